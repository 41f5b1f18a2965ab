"""The numbers that define the course's formats, each named once, with the spec it comes from.

The format modules beside this one import them from here and keep their own names for them (`w8a16.QMAX`,
`mxfp4.BLOCK`, `fp8.E4M3_MAX`, ...), which the chapters and the tests import.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------------------------------------
# Integer weights

# W8A16: symmetric int8, q in -127..127 (-128 left out so that the range is symmetric: q and -q both exist), one
# float32 scale per output channel, s = max |w| / 127 (LLM.int8(), Dettmers et al. 2022, "absmax" quantization).
INT8_QMAX = 127

# W4A16: asymmetric int4, codes 0..15 with a uint8 zero point per group (GPTQ, Frantar et al. 2022; AWQ,
# Lin et al. 2023): scale = (hi - lo) / 15.
INT4_QMAX = 15
# The group sizes the chapter takes (consecutive k sharing a scale and a zero), and the usual one: 128 in GPTQ's and
# AWQ's published checkpoints, the default of the byte models and the capstone's Linear layers.
W4A16_GROUP_SIZES = (32, 64, 128)
W4A16_GROUP_SIZE = 128
# 4-bit codes per int32 in the GPTQ checkpoint layout (AutoGPTQ's QuantLinear.pack; qmatmul/formats/w4a16.py).
GPTQ_PACK = 8

# ----------------------------------------------------------------------------------------------------------
# 8-bit floats (OCP 8-bit Floating Point Specification (OFP8), v1.0, 2023; torch.float8_e4m3fn and float8_e5m2)

# (exponent bits, mantissa bits, bias, has infinities) of each 8-bit float, as the OFP8 spec defines them.
FLOAT8_FIELDS = {
    "e4m3fn": (4, 3, 7, False),
    "e5m2": (5, 2, 15, True),
}
# E4M3's largest finite value, 1.75 · 2^8 (S.1111.110; S.1111.111 is NaN and there is no infinity).
E4M3_MAX = 448.0
# E4M3's smallest normal, 2^(1 - 7) (torch.finfo(torch.float8_e4m3fn).tiny): torchao clamps the NVFP4 block
# scales to it.
E4M3_TINY = 2.0**-6
# torch <= 2.11 (and ml_dtypes, and a GPU's cvt without .satfinite) round |v| > 464 into the NaN code 0x7F.
E4M3_OVERFLOW = 464.0
# E5M2's largest finite value, 1.75 · 2^15 (S.11110.11; E5M2 keeps IEEE's infinities and NaNs).
E5M2_MAX = 57344.0
# DeepSeek-V3's fine-grained FP8 scaling (DeepSeek-V3 Technical Report, 2024): activations in tiles
# of 1 x 128, weights in blocks of 128 x 128, one float32 scale each.
FP8_SCALE_BLOCK = 128

# ----------------------------------------------------------------------------------------------------------
# 4-bit floats and their scales (OCP Microscaling Formats (MX) Specification, v1.0, 2023)

# E2M1 (the MX spec's FP4 element): bias 1, magnitudes by code 0..7, no infinity, no NaN; the largest is
# 6 = 1.5 · 2^2.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0
E2M1_EMAX = 2  # the exponent of E2M1's largest power of two, 4 (6 = 1.5 · 2^2)
# E8M0 (the MX spec's scale): an unsigned biased exponent, value 2^(e - 127); 0xFF is NaN.
E8M0_BIAS = 127
E8M0_NAN = 0xFF
# MXFP4: one E8M0 scale per block of 32 elements along K (the MX spec's block size k = 32, the same for every
# concrete MX format).
MX_BLOCK = 32
# NVFP4 (NVIDIA Blackwell; torchao's NVFP4Tensor): one e4m3 scale per block of 16 elements along K, and one
# float32 scale per tensor.
NVFP4_BLOCK = 16
