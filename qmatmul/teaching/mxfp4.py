"""Chapter MXFP4, the teaching cells: the code table and bytes per weight (explain_format), the block explorer,
the figure that compares the scale rules and int4 at equal bits, the roofline's predictions and the cell that
compares the paths at decode (with the figures recorded on the H200). NVFP4's comparison figure reuses its weights
and int4 baseline (qmatmul/teaching/nvfp4.py)."""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks.mxfp4 import BANDWIDTH_SHAPE, timing_weights
from qmatmul.formats import fp4
from qmatmul.formats.mxfp4 import (
    BLOCK,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    naive,
    quantize_codes,
)
from qmatmul.teaching import compare, plots, recorded, roofline_model, widgets

# ----------------------------------------------------------------------------------------------------------
# The format: its codes, its scale and its bytes per weight


def explain_format() -> None:
    """Print the E2M1 code table, the E8M0 rule and the bytes per weight."""
    print("E2M1 codes (bit 3 sign | bits 2-1 exponent, bias 1 | bit 0 mantissa):")
    for c in range(8):
        e, m = c >> 1, c & 1
        how = f"0.{5 * m} (subnormal: m · 0.5)" if e == 0 else f"2^{e - 1} · 1.{5 * m}"
        print(
            f"  {c:04b}  {fp4.E2M1_MAGNITUDES[c]:>3g}   = {how}      {c | 8:04b}  -{fp4.E2M1_MAGNITUDES[c]:g}"
        )
    print("E8M0 scale code e: the value 2^(e - 127); 0xFF is NaN. No sign, no mantissa: a pure power of two.")
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("W8A16 (int8 + fp32 per row)", 1.0),
        ("MXFP4 (E2M1 + E8M0 per 32)", bytes_per_weight()),
    ]
    print("Bytes per weight:")
    for name, b in rows:
        print(f"  {name:<30} {b:.5f} B  ({8 * b:.2f} bits)")
    print(f"At decode MXFP4 can be up to {2 / bytes_per_weight():.2f}x faster than bf16.")


# ----------------------------------------------------------------------------------------------------------
# The widget: one block of 32 values, its scale and each code


def block_table(values, rule: str = "floor") -> dict:
    """What the explorer shows for one block of 32 values."""
    v = torch.as_tensor(values, dtype=torch.float32).reshape(1, BLOCK)
    codes, scales = quantize_codes(v, rule)
    X = float(fp4.e8m0_decode(scales)[0, 0])
    back = fp4.e2m1_decode(codes) * X
    return {
        "amax": float(v.abs().max()),
        "scale_code": int(scales[0, 0]),
        "exponent": int(scales[0, 0]) - fp4.E8M0_BIAS,
        "X": X,
        "values": v[0].tolist(),
        "ratios": (v[0] / X).tolist(),
        "codes": codes[0].tolist(),
        "dequantized": back[0].tolist(),
        "clipped": int((v[0].abs() / X > fp4.E2M1_MAX).sum()),
        "rel_error": float((back - v).norm() / v.norm().clamp_min(1e-30)),
    }


def block_text(values, rule: str = "floor") -> str:
    t = block_table(values, rule)
    lines = [
        f"amax = {t['amax']:.5g};  floor(log2 amax) - 2 = {t['exponent']}  ->  E8M0 code {t['scale_code']} "
        f"({t['scale_code']:08b}), X = 2^{t['exponent']} = {t['X']:.5g}"
        if rule == "floor"
        else f"amax = {t['amax']:.5g};  ceil(log2(amax / 6)) = {t['exponent']}  ->  E8M0 code {t['scale_code']}, "
        f"X = {t['X']:.5g}",
        f"{'i':>3} {'w':>10} {'w / X':>8} {'code':>5} {'E2M1':>6} {'code·X':>10}",
    ]
    for i in range(BLOCK):
        c = t["codes"][i]
        lines.append(
            f"{i:>3} {t['values'][i]:>10.4g} {t['ratios'][i]:>8.3f} {c:04b}  {float(fp4.e2m1_decode(torch.tensor(c))):>6g} "
            f"{t['dequantized'][i]:>10.4g}" + ("  clipped to ±6" if abs(t["ratios"][i]) > 6 else "")
        )
    lines.append(f"clipped: {t['clipped']};  relative error of the block: {t['rel_error']:.3%}")
    return "\n".join(lines)


def block_explorer():
    """Sliders: a block of 32 Gaussian weights (seed), one outlier's size, and the scale rule."""
    import ipywidgets as W

    def text(seed: int, outlier: float, rule: str) -> str:
        g = checks.generator(seed)
        v = torch.randn(BLOCK, generator=g) * 0.02
        v[5] = outlier * 0.02
        return block_text(v, rule)

    seed = W.IntSlider(value=0, min=0, max=50, description="block")
    outlier = W.FloatSlider(value=3.5, min=-8, max=8, step=0.05, description="w[5] / 0.02")
    rule = W.ToggleButtons(options=["floor", "ceil"], description="scale rule")
    return W.VBox(
        [W.HBox([seed, outlier]), rule, widgets.text_view(text, seed=seed, outlier=outlier, rule=rule)]
    )


# ----------------------------------------------------------------------------------------------------------
# The comparison figure: floor vs ceil rule, MXFP4 vs int4 at equal bits


def int4_groupwise(w: torch.Tensor, group: int) -> torch.Tensor:
    """Dequantized symmetric int4 (-7..7) with one bf16 absmax scale per group of `group` along K."""
    N, K = w.shape
    b = w.float().reshape(N, K // group, group)
    s = (b.abs().amax(dim=2, keepdim=True) / 7).to(torch.bfloat16).float()
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (torch.round(b / s).clamp(-7, 7) * s).reshape(N, K)


def realistic_weights(kind: str, N: int = 512, K: int = 2048, seed: int = 0) -> torch.Tensor:
    """Gaussian rows of distinct scales, or heavy-tailed (Student t, 4 degrees of freedom) like LLM weights."""
    g = checks.generator(seed)
    row = torch.exp(torch.empty(N, 1).uniform_(-1.0, 1.0, generator=g)) * 0.02
    if kind == "gaussian":
        return torch.randn(N, K, generator=g) * row
    z = torch.randn(N, K, generator=g)
    chi2 = sum(torch.randn(N, K, generator=g) ** 2 for _ in range(4)) / 4
    return z / chi2.sqrt() * row


def error_table(w: torch.Tensor) -> list[tuple[str, float, float]]:
    """(method, bits per weight, relative RMS error) on w."""

    def rel(deq):
        return float((deq - w).norm() / w.norm())

    def mx(rule):
        codes, scales = quantize_codes(w, rule)
        return dequantize(fp4.pack_nibbles(codes), scales)

    return [
        ("MXFP4, spec (floor)", 4.25, rel(mx("floor"))),
        ("MXFP4, ceil(log2(amax/6))", 4.25, rel(mx("ceil"))),
        ("int4 g=64, bf16 scale", 4.25, rel(int4_groupwise(w, 64))),
        ("int4 g=32, bf16 scale", 4.5, rel(int4_groupwise(w, 32))),
    ]


def compare_rules_figure(seed: int = 0):
    """Relative error of each method on two weight distributions; prints the table too."""
    tables = {k: error_table(realistic_weights(k, seed=seed)) for k in ("gaussian", "heavy-tailed")}
    return plots.error_bars(tables, "512 × 2048 weights: relative error by format and scale rule")


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Recorded on the course's H200 (docs/bench-h200.json, eager) at M = 1, N x K = 28672 x 8192, bf16 activations.
H200_RECORDED_US = recorded.decode_us(
    "mxfp4 decode",
    {
        "dense bf16 (cuBLAS)": "dense (cuBLAS)",
        "naive: dequantize, then matmul": "naive: dequantize, matmul",
        "mxfp4_matmul (tiled)": "solution mxfp4_matmul (tiled)",
        "mxfp4_decode": "solution mxfp4_decode",
        "tl.dot_scaled kernel": "solution tl.dot_scaled",
    },
    1, *BANDWIDTH_SHAPE,
)  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["mxfp4"], (1, 16, 2048), naive="mxfp4", shape=BANDWIDTH_SHAPE)


def compare_paths(env, prefill_fn, decode_fn, dot_scaled_fn=None, M: int = 1):
    """Time the dense matmul, the naive path and the learner's kernels at decode; plot bytes and time."""
    N, K = BANDWIDTH_SHAPE
    rows = compare.decode_rows(
        M, N, K, bytes_moved, bytes_moved_naive, "mxfp4_matmul (tiled)", "mxfp4_decode"
    )
    if dot_scaled_fn is not None:
        rows.append(("tl.dot_scaled kernel", bytes_moved(M, N, K)))

    def fns():
        g = checks.generator(0, "cuda")
        packed, scales = timing_weights(N, K, g)
        w = torch.randn(N, K, device="cuda", generator=g).to(env.act_dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(env.act_dtype)
        kernels = [prefill_fn, decode_fn] + ([dot_scaled_fn] if dot_scaled_fn is not None else [])
        return [lambda: x @ w.T, lambda: naive(x, packed, scales)] + [
            lambda fn=fn: fn(x, packed, scales) for fn in kernels
        ]

    return compare.compare_paths(env, rows, fns, H200_RECORDED_US, M=M, shape=(N, K))
