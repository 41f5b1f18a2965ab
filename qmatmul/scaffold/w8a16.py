"""Chapter W8A16, what runs in the learner's process: `prepare` (validation and the output), the launch
configurations of the tiled and the decode kernel (the decode's K split: `decode_config`, `split_scratch`; the
checks force a split with `use_split`), the prefill wrapper's path choice (`decode_first`), and the helpers the chapter
gives (`QMAX`, `as_16bit`, `decoded_gemm`, and exercise 3's `k_slice` and `finish`, @triton.jit functions).
`__all__` is the chapter's GIVEN: qmatmul/w8a16.py derives it from there.
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.formats.w8a16 import QMAX
from qmatmul.kernels import configs, gemm
from qmatmul.kernels.gemm import as_16bit, decoded_gemm
from qmatmul.kernels.splitk import finish, k_slice
from qmatmul.kernels.splitk import scratch as split_scratch  # the workspace and counters `finish` takes
from qmatmul.scaffold import validation

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
__all__ = [
    "prepare", "prefill_config", "decode_config", "split_scratch", "QMAX", "decode_first", "as_16bit", "decoded_gemm",
    "k_slice", "finish",
]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use: validation, allocation, launch configurations


def prepare(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, out: torch.Tensor | None = None):
    """Validate the inputs of a W8A16 matmul with clear messages; allocate out if needed.

    Returns M, N, K, out.
    """
    validation.require_tensors(x=x, q=q, s=s)
    M, K = validation.require_activations(x)
    validation.require_codes("q", q, torch.int8, "[N, K]")
    N = q.shape[0]
    validation.require_same_k("x", x, "q", q, "[N, K]", q.shape[1])
    if s.dtype != torch.float32 or tuple(s.shape) != (N,):
        raise ValueError(f"s must be float32 of shape [N] = [{N}], got {s.dtype} of shape {list(s.shape)}")
    return M, N, K, validation.placed(x, out, M, N, dict(q=q, s=s))


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel."""
    return configs.choose("w8a16.tiled", configs.chapter_device(device), M=M, N=N, K=K)


def decode_first(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the prefill wrapper converts the codes once and multiplies with decoded_gemm's TMA GEMM: where that
    GEMM takes x, the converted weight (a contiguous [N, K] tensor in x's dtype; an empty one stands for it here) and
    out (Hopper and newer). Measured only there (the H200: docs/perf-notes.md, tenth round); elsewhere the chapter's
    fused kernel runs."""
    return gemm.takes_tma(x, x.new_empty((0, x.shape[1])), out)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel (all M rows, padded to 16, in one program, a strip of N) and SPLIT_K, the
    number of slices of K (the grid's second axis): more than 1 where the strips alone are too few to fill the GPU."""
    cfg = configs.choose("w8a16.decode", configs.chapter_device(device), M=M, N=N, K=K)
    return cfg | {"SPLIT_K": FORCED_SPLIT[-1]} if FORCED_SPLIT else cfg


# The checks force a K split (see use_split), so that a kernel is graded split and unsplit on every device. The worker
# sets it from checks.WORKER_STATE before every op, under the key "qmatmul.scaffold.w8a16:FORCED_SPLIT".
FORCED_SPLIT: list = []


def use_split(split: int):
    """Context manager: decode_config returns SPLIT_K = split."""
    return checks.forcing(FORCED_SPLIT, f"{__name__}:FORCED_SPLIT", split)
