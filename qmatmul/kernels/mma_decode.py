"""Expert W4A16, MXFP4 and NVFP4 decode on warp-level tensor-core MMAs, in Gluon, on a weight repacked once at load.

The readable kernels leave the register layout to Triton, which builds the MMA's operands from the loaded tile through
moves, permutes and shared memory (5-13 instructions a weight on sm_90, `tools/sass.py`). Here the layout is the
kernel's: `repack` (qmatmul/kernels/mma_repack.py) stores each 16 x 16 weight tile as 32 int32 words, one a lane,
whose eight nibbles are exactly the eight values that lane holds of `mma.sync.m16n8k16`'s first operand, ordered so
that one shift and one LOP3 make two of them at once (nibble j in the low half of a register, nibble j + 4 in the high
half, as bf16 128 + q). The weights are the MMA's rows (N, 16 a tile), the activations its 8 or 16 columns (M
padded); each group of K is one chain of MMAs into a float32 partial sum that its scale multiplies, exactly as the
chapter's reference scales. The repack also reorders K inside each 64-wide chunk (`x_order`, the same for weights and
activations, so the sum is unchanged) so that each lane's part of the MMA's second operand is 16 consecutive values of
x: two 16-byte loads instead of eight 4-byte ones.

Gluon (triton.experimental.gluon, triton 3.5 or newer) states every layout; `convert_layout(..., assert_trivial=True)`
makes the compiler prove the unpacked tile already is the MMA operand (no data moves). Gluon has no interpreter, so
the CPU tests run `unpack_like_kernel` (qmatmul/kernels/mma_repack.py: the kernel's tensor program in torch, op for
op) against the chapter's layout and compile the kernel for sm_90 (tests/test_mma_decode.py); the GPU tests run it.

Per 8 weights a lane issues 3 shifts, 4 LOP3, 4 HADD2 (q - z, exact) and one or two HMMAs: 2.2-2.4 SASS instructions
a weight in the loop with its loads (sm_90, `tools/sass.py mma-w4a16-m1 mma-w4a16-m16`), against 4.9 for
qmatmul.kernels.expert's Triton tensor-core kernel. What it measured on the H200: docs/perf-notes.md, seventh and eighth
rounds.

MXFP4 and NVFP4 (`repack_fp4`, `decode_fp4`) take the same tiles with K reordered inside each scale block (32 or 16
values) and each e2m1 code's bits stored where the kernel wants them in a bf16 (FP4_BITS): pair by pair an AND, a
rotate and an AND, or an AND, a multiply and an AND give two bf16 holding the values times 2^-126, and one bf16x2
multiply by 2^126 makes them exact (the subnormal 0.5 included). Each scale block is one MMA chain whose float32 sum
its scale multiplies: 2.8-2.9 (MXFP4) and 3.4-3.6 (NVFP4) SASS instructions a weight (docs/perf-notes.md, ninth round).
At M = 1, `_fp4_diag_kernel` puts the MMA's eight columns, otherwise copies of the one row of x, to work: x's scale
block c in column c and zeros elsewhere, so one chain gives every block's sum in its own column and a lane scales only
the four it holds: 2.2-2.5 instructions a weight (twelfth round).
"""

from __future__ import annotations

import torch
import triton

from qmatmul.kernels import configs, splitk
from qmatmul.kernels.configs import diag_shape
from qmatmul.kernels.mma_repack import (
    FP4_BITS,
    FP4_MASK,
    FP4_PAIR3_MASK,
    FP4_PAIR3_MUL,
    SLOTS,
    decode_like_kernel_fp4,
    repack,
    repack_fp4,
    tile_index,
    unpack_like_kernel,
    x_order,
)

try:  # Gluon: triton 3.5 and newer
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2
except ImportError:  # pragma: no cover - older triton: the callers take another path
    gluon = None

# The repacking and its CPU models (qmatmul/kernels/mma_repack.py) and the block-diagonal kernel's shape
# (qmatmul/kernels/configs.py), as `mma_decode.<name>` too.
__all__ = [
    "FP4_BITS", "FP4_MASK", "FP4_PAIR3_MASK", "FP4_PAIR3_MUL", "SLOTS", "available", "config", "config_fp4", "decode",
    "decode_fp4", "decode_like_kernel_fp4", "diag_shape", "mxfp4_decode", "nvfp4_decode", "repack", "repack_fp4",
    "supports", "tile_index", "unpack_like_kernel", "w4a16_decode", "why_not", "why_not_fp4", "x_order",
]  # fmt: skip


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
    groups = f"needs groups of 64 times a power of two (G = {group_size}) dividing K = {K}"
    return _missing() or _why_not_dtype(dtype) or ("" if supports(group_size, K) else groups)


def why_not_fp4(dtype, K: int) -> str:
    """Why the fp4 MMA decode does not run here on these operands, or "" when it does."""
    chunks = f"needs K a multiple of 64, got {K}"
    return _missing() or _why_not_dtype(dtype) or ("" if K % 64 == 0 else chunks)


def _why_not_dtype(dtype) -> str:
    if dtype == torch.bfloat16:
        return ""
    return f"takes bf16 activations, not {str(dtype).replace('torch.', '')}"


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
    def _x_layout(KC, BM, W, J=16):
        """[KC, 4, J, BM] x values of a step as repack orders K: lane 4 g + t holds row g's (g + 8 too at BM = 16)
        J consecutive values t of each piece of 4 J (a 64-wide chunk, or one fp4 scale block) in consecutive
        registers; every warp holds the same."""
        regs = [[0, 0, 1 << i, 0] for i in range(J.bit_length() - 1)]
        regs += [[1 << i, 0, 0, 0] for i in range(KC.bit_length() - 1)]
        regs += [[0, 0, 0, 8]] if BM == 16 else []
        lanes = [[0, 1, 0, 0], [0, 2, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 4]]
        warps = [[0, 0, 0, 0]] * (W.bit_length() - 1)
        return gl.DistributedLinearLayout(regs, lanes, warps, [], [KC, 4, J, BM])

    def _fp4_asm(j: int) -> str:
        """Pair j of a `repack_fp4` word -> two bf16 e2m1 values: the bits put in place (FP4_BITS), then times 2^126
        by one bf16x2 FMA (exact, the subnormal 0.5 included; -0 added so that -0 stays -0)."""
        place = {0: "", 1: "shf.r.wrap.b32 t, t, t, 3;", 2: "shf.r.wrap.b32 t, t, t, 6;",
                 3: f"and.b32 t, t, {FP4_PAIR3_MASK}; mul.lo.u32 t, t, {FP4_PAIR3_MUL};"}[j]  # fmt: skip
        return (
            "{ .reg .b32 t, c, z; mov.b32 t, $2; " + place + f" and.b32 t, t, {FP4_MASK}; "
            "mov.b32 c, 0x7E807E80; mov.b32 z, 0x80008000; fma.rn.bf16x2 t, t, c, z; mov.b32 {$0, $1}, t; }"
        )

    E2M1_0 = gl.constexpr(_fp4_asm(0))
    E2M1_1 = gl.constexpr(_fp4_asm(1))
    E2M1_2 = gl.constexpr(_fp4_asm(2))
    E2M1_3 = gl.constexpr(_fp4_asm(3))

    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # renamed after triton 3.6

    @gluon.constexpr_function
    def _mma_layout(W):
        """mma.sync m16n8k16's accumulator, W warps along the rows (the weight's N)."""
        return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])

    @gluon.constexpr_function
    def _chunks_layout(W):
        """The words as stored, [tiles, chunks, lane, 4]: a lane's four words of a chunk in one 16-byte load, warps
        over the row tiles."""
        return gl.BlockedLayout([1, 1, 1, 4], [1, 1, 32, 1], [W, 1, 1, 1], [3, 2, 1, 0])

    @gluon.jit
    def _steps(n_steps):
        """The program's run [g0, g1) of n_steps: the pid_k-th of num_programs(1) even runs (split-K)."""
        per = gl.cdiv(n_steps, gl.num_programs(1))
        g0 = gl.program_id(1) * per
        return g0, gl.minimum(n_steps, g0 + per)

    @gluon.jit
    def _chunk_offsets(N, K, TN: gl.constexpr, CH: gl.constexpr, w_l: gl.constexpr):
        """Offsets [TN, CH, 32, 4] into `repack`'s words of the first CH 64-wide chunks of the program's TN row tiles;
        tiles past N read the last one again (never stored): no mask."""
        tn = gl.program_id(0) * TN + gl.arange(
            0, TN, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, w_l)))
        )
        tn = gl.minimum(tn, gl.cdiv(N, 16) - 1)
        kc = gl.arange(0, CH, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, w_l))))
        ln = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, w_l))))
        cc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, w_l))))
        w_off = (
            (tn[:, None, None, None] * (K // 64) + kc[None, :, None, None]) * 32 + ln[None, None, :, None]
        ) * 4
        return w_off + cc[None, None, None, :]

    @gluon.jit
    def _w4_mma_kernel(
        x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
        stride_xm, stride_sn, stride_ym,
        GROUP: gl.constexpr, R: gl.constexpr, BM: gl.constexpr, X_SHARED: gl.constexpr,
    ):  # fmt: skip
        """y[m, n] = sum over groups g of s[n, g] * sum_k (q[n, k] - z[n, g]) x[m, k].

        Program (pid_n, pid_k): BLOCK_N = 16 x warps x R rows of N and the pid_k-th of num_programs(1) even runs of
        groups. Split, each program writes its float32 part to ws [split, M, N] and counts itself in cnt[pid_n]; the
        last one of a strip adds the parts in order and writes y (`_finish`)."""
        W: gl.constexpr = gl.num_warps()
        TN: gl.constexpr = W * R  # 16-row tiles a program
        BLOCK_N: gl.constexpr = 16 * TN
        KC: gl.constexpr = GROUP // 64  # 64-wide chunks a group
        mma: gl.constexpr = _mma_layout(W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        g0, g1 = _steps(K // GROUP)
        w_off = _chunk_offsets(N, K, TN, KC, _chunks_layout(W))
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
            xk = _mma_order(gl.load(x_ptr + x_off + g * GROUP), KC, 64, BM)
            if X_SHARED:
                _barrier()  # every warp has read the last group's x
                x_smem.store(xk)
                _barrier()
                xk = x_smem.load(b_l)
            else:
                xk = gl.convert_layout(xk, b_l, assert_trivial=True)
            z = gl.load(z_ptr + rows_a * stride_sn + g)
            s = gl.load(s_ptr + rows_s * stride_sn + g)
            # [TN, chunk, lane, c] -> [TN, lane, (chunk, c)]: the group's 16-wide tiles of K in order
            words = gl.reshape(gl.permute(words, [0, 2, 1, 3]), [TN, 32, 4 * KC])
            a = _mma_operand(words, TN, 4 * KC, a_l, PAIR0, PAIR1, PAIR2, PAIR3)
            a = a - (z.to(gl.float32) + 128.0).to(gl.bfloat16)[:, None]  # q - z, exact
            part = mma_v2(a, xk, gl.zeros([BLOCK_N, BM], gl.float32, layout=mma))
            acc = acc + part * s[:, None]
        _finish(acc, y_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, rows_c, pid_n, pid_k, BM, mma)

    @gluon.jit
    def _finish(acc, y_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, rows_c, pid_n, pid_k, BM: gl.constexpr,
                mma: gl.constexpr):  # fmt: skip
        """Store the program's float32 sum: y, or split, its part to ws [split, M, N], counted in cnt[pid_n]
        (`qmatmul/kernels/splitk.py`); the strip's last program adds the parts in order, writes y and sets the count back to
        0: one launch, no atomics on the output, the same sum whichever program finishes last."""
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
                acc = gl.zeros(acc.shape, gl.float32, layout=mma)
                for j in range(gl.num_programs(1)):
                    at = ws_ptr + (j * M + cols[None, :]) * N + rows_c[:, None]
                    acc += gl.load(at, mask=y_mask, other=0.0, cache_modifier=".cg")
                gl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
                gl.store(cnt_ptr + pid_n, 0)  # ready for the next call: no launch zeroes the counters

    @gluon.jit
    def _mma_operand(w, TN: gl.constexpr, C: gl.constexpr, a_l: gl.constexpr, P0: gl.constexpr, P1: gl.constexpr,
                     P2: gl.constexpr, P3: gl.constexpr):  # fmt: skip
        """Words [TN, 32 lanes, C] (C 16-wide tiles of K, as `repack` / `repack_fp4` store them) -> bf16 [16 TN, 16 C],
        the MMA's first operand (the compiler proves no data moves), pair j of each word made by the inline PTX Pj."""
        v = gl.join(gl.join(_pair(w, P0), _pair(w, P1)), gl.join(_pair(w, P2), _pair(w, P3)))
        # [TN, lane (g, t), c, b0, b1, b2] -> [tn, b1, g, c, b2, t, b0]: rows 16 tn + 8 b1 + g, K 16 c + 8 b2 + 2 t + b0
        v = gl.permute(gl.reshape(v, [TN, 8, 4, C, 2, 2, 2]), [0, 5, 1, 3, 6, 2, 4])
        return gl.convert_layout(gl.reshape(v, [16 * TN, 16 * C]), a_l, assert_trivial=True)

    @gluon.jit
    def _fp4_scale(codes, b: gl.constexpr, SB: gl.constexpr):
        """Block b's scale of a step, float32, from the step's codes of a row read as one integer (byte b)."""
        if SB == 32:
            return _e8m0((codes << (23 - 8 * b)) & 0x7F800000)
        return _e4m3((codes >> (8 * b)) & 0xFF)

    @gluon.jit
    def _e8m0(field):
        """e8m0 2^(e - 127) as float32, from e already in a float32's exponent field (e << 23); e = 0 would give 0, so
        the subnormal 2^-127's bits are its floor (non-negative floats order as their bits do)."""
        return gl.maximum(field, 0x00400000).to(gl.float32, bitcast=True)

    @gluon.jit
    def _e4m3(code):
        """An e4m3 code (an integer 0..255) as float32."""
        return code.to(gl.uint8).to(gl.float8e4nv, bitcast=True).to(gl.float32)

    @gluon.jit
    def _mma_order(xk, NB: gl.constexpr, SB: gl.constexpr, BM: gl.constexpr):
        """x [NB, 4, SB / 4, BM] as read (lane t's SB / 4 values of each block side by side) -> [NB SB, BM] in the
        MMA's K order, block by block: the inverse of `x_order(block=SB)` (SB = 64: W4A16's chunks)."""
        xk = gl.permute(gl.reshape(xk, [NB, 4, SB // 16, 2, 2, BM]), [0, 2, 3, 1, 4, 5])  # c, b2, t, b0
        return gl.reshape(xk, [NB * SB, BM])

    @gluon.jit
    def _fp4_block(w, xk, s, acc, TN: gl.constexpr, SB: gl.constexpr, a_l: gl.constexpr, mma: gl.constexpr):
        """One scale block of SB values of K: acc += (e2m1 tile . x) * s, the scale on the float32 chain."""
        a = _mma_operand(w, TN, SB // 16, a_l, E2M1_0, E2M1_1, E2M1_2, E2M1_3)
        part = mma_v2(a, xk, gl.zeros(acc.shape, gl.float32, layout=mma))
        return acc + part * s[:, None]

    @gluon.jit
    def _x_block(x_ptrs, x_smem, b: gl.constexpr, SB: gl.constexpr, BM: gl.constexpr, b_l: gl.constexpr,
                 X_SHARED: gl.constexpr):  # fmt: skip
        """Block b of the step's x as the MMA's second operand: from shared memory, or read by each lane itself."""
        if X_SHARED:
            xk = x_smem.slice(b * SB, SB).load(b_l)
        else:
            xk = gl.convert_layout(_mma_order(gl.load(x_ptrs + b * SB), 1, SB, BM), b_l, assert_trivial=True)
        return xk

    @gluon.jit
    def _fp4_mma_kernel(
        x_ptr, w_ptr, s_ptr, gs_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
        stride_xm, stride_sn, stride_ym,
        SB: gl.constexpr, R: gl.constexpr, BM: gl.constexpr, HAS_GS: gl.constexpr, X_SHARED: gl.constexpr,
    ):  # fmt: skip
        """y[m, n] = gs * sum over blocks b of s[n, b] * sum_k e2m1[n, k] x[m, k]: MXFP4 (SB = 32, e8m0 scales) or
        NVFP4 (SB = 16, e4m3 scales, HAS_GS: the float32 global scale gs). A step is one 64-wide chunk of K; the
        program (pid_n, pid_k) and split-K as in _w4_mma_kernel."""
        W: gl.constexpr = gl.num_warps()
        TN: gl.constexpr = W * R
        BLOCK_N: gl.constexpr = 16 * TN
        mma: gl.constexpr = _mma_layout(W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        w_l: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 32, 1], [W, 1, 1], [2, 1, 0])
        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        g0, g1 = _steps(K // 64)

        tn = gl.minimum(pid_n * TN + gl.arange(0, TN, layout=gl.SliceLayout(1, gl.SliceLayout(2, w_l))),
                        gl.cdiv(N, 16) - 1)  # fmt: skip
        ln = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, w_l)))
        cc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, w_l)))
        w_off = (tn[:, None, None] * (K // 64) * 32 + ln[None, :, None]) * 4 + cc[None, None, :]
        rows_c = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        # A row's codes of a step as one integer (2 e8m0 or 4 e4m3); rows past N read the last row's (never stored)
        s_int: gl.constexpr = gl.uint16 if SB == 32 else gl.int32
        s_rows = (s_ptr + gl.minimum(rows_c, N - 1) * stride_sn).to(gl.pointer_type(s_int))

        # x as [block, t, SB / 4, row] in the order repack_fp4 gave K. Per lane (one block a load, lane t's values of
        # it side by side; every warp reads the same x), or (X_SHARED) read once a program in 16-byte pieces and
        # stored in shared memory in the MMA's K order, the operand then read by ldmatrix. Rows past M read row M - 1.
        NB: gl.constexpr = 64 // SB
        if X_SHARED:
            x_l: gl.constexpr = gl.BlockedLayout([1, 1, SB // 4, 1], [1, 4, 1, 8], [1, 1, 1, W], [2, 1, 0, 3])
            x_smem = gl.allocate_shared_memory(
                gl.bfloat16, [64, BM], gl.SwizzledSharedLayout(8, 1, 8, [0, 1])
            )
        else:
            x_l: gl.constexpr = _x_layout(1, BM, W, SB // 4)
            x_smem = 0
        xb = gl.arange(
            0, NB if X_SHARED else 1, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, x_l)))
        )
        xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xj = gl.arange(0, SB // 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, x_l))))
        xm = gl.arange(0, BM, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, x_l))))
        x_off = (xb[:, None, None, None] * SB + xt[None, :, None, None] * (SB // 4) + xj[None, None, :, None]
                 + gl.minimum(xm, M - 1)[None, None, None, :] * stride_xm)  # fmt: skip

        acc = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma)
        for g in range(g0, g1):
            words = gl.load(w_ptr + w_off + g * 128)  # [TN, 32, 4]: the four 16-wide tiles of the chunk
            lo, hi = gl.split(gl.permute(gl.reshape(words, [TN, 32, 2, 2]), [0, 1, 3, 2]))  # tiles 0-1, 2-3
            x_at = x_ptr + x_off + g * 64
            if X_SHARED:
                xk = _mma_order(gl.load(x_at), NB, SB, BM)
                _barrier()  # every warp has read the last step's x
                x_smem.store(xk)
                _barrier()
            e = gl.load(s_rows + g).to(gl.int32)
            if SB == 32:
                acc = _fp4_block(lo, _x_block(x_at, x_smem, 0, SB, BM, b_l, X_SHARED), _fp4_scale(e, 0, SB), acc,
                                 TN, SB, a_l, mma)  # fmt: skip
                acc = _fp4_block(hi, _x_block(x_at, x_smem, 1, SB, BM, b_l, X_SHARED), _fp4_scale(e, 1, SB), acc,
                                 TN, SB, a_l, mma)  # fmt: skip
            else:
                w0, w1 = gl.split(lo)
                w2, w3 = gl.split(hi)
                acc = _fp4_block(gl.expand_dims(w0, 2), _x_block(x_at, x_smem, 0, SB, BM, b_l, X_SHARED),
                                 _fp4_scale(e, 0, SB), acc, TN, SB, a_l, mma)  # fmt: skip
                acc = _fp4_block(gl.expand_dims(w1, 2), _x_block(x_at, x_smem, 1, SB, BM, b_l, X_SHARED),
                                 _fp4_scale(e, 1, SB), acc, TN, SB, a_l, mma)  # fmt: skip
                acc = _fp4_block(gl.expand_dims(w2, 2), _x_block(x_at, x_smem, 2, SB, BM, b_l, X_SHARED),
                                 _fp4_scale(e, 2, SB), acc, TN, SB, a_l, mma)  # fmt: skip
                acc = _fp4_block(gl.expand_dims(w3, 2), _x_block(x_at, x_smem, 3, SB, BM, b_l, X_SHARED),
                                 _fp4_scale(e, 3, SB), acc, TN, SB, a_l, mma)  # fmt: skip
        if HAS_GS:
            acc = acc * gl.load(gs_ptr)
        _finish(acc, y_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, rows_c, pid_n, pid_k, BM, mma)

    @gluon.jit
    def _fp4_diag_kernel(
        x_ptr, w_ptr, s_ptr, gs_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K,
        stride_xm, stride_sn, stride_ym,
        SB: gl.constexpr, R: gl.constexpr, BM: gl.constexpr, HAS_GS: gl.constexpr, NB: gl.constexpr,
        MP: gl.constexpr,
    ):  # fmt: skip
        """_fp4_mma_kernel's sum for up to MP rows of x (MP x NB <= 8), the MMA's eight columns put to work: a step is
        NB scale blocks, and the MMA's second operand holds row m's block b of x in column c = NB m + b and zeros
        elsewhere, so one chain of MMAs leaves each row's and block's partial sum in its own column. A lane holds four
        of those (two rows of the weight, two columns) and scales only them: 4 scales and 4 FFMAs a lane a step and
        row tile, where the block-by-block chain scales 2 rows x NB blocks and all 4 of its values per block. Each
        row's NB columns are added at the end."""
        W: gl.constexpr = gl.num_warps()
        TN: gl.constexpr = W * R
        BLOCK_N: gl.constexpr = 16 * TN
        STEP: gl.constexpr = NB * SB
        CH: gl.constexpr = STEP // 64  # 64-wide chunks a step
        mma: gl.constexpr = _mma_layout(W)
        a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        pid_n = gl.program_id(0)
        pid_k = gl.program_id(1)
        g0, g1 = _steps(K // STEP)
        w_off = _chunk_offsets(N, K, TN, CH, _chunks_layout(W))
        rows_c = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        cols = gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
        # rows past N: the last row's scales; columns past MP x NB (their sums are zeros) none
        s_off = gl.minimum(rows_c, N - 1)[:, None] * stride_sn + (cols if MP == 1 else cols % NB)[None, :]
        s_used = (rows_c >= 0)[:, None] & (cols < MP * NB)[None, :]

        # x as [block, t, SB / 4, column]: lane 4 c + t reads its SB / 4 values of block c % NB of row c // NB (one
        # load), and holds zeros for the other blocks: the block-diagonal operand, every warp the same. Rows past M
        # read row M - 1 (their columns are never stored).
        x_l: gl.constexpr = _x_layout(NB, BM, W, SB // 4)
        xb = gl.arange(0, NB, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xj = gl.arange(0, SB // 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, x_l))))
        xm = gl.arange(0, BM, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, x_l))))
        x_off = xb[:, None, None, None] * SB + xt[None, :, None, None] * (SB // 4) + xj[None, None, :, None]
        # One row: every column the same row of x (to the full shape). The general form below compiled to 74 registers
        # at M = 1 against these 66 (MXFP4), which costs a second wave at 28672 x 8192 (docs/perf-notes.md, twelfth
        # round); so does its reduction below.
        if MP == 1:
            x_off = x_off + (xm * 0)[None, None, None, :]
            x_diag = xb[:, None, None, None] == xm[None, None, None, :]
        else:
            x_off = x_off + (gl.minimum(xm // NB, M - 1) * stride_xm)[None, None, None, :]
            x_col = xm < MP * NB
            x_diag = (xb[:, None, None, None] == (xm % NB)[None, None, None, :]) & x_col[None, None, None, :]

        acc = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma)
        for g in range(g0, g1):
            words = gl.load(w_ptr + w_off + g * (CH * 128))
            words = gl.reshape(gl.permute(words, [0, 2, 1, 3]), [TN, 32, 4 * CH])
            xk = gl.load(x_ptr + x_off + g * STEP, mask=x_diag, other=0.0)
            xk = gl.convert_layout(_mma_order(xk, NB, SB, BM), b_l, assert_trivial=True)
            a = _mma_operand(words, TN, 4 * CH, a_l, E2M1_0, E2M1_1, E2M1_2, E2M1_3)
            part = mma_v2(a, xk, gl.zeros([BLOCK_N, BM], gl.float32, layout=mma))
            if MP * NB < BM:  # block c % NB's code in column c, none past MP x NB
                e = gl.load(s_ptr + s_off + g * NB, mask=s_used).to(gl.int32)
            else:
                e = gl.load(s_ptr + s_off + g * NB).to(gl.int32)
            s = _e8m0(e << 23) if SB == 32 else _e4m3(e)
            acc = acc + part * s
        if MP == 1:  # y in column 0, the only one stored: the sum of all
            total = gl.sum(acc, axis=1)
            if HAS_GS:
                total = total * gl.load(gs_ptr)
            out = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma) + total[:, None]
        else:
            out = gl.zeros([BLOCK_N, BM], gl.float32, layout=mma)
            for m in gl.static_range(MP):  # row m of y in column m: the sum of its NB columns
                total = gl.sum(gl.where((cols // NB == m)[None, :], acc, 0.0), axis=1)
                out = gl.where((cols == m)[None, :], total[:, None], out)
            if HAS_GS:
                out = out * gl.load(gs_ptr)
        _finish(out, y_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, rows_c, pid_n, pid_k, BM, mma)


def config(M: int, N: int, K: int) -> dict:
    """Row tiles a warp (R), warps, how x is read, split-K of the W4A16 kernel, as measured on the H200
    (qmatmul/kernels/configs.py, "mma.w4a16")."""
    return configs.choose("mma.w4a16", "cuda", M=M, N=N, K=K)


def w4a16_decode(x, packed, scales, zeros, group_size, out=None):
    """The chapter's signature: repacks on every call, so for checks, not for timing (a deployment repacks once)."""
    return decode(x, repack(packed), scales, zeros, group_size, packed.shape[0], out=out)


def decode(x: torch.Tensor, words: torch.Tensor, scales, zeros, group_size: int, N: int, out=None, **cfg):
    """y = x @ dequantize(W)^T for M <= 16 rows of bf16 x, W given as `repack`'s words (N its rows)."""
    M, K, x, out = _checked(x, words, N, out)
    if not supports(group_size, K):
        raise ValueError(f"groups of G = {group_size} do not fit the kernel's 64-wide chunks of K = {K}")
    groups = K // group_size
    if tuple(scales.shape) != (N, groups) or tuple(zeros.shape) != (N, groups) or zeros.dtype != torch.uint8:
        raise ValueError(f"scales (float32) and zeros (uint8) must be [N, K/G] = [{N}, {groups}]")
    return _launch(_w4_mma_kernel, x, words, scales.float().contiguous(), zeros.contiguous(), out, N, group_size,
                   dict(cfg or config(M, N, K)), GROUP=group_size)  # fmt: skip


def config_fp4(M: int, N: int, K: int, block: int = 32) -> dict:
    """Row tiles a warp, how x is read, split-K of the fp4 kernels (block: 32 or 16 values a scale), as measured on
    the H200 (qmatmul/kernels/configs.py, "mma.fp4")."""
    return configs.choose("mma.fp4", "cuda", M=M, N=N, K=K, block=block)


def mxfp4_decode(x, packed, scales, out=None):
    """The MXFP4 chapter's signature: repacks on every call, so for checks, not for timing."""
    return decode_fp4(x, repack_fp4(packed, 32), scales, None, packed.shape[0], out=out)


def nvfp4_decode(x, packed, scales, g, out=None):
    """The NVFP4 chapter's signature: repacks on every call, so for checks, not for timing."""
    return decode_fp4(x, repack_fp4(packed, 16), scales, g, packed.shape[0], out=out)


def decode_fp4(x: torch.Tensor, words: torch.Tensor, scales, g, N: int, out=None, **cfg):
    """MXFP4 (g None: e8m0 scale codes uint8 [N, K/32]) or NVFP4 (e4m3 codes uint8 [N, K/16] and the float32 global
    scale g): y = x @ W^T for M <= 16 rows of bf16 x, W given as `repack_fp4`'s words (N its rows)."""
    M, K, x, out = _checked(x, words, N, out)
    sb = 32 if g is None else 16
    if tuple(scales.shape) != (N, K // sb) or scales.dtype != torch.uint8:
        raise ValueError(f"the scales must be uint8 codes [N, K/{sb}] = [{N}, {K // sb}]")
    scales = scales.contiguous()
    if scales.data_ptr() % 4:  # the kernel reads a row's codes of a step as one 16- or 32-bit integer
        scales = scales.clone()
    gs = scales if g is None else g.float().reshape(1)
    cfg = dict(cfg or config_fp4(M, N, K, sb))
    if cfg.pop("DIAG", False):
        mp, nb = (cfg.setdefault(k, v) for k, v in zip(("MP", "NB"), diag_shape(M, sb), strict=True))
        if M > mp or mp * nb > 8 or K % (nb * sb) or nb * sb % 64:
            raise ValueError(f"the block-diagonal kernel takes MP >= M rows of x and NB blocks a step, MP x NB at most "
                             f"8, the step ({nb * sb} values) a multiple of 64 dividing K; got M = {M}, MP = {mp}, "
                             f"NB = {nb}, K = {K}")  # fmt: skip
        cfg.pop("X_SHARED", None)
        return _launch(
            _fp4_diag_kernel, x, words, scales, gs, out, N, nb * sb, cfg, SB=sb, HAS_GS=g is not None
        )
    return _launch(_fp4_mma_kernel, x, words, scales, gs, out, N, 64, cfg, SB=sb, HAS_GS=g is not None)


def _checked(x: torch.Tensor, words: torch.Tensor, N: int, out):
    """Both decodes' operands: bf16 x of at most 16 rows (rows may be strided), `repack`'s or `repack_fp4`'s words of
    an [N, K] weight, out [M, N] with unit stride along N (made when None). -> M, K, x, out."""
    if x.dtype != torch.bfloat16:
        raise ValueError(f"the MMA decode takes bf16 activations, got {x.dtype}")
    M, K = x.shape
    if M > 16:
        raise ValueError(f"the MMA decode takes at most 16 rows, got M = {M}")
    if K % 64 or tuple(words.shape) != (triton.cdiv(N, 16), K // 64, 32, 4):
        raise ValueError(f"words of shape {list(words.shape)} do not fit N = {N}, K = {K}")
    if words.dtype != torch.int32 or not words.is_contiguous():
        raise ValueError(f"words must be repack's contiguous int32 words (the kernel reads a lane's four words as one "
                         f"16-byte load), got {words.dtype}{'' if words.is_contiguous() else ', not contiguous'}")  # fmt: skip
    x = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty(M, N, dtype=x.dtype, device=x.device) if out is None else out
    if tuple(out.shape) != (M, N) or out.stride(1) != 1:
        raise ValueError(f"out must be [{M}, {N}] with unit stride along N")
    return M, K, x, out


def _launch(kernel, x, words, s, z, out, N: int, step: int, cfg: dict, **constants):
    """One launch of either kernel: a program per BLOCK_N rows and SPLIT_K (cfg's, at most one a step of `step`
    values of K) parts of K, with the split-K workspace and the strips' counters."""
    M, K = x.shape
    split = min(cfg.pop("SPLIT_K", 1), K // step)
    n_blocks = triton.cdiv(N, 16 * cfg["num_warps"] * cfg["R"])
    ws, cnt = splitk.scratch(x.device, split, N, n_blocks)
    kernel[(n_blocks, split)](
        x, words, s, z, out, ws, cnt, M, N, K, x.stride(0), s.stride(0), out.stride(0),
        BM=8 if M <= 8 else 16, **cfg, **constants,
    )  # fmt: skip
    return out
