"""Expert W4A16 decode on warp-level tensor-core MMAs, written in Gluon, on a weight repacked once at load time.

The readable kernels leave the register layout to Triton, which builds the MMA's operands from the loaded tile through
moves, permutes and shared memory (5-13 instructions a weight on sm_90, `tools/sass.py`). Here the layout is the
kernel's: `repack` stores each 16 x 16 weight tile as 32 int32 words, one a lane, whose eight nibbles are exactly
the eight values that lane holds of `mma.sync.m16n8k16`'s first operand, ordered so that one shift and one LOP3 make
two of them at once (nibble j in the low half of a register, nibble j + 4 in the high half, as bf16 128 + q). The
weights are the MMA's rows (N, 16 a tile), the activations its 8 or 16 columns (M padded); each group of K is one
chain of MMAs into a float32 partial sum that its scale multiplies, exactly as the chapter's reference scales. The
repack also reorders K inside each 64-wide chunk (`x_order`, the same for weights and activations, so the sum is
unchanged) so that each lane's part of the MMA's second operand is 16 consecutive values of x: two 16-byte loads
instead of eight 4-byte ones.

Gluon (triton.experimental.gluon, triton 3.5 or newer) states every layout; `convert_layout(..., assert_trivial=True)`
makes the compiler prove the unpacked tile already is the MMA operand (no data moves). Gluon has no interpreter, so
the CPU tests run `unpack_like_kernel` (the kernel's tensor program in torch, op for op) against the chapter's layout
and compile the kernel for sm_90 (tests/test_mma_decode.py); the GPU tests run it.

Per 8 weights a lane issues 3 shifts, 4 LOP3, 4 HADD2 (q - z, exact) and one or two HMMAs: 2.2-2.4 SASS instructions
a weight in the loop with its loads (sm_90, `tools/sass.py mma-w4a16-m1 mma-w4a16-m16`), against 4.9 for
qmatmul.expert's Triton tensor-core kernel. What it measured on the H200: docs/perf-notes.md, seventh and eighth
rounds.
"""

from __future__ import annotations

import torch
import triton

from qmatmul.formats.w4a16 import unpack

try:  # Gluon: triton 3.5 and newer
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2
except ImportError:  # pragma: no cover - older triton: the callers take another path
    gluon = None

# Nibble slot of value v = b0 + 2 b1 + 4 b2 of a lane's A fragment (rows g + 8 b1, columns 2 t + b0 + 8 b2 of a
# 16 x 16 tile, lane 4 g + t): pair j = b1 + 2 b2 is nibbles j and j + 4, b0 chooses the half.
SLOTS = [(v >> 1 & 1) + 2 * (v >> 2) + 4 * (v & 1) for v in range(8)]


def _missing() -> str:
    """What this machine lacks to run the kernel (Gluon, a CUDA GPU with mma.sync bf16: sm_80 or newer), or ""."""
    if gluon is None:
        return f"needs triton with Gluon (3.5 or newer), have {triton.__version__}"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0):
        return "needs a CUDA GPU of sm_80 or newer"
    return ""


def available() -> bool:
    return not _missing()


def supports(group_size: int, K: int) -> bool:
    """The kernel's step is one group of K, a power-of-two number of 64-wide chunks (a Gluon tensor's shape)."""
    return group_size % 64 == 0 and group_size & (group_size - 1) == 0 and K % group_size == 0


def why_not(dtype, group_size: int, K: int) -> str:
    """Why the MMA decode does not run here on these operands (for a table's row), or "" when it does."""
    if missing := _missing():
        return missing
    if dtype != torch.bfloat16:
        return f"takes bf16 activations, not {str(dtype).replace('torch.', '')}"
    if not supports(group_size, K):
        return f"needs groups of 64 times a power of two (G = {group_size}) dividing K = {K}"
    return ""


def _tile_index(device=None):
    """(row, column) in a 16 x 16 tile of value v of lane l's A fragment, each [32 lanes, 8 values]."""
    lane = torch.arange(32, device=device)[:, None]
    v = torch.arange(8, device=device)[None, :]
    g, t = lane // 4, lane % 4
    b0, b1, b2 = v & 1, v >> 1 & 1, v >> 2
    return g + 8 * b1, 2 * t + b0 + 8 * b2


def x_order(device=None) -> torch.Tensor:
    """Which of a 64-wide chunk's elements of x the kernel's K position k (in the MMA's order) holds: the kernel's
    reshape and permute of its x tile, op for op. Lane t's B fragment (K positions 2t, 2t + 1, 2t + 8, 2t + 9 of
    each 16-wide tile c) is x[16 t + 4 c ..][:4], so a lane's 16 values lie side by side (two 16-byte loads)."""
    return torch.arange(64, device=device).reshape(4, 4, 2, 2).permute(1, 2, 0, 3).reshape(64)


def repack(packed: torch.Tensor) -> torch.Tensor:
    """The chapter's packed uint8 [N, K/2] (element 2i in the low nibble) -> int32 [ceil(N/16), K/64, 32, 4]:
    word [tn, kc, lane, c] holds the lane's eight values of the 16 x 16 tile (rows 16 tn.., K positions 64 kc + 16 c..
    of `x_order`). Rows past N are zero. Bit-exact and done once, when the weights are loaded."""
    N, K2 = packed.shape
    K = 2 * K2
    if K % 64:
        raise ValueError(f"repack needs K to be a multiple of 64, got K = {K}")
    q = unpack(packed).to(torch.int32).reshape(N, K // 64, 64)[:, :, x_order(packed.device)].reshape(N, K)
    TN = triton.cdiv(N, 16)
    q = torch.nn.functional.pad(q, (0, 0, 0, 16 * TN - N)).reshape(TN, 16, K // 16, 16).permute(0, 2, 1, 3)
    r, c = _tile_index(packed.device)
    vals = q[:, :, r, c]  # [TN, K/16, 32, 8]
    slots = torch.tensor(SLOTS, device=packed.device, dtype=torch.int32)
    words = (vals << (4 * slots)).sum(-1, dtype=torch.int64)  # eight disjoint nibbles
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.reshape(TN, K // 64, 4, 32).permute(0, 1, 3, 2).contiguous()


def unpack_like_kernel(words: torch.Tensor, N: int) -> torch.Tensor:
    """The kernel's tensor program in torch, op for op (shifts, masks, join, reshape, permute), with K put back from
    `x_order`: int32 words of `repack` -> the codes q [N, K] as int32. The CPU tests hold it equal to the chapter's
    unpacking."""
    TN, KCH = words.shape[:2]
    pairs = []
    for j in range(4):
        t = (words >> (4 * j)) & 0x000F000F
        pairs.append(torch.stack((t & 0xFFFF, t >> 16), dim=-1))  # join(low half, high half)
    v = torch.stack((torch.stack((pairs[0], pairs[1]), -1), torch.stack((pairs[2], pairs[3]), -1)), -1)
    v = v.reshape(TN, KCH, 8, 4, 4, 2, 2, 2).permute(0, 6, 2, 1, 4, 7, 3, 5).reshape(16 * TN, KCH, 64)
    q = torch.empty_like(v)
    q[:, :, x_order(words.device)] = v  # the code position k multiplies is x's element x_order[k]
    return q.reshape(16 * TN, 64 * KCH)[:N]


if gluon is not None:
    # One shift and one LOP3 ((t & 0x000F000F) | 0x43004300) a register: nibbles j and j + 4 as bf16 128 + q in the
    # low and high half. The halves leave as one register's two 16-bit parts, so the MMA takes it as it is.
    _PAIR = ["{ .reg .b32 t; shr.u32 t, $2, " + str(4 * j) + "; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea; "
             "mov.b32 {$0, $1}, t; }" for j in range(4)]  # fmt: skip
    PAIR0 = gl.constexpr(_PAIR[0])
    PAIR1 = gl.constexpr(_PAIR[1])
    PAIR2 = gl.constexpr(_PAIR[2])
    PAIR3 = gl.constexpr(_PAIR[3])

    @gluon.jit
    def _pair(words, ASM: gl.constexpr):
        lo, hi = gl.inline_asm_elementwise(
            ASM, "=h,=h,r", [words], dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=1
        )
        return gl.join(lo, hi)

    @gluon.constexpr_function
    def _x_layout(KC, BM, W):
        """[KC, 4, 16, BM] x values of a group as repack orders K: lane 4 g + t holds row g's (g + 8 too at BM = 16)
        16 consecutive values t of each 64-wide chunk in consecutive registers; every warp holds the same."""
        regs = [[0, 0, 1 << i, 0] for i in range(4)] + [[1 << i, 0, 0, 0] for i in range(KC.bit_length() - 1)]
        regs += [[0, 0, 0, 8]] if BM == 16 else []
        lanes = [[0, 1, 0, 0], [0, 2, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 4]]
        warps = [[0, 0, 0, 0]] * (W.bit_length() - 1)
        return gl.DistributedLinearLayout(regs, lanes, warps, [], [KC, 4, 16, BM])

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # renamed after triton 3.6

    @gluon.jit
    def _w4_mma_kernel(
        x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
        stride_xm, stride_sn, stride_ym,
        GROUP: gl.constexpr, R: gl.constexpr, BM: gl.constexpr, X_SHARED: gl.constexpr,
    ):  # fmt: skip
        """y[m, n] = sum over groups g of s[n, g] * sum_k (q[n, k] - z[n, g]) x[m, k].

        Program (pid_n, pid_k): BLOCK_N = 16 x warps x R rows of N and the pid_k-th of num_programs(1) even runs of
        groups. Split, each program writes its float32 part to ws [split, M, N] and counts itself in cnt[pid_n]
        (zeroed by the caller); the last one of a strip adds the parts in order and writes y: one launch, no
        atomics on the output, the same sum whichever program finishes last."""
        W: gl.constexpr = gl.num_warps()
        TN: gl.constexpr = W * R  # 16-row tiles a program
        BLOCK_N: gl.constexpr = 16 * TN
        KC: gl.constexpr = GROUP // 64  # 64-wide chunks a group
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8]
        )
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        # The words as stored: a lane's four words of a chunk in one 16-byte load, warps over the row tiles.
        w_l: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [1, 1, 32, 1], [W, 1, 1, 1], [3, 2, 1, 0])
        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        n_groups = K // GROUP
        per = gl.cdiv(n_groups, gl.num_programs(1))
        g0 = pid_k * per
        g1 = gl.minimum(n_groups, g0 + per)

        # tiles past N read the last one again (never stored): no mask
        tn = pid_n * TN + gl.arange(
            0, TN, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, w_l)))
        )
        tn = gl.minimum(tn, gl.cdiv(N, 16) - 1)
        kc = gl.arange(0, KC, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, w_l))))
        ln = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, w_l))))
        cc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, w_l))))
        w_off = (
            (tn[:, None, None, None] * (K // 64) + kc[None, :, None, None]) * 32 + ln[None, None, :, None]
        ) * 4
        w_off = w_off + cc[None, None, None, :]
        rows_a = gl.minimum(pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_l)), N - 1)
        rows_c = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        rows_s = gl.minimum(rows_c, N - 1)  # rows past N: the last row's scales (never stored)

        # x as [chunk, t, 16, row] in the order repack gave K: the MMA lane t's 16 values of a 64-wide chunk lie
        # side by side. Either each lane reads them itself (two 16-byte loads; every warp reads the same x) or
        # the program reads x once, in 16-byte pieces, and stores it in shared memory in the MMA's K order. Rows
        # past M read row M - 1 (no mask, no zeroed registers): their columns are never stored.
        if X_SHARED:
            x_l: gl.constexpr = gl.BlockedLayout([1, 1, 8, 1], [1, 4, 2, 4], [1, 1, 1, W], [2, 1, 0, 3])
        else:
            x_l: gl.constexpr = _x_layout(KC, BM, W)
        xc = gl.arange(0, KC, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xj = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, x_l))))
        xm = gl.arange(0, BM, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, x_l))))
        x_off = (xc[:, None, None, None] * 64 + xt[None, :, None, None] * 16 + xj[None, None, :, None]
                 + gl.minimum(xm, M - 1)[None, None, None, :] * stride_xm)  # fmt: skip

        if X_SHARED:
            # one row of x a 256-byte line, its 16-byte pieces swizzled: ldmatrix reads them without conflicts
            x_sl: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [0, 1])
            x_smem = gl.allocate_shared_memory(gl.bfloat16, [GROUP, BM], x_sl)
        acc = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma)
        for g in range(g0, g1):
            words = gl.load(w_ptr + w_off + g * (KC * 128))
            # [chunk, t, (c, b2, b0), row] -> [(chunk, c, b2, t, b0), row]: the MMA's K order
            xk = gl.load(x_ptr + x_off + g * GROUP)
            xk = gl.permute(gl.reshape(xk, [KC, 4, 4, 2, 2, BM]), [0, 2, 3, 1, 4, 5])
            xk = gl.reshape(xk, [GROUP, BM])
            if X_SHARED:
                _barrier()  # every warp has read the last group's x
                x_smem.store(xk)
                _barrier()
                xk = x_smem.load(b_l)
            else:
                xk = gl.convert_layout(xk, b_l, assert_trivial=True)
            z = gl.load(z_ptr + rows_a * stride_sn + g)
            s = gl.load(s_ptr + rows_s * stride_sn + g)
            v = gl.join(gl.join(_pair(words, PAIR0), _pair(words, PAIR1)),
                        gl.join(_pair(words, PAIR2), _pair(words, PAIR3)))  # [TN, KC, lane, c, b0, b1, b2]  # fmt: skip
            v = gl.permute(gl.reshape(v, [TN, KC, 8, 4, 4, 2, 2, 2]), [0, 6, 2, 1, 4, 7, 3, 5])
            a = gl.convert_layout(gl.reshape(v, [BLOCK_N, GROUP]), a_l, assert_trivial=True)
            a = a - (z.to(gl.float32) + 128.0).to(gl.bfloat16)[:, None]  # q - z, exact
            part = mma_v2(a, xk, gl.zeros([BLOCK_N, BM], gl.float32, layout=mma))
            acc = acc + part * s[:, None]
        cols = gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
        y = y_ptr + cols[None, :] * stride_ym + rows_c[:, None]
        y_mask = (rows_c < N)[:, None] & (cols < M)[None, :]
        if gl.num_programs(1) == 1:
            gl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
        else:  # split K: each part to the workspace; the last of the column strip's programs adds them up
            part_at = ws_ptr + (pid_k * M + cols[None, :]) * N + rows_c[:, None]
            gl.store(part_at, acc, mask=y_mask)
            _barrier()  # every lane's part is written before the count says so
            done = gl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
            if done == gl.num_programs(1) - 1:
                acc = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma)
                for j in range(gl.num_programs(1)):
                    at = ws_ptr + (j * M + cols[None, :]) * N + rows_c[:, None]
                    acc += gl.load(at, mask=y_mask, other=0.0, cache_modifier=".cg")
                gl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)


def config(M: int, N: int, K: int) -> dict:
    """Row tiles a warp (R), warps, how x is read, split-K: graph-timed on the H200 (docs/perf-notes.md, eighth round,
    sweep 20), % of copy on 28672 x 8192, 8192 x 28672, 8192 x 8192, with K split 2 ways where N is long and 8 where
    it is short. Up to M = 4 each lane reads its own x (M = 1: 74 / 76 / 56; M = 4: 71 / 66 / 47, two tiles a warp
    where N is short: 56 / 44 with one); from M = 5 the program reads x once through shared memory, where per lane
    every warp's reads of x outgrow the weight's (M = 16, two tiles a warp: 54 / 57 / 39; per lane at best
    45 / 48 / 39)."""
    split = 2 if N >= 16384 else 8
    if M <= 4:
        return dict(R=1 if M == 1 or N >= 16384 else 2, num_warps=4, X_SHARED=False, SPLIT_K=split)
    return dict(R=1 if M <= 8 else 2, num_warps=4, X_SHARED=True, SPLIT_K=split)


def w4a16_decode(x, packed, scales, zeros, group_size, out=None):
    """The chapter's signature: repacks on every call, so for checks, not for timing (a deployment repacks once)."""
    return decode(x, repack(packed), scales, zeros, group_size, packed.shape[0], out=out)


def decode(x: torch.Tensor, words: torch.Tensor, scales, zeros, group_size: int, N: int, out=None, **cfg):
    """y = x @ dequantize(W)^T for M <= 16 rows of bf16 x, W given as `repack`'s words (N its rows)."""
    if x.dtype != torch.bfloat16:
        raise ValueError(f"the MMA decode takes bf16 activations, got {x.dtype}")
    M, K = x.shape
    if M > 16:
        raise ValueError(f"the MMA decode takes at most 16 rows, got M = {M}")
    if not supports(group_size, K) or tuple(words.shape) != (triton.cdiv(N, 16), K // 64, 32, 4):
        raise ValueError(f"words of shape {list(words.shape)} do not fit N = {N}, K = {K}, G = {group_size}")
    groups = K // group_size
    if tuple(scales.shape) != (N, groups) or tuple(zeros.shape) != (N, groups) or zeros.dtype != torch.uint8:
        raise ValueError(f"scales (float32) and zeros (uint8) must be [N, K/G] = [{N}, {groups}]")
    x = x if x.stride(1) == 1 else x.contiguous()  # rows may be strided
    scales, zeros = scales.float().contiguous(), zeros.contiguous()
    out = torch.empty(M, N, dtype=x.dtype, device=x.device) if out is None else out
    if tuple(out.shape) != (M, N) or out.stride(1) != 1:
        raise ValueError(f"out must be [{M}, {N}] with unit stride along N")
    cfg = dict(cfg or config(M, N, K))
    split = min(cfg.pop("SPLIT_K", 1), K // group_size)
    bm = 8 if M <= 8 else 16
    block_n = 16 * cfg["num_warps"] * cfg["R"]

    n_blocks = triton.cdiv(N, block_n)
    one = split == 1  # then neither is touched: empty() launches nothing
    ws = torch.empty(1 if one else (split, M, N), dtype=torch.float32, device=x.device)
    cnt = (torch.empty if one else torch.zeros)(1 if one else n_blocks, dtype=torch.int32, device=x.device)
    _w4_mma_kernel[(n_blocks, split)](
        x, words, scales, zeros, out, ws, cnt, M, N, K, x.stride(0), scales.stride(0), out.stride(0),
        GROUP=group_size, BM=bm, **cfg,
    )  # fmt: skip
    return out
