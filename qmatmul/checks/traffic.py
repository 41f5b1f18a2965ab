"""Memory-traffic audit under Triton's interpreter: how many bytes did a kernel load from each tensor, and did it
reach outside every tensor it was given?

A fused kernel reads each weight byte once. Counting what the interpreter loads gives CPU-only learners
feedback on performance: "your kernel read the weights 8 times". It carries no points (course.md).

The same hook guards the process: a load or store whose address lies outside every tensor argument of its kernel
launch (a mask that lets an edge through) is recorded by kernel argument and edge ("rows m = 3..15 of y_ptr, past
M = 3") and, for the kinds of access the audit withholds, not performed. The interpreter writes through raw
addresses: an unmasked store past the end of the output wrote into the heap and killed the learner's Jupyter kernel
(issue 43: FP8's decode 3 fresh kernels of 3). Withheld, it never happens, and the check says where it would have.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["OUTSIDE", "KINDS", "available", "Traffic", "Outside", "count", "guard", "audit", "active"]

OUTSIDE = "outside every tensor"  # elements accessed outside every tensor argument of their kernel launch
KINDS = frozenset({"load", "store"})  # an atomic read-modify-write counts as a store


def available() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


class Outside(NamedTuple):
    """Elements loaded and stored outside every tensor argument, and where (one line per argument and edge).
    A tuple, so that it crosses the grader's JSON channel as a list (worker.py: list(seen.outside))."""

    loads: int
    stores: int
    where: str = ""


@dataclass
class Traffic:
    tensors: dict  # name -> torch.Tensor
    loaded: dict = field(default_factory=dict)  # name -> bytes loaded
    stored: dict = field(default_factory=dict)  # name -> bytes stored
    withhold: frozenset = frozenset()  # the kinds of access outside every tensor that are not performed
    strays: dict = field(
        default_factory=dict
    )  # (kind, kernel, argument, shape, dim, label, size) -> [n, lo, hi]

    def times_read(self, name: str) -> float:
        t = self.tensors[name]
        return self.loaded.get(name, 0) / max(1, t.numel() * t.element_size())

    @property
    def outside(self) -> Outside:
        """Elements loaded and stored outside every named tensor (a mask that lets too much through), and where."""
        return Outside(self.loaded.get(OUTSIDE, 0), self.stored.get(OUTSIDE, 0), self.where())

    def where(self, kinds=KINDS) -> str:
        """One line per kind of access, kernel argument and edge crossed: how far past the edge, how many."""
        lines = []
        for (kind, kernel, arg, shape, dim, label, size), (n, lo, hi) in self.strays.items():
            if kind not in kinds:
                continue
            whose = f"{kind} {'from' if kind == 'load' else 'to'} `{arg}` ({kernel}'s argument, a {list(shape)} tensor)"
            if dim is None:
                lines.append(f"the {whose} reached {n} elements outside it")
                continue
            unit, letter, limit = label
            span = f"{lo}" if lo == hi else f"{lo}..{hi}"
            name = f"{unit}s {letter} = {span}" if letter else f"{unit}s {span}"
            n_far = -lo if lo < 0 else hi - size + 1
            far = f"up to {n_far} {unit}{'s' if n_far > 1 else ''} {'before the first' if lo < 0 else 'past the last'}"
            bound = f"{limit} = {size}" if limit else f"{size} {unit}s"
            lines.append(f"the {whose} reached {name}, {far} {unit} ({bound}); {n} elements")
        if lines and kinds & self.withhold:
            held = " and ".join(sorted(kinds & self.withhold))
            lines.append(
                f"(the check held back every {held} outside the tensors: none of them was performed)"
            )
        return "\n".join(lines)

    def describe(self) -> str:
        parts = []
        for name, t in self.tensors.items():
            nbytes = t.numel() * t.element_size()
            parts.append(
                f"{name}: read {self.loaded.get(name, 0) / nbytes:.2f}x, written {self.stored.get(name, 0) / nbytes:.2f}x "
                f"of its {nbytes} bytes"
            )
        return "; ".join(parts)


# ----------------------------------------------------------------------------------------------------------
# Where an access outside its tensors went: which kernel argument, which edge, how far


@dataclass
class _Launch:
    kernel: str
    args: list  # (kernel argument name, tensor, (lo, hi) bytes it can reach)
    sizes: dict  # integer arguments by name (M, N, K): to name a tensor's edges
    # False when a tensor argument is not in host memory (the interpreter copies it there): nothing is judged
    judged: bool = True


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes a (possibly strided) view can reach: from its first element to its last."""
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)) if t.numel() else -1
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _decompose(offsets: np.ndarray, strides, order) -> np.ndarray:
    """Element offsets -> indices [ndim, ...], largest stride first (floor division: negatives stay negative)."""
    idx = np.zeros((len(strides), *offsets.shape), dtype=np.int64)
    rest = offsets.copy()
    for d in order:
        if strides[d]:
            idx[d] = rest // strides[d]
            rest = rest - idx[d] * strides[d]
    return idx


def _indices(offsets: np.ndarray, strides, shape) -> np.ndarray:
    """The tensor index of each element of a pointer block, [ndim, *block].

    An address alone is ambiguous past an edge (column N of row m is column 0 of row m + 1), so the block's own
    axes decide: a block axis whose step is a multiple of one dimension's stride walks that dimension, from the
    index of the block's first element. Where the block is not affine so, each address is read row-major."""
    order = sorted(range(len(strides)), key=lambda d: -abs(strides[d]))
    plain = _decompose(offsets, strides, order)
    if offsets.ndim == 0 or offsets.size < 2:
        return plain
    anchor = _decompose(offsets[(0,) * offsets.ndim], strides, order)
    idx = np.broadcast_to(anchor.reshape(-1, *([1] * offsets.ndim)), plain.shape).copy()
    for a, n in enumerate(offsets.shape):
        if n < 2:
            continue
        steps = np.diff(offsets, axis=a)
        step = int(steps.flat[0])
        if not (steps == step).all():
            return plain
        exact = sorted((d for d in order if strides[d] == step), key=lambda d: shape[d] == 1)
        dims = [d for d in order if strides[d] and step % strides[d] == 0 and shape[d] > 1]
        if not (exact or dims):
            return plain
        d = (exact or dims)[0]
        pos = np.arange(n).reshape([-1 if i == a else 1 for i in range(offsets.ndim)])
        idx[d] += pos * (step // strides[d])
    ok = sum(idx[d] * strides[d] for d in range(len(strides))) == offsets
    return idx if ok.all() else plain


def _labels(shape, sizes: dict) -> list:
    """(unit, letter, limit) per dimension: rows and columns, named m, n or k where one size argument matches."""
    units = {1: ["element"], 2: ["row", "column"]}.get(
        len(shape), [f"dim-{d} index" for d in range(len(shape))]
    )
    out = []
    for unit, size in zip(units, shape, strict=True):
        names = [k for k, v in sizes.items() if v == size]
        name = names[0] if len(names) == 1 else ""
        out.append((unit, name.lower(), name))
    return out


def _record(
    traffic: Traffic, kind: str, launch: _Launch, addrs: np.ndarray, on: np.ndarray, outside: np.ndarray
):
    """Add the outside elements of one access to traffic.strays, by kernel argument and edge. The argument is the one
    the access's other elements lie in (a tile that runs past an edge), else the one it lies nearest."""
    if launch is None or not launch.args:
        return
    hits = [int(((addrs[on] >= lo) & (addrs[on] < hi)).sum()) for _, _, (lo, hi) in launch.args]
    if max(hits) > 0:
        arg, t, (lo, hi) = launch.args[int(np.argmax(hits))]
    else:  # the whole access lies outside: the argument whose span it lies nearest
        far = addrs[outside]
        mid = int(np.median(far.astype(np.float64)))
        dist = [min(abs(mid - lo), abs(mid - hi)) for _, _, (lo, hi) in launch.args]
        arg, t, (lo, hi) = launch.args[int(np.argmin(dist))]
    size = t.element_size()
    offsets = (addrs.astype(np.int64) - np.int64(t.data_ptr())) // size
    shape, key0 = tuple(t.shape), (kind, launch.kernel, arg, tuple(t.shape))
    if t.dim() == 0:
        _bump(traffic.strays, (*key0, None, None, 0), int(outside.sum()), 0, 0)
        return
    idx = _indices(offsets, t.stride(), shape)
    placed = False
    for d, label in enumerate(_labels(shape, launch.sizes)):
        for beyond in (outside & (idx[d] >= shape[d]), outside & (idx[d] < 0)):
            if beyond.any():
                placed, v = True, idx[d][beyond]
                _bump(
                    traffic.strays, (*key0, d, label, shape[d]), int(beyond.sum()), int(v.min()), int(v.max())
                )
    if not placed:  # outside the view's span, yet no index out of range (a view with gaps)
        _bump(traffic.strays, (*key0, None, None, 0), int(outside.sum()), 0, 0)


def _bump(strays: dict, key: tuple, n: int, lo: int, hi: int) -> None:
    got = strays.get(key)
    strays[key] = [n, lo, hi] if got is None else [got[0] + n, min(got[1], lo), max(got[2], hi)]


# ----------------------------------------------------------------------------------------------------------
# The hook: one patch of the interpreter, shared by every audit active at the time

_active: list[Traffic] = []  # the audits in progress, outermost first
_launches: list[_Launch] = []  # the kernel launches in progress (a stack)
_saved: dict = {}


def active() -> bool:
    """True inside an audit or a guard (a nested one only adds its own counts)."""
    return bool(_active)


def _account(counts: dict, ranges, addrs: np.ndarray, size: int) -> None:
    """Add the bytes of one access's active elements (addrs) to counts, per named tensor."""
    for name, lo, hi in ranges:
        counts[name] = counts.get(name, 0) + int(np.count_nonzero((addrs >= lo) & (addrs < hi))) * size


def _access(kind: str, ptrs, mask):
    """Account one access in every active audit; return the mask it may run with (outside elements withheld)."""
    addrs = np.asarray(ptrs.data).astype(np.uint64)
    on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
    launch = _launches[-1] if _launches else None
    if launch is not None:
        spans = [span for _, _, span in launch.args] if launch.judged else []
    else:
        spans = [r[1:] for t in _active for r in _ranges(t)]
    inside = np.zeros(addrs.shape, dtype=bool)
    for lo, hi in spans:
        inside |= (addrs >= lo) & (addrs < hi)
    stray = on & ~inside if spans else np.zeros(addrs.shape, dtype=bool)
    size = ptrs.get_element_ty().primitive_bitwidth // 8
    n_out = int(np.count_nonzero(stray))
    performed = addrs[on]
    for t in _active:
        counts = t.loaded if kind == "load" else t.stored
        _account(counts, _ranges(t), performed, size)
        counts[OUTSIDE] = counts.get(OUTSIDE, 0) + n_out
        if n_out:
            _record(t, kind, launch, addrs, on, stray)
    if n_out and any(kind in t.withhold for t in _active):
        return np.ascontiguousarray(on & ~stray)
    return None


def _ranges(traffic: Traffic):
    got = traffic.__dict__.get("_ranges")
    if got is None:
        got = [(name, *_span(t)) for name, t in traffic.tensors.items()]
        traffic.__dict__["_ranges"] = got
    return got


def _install() -> None:
    from triton.runtime import interpreter

    builder, executor = interpreter.interpreter_builder, interpreter.GridExecutor
    load, store, rmw = builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw
    run = executor.__call__
    _saved.update(executor=executor, run=run, builder=builder)

    def counted_run(self, *args, **kwargs):
        named = [*zip(self.arg_names, args, strict=False), *kwargs.items()]
        tensors = [(n, a, _span(a)) for n, a in named if isinstance(a, torch.Tensor)]
        sizes = {n: a for n, a in named if isinstance(a, int) and not isinstance(a, bool) and n.isupper()}
        judged = all(a.device.type == "cpu" for _, a, _ in tensors)
        _launches.append(_Launch(getattr(self.fn, "__name__", "kernel"), tensors, sizes, judged))
        try:
            return run(self, *args, **kwargs)
        finally:
            _launches.pop()

    def counted_load(ptrs, mask, other, *args):
        kept = _access("load", ptrs, mask)
        return load(ptrs, mask if kept is None else interpreter.TensorHandle(kept, mask.dtype), other, *args)

    def counted_store(ptrs, value, mask, *args):
        kept = _access("store", ptrs, mask)
        return store(ptrs, value, mask if kept is None else interpreter.TensorHandle(kept, mask.dtype), *args)

    def counted_rmw(op, ptr, val, mask, *args):
        kept = _access("store", ptr, mask)
        return rmw(op, ptr, val, mask if kept is None else interpreter.TensorHandle(kept, mask.dtype), *args)

    builder.create_masked_load, builder.create_masked_store = counted_load, counted_store
    builder.create_atomic_rmw = counted_rmw
    executor.__call__ = counted_run


def _uninstall() -> None:
    builder, executor = _saved.pop("builder"), _saved.pop("executor")
    for name in ("create_masked_load", "create_masked_store", "create_atomic_rmw"):
        builder.__dict__.pop(name, None)  # back to the class's methods
    executor.__call__ = _saved.pop("run")


@contextlib.contextmanager
def count(tensors: dict, *, withhold=frozenset({"store"})):
    """Count the bytes the interpreter loads from and stores to each named tensor inside the block, and every access
    outside the tensor arguments of its launch (Traffic.outside). The kinds in `withhold` ("load", "store") are not
    performed there: by default stores, which would write into whatever memory follows a tensor."""
    for t in tensors.values():
        if t.device.type != "cpu":
            raise ValueError("the traffic audit runs in the interpreter, on CPU tensors")
    traffic = Traffic(dict(tensors), withhold=frozenset(withhold))
    if not _active:
        _install()
    _active.append(traffic)
    try:
        yield traffic
    finally:
        _active.remove(traffic)
        if not _active:
            _uninstall()


def guard():
    """The learner's process kept safe: no load or store outside its launch's tensors is performed; each is
    recorded (Traffic.outside) for the check to report."""
    return count({}, withhold=KINDS)


def audit(fn, inputs: dict, out: torch.Tensor) -> Traffic:
    """Run fn(*inputs.values(), out=out) under the interpreter and count its traffic per tensor."""
    with count({**inputs, "out": out}) as traffic:
        fn(*inputs.values(), out=out)
    return traffic
