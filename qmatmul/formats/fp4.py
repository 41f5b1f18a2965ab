"""E2M1 (fp4) and E8M0 codecs shared by the MXFP4 and NVFP4 chapters, written in plain torch (host side).

E2M1 (OCP MX v1.0): bit 3 sign, bits 2-1 exponent (bias 1), bit 0 mantissa. Magnitudes by code 0..7:
    0, 0.5, 1, 1.5, 2, 3, 4, 6. No infinity, no NaN.
Encoding rounds to nearest, ties to even code, and saturates to ±6. The sign bit is the sign of the input
(as ml_dtypes and torchao do): a small negative value that rounds to zero is code 8, "-0".
Two codes per byte: element 2i in the low nibble, element 2i+1 in the high nibble (what `tl.dot_scaled`
expects for "e2m1").

E8M0: an unsigned biased exponent, value 2^(e - 127); 0xFF is NaN.
"""

from __future__ import annotations

import functools

import torch

from qmatmul.formats.constants import E2M1_MAGNITUDES, E8M0_BIAS, E8M0_NAN
from qmatmul.formats.constants import E2M1_MAX as E2M1_MAX
from qmatmul.formats.constants import E4M3_MAX as E4M3_MAX
from qmatmul.formats.constants import E4M3_TINY as E4M3_TINY

# Round to nearest, ties to the even code: the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 between
# consecutive magnitudes, and whether a value exactly on one goes up (True) or stays down (False).
E2M1_MIDPOINTS = (
    (0.25, False),
    (0.75, True),
    (1.25, False),
    (1.75, True),
    (2.5, False),
    (3.5, True),
    (5.0, False),
)


@functools.cache
def e2m1_table(dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The 16 values of E2M1 by code (codes 8..15 are the negatives, code 8 is -0.0), made once per dtype and
    device and shared (read it, never write it): a path that indexes it copies nothing from the host, so a CUDA
    graph can capture it."""
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=dtype)
    return torch.cat([mags, -mags]).to(device)


def e2m1_encode_magnitude(a: torch.Tensor) -> torch.Tensor:
    """Codes 0..7 of magnitudes a >= 0 (float32): round to nearest, ties to even, saturate at 6."""
    code = torch.zeros(a.shape, dtype=torch.uint8, device=a.device)
    for mid, tie_up in E2M1_MIDPOINTS:
        code += (a >= mid if tie_up else a > mid).to(torch.uint8)
    return code


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) of float values v, already divided by their block scale."""
    v = v.float()
    return e2m1_encode_magnitude(v.abs()) | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of E2M1 codes (any integer dtype, 0..15)."""
    return e2m1_table(torch.float32, codes.device)[codes.long() & 0xF]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes 0..15 -> [..., K/2] uint8, element 2i in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"the last dimension must be even to pack two codes per byte, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] uint8 -> [..., K] codes, element 2i from the low nibble."""
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack([lo, hi], dim=-1).flatten(-2)


def floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) exactly (int32) for finite a > 0, subnormals included; a = 0 gives a very small number."""
    mantissa, exponent = torch.frexp(a.float())  # a = mantissa · 2^exponent, mantissa in [0.5, 1)
    return torch.where(a > 0, exponent - 1, torch.full_like(exponent, -(1 << 20)))


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 2^(e - 127) of E8M0 codes (0xFF: NaN). 2^-127 is an fp32 subnormal, exactly representable."""
    e = codes.to(torch.int32)
    value = torch.ldexp(torch.ones(e.shape, device=e.device), (e - E8M0_BIAS).float())
    return torch.where(e == E8M0_NAN, torch.full_like(value, float("nan")), value)


def e8m0_from_exponent(exponent: torch.Tensor) -> torch.Tensor:
    """E8M0 codes of 2^exponent, the exponent clamped to the representable -127..127."""
    return (exponent.clamp(-E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS).to(torch.uint8)


# e4m3 (float8_e4m3fn) as the NVFP4 block scale: bias 7, max 448 (E4M3_MAX), smallest normal 2^-6 (E4M3_TINY),
# no infinity.


def e4m3_encode(v: torch.Tensor) -> torch.Tensor:
    """uint8 bits of float32 values rounded to e4m3 (torch's cast: round to nearest even). Clamp first."""
    return v.float().to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(bits: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 bit patterns (uint8)."""
    return bits.to(torch.uint8).view(torch.float8_e4m3fn).float()


def swap_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """The other nibble order (element 2i in the high nibble): what a packer or reader that swaps them produces."""
    return (packed >> 4) | ((packed & 0xF) << 4)


def block_weight(
    N: int, K: int, block: int, g: torch.Generator, low: float, dtype=torch.float32
) -> torch.Tensor:
    """Test weights for the block-scaled chapters: a magnitude per row (e^[-2, 2] x 0.02) and per block of `block`
    along K (e^[low, 1.5]), so rows and blocks get distinct scales."""
    row = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=g)) * 0.02
    blk = torch.exp(torch.empty(N, K // block, 1).uniform_(low, 1.5, generator=g)).repeat_interleave(block, 1)
    return (torch.randn(N, K, generator=g) * row * blk.reshape(N, K)).to(dtype)
