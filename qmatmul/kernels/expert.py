"""Expert decode kernels: faster than the chapters' readable solutions, and harder to read.

They are not graded and not in the notebooks; `make bench` times them beside the readable solutions. (The fastest
W4A16 decode is `qmatmul/kernels/mma_decode.py`, on a weight repacked into the tensor cores' operand layout, in Gluon.) Each
reads the chapter's own layout (W4A16: packed uint8 [N, K/2], element 2i in the low nibble, float32 scales and
uint8 zeros [N, K/G]) and runs under the interpreter too (tests/test_expert.py).

Tricks, each exact:
* The packed weight is read as int32 words: nibble i of word w is element k = 8w + i (little-endian bytes).
* Magic numbers instead of int->float conversions: OR a code into the mantissa of a float (fp32 1 + q/16 with
  0x3F800000; fp16 1024 + q with 0x6400; bf16 128 + q with 0x4300). The GEMV subtracts nothing per element:
  offset, zero point and scale are applied once per group through the group's sum of x. The tensor-core
  kernel subtracts (magic + z) per element, exactly, and scales once per group.
* M = 1: a GEMV on the CUDA cores (no tensor-core padding of M to 16). M = 2..16: two fp16/bf16 lanes per int32
  (mask 0x000F000F), the eight nibble planes joined back into K order in registers, then `tl.dot`; K split four
  ways (the parts added in the same launch: `qmatmul/kernels/splitk.py`).
* MXFP4 / NVFP4 (the chapters' layouts: packed uint8 [N, K/2], block-scale codes uint8 [N, K/32] e8m0 or [N, K/16]
  e4m3 bits, NVFP4's float32 tensor scale g): two e2m1 codes an integer operation as well. An e2m1 code's sign,
  exponent and mantissa bits placed at a 16-bit float's sign bit and lowest exponent bits make that float the
  code's value times 2^-126 (bf16) or 2^-14 (fp16); one multiply undoes it and one more applies the block's
  scale, both exact (a code times a block scale has at most 6 significant bits). No K masks: BLOCK_K divides K
  (the chapters' `divisible_k`), and split-K where N is short (`qmatmul/kernels/splitk.py`).
* W8A16 decode where N is short: the chapter's kernel with K split across programs (`qmatmul/kernels/splitk.py`: each
  strip's last program adds the float32 parts in order and stores the output, in the same launch).
* FP8 prefill on Hopper (the chapter's layouts: e4m3 x [M, K] and w [N, K], float32 scales per row and column, or
  per 1 x 128 and 128 x 128 block): `qmatmul.kernels.gemm.tma_kernel`, a persistent grid fed by TMA, partial sums promoted
  to float32 every BLOCK_K as in the chapter's solution (row-wise) or each 128-wide step's product scaled before it
  is added (block-scaled).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from qmatmul.formats.constants import MX_BLOCK, NVFP4_BLOCK
from qmatmul.kernels import configs, gemm, splitk
from qmatmul.scaffold import fp8, mxfp4, nvfp4, w4a16, w8a16


@triton.jit
def _one_plus(words, SHIFT: tl.constexpr, MASK: tl.constexpr):
    """fp32 1 + code / 2^bits: the code moved to the top of the mantissa (SHIFT < 0 shifts right)."""
    if SHIFT >= 0:
        v = words << SHIFT
    else:
        v = words >> (-SHIFT)
    return ((v & MASK) | 0x3F800000).to(tl.float32, bitcast=True)


@triton.jit
def _planes8(xk, A: tl.constexpr, B: tl.constexpr):
    """xk [A, B, 8] -> its eight planes [A, B], plane i holding xk[:, :, i]."""
    e, o = tl.split(tl.reshape(xk, (A, B, 2, 2, 2)))  # i even / odd
    e0, e2 = tl.split(e)
    o1, o3 = tl.split(o)
    x0, x4 = tl.split(e0)
    x2, x6 = tl.split(e2)
    x1, x5 = tl.split(o1)
    x3, x7 = tl.split(o3)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _w4_gemv_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, N, K,
    stride_xk, stride_wn, stride_sn, stride_yn,
    GROUP: tl.constexpr, GPI: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """y[0, n] = sum_g s[n, g] * sum_{k in g} x[k] * (q[n, k] - z[n, g]) for one row of x.

    Each code becomes f = 1 + q/16 (two integer ops), so sum x f = X + D/16 with X = sum x, D = sum x q, and
    the group's contribution is s * (16 * sum x f - (16 + z) * X).
    """
    WG: tl.constexpr = GROUP // 8  # int32 words per group
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_g = tl.arange(0, GPI)
    offs_w = tl.arange(0, WG)
    offs_i = tl.arange(0, 8)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    n_groups = K // GROUP
    for g0 in range(0, n_groups, GPI):
        grp = g0 + offs_g  # [GPI]
        g_mask = grp < n_groups
        m2 = n_mask[:, None] & g_mask[None, :]
        word = (grp[:, None] * WG + offs_w[None, :])[None, :, :]  # [1, GPI, WG]
        words = tl.load(w_ptr + offs_n[:, None, None] * stride_wn + word, mask=m2[:, :, None], other=0)
        s = tl.load(s_ptr + offs_n[:, None] * stride_sn + grp[None, :], mask=m2, other=0.0)
        z = tl.load(z_ptr + offs_n[:, None] * stride_sn + grp[None, :], mask=m2, other=0).to(tl.float32)
        k = grp[:, None, None] * GROUP + offs_w[None, :, None] * 8 + offs_i[None, None, :]
        xk = tl.load(x_ptr + k * stride_xk, mask=g_mask[:, None, None], other=0.0).to(tl.float32)
        x_sum = tl.sum(tl.sum(xk, axis=2), axis=1)  # [GPI]
        x0, x1, x2, x3, x4, x5, x6, x7 = _planes8(xk, GPI, WG)
        part = _one_plus(words, 19, 0x00780000) * x0[None]
        part += _one_plus(words, 15, 0x00780000) * x1[None]
        part += _one_plus(words, 11, 0x00780000) * x2[None]
        part += _one_plus(words, 7, 0x00780000) * x3[None]
        part += _one_plus(words, 3, 0x00780000) * x4[None]
        part += _one_plus(words, -1, 0x00780000) * x5[None]
        part += _one_plus(words, -5, 0x00780000) * x6[None]
        part += _one_plus(words, -9, 0x00780000) * x7[None]
        acc += tl.sum((16.0 * tl.sum(part, axis=2) - (16.0 + z) * x_sum[None, :]) * s, axis=1)
    tl.store(y_ptr + offs_n * stride_yn, acc.to(y_ptr.dtype.element_ty), mask=n_mask)


@triton.jit
def in_order(f0, f1, f2, f3, f4, f5, f6, f7):
    """Eight [R, C] planes, plane i holding nibble i of each word -> [R, 8 C] in K order (element 8j + i is plane
    i's column j). Joined in a tree, not reshaped from [R, C, 8], so the tile keeps the layout the dot's operand is
    built from: join(a, b)[..., t] is a at t = 0, b at t = 1, so index (c, b, a) of the last three axes holds
    plane 4c + 2b + a."""
    even = tl.join(tl.join(f0, f4), tl.join(f2, f6))  # (c, b): plane 4c + 2b
    odd = tl.join(tl.join(f1, f5), tl.join(f3, f7))  # (c, b): plane 4c + 2b + 1
    return tl.reshape(tl.join(even, odd), (f0.shape[0], 8 * f0.shape[1]))


@triton.jit
def magic_pair(words, NIB: tl.constexpr, MAGIC: tl.constexpr, DT: tl.constexpr):
    """Nibbles NIB and NIB + 4 of int32 words as 16-bit floats BASE + q (MAGIC the bits of BASE): both at once,
    one in each 16-bit half (nibble NIB + 4 lies 16 bits above nibble NIB)."""
    t = ((words >> (4 * NIB)) & 0x000F000F) | (MAGIC * 0x10001)
    return t.to(tl.int16).to(DT, bitcast=True), (t >> 16).to(tl.int16).to(DT, bitcast=True)


@triton.jit
def w4_lanes_tile(words, z, DT: tl.constexpr):
    """int32 words [R, C] of uint4 codes and their zero points z [R] -> q - z [R, 8 C] in DT, exactly: two codes an
    integer operation through the magic number (BASE + q lands in the mantissa), then one subtraction."""
    if DT == tl.bfloat16:
        MAGIC: tl.constexpr = 0x4300  # bf16 128 + q
        BASE: tl.constexpr = 128.0
    else:
        MAGIC: tl.constexpr = 0x6400  # fp16 1024 + q
        BASE: tl.constexpr = 1024.0
    f0, f4 = magic_pair(words, 0, MAGIC, DT)
    f1, f5 = magic_pair(words, 1, MAGIC, DT)
    f2, f6 = magic_pair(words, 2, MAGIC, DT)
    f3, f7 = magic_pair(words, 3, MAGIC, DT)
    f = in_order(f0, f1, f2, f3, f4, f5, f6, f7)  # BASE + q, exactly
    return f - (z.to(tl.float32) + BASE).to(DT)[:, None]  # exact: integers below 2^11


@triton.jit
def _w4_tc_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
):  # fmt: skip
    """All M rows (padded to BLOCK_M) in one program, BLOCK_N output columns, one group of K a step, K split SPLIT_K
    ways over the grid's second axis (`splitk.finish`)."""
    WG: tl.constexpr = GROUP // 8
    DT: tl.constexpr = x_ptr.dtype.element_ty
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_w = tl.arange(0, WG)
    offs_k = tl.arange(0, GROUP)
    lo, hi = splitk.k_slice(K, GROUP, SPLIT_K, pid_k)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, GROUP):
        words = tl.load(w_ptr + offs_n[:, None] * stride_wn + (k0 // 8 + offs_w)[None, :],
                        mask=n_mask[:, None], other=0)  # fmt: skip
        s = tl.load(s_ptr + offs_n * stride_sn + k0 // GROUP, mask=n_mask, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + k0 // GROUP, mask=n_mask, other=0)
        xk = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                     mask=m_mask[:, None], other=0.0)  # fmt: skip
        # Measured slower on the H200 (docs/expert-h200.md): the weights as the MMA's first operand (x^T as the
        # second), and folding the zero into a per-group sum of x as the GEMV does (25 % against 35 % of copy).
        acc += tl.dot(xk, tl.trans(w4_lanes_tile(words, z, DT))) * s[None, :]
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = m_mask[:, None] & n_mask[None, :]
    splitk.finish(acc, y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)


def launch_split(kernel, grid_n: int, split: int, pointers: tuple, rest: tuple, **cfg) -> torch.Tensor:
    """kernel[(grid_n, split)](*pointers, workspace, counters, *rest, SPLIT_K=split, **cfg) for the decode kernels
    whose pointer arguments (x, the weight, its scales, ..., out last) come before `splitk.scratch`'s pair; returns
    out."""
    out = pointers[-1]
    part, count = splitk.scratch(out.device, split, out.shape[1], grid_n, rows=cfg["BLOCK_M"])
    kernel[(grid_n, split)](*pointers, part, count, *rest, SPLIT_K=split, **cfg)
    return out


def words_of(packed: torch.Tensor) -> torch.Tensor:
    """The packed uint8 [N, K/2] weight seen as int32 [N, K/8] (no copy)."""
    if packed.shape[1] % 4 or packed.stride(1) != 1 or packed.stride(0) % 4 or packed.storage_offset() % 4:
        raise ValueError(
            "the expert kernels read the packed weight as int32 words: K must be a multiple of 8"
        )
    return packed.view(torch.int32)


def gemv_config(N: int, K: int, device: str) -> dict:
    """The GEMV's launch on `device` (qmatmul/kernels/configs.py, "expert.w4a16_gemv")."""
    return configs.choose("expert.w4a16_gemv", device, N=N, K=K)


def tc_config(M: int, N: int, device: str) -> dict:
    """The tensor-core kernel's launch and split-K on `device` (qmatmul/kernels/configs.py, "expert.w4a16_tc")."""
    return configs.choose("expert.w4a16_tc", device, M=M, N=N)


def w4a16_gemv(x, packed, scales, zeros, group_size, out=None, **cfg):
    M, N, K, out = w4a16.prepare(x, packed, scales, zeros, group_size, out)
    if M != 1:
        raise ValueError(f"w4a16_gemv takes one row, got M = {M}")
    cfg = cfg or gemv_config(N, K, x.device.type)
    words = words_of(packed)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    _w4_gemv_kernel[grid](
        x, words, scales, zeros, out, N, K, x.stride(1), words.stride(0), scales.stride(0), out.stride(1),
        GROUP=group_size, **cfg,
    )  # fmt: skip
    return out


def w4a16_decode_tc(x, packed, scales, zeros, group_size, out=None, **cfg):
    M, N, K, out = w4a16.prepare(x, packed, scales, zeros, group_size, out)
    if M > 16:
        raise ValueError(f"w4a16_decode_tc takes at most 16 rows, got M = {M}")
    cfg = dict(cfg or tc_config(M, N, x.device.type))
    split = min(cfg.pop("SPLIT_K", 1), K // group_size)
    words = words_of(packed)

    return launch_split(
        _w4_tc_kernel, triton.cdiv(N, cfg["BLOCK_N"]), split, (x, words, scales, zeros, out),
        (M, N, K, x.stride(0), x.stride(1), words.stride(0), scales.stride(0), out.stride(0), out.stride(1)),
        GROUP=group_size, **cfg,
    )  # fmt: skip


def w4a16_decode(x, packed, scales, zeros, group_size, out=None):
    """The expert W4A16 decode: the GEMV at M = 1, the tensor-core kernel at M = 2..16."""
    if x.dim() == 2 and x.shape[0] == 1:
        return w4a16_gemv(x, packed, scales, zeros, group_size, out)
    return w4a16_decode_tc(x, packed, scales, zeros, group_size, out)


# ----------------------------------------------------------------------------------------------------------
# MXFP4 and NVFP4 decode, M = 1..16


@triton.jit
def block_scales(e, NV: tl.constexpr, UNIT: tl.constexpr):
    """Block-scale codes (int32) as float32, times UNIT (a power of two, folded into one multiply): e8m0 is a
    float32's exponent; e4m3 goes through fp16 (exponent bits 13-10, mantissa 9-7) and times 2^8 for the bias."""
    if NV:
        bits = ((e & 0x7F) << 7) | ((e & 0x80) << 8)
        return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * (256.0 * UNIT)
    scale = (e << 23).to(tl.float32, bitcast=True)
    if UNIT != 1.0:
        scale = scale * UNIT
    return scale


@triton.jit
def e2m1_pair(words, NIB: tl.constexpr, SHIFT: tl.constexpr, DT: tl.constexpr):
    """Nibbles NIB and NIB + 4 of int32 words, e2m1 codes, as 16-bit floats of type DT times 2^-126 (bf16) or 2^-14
    (fp16): both at once, one in each 16-bit half (nibble NIB + 4 lies 16 bits above nibble NIB)."""
    words = words.to(tl.uint32, bitcast=True)  # unsigned: 0x80008000 is a uint32 constant
    if SHIFT >= 4 * NIB:
        t = words << (SHIFT - 4 * NIB)
    else:
        t = words >> (4 * NIB - SHIFT)
    magnitude = t & ((7 << SHIFT) * 0x10001)  # exponent and mantissa bits at SHIFT + 2 .. SHIFT, both halves
    sign = (words << (12 - 4 * NIB)) & 0x80008000  # bit 4 NIB + 3 to bit 15, bit 4 NIB + 19 to bit 31
    t = magnitude | sign
    return t.to(tl.uint16).to(DT, bitcast=True), (t >> 16).to(tl.uint16).to(DT, bitcast=True)


@triton.jit
def fp4_lanes_tile(words, e, DT: tl.constexpr, SB: tl.constexpr, NV: tl.constexpr):
    """int32 words [R, C] of e2m1 codes and their block-scale codes [R, 8 C / SB] -> the weights [R, 8 C] in DT,
    exactly: two codes an integer operation, one multiply to undo the placement, one for the scale."""
    if DT == tl.bfloat16:
        SHIFT: tl.constexpr = 6  # e2m1's exponent and mantissa at bf16's bits 8-7 and 6
        UNDO: tl.constexpr = 2.0**126
    else:
        SHIFT: tl.constexpr = 9  # at fp16's bits 11-10 and 9
        UNDO: tl.constexpr = 2.0**14
    f0, f4 = e2m1_pair(words, 0, SHIFT, DT)
    f1, f5 = e2m1_pair(words, 1, SHIFT, DT)
    f2, f6 = e2m1_pair(words, 2, SHIFT, DT)
    f3, f7 = e2m1_pair(words, 3, SHIFT, DT)
    v = in_order(f0, f1, f2, f3, f4, f5, f6, f7) * tl.full((1, 1), UNDO, DT)  # the e2m1 values, exactly
    R: tl.constexpr = words.shape[0]
    BK: tl.constexpr = 8 * words.shape[1]
    scale = block_scales(e, NV, 1.0).to(DT)
    return tl.reshape(tl.reshape(v, (R, BK // SB, SB)) * scale[:, :, None], (R, BK))


@triton.jit
def _fp4_decode_kernel(
    x_ptr, p_ptr, s_ptr, g_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_sn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SB: tl.constexpr, NV: tl.constexpr,
    SPLIT_K: tl.constexpr,
):  # fmt: skip
    """All M rows (padded to BLOCK_M) in one program, BLOCK_N columns, K split SPLIT_K ways over the grid's second
    axis (`splitk.finish`). p_ptr: the packed weight as int32 words [N, K / 8]; BLOCK_K divides K (no K masks)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 8)
    offs_s = tl.arange(0, BLOCK_K // SB)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n[:, None] < N
    DT: tl.constexpr = x_ptr.dtype.element_ty
    lo, hi = splitk.k_slice(K, BLOCK_K, SPLIT_K, pid_k)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
        words = tl.load(p_ptr + offs_n[:, None] * stride_pn + (k0 // 8 + offs_j)[None, :], mask=n_ok, other=0)
        e = tl.load(s_ptr + offs_n[:, None] * stride_sn + (k0 // SB + offs_s)[None, :], mask=n_ok, other=0)
        acc = tl.dot(x, tl.trans(fp4_lanes_tile(words, e.to(tl.int32), DT, SB, NV)), acc)
    if NV:
        acc = acc * tl.load(g_ptr)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    splitk.finish(acc, y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)


def fp4_config(N: int, K: int, device: str) -> dict:
    """Tiles and split-K of the fp4 decode (qmatmul/kernels/configs.py, "expert.fp4"). BLOCK_K is the most a step may
    take: the wrapper halves it until it divides K."""
    return configs.choose("expert.fp4", device, N=N, K=K)


def _fp4_decode(x, packed, scales, g, out, cfg, nv: bool):
    M, N, K, out = nvfp4.prepare(x, packed, scales, g, out) if nv else mxfp4.prepare(x, packed, scales, out)
    if M > 16:
        raise ValueError(f"the expert fp4 decode takes at most 16 rows, got M = {M}")
    cfg = dict(cfg or fp4_config(N, K, x.device.type))
    split = cfg.pop("SPLIT_K", 1)
    x, packed, scales, cfg["BLOCK_K"] = (nvfp4 if nv else mxfp4).divisible_k(
        x, packed, scales, cfg["BLOCK_K"]
    )
    words = words_of(packed)

    return launch_split(
        _fp4_decode_kernel, triton.cdiv(N, cfg["BLOCK_N"]), split, (x, words, scales, g if nv else scales, out),
        (M, N, x.shape[1], x.stride(0), x.stride(1), words.stride(0), scales.stride(0), out.stride(0), out.stride(1)),
        SB=NVFP4_BLOCK if nv else MX_BLOCK, NV=nv, **cfg,
    )  # fmt: skip


def mxfp4_decode(x, packed, scales, out=None, **cfg):
    """The expert MXFP4 decode (M = 1..16): `mxfp4.reference`'s product, two codes an integer operation."""
    return _fp4_decode(x, packed, scales, None, out, cfg, nv=False)


def nvfp4_decode(x, packed, scales, g, out=None, **cfg):
    """The expert NVFP4 decode (M = 1..16): `nvfp4.reference`'s product, two codes an integer operation."""
    return _fp4_decode(x, packed, scales, g, out, cfg, nv=True)


# ----------------------------------------------------------------------------------------------------------
# FP8 prefill on Hopper


def fp8_matmul_tma(xq, sx, wq, sw, out=None, **cfg):
    """The expert FP8 prefill (`fp8.reference`'s product): the chapter's `fp8_matmul` interface, TMA-fed, partial sums
    promoted every BLOCK_K (PROMOTE=False in cfg: Triton's sm_90 default, which is wrong on long K). K must be a
    multiple of 16 (a TMA row is a multiple of 16 bytes) and out row-major."""
    M, N, K, sx, sw, out = fp8.prepare(xq, sx, wq, sw, out)
    promote = cfg.pop("PROMOTE", True)  # cfg: tiles for gemm.tma_matmul (default gemm.tma_config's)
    return gemm.tma_matmul(xq, wq, out, sx=sx, sw=sw, scales=gemm.ROW_SCALES, promote=promote, **cfg)


def fp8_block_matmul_tma(xq, sx, wq, sw, out=None, **cfg):
    """The expert FP8 block-scaled prefill (`fp8.block_reference`'s product): the chapter's `fp8_block_matmul`
    interface (sx [M, K/128], sw [N/128, K/128]), TMA-fed, each 128-wide K step's product scaled and added in
    float32."""
    M, N, K, out = fp8.prepare_block(xq, sx, wq, sw, out)
    return gemm.tma_matmul(xq, wq, out, sx=sx, sw=sw, scales=gemm.BLOCK_SCALES, **cfg)


# ----------------------------------------------------------------------------------------------------------
# W8A16 decode with K split, one launch


@triton.jit
def _w8_split_kernel(
    x_ptr, q_ptr, s_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_qn, stride_qk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
):  # fmt: skip
    """The chapter's decode kernel over one of SPLIT_K spans of K (program (n, k)), its sums scaled and then stored or
    added up by `splitk.finish`."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    lo, hi = splitk.k_slice(K, BLOCK_K, SPLIT_K, pid_k)  # unsplit: the chapter's loop as it is
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)  # fmt: skip
        q = tl.load(q_ptr + offs_n[None, :] * stride_qn + k[:, None] * stride_qk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0)  # fmt: skip
        acc = tl.dot(x, q.to(x.dtype), acc)
    n_ok = offs_n < N
    acc = acc * tl.load(s_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m < M)[:, None] & n_ok[None, :]
    splitk.finish(acc, y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)


def w8a16_split_config(N: int, K: int, device: str) -> dict:
    """Tiles and split-K of the split W8A16 decode (qmatmul/kernels/configs.py, "expert.w8a16_split")."""
    return configs.choose("expert.w8a16_split", device, N=N, K=K)


def w8a16_decode_split(x, q, s, out=None, **cfg):
    """The expert W8A16 decode (`w8a16.reference`'s product, M <= 16): the chapter's kernel with K split across
    programs where N is short, the partial sums added by each strip's last program in the same launch. Since exercise 3
    splits K too, this is the chapter's solution (the same kernel and launch rule, `configs.w8a16_split`), kept as the
    course's own copy for the bench, the capstone and the tests, which do not read the notebook."""
    M, N, K, out = w8a16.prepare(x, q, s, out)
    if M > 16:
        raise ValueError(f"w8a16_decode_split takes at most 16 rows, got M = {M}")
    cfg = dict(cfg or w8a16_split_config(N, K, x.device.type))
    n_blocks = triton.cdiv(N, cfg["BLOCK_N"])
    split = cfg.pop("SPLIT_K")
    return launch_split(
        _w8_split_kernel, n_blocks, split, (x, q, s, out),
        (M, N, K, x.stride(0), x.stride(1), q.stride(0), q.stride(1), out.stride(0), out.stride(1)), BLOCK_M=16, **cfg,
    )  # fmt: skip
