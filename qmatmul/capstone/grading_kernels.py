"""Grading kernels: the reference numerics, recording every call, and an audit of the learner's own torch ops."""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from qmatmul import checks
from qmatmul.capstone.formats import FORMATS, dequantized, reference_matmul, reference_quantize, validate
from qmatmul.capstone.model import linear_names
from qmatmul.capstone.registry import DECODE_MAX_M, KernelSet


class OpAudit(checks.OpRecorder):
    """Records the aten ops of the learner's code, not those of the grading kernels it calls."""

    def __init__(self):
        super().__init__()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.paused:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


_QCACHE: dict = {}  # grading: (format, shape, hash of the weight) -> the reference quantizer's tensors
# grading: the stored tensors (ids and versions) -> (those tensors, their dequantized weight)
DEQUANTIZED_CACHE: dict = {}


def _weight_key(fmt: str, w: torch.Tensor) -> tuple:
    w = w.detach().float().cpu().contiguous()
    return fmt, tuple(w.shape), hashlib.blake2b(w.numpy().tobytes(), digest_size=16).hexdigest()


def preload_caches(fmt: str, model: nn.Module, table: dict, device) -> None:
    """Grading caches filled from the trusted side's table (name -> the reference quantizer's tensors, and their
    dequantized weight), so that the learner's quantize_model does not wait for the reference quantizer again."""
    for name in linear_names(model):
        if name in table.get("stored", {}):
            stored = tuple(t.to(device) for t in table["stored"][name])
            _QCACHE[_weight_key(fmt, model.get_submodule(name).weight)] = stored
            key = tuple((id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype) for t in stored)
            DEQUANTIZED_CACHE[key] = (stored, table["deq"][name])


class GradingKernels:
    """Kernel sets whose kernels validate their inputs like the chapters' wrappers, compute the fp32 reference,
    and log (kind, M, K) per call. Dequantized weights are cached per stored tensor.

    fresh: the quantizer returns new tensors at each call, never the cached ones. A rebuilt module (built on a
    decoy, then given the first one's buffers in place) would otherwise write those buffers into the cache entry
    of the decoy's weight, and a forward that quantizes the decoy's weight afresh would read the real one's."""

    def __init__(self, fresh: bool = False):
        self.calls: list[tuple[str, str, int, int]] = []
        self.audit: OpAudit | None = None
        self.fresh = fresh

    def _pause(self):
        return _Paused(self.audit)

    def sets(self) -> dict:
        out = {}
        for fmt in FORMATS:

            def quantize(w, fmt=fmt):
                with self._pause():
                    wc = w.detach().float().cpu().contiguous()
                    key = _weight_key(fmt, wc)
                    if key not in _QCACHE:  # the same weight quantized again (the reference model, a re-run)
                        _QCACHE[key] = tuple(t.to(w.device) for t in reference_quantize(fmt, wc))
                    return tuple(t.clone() for t in _QCACHE[key]) if self.fresh else _QCACHE[key]

            def run(kind, x, *stored, out=None, fmt=fmt):
                with self._pause():
                    if not isinstance(x, torch.Tensor) or x.dim() != 2:
                        raise ValueError(f"the {kind} kernel takes a 2-D x [M, K], got "
                                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")  # fmt: skip
                    if kind == "decode" and x.shape[0] > DECODE_MAX_M:
                        raise ValueError(
                            f"the decode kernel takes at most {DECODE_MAX_M} rows, got M = {x.shape[0]}"
                        )
                    out = validate(fmt, x, stored, out)
                    self.calls.append((fmt, kind, int(x.shape[0]), int(x.shape[1])))
                    # The cache holds the stored tensors themselves (so no other tensor takes their id); a
                    # change in place bumps a tensor's version, which is part of the key.
                    key = tuple((id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype) for t in stored)
                    if key not in DEQUANTIZED_CACHE:
                        DEQUANTIZED_CACHE[key] = (stored, dequantized(fmt, stored))
                    y = reference_matmul(fmt, x, stored, DEQUANTIZED_CACHE[key][1]).to(x.dtype).to(x.device)
                    if out is None:
                        return y
                    return out.copy_(y)

            out[fmt] = KernelSet(fmt, quantize, lambda *a, run=run, **k: run("prefill", *a, **k),
                                 lambda *a, run=run, **k: run("decode", *a, **k), {"all": "grading"})  # fmt: skip
        return out


class _Paused:
    def __init__(self, audit):
        self.audit = audit

    def __enter__(self):
        if self.audit is not None:
            self.audit.paused += 1

    def __exit__(self, *exc):
        if self.audit is not None:
            self.audit.paused -= 1
