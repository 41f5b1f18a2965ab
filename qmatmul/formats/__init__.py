"""The number formats, bit for bit: one module each (quantizer, dequantizer, reference, naive path, byte counts),
the numbers that define them (constants.py), and the registry below.

FORMATS maps each weight format's name to a Format: its module's functions for the weight of a Linear layer (W[N, K]
in nn.Linear's layout; W4A16 in groups of W4A16_GROUP_SIZE, FP8 with one scale per row, as the capstone stores
them), each called as its module defines it. `get(name)` looks one up, or says which formats there are.

    from qmatmul import formats
    stored = formats.get("w4a16").quantize(w)          # w4a16.quantize(w, 128)
    y = formats.get("w4a16").naive(x, *stored)          # w4a16.naive(x, packed, scales, zeros, 128)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from qmatmul.formats import fp8, mxfp4, nvfp4, w4a16, w8a16
from qmatmul.formats.constants import W4A16_GROUP_SIZE


@dataclass(frozen=True)
class Format:
    """One weight format, its module's functions for a Linear layer's weight W[N, K]."""

    name: str
    module: ModuleType  # qmatmul/formats/<name>.py
    quantize: Callable  # w [N, K] float -> the stored tensors (a tuple)
    dequantize: Callable  # *stored -> float32 [N, K]
    reference: Callable  # x [M, K], *stored -> y float32 [M, N], the grading reference
    naive: Callable  # x [M, K] 16-bit, *stored -> y [M, N] in x's dtype: the whole weight decoded, a dense matmul
    bytes_per_weight: Callable  # K -> bytes per weight, scales and zeros included (the tensor scale excluded)
    bytes_moved: Callable  # (M, N, K, group_size) -> the bytes a fused kernel must move (16-bit activations)
    bytes_moved_naive: Callable  # (M, N, K, group_size) -> the bytes of the naive path
    quantize_activation: Callable | None = None  # W8A8 (FP8): x [M, K] -> (xq, sx), one scale per row
    tensor_scale_bytes: int = 0  # bytes stored once per weight matrix (NVFP4's float32 tensor scale)


def _ungrouped(byte_model: Callable) -> Callable:
    """A byte model (M, N, K) called as W4A16's is, (M, N, K, group_size): the group size is W4A16's alone."""

    def bytes_of(M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE) -> int:
        return byte_model(M, N, K)

    return bytes_of


# W4A16 in groups of W4A16_GROUP_SIZE along K


def _w4a16_quantize(w):
    return w4a16.quantize(w, W4A16_GROUP_SIZE)


def _w4a16_dequantize(packed, scales, zeros):
    return w4a16.dequantize(packed, scales, zeros, W4A16_GROUP_SIZE)


def _w4a16_reference(x, packed, scales, zeros):
    return w4a16.reference(x, packed, scales, zeros, W4A16_GROUP_SIZE)


def _w4a16_naive(x, packed, scales, zeros):
    return w4a16.naive(x, packed, scales, zeros, W4A16_GROUP_SIZE)


def _w4a16_bytes_per_weight(K: int) -> float:
    return w4a16.bytes_per_weight(W4A16_GROUP_SIZE)


# FP8 (W8A8) with one scale per row: per output channel of the weight, per token of the activation


def _fp8_quantize_per_row(t):
    return fp8.quantize(t, (1, t.shape[1]))


def _fp8_dequantize_per_row(q, s):
    return fp8.dequantize(q, s, (1, q.shape[1]))


def _fp8_reference(x, wq, sw):
    return fp8.reference(*_fp8_quantize_per_row(x), wq, sw)


def _fp8_naive(x, wq, sw):
    xq, sx = _fp8_quantize_per_row(x)
    return fp8.naive(xq, sx, wq, sw, dtype=x.dtype)


# MXFP4 and NVFP4: the block sizes are the formats' own


def _mxfp4_bytes_per_weight(K: int) -> float:
    return mxfp4.bytes_per_weight()


def _nvfp4_bytes_per_weight(K: int) -> float:
    return nvfp4.bytes_per_weight()


FORMATS: dict[str, Format] = {
    "w8a16": Format("w8a16", w8a16, w8a16.quantize, w8a16.dequantize, w8a16.reference, w8a16.naive,
                    w8a16.bytes_per_weight, _ungrouped(w8a16.bytes_moved), _ungrouped(w8a16.bytes_moved_naive)),
    "w4a16": Format("w4a16", w4a16, _w4a16_quantize, _w4a16_dequantize, _w4a16_reference, _w4a16_naive,
                    _w4a16_bytes_per_weight, w4a16.bytes_moved, w4a16.bytes_moved_naive),
    "fp8": Format("fp8", fp8, _fp8_quantize_per_row, _fp8_dequantize_per_row, _fp8_reference, _fp8_naive,
                  fp8.bytes_per_weight, _ungrouped(fp8.bytes_moved), _ungrouped(fp8.bytes_moved_naive),
                  quantize_activation=_fp8_quantize_per_row),
    "mxfp4": Format("mxfp4", mxfp4, mxfp4.quantize, mxfp4.dequantize, mxfp4.reference, mxfp4.naive,
                    _mxfp4_bytes_per_weight, _ungrouped(mxfp4.bytes_moved), _ungrouped(mxfp4.bytes_moved_naive)),
    # A Linear layer's naive path folds the tensor scale into the weight (nvfp4.naive_scale_folded): the chapter's
    # nvfp4.naive applies it after the 16-bit product, which can overflow fp16.
    "nvfp4": Format("nvfp4", nvfp4, nvfp4.quantize, nvfp4.dequantize, nvfp4.reference, nvfp4.naive_scale_folded,
                    _nvfp4_bytes_per_weight, _ungrouped(nvfp4.bytes_moved), _ungrouped(nvfp4.bytes_moved_naive),
                    tensor_scale_bytes=4),
}  # fmt: skip


def get(name: str) -> Format:
    """The format called `name`, or a ValueError naming the formats there are."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {name!r}: one of {', '.join(FORMATS)}") from None
