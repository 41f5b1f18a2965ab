"""Split-K for the decode kernels, in one launch: `scratch` (the workspace and the strips' counters), `k_slice` (the
span of K a program sums) and `finish` (a Triton kernel's epilogue; `qmatmul/kernels/mma_decode.py`'s Gluon `_finish`
does the same).

Each of a column strip's programs stores its float32 partial sums in the workspace and counts itself in the strip's
counter; the last one to arrive adds the parts in order, writes the output and sets the counter back to 0. So the
counters are zeroed once, when they are made, and a call (or a CUDA graph's replay) launches nothing else. Launches
that share a scratch must run one after another (one stream), as the course's and the bench's calls do.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_SCRATCH: dict = {}


def scratch(device, split: int, N: int, n_blocks: int, rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(workspace, counters) for `split` parts of up to `rows` rows of N outputs and n_blocks column strips: float32
    [split * rows * N] and int32 [n_blocks] at 0, made once per device and shape. Unsplit, one-element placeholders."""
    if split == 1:
        N = n_blocks = rows = 1
    key = (str(torch.device(device)), split, N, n_blocks, rows)
    if key not in _SCRATCH:
        _SCRATCH[key] = (torch.empty(split * rows * N, dtype=torch.float32, device=device),
                         torch.zeros(n_blocks, dtype=torch.int32, device=device))  # fmt: skip
    return _SCRATCH[key]


@triton.jit
def k_slice(K, BLOCK_K: tl.constexpr, SPLIT_K, pid_k):
    """[lo, hi): the span of K that program pid_k of SPLIT_K sums, in whole BLOCK_K steps, as many in every program
    (the last may have fewer or none), never past K. Unsplit: [0, K). SPLIT_K may be a constexpr or tl.num_programs(1)."""
    span = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    lo = pid_k * span
    return lo, tl.minimum(lo + span, K)


@triton.jit
def finish(acc, y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K: tl.constexpr):
    """Store a program's float32 sums acc [rows offs_m, columns offs_n] at the pointers y (where y_mask): unsplit,
    directly; split, to its part of the workspace at part_ptr (SPLIT_K parts of acc's height times N, as `scratch`
    makes it), counted in count_ptr[pid_n]. The strip's last program adds the SPLIT_K parts in order, stores them
    and sets the counter back to 0."""
    if SPLIT_K == 1:
        tl.store(y, acc.to(y.dtype.element_ty), mask=y_mask)
    else:
        part = part_ptr + offs_m[:, None] * N + offs_n[None, :]
        stride = acc.shape[0] * N
        tl.store(part + pid_k * stride, acc, mask=y_mask)
        tl.debug_barrier()  # every thread's part stored before the release below
        if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLIT_K - 1:
            total = tl.zeros(acc.shape, dtype=tl.float32)
            for j in range(SPLIT_K):  # in order: the same sum whichever program finishes last
                total += tl.load(part + j * stride, mask=y_mask, other=0.0, cache_modifier=".cg")
            tl.store(y, total.to(y.dtype.element_ty), mask=y_mask)
            tl.store(count_ptr + pid_n, 0)
