"""FP8: e4m3 weights and activations (W8A8-FP8) with per-tensor, per-row and block scales.

Weights use nn.Linear's layout W[N, K]; activations x[M, K]. Symmetric scaling by blocks of br x bc elements:
    s[i, j] = max |x| over block (i, j) / 448       (float32; an all-zero block gets s = 1)
    q = saturate(x / s) cast to float8_e4m3fn        (x / s in float32, clamped to ±448, round to nearest even)
Per tensor: one block of the whole shape; per row: blocks of 1 x K (per token for x, per output channel for W);
DeepSeek-V3: activations 1 x 128, weights 128 x 128.
The W8A8 GEMM with per-row scales applies both scales in the epilogue:
    y = (xq @ wq.T) * sx[:, None] * sw[None, :]      (fp32 accumulation, y in bf16; fp16 on the CPU and pre-sm_80)
"""

from __future__ import annotations

import math

import torch

from qmatmul.formats.constants import E4M3_MAX, FLOAT8_FIELDS
from qmatmul.formats.constants import E4M3_OVERFLOW as E4M3_OVERFLOW
from qmatmul.formats.constants import E5M2_MAX as E5M2_MAX
from qmatmul.formats.constants import FP8_SCALE_BLOCK as SCALE_BLOCK

E4M3 = torch.float8_e4m3fn


def saturate(v: torch.Tensor) -> torch.Tensor:
    """The saturating cast: clamp to ±448 (inf included), then round to nearest even into e4m3fn. NaN stays NaN."""
    return v.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """max |x| over each block; partial blocks at the edges count only their real elements."""
    R, C = x.shape
    br, bc = block
    a = torch.nn.functional.pad(x.float().abs(), (0, cdiv(C, bc) * bc - C, 0, cdiv(R, br) * br - R))
    return a.view(cdiv(R, br), br, cdiv(C, bc), bc).amax(dim=(1, 3))


def expand_scales(s: torch.Tensor, shape: tuple[int, int], block: tuple[int, int]) -> torch.Tensor:
    """One scale per element: s[i // br, j // bc]."""
    R, C = shape
    return s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:R, :C]


def normalize_block(block, shape) -> tuple[int, int]:
    R, C = shape
    br, bc = block
    return (R if br is None else min(int(br), R) or 1, C if bc is None else min(int(bc), C) or 1)


def quantize(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference quantizer: q (e4m3fn, x's shape) and s (float32 [cdiv(R, br), cdiv(C, bc)])."""
    amax = block_amax(x, block)
    s = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = saturate(x.float() / expand_scales(s, tuple(x.shape), block))
    return q, s


def dequantize(q: torch.Tensor, s: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    return q.float() * expand_scales(s.float(), tuple(q.shape), block)


def reference(xq, sx, wq, sw) -> torch.Tensor:
    """y = (xq @ wq.T) * sx[:, None] * sw[None, :] in float32 (the grading reference), on the operands' device:
    the timed cells recheck up to 800 outputs of a 28672 x 8192 weight, minutes each on a CPU (fp32 matmuls on
    CUDA do not use TF32 unless asked)."""
    raw = xq.float() @ wq.float().T
    return raw * sx.float().reshape(-1)[:, None] * sw.float().reshape(-1)[None, :]


def naive(xq, sx, wq, sw, dtype=torch.bfloat16):
    """The naive path: dequantize both operands into memory, then a dense matmul."""
    x = (xq.to(dtype) * sx.reshape(-1, 1).to(dtype)).to(dtype)
    w = (wq.to(dtype) * sw.reshape(-1, 1).to(dtype)).to(dtype)
    return x @ w.T


def scaled_mm(xq, sx, wq, sw):
    """PyTorch's fp8 GEMM (cuBLASLt) with row-wise scales: the speed reference on sm_89+."""
    return torch._scaled_mm(xq, wq.t(), scale_a=sx.reshape(-1, 1), scale_b=sw.reshape(1, -1),
                            out_dtype=torch.bfloat16)  # fmt: skip


def decode_bits(code: int, fmt: str = "e4m3fn") -> float:
    """The value of an 8-bit code, from the rules (not from torch): sign, biased exponent, mantissa."""
    e_bits, m_bits, bias, has_inf = FLOAT8_FIELDS[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    e_max = (1 << e_bits) - 1
    if has_inf and e == e_max:
        return sign * math.inf if m == 0 else math.nan
    if not has_inf and e == e_max and m == (1 << m_bits) - 1:
        return math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


def bytes_per_weight(K: int, block: tuple[int, int] | None = None) -> float:
    """e4m3 weight plus its share of the float32 scales (per row when block is None)."""
    if block is None:
        return 1 + 4 / K
    return 1 + 4 / (block[0] * block[1])


def bytes_moved(M: int, N: int, K: int, out_bytes: int = 2) -> int:
    """What a fused W8A8-FP8 matmul must move: e4m3 weights and activations, row scales, the output."""
    return N * K + M * K + 4 * (M + N) + out_bytes * M * N


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """Dequantize both operands to 16 bits in memory, read them back for the matmul."""
    return bytes_moved(M, N, K, act_bytes) + 2 * act_bytes * (N * K + M * K)


def block_reference(xq, sx, wq, sw) -> torch.Tensor:
    """y = dequantize(xq, sx, 1 x 128) @ dequantize(wq, sw, 128 x 128).T, in float64 then float32."""
    x = xq.double().cpu() * expand_scales(sx.double().cpu(), tuple(xq.shape), (1, SCALE_BLOCK))
    w = wq.double().cpu() * expand_scales(sw.double().cpu(), tuple(wq.shape), (SCALE_BLOCK, SCALE_BLOCK))
    return (x @ w.T).float()
