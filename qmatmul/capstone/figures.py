"""The capstone's figures: quality against bytes per weight, one point per format (from capstone.measure), and the
Llama-3-8B block's step, each format's speed-up over 16-bit (from capstone.time_llama_stack)."""

from __future__ import annotations

from qmatmul.capstone.formats import FORMATS, LABELS, weight_bytes_per_weight
from qmatmul.capstone.measure import RESULTS
from qmatmul.capstone.runtime import autograding


def quality_figure(rows=None):
    """Quality against bytes per weight, one point per format."""
    if autograding():
        return None
    import matplotlib.pyplot as plt

    rows = rows or RESULTS
    if not rows:
        print("Run the measurement first (capstone.measure).")
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        x = r["bytes_per_weight"]
        axes[0].scatter(x, max(1 - r["cos_mean"], 1e-7), s=40)
        axes[0].annotate(
            r["label"],
            (x, max(1 - r["cos_mean"], 1e-7)),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=8,
        )
        axes[1].scatter(x, r["rho_gold"], s=40)
        axes[1].annotate(
            r["label"], (x, r["rho_gold"]), textcoords="offset points", xytext=(5, 4), fontsize=8
        )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("1 - cosine similarity to fp32 (mean over sentences)")
    axes[1].set_ylabel("Spearman rho of pair similarities vs the labels")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per weight (scales and zeros included)")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("all-MiniLM-L6-v2: what each format costs in quality, against what it saves in bytes")
    fig.tight_layout()
    return fig


def step_speedups(step=None) -> tuple[dict, str]:
    """{(format, M): (graph ×, eager ×)}: each format's speed-up over 16-bit nn.Linear on the Llama-3-8B block's step,
    graph against 16-bit's graph and eager against 16-bit's eager (None where a figure is missing), and where the
    times come from. step: what time_llama_stack returned ({(path, M): (graph µs, eager µs)}); empty or None (no
    GPU here) reads the course's recorded run (docs/capstone-h200.json's `step_us`, keys "path M=1")."""
    from qmatmul.capstone.speed import _recorded

    where = "measured here"
    if not step:
        rec = _recorded()
        step = {(k.rsplit(" ", 1)[0], int(k.rsplit("=", 1)[1])): v for k, v in rec.get("step_us", {}).items()}
        device = next((ln for ln in rec.get("env", "").splitlines() if ln.startswith("device:")), "")
        where = f"recorded on the course's {device[8:].split(' (')[0] or 'GPU'}" if step else ""

    def ratio(base, t):
        return base / t if base and t else None

    out = {}
    for (path, M), times in step.items():
        base = step.get(("16-bit", M))
        if path in FORMATS and base:
            out[(path, M)] = tuple(ratio(b, t) for b, t in zip(base, times, strict=True))
    return out, where


def speed_figure(step=None):
    """The Llama-3-8B block's decode step: each format's speed-up over 16-bit nn.Linear at each M, captured as a CUDA
    graph (what a serving engine runs) and called from Python (eager), beside the most its bytes allow (16-bit's 2
    bytes a weight over the format's). step: what time_llama_stack returned; without it, the course's recorded run."""
    if autograding():
        return None
    import matplotlib.pyplot as plt

    speedups, where = step_speedups(step)
    if not speedups:
        print("No step timed and no recorded run in this checkout: nothing to draw.")
        return None
    ms = sorted({M for _, M in speedups})
    fmts = [f for f in FORMATS if any((f, M) in speedups for M in ms)]
    fig, axes = plt.subplots(
        1, len(ms), figsize=(5.5 * len(ms), 0.6 * len(fmts) + 1.8), sharey=True, squeeze=False
    )
    for ax, M in zip(axes[0], ms, strict=True):
        for i, fmt in enumerate(fmts):
            graph, eager = speedups.get((fmt, M), (None, None))
            bound = 2 / weight_bytes_per_weight(fmt, 4096)
            ax.barh(i - 0.18, graph or 0, height=0.36, color="tab:blue",
                    label="captured (CUDA graph)" if i == 0 else None)  # fmt: skip
            ax.barh(i + 0.18, eager or 0, height=0.36, color="tab:blue", alpha=0.3,
                    label="eager (from Python)" if i == 0 else None)  # fmt: skip
            ax.scatter(
                bound, i, marker="D", color="black", zorder=3, label="bytes' bound" if i == 0 else None
            )
            for y, v in ((i - 0.18, graph), (i + 0.18, eager)):
                ax.annotate("-" if v is None else f"{v:.2f}x", (v or 0, y), xytext=(3, -3),
                            textcoords="offset points", fontsize=8)  # fmt: skip
        ax.axvline(1.0, color="gray", lw=1, ls="--")
        ax.set_title(f"M = {M}")
        ax.set_xlabel("speed-up over 16-bit nn.Linear (x)")
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(fmts)), [LABELS[f] for f in fmts])
    axes[0][0].invert_yaxis()  # the formats top to bottom in the course's order
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"A Llama-3-8B block's seven Linears, one decode step ({where})")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
