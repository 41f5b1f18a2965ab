"""The figures recorded on the course's H200: docs/bench-h200.json (written by `make bench`) is their one source.

Code that shows a recorded figure reads it here; the docs and notebooks quote it with a reference that
tests/test_figures.py checks against the same file (tools/figures.py says how to write one).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

# qmatmul/bench-h200.json is a link to docs/bench-h200.json, so that an installed package carries the data too.
DATA = Path(__file__).resolve().parent / "bench-h200.json"

# The figure a reference names: graph-timed (the kernel's own time) or eager (one Python call, L2 flushed).
FIELDS = {
    "us": ("us", 1.0),
    "us_eager": ("us_eager", 1.0),
    "copy": ("copy_frac", 100.0),  # % of the copy bandwidth
    "copy_eager": ("copy_frac_eager", 100.0),
    "cublas": ("cublas_frac", 100.0),  # % of cuBLAS bf16 8192^3
    "cublas_eager": ("cublas_frac_eager", 100.0),
    "TFLOPs": ("TFLOPs", 1.0),
    "TFLOPs_eager": ("TFLOPs_eager", 1.0),
    "TBps": ("TBps", 1.0),
    "TBps_eager": ("TBps_eager", 1.0),
}


class MissingFigure(LookupError):
    """A figure asked for that docs/bench-h200.json does not hold."""


@functools.cache
def data() -> dict:
    try:
        return json.loads(DATA.read_text())
    except FileNotFoundError:
        raise MissingFigure(
            f"{DATA} is missing: the package was installed without its recorded figures"
        ) from None


def meta() -> dict:
    return data()["meta"]


def row(kind: str, label: str, M: int, N: int, K: int) -> dict:
    """The row of one path at one shape, e.g. row("w8a16 decode", "dense (cuBLAS)", 1, 28672, 8192)."""
    for r in data()["rows"]:
        if (r["kind"], r["label"], r["M"], r.get("N"), r.get("K")) == (kind, label, M, N, K):
            return r
    labels = sorted({r["label"] for r in data()["rows"] if r["kind"] == kind})
    raise MissingFigure(
        f"no row {kind!r} · {label!r} at M={M}, N={N}, K={K} in {DATA.name}; {kind!r} has {labels}"
    )


def figure(kind: str, label: str, M: int, N: int, K: int, field: str) -> float:
    """One figure of a row in the unit docs quote it in (`FIELDS`: µs, %, TFLOP/s, TB/s)."""
    key, scale = FIELDS[field]
    r = row(kind, label, M, N, K)
    if key not in r:
        raise MissingFigure(
            f"{kind!r} · {label!r} at M={M}, N={N}, K={K} has no {key!r} ({r.get('graph_error', '')})"
        )
    return r[key] * scale


def versions() -> str:
    v = meta()["versions"]
    return f"torch {v['torch']}, triton {v['triton']}"


def ceilings() -> dict:
    """The H200's two ceilings as the chapters use them where no GPU is present."""
    m = meta()
    return {
        "gpu": f"{m['gpu']} (sm_{m['capability'][0]}{m['capability'][1]})",
        "date": m["date"],
        "versions": versions(),
        "copy_bandwidth": m["copy_TBps"] * 1e12,  # bytes/s, read + written
        "bf16_flops": m["cublas_TFLOPs_8192"] * 1e12,  # FLOP/s, cuBLAS bf16 8192^3
        "fp8_flops": figure("fp8 prefill", "torch._scaled_mm rowwise", 8192, 8192, 8192, "TFLOPs") * 1e12,
    }


def decode_us(kind: str, labels: dict[str, str], M: int, N: int, K: int) -> dict[str, float | None]:
    """A chapter's recorded decode times (eager: how the notebook's compare_paths times on a GPU), µs by the
    chapter's own label; `labels` maps those to the data's."""
    known = {r["label"] for r in data()["rows"] if r["kind"] == kind}
    out = {}
    for ours, theirs in labels.items():
        if theirs not in known:
            raise MissingFigure(f"no path {theirs!r} in {kind!r} of {DATA.name}: it has {sorted(known)}")
        try:
            out[ours] = figure(kind, theirs, M, N, K, "us_eager")
        except MissingFigure:  # not recorded at this shape
            out[ours] = None
    return out
