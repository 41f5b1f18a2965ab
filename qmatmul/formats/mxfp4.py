"""MXFP4: OCP microscaling. E2M1 (fp4) weights, one E8M0 (power-of-two) scale per 32 along K.

Weights use nn.Linear's layout W[N, K]; K must be a multiple of 32 (one MX block).
    X[n, b]  = 2^(floor(log2(max |W[n, 32b : 32b+32]|)) - 2)      (2 = emax of E2M1; clamped to 2^-127..2^127)
    code     = E2M1(round-to-nearest-even(W / X), saturated to ±6)  (fp4.e2m1_encode)
    packed   = uint8 [N, K/2], element 2i in the low nibble;  scales = uint8 [N, K/32], E8M0 codes
    y        = x @ (E2M1 value · X).T                               (x: [M, K] fp16/bf16, y: [M, N] in x's dtype)
"""

from __future__ import annotations

import torch

from qmatmul.formats import fp4
from qmatmul.formats.constants import E2M1_EMAX as EMAX_E2M1
from qmatmul.formats.constants import MX_BLOCK as BLOCK  # elements per MX block (one E8M0 scale)


def shared_exponent(amax: torch.Tensor, rule: str = "floor") -> torch.Tensor:
    """The block's scale exponent (int32). "floor": the spec's floor(log2(amax)) - 2, which may clip values in
    (6, 8)·X to 6. "ceil": ceil(log2(amax / 6)), which never clips but wastes up to a binade. amax = 0 gives
    the smallest scale, 2^-127."""
    if rule == "floor":
        e = fp4.floor_log2(amax) - EMAX_E2M1
    elif rule == "ceil":
        ratio = amax.float() / fp4.E2M1_MAX
        e = fp4.floor_log2(ratio)
        e = e + (ratio > torch.ldexp(torch.ones_like(ratio), e.float())).to(torch.int32)  # ceil
    else:
        raise ValueError(f"rule must be 'floor' or 'ceil', got {rule!r}")
    return torch.where(amax > 0, e, torch.full_like(e, -fp4.E8M0_BIAS)).clamp(-fp4.E8M0_BIAS, fp4.E8M0_BIAS)


def quantize_codes(w: torch.Tensor, rule: str = "floor") -> tuple[torch.Tensor, torch.Tensor]:
    """Unpacked E2M1 codes (uint8 [N, K]) and E8M0 scale codes (uint8 [N, K/32])."""
    w = w.float()
    N, K = w.shape
    if K % BLOCK:
        raise ValueError(f"K must be a multiple of {BLOCK} (one MX block), got K = {K}")
    blocks = w.reshape(N, K // BLOCK, BLOCK)
    e = shared_exponent(blocks.abs().amax(dim=2), rule)
    # Dividing by a power of two is exact (multiplying by 2^-e): no rounding happens before the E2M1 rounding.
    v = torch.ldexp(blocks, -e[:, :, None].float())
    return fp4.e2m1_encode(v).reshape(N, K), fp4.e8m0_from_exponent(e)


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference quantizer: (packed uint8 [N, K/2], scales uint8 [N, K/32])."""
    codes, scales = quantize_codes(w)
    return fp4.pack_nibbles(codes), scales


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 [N, K] from packed codes and E8M0 scales."""
    values = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    return values * fp4.e8m0_decode(scales).repeat_interleave(BLOCK, dim=1)


def reference(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """y = x @ W.T in float32 (the grading reference)."""
    return x.float() @ dequantize(packed, scales).T


def naive(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The naive path: dequantize the whole weight into memory (as torch ops on the GPU), then a dense matmul."""
    table = fp4.e2m1_table(x.dtype, x.device)
    N = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(N, -1).long()
    scale = torch.exp2(scales.float() - fp4.E8M0_BIAS).to(x.dtype).repeat_interleave(BLOCK, dim=1)
    return x @ (table[codes] * scale).T


def bytes_per_weight() -> float:
    """Half a byte of E2M1 plus a 32nd of a byte of E8M0: 4.25 bits."""
    return 0.5 + 1 / BLOCK


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The bytes a fused MXFP4 matmul must move: packed codes, scales, activations in, output out."""
    return N * K // 2 + N * K // BLOCK + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The naive path: read the packed weight, write the dequantized 16-bit weight, read it back."""
    return bytes_moved(M, N, K, act_bytes) + 2 * act_bytes * N * K
