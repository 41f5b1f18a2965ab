"""Chapter W4A16's teaching cells: what the format stores (explain_format), the nibble explorer, the error against
the group size, the floor times the roofline predicts, and the paths compared at decode (compare_paths; the H200's
recorded figures where there is no GPU).
"""

from __future__ import annotations

import torch

from qmatmul import checks, environment, timing
from qmatmul.checks.w4a16 import BANDWIDTH_GROUP, BANDWIDTH_SHAPE, random_packed
from qmatmul.formats.w4a16 import QMAX, bytes_moved, bytes_per_weight, dequantize, naive, tinygemm_operands
from qmatmul.teaching import plots, recorded, roofline_model, widgets
from qmatmul.teaching.roofline_model import bytes_moved_dense

# ----------------------------------------------------------------------------------------------------------
# What the format stores


def explain_format(K: int = 8192) -> None:
    """Print the bytes per weight of each format and what that means for a decode step."""
    rows = [("bf16/fp16 dense", 2.0), ("W8A16 (int8 + fp32 scale per row)", 1 + 4 / K)]
    rows += [(f"W4A16, G = {g} (int4 + fp32 scale + u8 zero)", bytes_per_weight(g)) for g in (32, 64, 128)]
    print(f"Bytes per weight (rows of K = {K}):")
    for name, b in rows:
        print(f"  {name:<44} {b:.5f} B   {2 / b:4.2f}x fewer than bf16")
    print(
        f"At G = 128 the scales and zeros add {5 / 128:.3f} B per weight ({100 * (5 / 128) / 0.5:.0f} % on top of "
        "the nibbles): a decode step can be up to "
        f"{2 / bytes_per_weight(128):.2f}x faster than bf16."
    )


# ----------------------------------------------------------------------------------------------------------
# The nibble explorer (a widget) and the error-against-group-size figure


def nibble_code(even: int, odd: int) -> dict:
    """Pack two 4-bit codes (elements 2i and 2i+1) into one byte, and unpack it again, showing each step."""
    even, odd = int(even) & 0xF, int(odd) & 0xF
    byte = even | (odd << 4)
    return {
        "even (2i)": format(even, "04b"),
        "odd (2i+1)": format(odd, "04b"),
        "odd << 4": format(odd << 4, "08b"),
        "byte": format(byte, "08b"),
        "byte value": byte,
        "byte & 0xF": byte & 0xF,
        "byte >> 4": byte >> 4,
        "swapped (wrong) byte": format(odd | (even << 4), "08b"),
    }


def nibble_explorer():
    """Sliders for the codes of elements 2i and 2i+1 (and a zero point): the byte they share, bit by bit."""
    import ipywidgets as W

    def text(even: int, odd: int, zero: int, scale: float) -> str:
        c = nibble_code(even, odd)
        return (
            f"element 2i   code {even:>2} = {c['even (2i)']}        → low nibble  (bits 3..0)\n"
            f"element 2i+1 code {odd:>2} = {c['odd (2i+1)']}        → high nibble (bits 7..4)\n"
            f"byte = even | (odd << 4) = <b>{c['byte'][:4]}</b> {c['byte'][4:]}  = {c['byte value']}\n"
            f"unpack: byte & 0xF = {c['byte & 0xF']:>2}    byte >> 4 = {c['byte >> 4']:>2}\n"
            f"dequantized: (q - zero) · scale = {(even - zero) * scale:+.4f} and {(odd - zero) * scale:+.4f}\n"
            f"swapped nibbles would store {c['swapped (wrong) byte']}: element 2i would read back {odd}"
        )

    even = W.IntSlider(value=3, min=0, max=15, description="code 2i")
    odd = W.IntSlider(value=12, min=0, max=15, description="code 2i+1")
    zero = W.IntSlider(value=8, min=0, max=15, description="zero")
    scale = W.FloatSlider(
        value=0.01, min=0.001, max=0.05, step=0.001, readout_format=".3f", description="scale"
    )
    return W.VBox(
        [even, odd, zero, scale, widgets.text_view(text, even=even, odd=odd, zero=zero, scale=scale)]
    )


def error_against_group_size(w: torch.Tensor, quantize_fn, sizes=(32, 64, 128)):
    """Relative error ‖w − deq‖ / ‖w‖ of quantize_fn at each group size, beside one scale per row (G = K)."""
    import matplotlib.pyplot as plt

    N, K = w.shape
    labels, errs, bpw = [], [], []
    for g in sizes:
        packed, s, z = quantize_fn(w, g)
        deq = dequantize(packed, s, z, g)
        labels.append(f"G = {g}")
        errs.append(float((deq - w.float()).norm() / w.float().norm()))
        bpw.append(bytes_per_weight(g))
    # One scale and zero per row, the whole of K (what many blog posts do): the reference at G = K.
    wg = w.float()
    lo, hi = wg.amin(1, keepdim=True).clamp(max=0), wg.amax(1, keepdim=True).clamp(min=0)
    s = ((hi - lo) / QMAX).clamp_min(1e-30)
    z = torch.round(-lo / s).clamp(0, QMAX)
    q = (torch.round(wg / s) + z).clamp(0, QMAX)
    labels.append(f"one per row (G = K = {K})")
    errs.append(float(((q - z) * s - wg).norm() / wg.norm()))
    bpw.append(0.5 + 5 / K)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    bars = ax.bar(labels, [100 * e for e in errs], color=["tab:blue"] * len(sizes) + ["tab:red"])
    for b, e, bb in zip(bars, errs, bpw, strict=True):
        ax.annotate(f"{100 * e:.1f} %\n{bb:.3f} B/w", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_ylabel("‖w − dequant‖ / ‖w‖ (%)")
    ax.set_title("int4 error against group size: smaller groups, less error, more bytes")
    ax.set_ylim(0, 130 * max(errs))
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Recorded on the course's H200 (docs/bench-h200.json, eager: L2 flushed, median) at N x K = 28672 x 8192, G = 128,
# bf16 activations: µs by M (recorded at M = 1, 4 and 16).
_RECORDED_PATHS = {
    "dense bf16 (cuBLAS)": "dense (cuBLAS)",
    "naive: dequantize, then matmul": "naive: dequantize, matmul",
    "torch._weight_int4pack_mm": "torch._weight_int4pack_mm",
    "the course solution's w4a16_decode": "solution w4a16_decode",
}
_BY_M = {M: recorded.decode_us("w4a16 decode", _RECORDED_PATHS, M, *BANDWIDTH_SHAPE) for M in (1, 4, 16)}
H200_RECORDED_US = {label: {M: us[label] for M, us in _BY_M.items()} for label in _RECORDED_PATHS}


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["w8a16", "w4a16"], (1, 16, 2048), naive="w4a16", shape=BANDWIDTH_SHAPE)


def compare_paths(env, decode_fn, ms=(1, 2, 4, 8, 16)):
    """Bandwidth against M: the learner's decode kernel, the dense matmul, the naive path and, where the GPU
    has it, PyTorch's int4 kernel (torch._weight_int4pack_mm, tinygemm). On a CPU: the H200's recorded times. Not
    under the autograder."""
    if environment.autograding():
        return None
    import matplotlib.pyplot as plt

    N, K = BANDWIDTH_SHAPE
    G = BANDWIDTH_GROUP
    series: dict[str, list] = {}
    if env.has_gpu:
        g = checks.generator(0, "cuda")
        dtype = env.act_dtype
        p, s, z = random_packed(N, K, G, "cuda", g)
        w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
        tiny = tinygemm_operands(p, s, z, G) if dtype == torch.bfloat16 else None
        tiny_fn = None if tiny is None else (lambda x: torch._weight_int4pack_mm(x, *tiny))
        paths = {
            "dense bf16 (cuBLAS)": lambda x: x @ w.T,
            "naive: dequantize, then matmul": lambda x: naive(x, p, s, z, G),
            "torch._weight_int4pack_mm": tiny_fn,
            "your w4a16_decode": lambda x: decode_fn(x, p, s, z, G),
        }
        for label, fn in paths.items():
            series[label] = []
            for M in ms:
                x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
                t = None
                if fn is not None:
                    try:
                        fn(x)
                        t = timing.median_ms(lambda fn=fn, x=x: fn(x)) * 1e3
                    except Exception as exc:  # noqa: BLE001 - an unfinished exercise shows as "not measured"
                        print(f"{label}: not measured ({type(exc).__name__})")
                series[label].append(t)
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    else:
        for label, by_m in H200_RECORDED_US.items():
            series[label] = [by_m.get(M) for M in ms]
        note = plots.recorded_note()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, times in series.items():
        nb = bytes_moved_dense if label.startswith("dense") else None
        pts = [(M, (nb(M, N, K) if nb else bytes_moved(M, N, K, G)) / (t * 1e-6) / 1e12)
               for M, t in zip(ms, times, strict=True) if t]  # fmt: skip
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=label)
        print(f"{label:<34}" + "".join(f"{'—' if t is None else f'{t:.0f} µs':>10}" for t in times))
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ms), [str(m) for m in ms])
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("TB/s over the bytes that must move")
    ax.set_title(f"decode, N x K = {N} x {K}, G = {G}: {note}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
