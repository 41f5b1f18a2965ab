"""W4A16's group-scaled GEMM on Hopper in Gluon: each group's scaling overlaps the next group's tensor-core work.

y[m, n] = sum over groups g of s[n, g] * sum_{k in g} x[m, k] w[n, k], for 16-bit x [M, K] and a weight w [N, K] of
exact integers (W4A16's q - z, decoded once): the product the chapter's kernels compute, the scales applied in
float32 to each group's partial sum because folding them into 16-bit weights would round them.

`gemm.tma_kernel` (Triton) does the same in its group mode and reaches 70-73 % of cuBLAS on the H200: Triton waits
for each step's `wgmma` before scaling its product, so the tensor cores idle while the FMAs run (docs/perf-notes.md,
sixth round). Here the loop is written out in Gluon (triton 3.5 or newer): step k's `warpgroup_mma` is issued
asynchronously, then the wait lets it run (one group outstanding) while step k - 1's product is scaled and added,
and the shared-memory stage step k - 1 read is refilled by TMA for a later step. The accumulator is transposed
(acc[n, m] = w . x^T), so each thread holds the scales of its two rows, as in `gemm.tma_kernel`'s SWAP tile.

Gluon has no interpreter: the CPU tests compile the kernel for sm_90 (tests/test_group_gemm.py); the GPU tests and
the bench run it.
"""

from __future__ import annotations

import torch
import triton

try:  # Gluon with Hopper's TMA and wgmma: triton 3.5 and newer
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # TMA's global-to-shared copy: async_copy_global_to_shared in triton 3.6, async_load in 3.9 (where the old name
    # raises)
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
except ImportError:  # pragma: no cover - older triton: gemm.tma_kernel's group mode runs instead
    gluon = None

# Tiles measured on the H200 (docs/perf-notes.md, eleventh round): w rows a program, x rows, K a step, TMA stages.
CONFIG = dict(BLOCK_N=128, BLOCK_M=128, BLOCK_K=128, STAGES=3, num_warps=8)


def why_not(x: torch.Tensor, w: torch.Tensor) -> str:
    """Why this kernel does not run on these operands (triton, GPU, layout), or "" when it does."""
    from qmatmul import gemm  # gemm imports this module

    if gluon is None:
        return f"needs triton with Gluon (3.5 or newer), have {triton.__version__}"
    if not x.is_cuda or torch.cuda.get_device_capability(x.device) != (9, 0):
        return "needs a Hopper GPU (sm_90): wgmma"
    if x.dtype not in (torch.bfloat16, torch.float16) or w.dtype != x.dtype:
        return f"takes 16-bit x and w of one dtype, got {x.dtype} and {w.dtype}"
    if not (gemm.describable(x) and gemm.describable(w)):
        return "needs operands a TMA descriptor can address (row-major, rows of a multiple of 16 bytes)"
    return ""


if gluon is not None:

    @gluon.jit
    def _load(w_desc, x_desc, w_s, x_s, ready, step, off_n, off_m, nbytes: gl.constexpr):
        """TMA: step's tiles of w and x into its stage, arriving on the stage's barrier."""
        st = step % w_s.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        mbarrier.expect(ready.index(st), nbytes)
        _tma_load(w_desc, [off_n, step * BK], ready.index(st), w_s.index(st))
        _tma_load(x_desc, [off_m, step * BK], ready.index(st), x_s.index(st))

    @gluon.jit
    def _refill(w_desc, x_desc, w_s, x_s, ready, step, steps, off_n, off_m, nbytes: gl.constexpr):
        """Load step into the stage it shares with a step whose product is done, if the loop reaches it."""
        if step < steps:
            _load(w_desc, x_desc, w_s, x_s, ready, step, off_n, off_m, nbytes)

    @gluon.jit
    def _issue(w_s, x_s, ready, step, zero):
        """Wait for step's tiles, then start its product w . x^T (asynchronous: the result is waited for later)."""
        STAGES: gl.constexpr = w_s.shape[0]
        st = step % STAGES
        mbarrier.wait(ready.index(st), (step // STAGES) & 1)
        return warpgroup_mma(w_s.index(st), x_s.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)

    @gluon.jit
    def _group_gemm_kernel(
        w_desc, x_desc, s_ptr, y_ptr, M, N, K, stride_sn, stride_ym, GROUP: gl.constexpr, STAGES: gl.constexpr,
    ):  # fmt: skip
        """Program (pid_n, pid_m): acc[BLOCK_N, BLOCK_M] = its tile of w . x^T over K in steps of BLOCK_K (which
        divides GROUP), each step's product times its group's scales, then stored transposed into y [M, N]."""
        W: gl.constexpr = gl.num_warps()
        BN: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        BM: gl.constexpr = x_desc.block_type.shape[0]
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, BM, 16]
        )
        off_n = gl.program_id(0) * BN
        off_m = gl.program_id(1) * BM
        w_s = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
        x_s = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        nbytes: gl.constexpr = w_desc.block_type.nbytes + x_desc.block_type.nbytes
        # Each step: wait for the last product, start this step's, then scale and add the last one while this one
        # runs (reading a product's registers before its wait, or copying one in flight, makes ptxas wait after every
        # wgmma). The products alternate between two register sets: step 0 alone, then steps in pairs; an odd count
        # of remaining steps gets one step past K, which TMA fills with zeros and whose scales read 0.
        pairs = gl.cdiv(gl.cdiv(K, BK) - 1, 2)
        steps = 1 + 2 * pairs
        for i in gl.static_range(STAGES):  # the first steps' tiles in flight, one a stage
            if i < steps:
                _load(w_desc, x_desc, w_s, x_s, ready, i, off_n, off_m, nbytes)

        rows = off_n + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
        s_rows = s_ptr + gl.minimum(rows, N - 1) * stride_sn  # rows past N read row N - 1's (never stored)
        groups = gl.cdiv(K, GROUP)
        zero = gl.zeros([BN, BM], gl.float32, layout=mma)
        acc = zero
        b = _issue(w_s, x_s, ready, 0, zero)
        s_b = gl.load(s_rows)
        for p in range(pairs):
            k = 1 + 2 * p
            done = warpgroup_mma_wait(num_outstanding=0, deps=(b,))
            a = _issue(w_s, x_s, ready, k, zero)  # step k runs while step k - 1's product is scaled
            acc += done * s_b[:, None]
            s_a = gl.load(s_rows + (k * BK) // GROUP, mask=(k * BK) // GROUP < groups, other=0.0)
            _refill(w_desc, x_desc, w_s, x_s, ready, k - 1 + STAGES, steps, off_n, off_m, nbytes)
            done = warpgroup_mma_wait(num_outstanding=0, deps=(a,))
            b = _issue(w_s, x_s, ready, k + 1, zero)  # step k + 1 runs while step k's product is scaled
            acc += done * s_a[:, None]
            s_b = gl.load(s_rows + ((k + 1) * BK) // GROUP, mask=((k + 1) * BK) // GROUP < groups, other=0.0)
            _refill(w_desc, x_desc, w_s, x_s, ready, k + STAGES, steps, off_n, off_m, nbytes)
        done = warpgroup_mma_wait(num_outstanding=0, deps=(b,))
        acc += done * s_b[:, None]
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))

        cols = off_m + gl.arange(0, BM, layout=gl.SliceLayout(0, mma))
        y = y_ptr + cols[None, :] * stride_ym + rows[:, None]
        gl.store(y, acc.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < N) & (cols[None, :] < M))


def group_gemm(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, group: int, out: torch.Tensor, **cfg):
    """out = the group-scaled product of x [M, K] and the integer weight w [N, K] with scales s [N, K / group]
    (float32), on Hopper: see the module's docstring. cfg: CONFIG's keys. The caller validates shapes (why_not says
    whether the kernel runs)."""
    from qmatmul import gemm

    why = why_not(x, w)
    if why:
        raise RuntimeError(f"group_gemm: {why}")
    if out.stride(1) != 1:
        raise ValueError("group_gemm stores into a row-major output")
    cfg = dict(CONFIG, **cfg)
    bn, bm, stages = cfg.pop("BLOCK_N"), cfg.pop("BLOCK_M"), cfg.pop("STAGES")
    bk = gemm.group_step(cfg.pop("BLOCK_K"), group)
    M, K = x.shape
    N = w.shape[0]
    dt = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk], gl.NVMMASharedLayout.get_default_for([bn, bk], dt))
    x_desc = TensorDescriptor.from_tensor(x, [bm, bk], gl.NVMMASharedLayout.get_default_for([bm, bk], dt))
    grid = (triton.cdiv(N, bn), triton.cdiv(M, bm))
    _group_gemm_kernel[grid](w_desc, x_desc, s, out, M, N, K, s.stride(0), out.stride(0), GROUP=group,
                             STAGES=stages, **cfg)  # fmt: skip
    return out
