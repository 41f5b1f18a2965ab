"""The capstone's figure: quality against bytes per weight, one point per format (from capstone.measure)."""

from __future__ import annotations

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
