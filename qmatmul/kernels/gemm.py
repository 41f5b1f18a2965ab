"""The plain GEMMs the chapters run on decoded weights, and the TMA-fed one they share with the expert FP8 kernels.

* `decoded_gemm(x, w, out, g=None, *, s=None, group_size=0, sw=None)`: out = x @ w.T (· g[0]) for 16-bit x [M, K]
  and a decoded weight w [N, K], or with s the integers' group scales applied to each group's partial sums (W4A16),
  or with sw a scale per column of the output (W8A16's codes). The chapters' wrappers call it from
  DEQUANTIZE_FIRST_M rows on, once the weight is decoded. Where a TMA descriptor can address the operands (Hopper
  and newer, triton's host tensor descriptors) it takes `tma_kernel`; elsewhere `matmul_kernel`, the Triton
  tutorial's GEMM in grouped launch order, with `configs.gemm_config`'s tiles.
* `as_16bit(q, dtype)`: int8 codes as a 16-bit float tensor (exact), one Triton pass: W8A16's decoding.
* `tma_kernel`: a persistent grid, one program an SM walking its output tiles in grouped order, operands fed by
  TMA through tensor descriptors (which zero-fill past the edges: no masks and no address arithmetic in the loop).
  Scales: none (16-bit operands, an optional float32 tensor scale g in the epilogue), per column of w (W8A16's
  integer codes as bf16), per row of x and column of w (FP8 row-wise, applied in the epilogue; the partial sums
  promoted to float32 every BLOCK_K on request, as Hopper's fp8 MMA keeps fewer bits), or per 1 x 128 block of x and
  128 x 128 block of w (FP8 block-scaled: each K step's product scaled before it is added, so BLOCK_K is the scale
  block), or per column of w and group of K (W4A16's exact integer weights q - z: BLOCK_K divides the group, and
  each step's product is scaled before it is added, as the chapter's fused kernel does). SWAP (the config's) makes
  the accumulator acc[n, m] = w · xᵀ: per-column scales then lie along acc's rows (two a thread, where acc[m, n]
  holds 32, each loaded with its own address every K step).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from qmatmul.formats.constants import FP8_SCALE_BLOCK
from qmatmul.kernels import configs

NO_SCALES, ROW_SCALES, BLOCK_SCALES, COLUMN_SCALES, GROUP_SCALES = 0, 1, 2, 3, 4
# the FP8 chapter's block-scaled GEMM: 1 x 128 activation blocks, 128 x 128 weight blocks
SCALE_BLOCK = FP8_SCALE_BLOCK


@triton.jit
def grouped_tile(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile `tile`, walking GROUP_M rows of tiles column by column, so the tiles that run
    at one time share their rows of x and columns of w in the L2."""
    width = GROUP_M * num_n
    first_m = (tile // width) * GROUP_M
    rows = min(num_m - first_m, GROUP_M)
    return first_m + (tile % width) % rows, (tile % width) // rows


@triton.jit
def matmul_kernel(
    x_ptr, w_ptr, g_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk, stride_sn,
    stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_G: tl.constexpr, GROUP: tl.constexpr, COLUMNS: tl.constexpr = False,
):  # fmt: skip
    """y = x @ w.T (times the scalar g[0] when HAS_G) for 16-bit x [M, K] and w [N, K]: the Triton tutorial's
    GEMM, in grouped launch order. GROUP > 0: w holds integers and s [N, K / GROUP] their scales; each K step
    (BLOCK_K divides GROUP) is multiplied by its group's scales before it is added, in float32. COLUMNS: s [N]
    scales output column n."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)  # fmt: skip
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)  # fmt: skip
        if GROUP:
            s = tl.load(s_ptr + offs_n * stride_sn + k0 // GROUP, mask=offs_n < N, other=0.0)
            acc += tl.dot(x, w) * s[None, :]
        else:
            acc = tl.dot(x, w, acc)
    if COLUMNS:
        acc = acc * tl.load(s_ptr + offs_n * stride_sn, mask=offs_n < N, other=0.0)[None, :]
    if HAS_G:
        acc = acc * tl.load(g_ptr)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(y_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))  # fmt: skip


@triton.jit
def tma_kernel(
    x_desc, w_desc, sx_ptr, sw_ptr, g_ptr, y_ptr, M, N, K, stride_ym, stride_sx, stride_sw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, SCALES: tl.constexpr, HAS_G: tl.constexpr, PROMOTE: tl.constexpr,
    FLATTEN: tl.constexpr, GROUP: tl.constexpr, SWAP: tl.constexpr,
):  # fmt: skip
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if SWAP:  # acc[n, m] = w · xᵀ: per-column scales lie along its rows
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = x_desc.load([pid_m * BLOCK_M, k0])
            w = w_desc.load([pid_n * BLOCK_N, k0])
            if SCALES == 4:  # this step lies in one group of K: its product times the group's column scales
                sg = tl.load(sw_ptr + offs_n * stride_sw + k0 // GROUP, mask=offs_n < N, other=0.0)
                if SWAP:  # along acc's rows: two a thread
                    acc += tl.dot(w, x.T) * sg[:, None]
                else:
                    acc += tl.dot(x, w.T) * sg[None, :]
            elif SWAP:
                if PROMOTE:
                    acc = tl.dot(w, x.T, acc, max_num_imprecise_acc=BLOCK_K)
                else:
                    acc = tl.dot(w, x.T, acc)
            elif SCALES == 2:  # this step's product times its blocks' scales (BLOCK_K is the scale block)
                kb = k0 // BLOCK_K
                sx = tl.load(sx_ptr + offs_m * stride_sx + kb, mask=offs_m < M, other=0.0)
                if BLOCK_N <= BLOCK_K:  # the tile lies in one block row of w: one scale, one FMA an output
                    sw = tl.load(sw_ptr + (pid_n * BLOCK_N // BLOCK_K) * stride_sw + kb)
                    acc += tl.dot(x, w.T) * (sx * sw)[:, None]
                else:
                    sw = tl.load(sw_ptr + (offs_n // BLOCK_K) * stride_sw + kb, mask=offs_n < N, other=0.0)
                    acc += tl.dot(x, w.T) * sx[:, None] * sw[None, :]
            elif PROMOTE:
                acc = tl.dot(x, w.T, acc, max_num_imprecise_acc=BLOCK_K)
            else:
                acc = tl.dot(x, w.T, acc)
        if SWAP:
            acc = tl.trans(acc)
        if SCALES == 1:
            sx = tl.load(sx_ptr + offs_m, mask=offs_m < M, other=0.0)
            acc = acc * sx[:, None]
        if SCALES == 1 or SCALES == 3:
            sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=0.0)
            acc = acc * sw[None, :]
        if HAS_G:
            acc = acc * tl.load(g_ptr)
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))  # fmt: skip


def tma_status(device) -> tuple[bool, str]:
    """(can run, why not): TMA descriptors need triton's host TensorDescriptor (3.4 on) and a Hopper or newer GPU;
    the interpreter runs them too."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False, f"triton {triton.__version__} has no host tensor descriptors (3.4 on)"
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (9, 0):
        return False, "TMA needs a Hopper or newer GPU (sm_90)"
    return True, ""


def tma_config(dtype, scales: int, device) -> dict:
    """Tiles of tma_kernel for operands of `dtype` and the scale mode `scales` (qmatmul/kernels/configs.py: small on the
    interpreter, the H200's best on a GPU)."""
    return configs.choose(tma_launch_name(dtype, scales), device)


def tma_launch_name(dtype, scales: int) -> str:
    """The name of tma_kernel's launch in qmatmul/kernels/configs.py for operands of `dtype` and the scale mode."""
    if scales == GROUP_SCALES:
        return "gemm.tma.group"
    if scales == BLOCK_SCALES:
        return "gemm.tma.block"
    return "gemm.tma.fp8" if dtype.itemsize == 1 else "gemm.tma"


def tma_matmul(
    x,
    w,
    out,
    *,
    sx=None,
    sw=None,
    g=None,
    scales: int = NO_SCALES,
    promote: bool = False,
    group: int = 0,
    **cfg,
):
    """out = (x @ w.T) with the scales `scales` names, by tma_kernel. x [M, K] and w [N, K] row-major, of one dtype
    (16-bit or fp8), K a multiple of 16 bytes' worth of elements; out row-major. cfg: tma_config's keys, and SWAP,
    GROUP_M, FLATTEN, PER_SM (programs an SM). Validation of shapes and dtypes is the caller's (the chapters'
    `prepare`)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    ok, why = tma_status(x.device)
    if not ok:
        raise RuntimeError(f"tma_matmul: {why}")
    M, K = x.shape
    N = w.shape[0]
    # int8 codes converted inside the kernel ran wrong on ragged shapes on the H200 (docs/perf-notes.md, sixth round)
    if w.dtype != x.dtype:
        raise ValueError(f"tma_matmul multiplies operands of one dtype, got x {x.dtype} and w {w.dtype}")
    if not (describable(x) and describable(w)) or out.stride(1) != 1:
        raise ValueError(
            "the TMA GEMM needs rows of a multiple of 16 bytes (K % 16 == 0 for fp8, K % 8 == 0 for 16-bit), "
            "row-major x, w and output, and x and w starting and striding on 16-byte boundaries"
        )
    cfg = dict(cfg or tma_config(x.dtype, scales, x.device))
    bm, bn, bk = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    swap = cfg.pop("SWAP", False)
    if scales == GROUP_SCALES:
        bk = group_step(bk, group)
    if swap and scales == BLOCK_SCALES:
        raise ValueError("the swapped TMA GEMM takes no block scales")
    if scales == BLOCK_SCALES and (bk != SCALE_BLOCK or (bn < bk and bk % bn)):
        raise ValueError(f"the block-scaled GEMM steps one scale block at a time: BLOCK_K must be {SCALE_BLOCK} "
                         "(and BLOCK_N divide it, or be a multiple of it)")  # fmt: skip
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    programs = min(sms * cfg.pop("PER_SM", 1), triton.cdiv(M, bm) * triton.cdiv(N, bn))
    dummy = out  # an unused pointer argument
    tma_kernel[(programs,)](
        TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
        dummy if sx is None else sx, dummy if sw is None else sw, dummy if g is None else g, out, M, N, K,
        out.stride(0), 0 if sx is None else sx.stride(0), 0 if sw is None else sw.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.pop("GROUP_M", 8), NUM_SMS=programs, SCALES=scales,
        HAS_G=g is not None, PROMOTE=promote, FLATTEN=cfg.pop("FLATTEN", False), GROUP=group, SWAP=swap, **cfg,
    )  # fmt: skip
    return out


def group_step(block_k: int, group: int) -> int:
    """BLOCK_K of a group-scaled GEMM: at most one group, and dividing it, so that each K step has one scale."""
    block_k = min(block_k, group)
    if group % block_k:
        raise ValueError(f"the group-scaled GEMM needs BLOCK_K to divide the group size {group}")
    return block_k


def describable(t: torch.Tensor) -> bool:
    """Can a TMA descriptor address this 2-D operand: row-major, rows of a multiple of 16 bytes, starting and
    striding on 16-byte boundaries (what the hardware's tensor maps require)."""
    size = t.element_size()
    return (
        t.dim() == 2
        and t.stride(1) == 1
        and (t.shape[1] * size) % 16 == 0
        and (t.stride(0) * size) % 16 == 0
        and t.data_ptr() % 16 == 0
    )


def uses_tma(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether `decoded_gemm` takes the TMA kernel for these operands: a CUDA GPU with TMA, describable operands."""
    return x.is_cuda and tma_status(x.device)[0] and describable(x) and describable(w)


def takes_tma(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether `decoded_gemm` multiplies these operands with `tma_kernel` (uses_tma, and a row-major output)."""
    return uses_tma(x, w) and out.stride(1) == 1


def tutorial_matmul(x, w, out, g=None, s=None, group: int = 0, columns: bool = False, **cfg):
    """matmul_kernel's launch (cfg: its tiles; default configs.gemm_config's for x's device); columns: s [N] scales
    the output's columns."""
    M, K = x.shape
    N = w.shape[0]
    cfg = dict(cfg or configs.gemm_config(x.device, grouped=bool(group)))
    if group:
        cfg["BLOCK_K"] = group_step(cfg["BLOCK_K"], group)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    matmul_kernel[grid](x, w, w if g is None else g, w if s is None else s, out, M, N, K, x.stride(0), x.stride(1),
                        w.stride(0), w.stride(1), 0 if s is None else s.stride(0), out.stride(0), out.stride(1),
                        GROUP_M=8, HAS_G=g is not None, GROUP=group, COLUMNS=columns, **cfg)  # fmt: skip
    return out


def decoded_gemm(x, w, out, g=None, *, s=None, group_size=0, sw=None):
    """out = x @ w.T (· g[0], a float32 tensor scale, when given) for 16-bit x [M, K] and a decoded weight w [N, K];
    with s [N, K / group_size], w holds integers and each group's product is scaled by s in float32 (W4A16's q - z:
    folding s into 16-bit weights would round them); with sw [N] (float32), output column n is scaled by sw[n]
    (W8A16's codes, for the same reason). tma_kernel on Hopper and newer, matmul_kernel elsewhere."""
    if s is not None and sw is not None:
        raise ValueError("decoded_gemm takes group scales s or column scales sw, not both")
    group = group_size if s is not None else 0
    if takes_tma(x, w, out):
        if sw is not None:
            return tma_matmul(x, w, out, sw=sw, g=g, scales=COLUMN_SCALES)
        if s is None:
            return tma_matmul(x, w, out, g=g)
        return tma_matmul(x, w, out, sw=s, g=g, scales=GROUP_SCALES, group=group)
    if sw is not None:
        return tutorial_matmul(x, w, out, g=g, s=sw, columns=True)
    return tutorial_matmul(x, w, out, g=g, s=s, group=group)


@triton.jit
def as_16bit_kernel(q_ptr, w_ptr, n, BLOCK: tl.constexpr):
    """w = q in w's dtype, BLOCK elements a program (through float32: triton's interpreter turns int8 into wrong bf16
    directly; both steps are exact)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    q = tl.load(q_ptr + offs, mask=offs < n)
    tl.store(w_ptr + offs, q.to(tl.float32).to(w_ptr.dtype.element_ty), mask=offs < n)


def as_16bit(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8 codes q as a new contiguous tensor of a 16-bit float dtype: exact (every int8 is a bf16 and an fp16). One
    Triton pass; on the H200 torch's q.to(torch.bfloat16) took 178 µs for 64 MB of codes, this 53 µs
    (docs/perf-notes.md, tenth round)."""
    if q.dtype != torch.int8 or dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"as_16bit converts int8 codes to bfloat16 or float16, got {q.dtype} to {dtype}")
    q = q.contiguous()
    w = torch.empty(q.shape, dtype=dtype, device=q.device)
    block = 8192 if q.is_cuda else 1024
    as_16bit_kernel[(triton.cdiv(q.numel(), block),)](
        q, w, q.numel(), BLOCK=block, num_warps=8 if q.is_cuda else 1
    )
    return w
