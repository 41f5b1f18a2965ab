"""Kernel sets: which quantizer and kernels a QuantLinear of each format runs, and the registry that says which set
is in force (the learner's, registered by use_kernels; the course's reference path for a format with none; inside
`using(sets)`, the sets given there, as the graded checks do)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from qmatmul.capstone.formats import FORMATS, naive_path, reference_quantize

DECODE_MAX_M = 16  # rows at or below which a QuantLinear must use the decode kernel


@dataclass
class KernelSet:
    """What a QuantLinear of one format calls.

    quantize(w [N, K] float) -> tuple of tensors (the stored weight);
    prefill(x [M, K] 16-bit, *stored, out=None) -> y [M, N] in x's dtype (any M);
    decode(x, *stored, out=None) -> y, for M <= 16.
    """

    fmt: str
    quantize: Callable
    prefill: Callable
    decode: Callable
    source: dict = field(default_factory=dict)  # part -> where it came from ("yours" or why not)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v}" for k, v in self.source.items())
        return f"KernelSet({self.fmt}; {parts})"


def reference_kernels(fmt: str) -> KernelSet:
    """The course's reference path: the reference quantizer, and PyTorch's dequantize-then-matmul."""

    def run(x, *stored, out=None):
        y = naive_path(fmt, x, *stored)
        return y if out is None else out.copy_(y)

    return KernelSet(fmt, lambda w: reference_quantize(fmt, w), run, run,
                     {p: "reference" for p in ("quantize", "prefill", "decode")})  # fmt: skip


class KernelRegistry:
    """The kernel set in force per format: the innermost `using(sets)`, else the one registered (use_kernels), else
    the course's reference path. One registry serves the process (REGISTRY); `kernels`, `use_kernels` and `using`
    are its methods."""

    def __init__(self):
        self.active: dict[str, KernelSet] = {}
        self.overrides: list[dict] = []

    def kernels(self, fmt: str) -> KernelSet:
        """The kernel set a QuantLinear of format `fmt` must use (see use_kernels / load_kernels)."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
        if self.overrides:
            return self.overrides[-1][fmt]
        if fmt not in self.active:
            self.active[fmt] = reference_kernels(fmt)
        return self.active[fmt]

    def use_kernels(self, sets: dict) -> None:
        """Register kernel sets (format -> KernelSet), e.g. those load_kernels() found."""
        for fmt, ks in sets.items():
            if fmt not in FORMATS or not isinstance(ks, KernelSet):
                raise ValueError(f"use_kernels takes {{format: KernelSet}}, got {fmt!r}: {type(ks).__name__}")
            self.active[fmt] = ks

    @contextlib.contextmanager
    def using(self, sets: dict):
        """Run a block with other kernel sets (every format must be given)."""
        self.overrides.append(sets)
        try:
            yield
        finally:
            self.overrides.pop()


REGISTRY = KernelRegistry()
kernels, use_kernels, using = REGISTRY.kernels, REGISTRY.use_kernels, REGISTRY.using


def kernel_word(ks: KernelSet) -> str:
    mine = [p for p, s in ks.source.items() if s.startswith("yours")]
    return "yours" if len(mine) == 3 else ("reference path" if not mine else "yours: " + ", ".join(mine))
