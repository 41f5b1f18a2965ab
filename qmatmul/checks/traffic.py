"""Memory-traffic audit under Triton's interpreter: how many bytes did a kernel load from each tensor?

A fused kernel reads each weight byte once. Counting what the interpreter loads gives CPU-only learners
feedback on performance: "your kernel read the weights 8 times". It carries no points (course.md).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["OUTSIDE", "available", "Traffic", "count", "audit"]

OUTSIDE = "outside every tensor"  # elements accessed outside every tensor argument of their kernel launch


def available() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@dataclass
class Traffic:
    tensors: dict  # name -> torch.Tensor
    loaded: dict = field(default_factory=dict)  # name -> bytes loaded
    stored: dict = field(default_factory=dict)  # name -> bytes stored

    def times_read(self, name: str) -> float:
        t = self.tensors[name]
        return self.loaded.get(name, 0) / max(1, t.numel() * t.element_size())

    @property
    def outside(self) -> tuple[int, int]:
        """Elements loaded and stored outside every named tensor (a mask that lets too much through)."""
        return self.loaded.get(OUTSIDE, 0), self.stored.get(OUTSIDE, 0)

    def describe(self) -> str:
        parts = []
        for name, t in self.tensors.items():
            nbytes = t.numel() * t.element_size()
            parts.append(
                f"{name}: read {self.loaded.get(name, 0) / nbytes:.2f}x, written {self.stored.get(name, 0) / nbytes:.2f}x "
                f"of its {nbytes} bytes"
            )
        return "; ".join(parts)


def _account(counts: dict, ranges, launch, ptrs, mask) -> None:
    """Add the active elements of one load or store to counts: bytes per named tensor, and elements that
    fall outside every tensor argument of the kernel launch doing the access."""
    addrs = np.asarray(ptrs.data).astype(np.uint64)
    active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
    addrs = addrs[active]
    size = ptrs.get_element_ty().primitive_bitwidth // 8
    for name, lo, hi in ranges:
        counts[name] = counts.get(name, 0) + int(np.count_nonzero((addrs >= lo) & (addrs < hi))) * size
    inside = np.zeros(addrs.shape, dtype=bool)
    for lo, hi in launch:
        inside |= (addrs >= lo) & (addrs < hi)
    counts[OUTSIDE] = counts.get(OUTSIDE, 0) + int(np.count_nonzero(~inside))


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes a (possibly strided) view can reach: from its first element to its last."""
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)) if t.numel() else -1
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


@contextlib.contextmanager
def count(tensors: dict):
    """Count the bytes the interpreter loads from and stores to each named tensor inside the block."""
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    traffic = Traffic(dict(tensors))
    ranges = []
    for name, t in tensors.items():
        if t.device.type != "cpu":
            raise ValueError("the traffic audit runs in the interpreter, on CPU tensors")
        ranges.append((name, *_span(t)))
    load, store = builder.create_masked_load, builder.create_masked_store
    launches = []  # the tensor arguments of the kernel launch in progress (a stack)
    executor = interpreter.GridExecutor
    run = executor.__call__

    def counted_run(self, *args, **kwargs):
        launches.append([_span(a) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)])
        try:
            return run(self, *args, **kwargs)
        finally:
            launches.pop()

    def counted_load(ptrs, mask, other, *args):
        _account(traffic.loaded, ranges, launches[-1] if launches else [r[1:] for r in ranges], ptrs, mask)
        return load(ptrs, mask, other, *args)

    def counted_store(ptrs, value, mask, *args):
        _account(traffic.stored, ranges, launches[-1] if launches else [r[1:] for r in ranges], ptrs, mask)
        return store(ptrs, value, mask, *args)

    builder.create_masked_load, builder.create_masked_store = counted_load, counted_store
    executor.__call__ = counted_run
    try:
        yield traffic
    finally:
        del builder.create_masked_load, builder.create_masked_store  # back to the class's methods
        executor.__call__ = run


def audit(fn, inputs: dict, out: torch.Tensor) -> Traffic:
    """Run fn(*inputs.values(), out=out) under the interpreter and count its traffic per tensor."""
    with count({**inputs, "out": out}) as traffic:
        fn(*inputs.values(), out=out)
    return traffic
