"""Figures the chapters share. Each returns the matplotlib Figure (the notebook shows it).

matplotlib is imported by the functions that draw, as in the chapter modules' figures: the grader's worker imports
the chapter modules and never draws.
"""

from __future__ import annotations

from qmatmul.teaching.roofline_model import H200


def quantization_error(w, q, s, title: str = "int8, one scale per output channel"):
    """Left: error of each weight in steps of its scale (uniform in ±0.5 when rounding is right).
    Right: each channel's relative error against its largest magnitude."""
    import matplotlib.pyplot as plt

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


def recorded_label(label: str) -> str:
    """A row of recorded figures: a course kernel's row names the course solution, never the learner's kernel."""
    return label if label.startswith(("dense", "naive", "torch")) else f"course solution's {label}"


def measured_label(label: str) -> str:
    """A row measured in this process: a course kernel's row is the learner's own."""
    return label if label.startswith(("dense", "naive", "torch")) else f"your {label}"


def recorded_note(where_known: bool = False, date: str | None = None) -> str:
    """Title of a figure of recorded times: which GPU, when, and that nothing was measured here."""
    h = H200
    return (f"bytes: the model; times{' where known' if where_known else ''}: recorded on the course's {h['gpu']} "
            f"on {date or h['date']} ({h['versions']}), not measured here (no GPU)")  # fmt: skip


def paths(rows, title: str):
    """rows: (label, MB moved, µs or None). Two bar charts: bytes moved and time."""
    import matplotlib.pyplot as plt

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


def paths_report(rows, times, title: str):
    """rows: (label, bytes moved); times: µs or None each. Prints the table and draws `paths`."""
    table = [(label, nbytes / 1e6, t) for (label, nbytes), t in zip(rows, times, strict=True)]
    for label, mb, t in table:
        print(f"{label:<40}{mb:>9.1f} MB  " + ("not measured" if t is None else f"{t:>8.1f} µs"))
    return paths(table, title)


def roofline(ceil, points, title: str = "roofline", *, extra_ceilings=()):
    """ceil: roofline.Ceilings; points: (label, FLOP/byte, FLOP/s achieved).

    Log-log axes: the memory roof (copy bandwidth x intensity), the compute roof, the ridge point where they meet,
    and each point labeled. extra_ceilings: (label, FLOP/s) drawn as dashed roofs (e.g. an fp8 matmul rate).
    Later chapters place their measured kernels with it: a point's FLOP/s is flops / measured seconds.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.4))
    xs = [p[1] for p in points]
    lo = min([0.1, *(x / 2 for x in xs)])
    ridge = ceil.matmul_flops / ceil.copy_bandwidth
    top = max([ridge * 20, 1e4, *(x * 2 for x in xs)])
    ai = np.logspace(np.log10(lo), np.log10(top), 200)
    ax.loglog(ai, np.minimum(ai * ceil.copy_bandwidth, ceil.matmul_flops) / 1e12, color="black")
    ax.annotate(f"copy {ceil.copy_bandwidth / 1e12:.2f} TB/s", (lo * 3, lo * 3 * ceil.copy_bandwidth / 1e12),
                textcoords="offset points", xytext=(4, 6), fontsize=8, rotation=25)  # fmt: skip
    ax.annotate(f"dense matmul {ceil.matmul_flops / 1e12:.0f} TFLOP/s", (ridge, ceil.matmul_flops / 1e12),
                textcoords="offset points", xytext=(8, 4), fontsize=8)  # fmt: skip
    ax.axvline(ridge, color="gray", linestyle=":", linewidth=1)
    ax.scatter([ridge], [ceil.matmul_flops / 1e12], marker="x", color="black", zorder=3)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, ceil.matmul_flops / 1e12), textcoords="offset points",
                xytext=(-60, -14), fontsize=8, color="gray")  # fmt: skip
    for label, rate in extra_ceilings:
        r = rate / ceil.copy_bandwidth
        ax.loglog([r, top], [rate / 1e12, rate / 1e12], color="gray", linestyle="--", linewidth=1)
        ax.loglog(
            ai[ai <= r], ai[ai <= r] * ceil.copy_bandwidth / 1e12, color="gray", linestyle="--", linewidth=1
        )
        ax.annotate(f"{label} {rate / 1e12:.0f} TFLOP/s", (r, rate / 1e12), textcoords="offset points",
                    xytext=(8, 4), fontsize=8, color="gray")  # fmt: skip
    for label, x, y in points:
        ax.scatter([x], [y / 1e12], zorder=3)
        ax.annotate(label, (x, y / 1e12), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{title}: {ceil.name}")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def error_bars(tables: dict, title: str):
    """tables: weight kind -> [(method, bits per weight, relative error)], the same methods for every kind.
    Horizontal bars of each method's error, one colour per kind; the table is printed too."""
    import matplotlib.pyplot as plt

    kinds = list(tables)
    methods = tables[kinds[0]]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    width = 0.38
    for i, k in enumerate(kinds):
        errs = [e for _, _, e in tables[k]]
        bars = ax.barh([j + i * width for j in range(len(methods))], errs, height=width, label=k)
        for b, e in zip(bars, errs, strict=True):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {e:.2%}", va="center", fontsize=8)
    ax.set_yticks([j + width / 2 for j in range(len(methods))])
    ax.set_yticklabels([f"{m} ({b:g} bits)" for m, b, _ in methods])
    ax.invert_yaxis()
    ax.set_xlabel("‖dequantized − w‖ / ‖w‖")
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    for k in kinds:
        print(k + ": " + ", ".join(f"{m} {e:.3%}" for m, _, e in tables[k]))
    return fig
