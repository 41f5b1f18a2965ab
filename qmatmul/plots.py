"""Figures the chapters share. Each returns the matplotlib Figure (the notebook shows it)."""

from __future__ import annotations

import matplotlib.pyplot as plt


def quantization_error(w, q, s, title: str = "int8, one scale per output channel"):
    """Left: error of each weight in steps of its scale (uniform in ±0.5 when rounding is right).
    Right: each channel's relative error against its largest magnitude."""
    wf = w.float().cpu()
    deq = q.float().cpu() * s.float().cpu()[:, None]
    steps = ((deq - wf) / s.float().cpu()[:, None]).flatten()
    rel = (deq - wf).norm(dim=1) / wf.norm(dim=1).clamp_min(1e-30)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    a.hist(steps.numpy(), bins=60, color="tab:blue")
    a.set_xlabel("q·s − w, in steps of s")
    a.set_ylabel("weights")
    a.set_title("rounding error: flat within ±0.5 step")
    b.scatter(wf.abs().amax(dim=1).numpy(), rel.numpy(), s=8, color="tab:orange")
    b.set_xscale("log")
    b.set_xlabel("channel max |w|")
    b.set_ylabel("‖q·s − w‖ / ‖w‖")
    b.set_title("relative error per channel")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def paths(rows, title: str):
    """rows: (label, MB moved, µs or None). Two bar charts: bytes moved and time."""
    labels = [r[0] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    a.barh(labels, [r[1] for r in rows], color="tab:gray")
    a.set_xlabel("MB that move through memory")
    a.invert_yaxis()
    times = [r[2] for r in rows]
    b.barh(labels, [t if t is not None else 0 for t in times], color="tab:green")
    for i, t in enumerate(times):
        b.text(0, i, "  not measured here" if t is None else f"  {t:.0f} µs", va="center")
    b.set_xlabel("median time (µs)")
    b.invert_yaxis()
    b.set_yticks([])
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def roofline(ceil, points, title: str = "roofline"):
    """ceil: roofline.Ceilings; points: (label, FLOP/byte, FLOP/s achieved)."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ai = np.logspace(-1, 4, 200)
    ax.loglog(ai, np.minimum(ai * ceil.copy_bandwidth, ceil.matmul_flops) / 1e12, color="black")
    for label, x, y in points:
        ax.scatter([x], [y / 1e12], zorder=3)
        ax.annotate(label, (x, y / 1e12), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{title}: {ceil.name}")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
