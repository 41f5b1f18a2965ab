"""Chapter MXFP4, what runs in the learner's process and the chapter gives the learner's code (its GIVEN,
`__all__` here): `prepare` (the validation of an MXFP4 matmul's inputs), the launch configurations of the tiled,
decode and tl.dot_scaled kernels, `divisible_k` for the decode wrapper, and the given helpers (`decoded_gemm`,
`BLOCK`). NVFP4 reuses these tiles (qmatmul/scaffold/nvfp4.py)."""

from __future__ import annotations

import torch

from qmatmul.formats.mxfp4 import BLOCK
from qmatmul.kernels import configs
from qmatmul.kernels.gemm import decoded_gemm
from qmatmul.scaffold import validation

__all__ = [
    "prepare",
    "prefill_config",
    "decoded_gemm",
    "decode_config",
    "divisible_k",
    "dot_scaled_config",
    "BLOCK",
]


def prepare(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor | None = None):
    """Validate the inputs of an MXFP4 matmul with clear messages; allocate out if needed. Returns M, N, K, out."""
    M, N, K = validation.require_block_scaled(
        x, packed, scales, block=BLOCK, block_name="MX", codes="E8M0 codes"
    )
    return M, N, K, validation.placed(x, out, M, N, dict(packed=packed, scales=scales))


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel (BLOCK_K is a multiple of 32: whole MX blocks per step)."""
    return configs.choose("mxfp4.tiled", configs.chapter_device(device), M=M, N=N, K=K)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N."""
    return configs.choose("mxfp4.decode", configs.chapter_device(device), M=M, N=N, K=K)


def divisible_k(x, packed, scales, block_k: int):
    """The decode wrapper's operands and BLOCK_K: validation.divisible_k with blocks of 32."""
    return validation.divisible_k(x, packed, scales, block_k, BLOCK)


def dot_scaled_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tl.dot_scaled bonus: the decode tiles for M <= 16 (BLOCK_N = 64 measured best for it on
    the H200), the prefill tiles above."""
    return configs.choose("mxfp4.dot_scaled", configs.chapter_device(device), M=M, N=N, K=K)
