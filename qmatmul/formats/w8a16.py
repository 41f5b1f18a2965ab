"""W8A16: int8 weights with one scale per output channel, fp16/bf16 activations.

Weights use nn.Linear's layout W[N, K] (out_features x in_features). Symmetric per-channel quantization:
    s[n] = max_k |W[n, k]| / 127            (float32; a row of zeros gets s = 1)
    q[n, k] = clamp(round(W[n, k] / s[n]), -127, 127)   (int8, round half to even, computed in float32)
    y = x @ (q * s[:, None]).T              (x: [M, K] fp16/bf16, y: [M, N] in x's dtype)
"""

from __future__ import annotations

import torch

from qmatmul.formats.constants import INT8_QMAX as QMAX


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference quantizer: returns q (int8 [N, K]) and s (float32 [N])."""
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return q, s


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return q.float() * s.float()[:, None]


def reference(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """y = x @ (q·s).T in float32 (the grading reference)."""
    return x.float() @ dequantize(q, s).T


def naive(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The naive path: dequantize the whole weight into memory, then a dense matmul."""
    return x @ (q.to(x.dtype) * s.to(x.dtype)[:, None]).T


def bytes_per_weight(K: int) -> float:
    """int8 weight plus its share of one float32 scale per row of K weights."""
    return 1 + 4 / K


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The bytes a fused W8A16 matmul must move: int8 weights, scales, activations in, output out."""
    return N * K + 4 * N + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The naive path: read int8, write the dequantized weight, read it back for the matmul."""
    return N * K + 4 * N + 2 * act_bytes * N * K + act_bytes * (M * K + M * N)
