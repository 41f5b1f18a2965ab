"""The capstone's formats: their names and labels, and per format the course's reference quantizer, the reference
path (PyTorch: dequantize, then matmul), the fp32 grading reference, the chapter's input validation and the bytes
per weight. Each is a lookup in the formats' registry (qmatmul/formats/__init__.py)."""

from __future__ import annotations

import torch

from qmatmul import checks, formats, fp8, mxfp4, nvfp4, w4a16, w8a16
from qmatmul.formats.constants import W4A16_GROUP_SIZE

FORMATS = tuple(formats.FORMATS)  # w8a16, w4a16, fp8, mxfp4, nvfp4: the chapters' order
LABELS = {
    "fp32": "fp32 (unquantized)",
    "16-bit": "16-bit dense",
    "w8a16": "W8A16",
    "w4a16": "W4A16 g128",
    "fp8": "FP8 per-row (W8A8)",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
}
GROUP = W4A16_GROUP_SIZE  # W4A16's group size in this chapter
DENSE_BYTES_PER_WEIGHT = {"fp32": 4.0, "16-bit": 2.0}  # the unquantized baselines


def reference_quantize(fmt: str, w: torch.Tensor) -> tuple:
    """The course's reference quantizer of each chapter: the tensors a QuantLinear stores."""
    w = w.detach().float()
    return formats.get(fmt).quantize(w)


def quantize_activation_fp8(x: torch.Tensor):
    """FP8 is W8A8: the activation gets one e4m3 scale per row, as the FP8 chapter's kernels expect."""
    return formats.get("fp8").quantize_activation(x)


def naive_path(fmt: str, x: torch.Tensor, *stored) -> torch.Tensor:
    """The reference path: dequantize the whole weight with PyTorch, then a dense matmul (in x's dtype). FP8
    quantizes the activation per row first; NVFP4 folds the tensor scale into the weight (nvfp4.naive_scale_folded):
    x @ (E2M1 · s).T alone can overflow fp16."""
    return formats.get(fmt).naive(x, *stored)


def dequantized(fmt: str, stored) -> torch.Tensor:
    """The stored weight decoded to float32 [N, K], on the CPU."""
    stored = [t.detach().cpu() for t in stored]
    return formats.get(fmt).dequantize(*stored)


def reference_matmul(fmt: str, x: torch.Tensor, stored, w: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W.T in float32 on the CPU, with the activation quantized first where the format does (FP8)."""
    w = dequantized(fmt, stored) if w is None else w
    xc = x.detach().cpu()
    form = formats.get(fmt)
    if form.quantize_activation is not None:
        return form.dequantize(*form.quantize_activation(xc)) @ w.T
    return xc.float() @ w.T


def validate(fmt: str, x, stored, out):
    """The chapter's own input validation (the messages a learner's kernel call would get)."""
    if fmt == "w8a16":
        return w8a16.prepare(x, *stored, out)[3]
    if fmt == "w4a16":
        return w4a16.prepare(x, *stored, GROUP, out)[3]
    if fmt == "fp8":
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        xq, sx = quantize_activation_fp8(x)
        N = stored[0].shape[0]
        if out is not None and (tuple(out.shape) != (x.shape[0], N) or out.dtype != x.dtype):
            raise ValueError(f"out must be {x.dtype} of shape [{x.shape[0]}, {N}]")
        fp8.prepare(xq, sx, *stored, None)
        return out
    if fmt == "mxfp4":
        return mxfp4.prepare(x, *stored, out)[3]
    if fmt == "nvfp4":
        return nvfp4.prepare(x, *stored, out)[3]
    raise ValueError(f"unknown format {fmt!r}")


def weight_bytes_per_weight(fmt: str, K: int = 384) -> float:
    """Bytes per weight, scales and zeros included, for a row of K weights."""
    if fmt in DENSE_BYTES_PER_WEIGHT:
        return DENSE_BYTES_PER_WEIGHT[fmt]
    form = formats.get(fmt)
    # the tensor scale is one float per matrix
    return form.bytes_per_weight(K) + form.tensor_scale_bytes / (K * 1536)


def same_stored(a, b) -> bool:
    """Are two stored weights (tuples of tensors) the same: dtypes, shapes and bits?"""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor) or x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            return False
        if not torch.equal(checks.comparable_bits(x.cpu()), checks.comparable_bits(y.cpu())):
            return False
    return True
