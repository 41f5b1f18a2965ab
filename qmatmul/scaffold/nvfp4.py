"""Chapter NVFP4, what runs in the learner's process and the chapter gives the learner's code (its GIVEN,
`__all__` here): `prepare` (the validation of an NVFP4 matmul's inputs, the tensor scale g included), the launch
configurations (MXFP4's tiles: qmatmul/scaffold/mxfp4.py), `divisible_k` for the decode wrapper, and the given
helpers (`decoded_gemm`, `BLOCK`)."""

from __future__ import annotations

import torch

from qmatmul.formats.nvfp4 import BLOCK
from qmatmul.kernels.gemm import decoded_gemm
from qmatmul.scaffold import mxfp4, validation

__all__ = ["prepare", "prefill_config", "decoded_gemm", "decode_config", "divisible_k", "BLOCK"]


def prepare(x, packed, scales, g, out=None):
    """Validate the inputs of an NVFP4 matmul with clear messages; allocate out if needed. Returns M, N, K, out."""
    M, N, K = validation.require_block_scaled(
        x, packed, scales, block=BLOCK, block_name="NVFP4", codes="e4m3 bits", g=g
    )
    if g.dtype != torch.float32 or g.numel() != 1:
        raise ValueError(f"g must be a float32 tensor of one element, got {g.dtype} of shape {list(g.shape)}")
    return M, N, K, validation.placed(x, out, M, N, dict(packed=packed, scales=scales), g=g)


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    return mxfp4.prefill_config(M, N, K, device)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Not swept for NVFP4: the MXFP4 decode tiles (same loop structure)."""
    return mxfp4.decode_config(M, N, K, device)


def divisible_k(x, packed, scales, block_k: int):
    """The decode wrapper's operands and BLOCK_K: validation.divisible_k with blocks of 16."""
    return validation.divisible_k(x, packed, scales, block_k, BLOCK)
