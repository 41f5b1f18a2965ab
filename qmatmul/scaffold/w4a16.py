"""Chapter W4A16, what runs in the learner's process: `prepare` (validation and the output), the launch
configurations of the tiled and the decode kernel, the decode kernel's split of K (`decode_split`), and the helpers
the chapter gives (`decoded_gemm`, `gptq_prepare`). `__all__` is the chapter's GIVEN: qmatmul/w4a16.py derives it
from there.
"""

from __future__ import annotations

import torch

from qmatmul.formats.w4a16 import GROUP_SIZES, gptq_prepare
from qmatmul.kernels import configs
from qmatmul.kernels.gemm import decoded_gemm
from qmatmul.scaffold import validation

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
__all__ = ["prepare", "prefill_config", "decode_config", "decode_split", "decoded_gemm", "gptq_prepare"]


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use: validation, allocation, launch configurations


def prepare(x, packed, scales, zeros, group_size, out=None):
    """Validate the inputs of a W4A16 matmul with clear messages; allocate out if needed.

    Returns M, N, K, out.
    """
    validation.require_tensors(x=x, packed=packed, scales=scales, zeros=zeros)
    M, K = validation.require_activations(x)
    validation.require_codes("packed", packed, torch.uint8, "[N, K/2]")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
    N = packed.shape[0]
    validation.require_same_k("x", x, "packed", packed, "[N, K/2]", 2 * packed.shape[1])
    if K % group_size:
        raise ValueError(f"K = {K} must be a multiple of the group size {group_size}")
    groups = K // group_size
    if scales.dtype != torch.float32 or tuple(scales.shape) != (N, groups):
        raise ValueError(
            f"scales must be float32 of shape [N, K/G] = [{N}, {groups}], got {scales.dtype} of shape "
            f"{list(scales.shape)}"
        )
    if zeros.dtype != torch.uint8 or tuple(zeros.shape) != (N, groups):
        raise ValueError(
            f"zeros must be uint8 of shape [N, K/G] = [{N}, {groups}], got {zeros.dtype} of shape "
            f"{list(zeros.shape)}"
        )
    return M, N, K, validation.placed(x, out, M, N, dict(packed=packed, scales=scales, zeros=zeros))


def prefill_config(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel. BLOCK_K divides the group size: one scale and zero per K block."""
    return configs.choose("w4a16.tiled", configs.chapter_device(device), M=M, N=N, K=K, group_size=group_size)


def decode_config(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N, one group
    of K per step."""
    return configs.choose(
        "w4a16.decode", configs.chapter_device(device), M=M, N=N, K=K, group_size=group_size
    )


def decode_split(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> int:
    """How many slices of K the decode kernel's grid sums (split-K): more programs when N alone gives too few."""
    groups = K // group_size
    if device != "cuda":
        return 2 if groups >= 2 else 1  # the interpreter runs the split path too, so the tests cover it
    strips = -(-N // decode_config(M, N, K, group_size, device)["BLOCK_N"])
    # H200: 8192 columns (256 strips) ran at 21 % unsplit and 24-26 % in two slices; 28672 (896 strips) the same.
    return 2 if strips < 512 and groups >= 2 else 1
