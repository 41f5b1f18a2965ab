"""Chapter FP8's teaching cells: the bits of an 8-bit float (table, explorer), the bytes per weight of each
format, the figure of error against scaling granularity, the floor-time predictions and the comparison of the paths
at decode (measured on a GPU, the H200's recorded figures on a CPU)."""

from __future__ import annotations

import math

import torch

from qmatmul import checks
from qmatmul.checks.fp8 import BANDWIDTH_SHAPE, PREFILL_THRESHOLD, random_matrix, timing_problem
from qmatmul.formats.fp8 import (
    E4M3,
    E4M3_MAX,
    E5M2_MAX,
    FLOAT8_FIELDS,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    decode_bits,
    dequantize,
    naive,
    quantize,
    scaled_mm,
)
from qmatmul.teaching import compare, recorded, roofline_model, widgets
from qmatmul.teaching.roofline_model import flops

# ----------------------------------------------------------------------------------------------------------
# The bits of an 8-bit float


def describe_bits(v: float, fmt: str = "e4m3fn", saturating: bool = True) -> dict:
    """What happens to v in an 8-bit format: the code, its fields, its value and the error."""
    e_bits, m_bits, bias, has_inf = FLOAT8_FIELDS[fmt]
    dtype = E4M3 if fmt == "e4m3fn" else torch.float8_e5m2
    t = torch.tensor([v], dtype=torch.float32)
    if saturating:
        top = E4M3_MAX if fmt == "e4m3fn" else E5M2_MAX
        t = t.clamp(-top, top)
    code = int(t.to(dtype).view(torch.uint8)[0])
    value = decode_bits(code, fmt)
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    b = format(code, "08b")
    kind = "nan" if math.isnan(value) else "inf" if math.isinf(value) else "subnormal" if e == 0 else "normal"
    if value == 0:
        kind = "zero"
    return {
        "code": code,
        "bits": f"{b[0]} {b[1 : 1 + e_bits]} {b[1 + e_bits :]}",
        "sign": code >> 7,
        "exponent": e,
        "mantissa": m,
        "kind": kind,
        "value": value,
        "error": value - v if math.isfinite(value) else math.nan,
    }


def show_bits(values=(1.0, 0.1, -3.5, 448.0, 500.0, 2.0**-9, 1e-4, 60000.0)) -> None:
    """A table: each value in e4m3fn (saturating) and e5m2."""
    print(
        f"{'value':>12} | {'e4m3fn: s eeee mmm':<22}{'→':>2} {'decoded':>10} | {'e5m2: s eeeee mm':<22}{'→':>2} {'decoded':>10}"
    )
    for v in values:
        a, b = describe_bits(v, "e4m3fn"), describe_bits(v, "e5m2", saturating=False)
        print(f"{v:>12.6g} | {a['bits']:<12}{a['kind']:>10} {a['value']:>12.6g} | "
              f"{b['bits']:<12}{b['kind']:>10} {b['value']:>12.6g}")  # fmt: skip


def bits_explorer():
    """Type a number: see its e4m3fn and e5m2 codes, fields, decoded values and rounding error."""
    import ipywidgets as W

    def text(v: float, saturating: bool) -> str:
        rows = []
        for fmt, sat in (("e4m3fn", saturating), ("e5m2", False)):
            c = describe_bits(v, fmt, saturating=sat)
            _, m_bits, bias, _ = FLOAT8_FIELDS[fmt]
            rows.append(
                f"{fmt:<7} bits {c['bits']:<12} ({c['kind']}: sign {c['sign']}, exponent {c['exponent']} "
                f"(bias {bias}), mantissa {c['mantissa']}/{1 << m_bits})\n"
                f"        value {c['value']:.6g}   error {c['error']:+.3g}"
            )
        note = (
            ""
            if saturating
            else "\n(e4m3fn without saturation: |v| > 464 becomes NaN; torch ≤ 2.11 does this)"
        )
        return "\n".join(rows) + note

    v = W.FloatText(value=0.3, description="v")
    sat = W.Checkbox(value=True, description="saturate e4m3fn at ±448")
    return W.VBox([W.HBox([v, sat]), widgets.text_view(text, v=v, saturating=sat)])


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def explain_format(K: int = 8192) -> None:
    rows = [
        ("bf16 dense", 2.0),
        ("W8A16 int8 + fp32 scale per row", 1 + 4 / K),
        ("FP8 e4m3 + fp32 scale per row", bytes_per_weight(K)),
        ("FP8 e4m3 + fp32 scale per 128x128 block", bytes_per_weight(K, (128, 128))),
    ]
    print(f"Bytes per weight (rows of K = {K}):")
    for name, b in rows:
        print(f"  {name:<42} {b:.5f} B")
    h200 = roofline_model.H200
    print(f"At decode FP8 moves the bytes of W8A16; at prefill the fp8 tensor cores have twice the bf16 peak rate "
          f"(cuBLAS reached {h200['fp8_flops'] / h200['bf16_flops']:.2f}× its bf16 rate on the course's H200).")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 1's figure: the error against the scaling granularity


E4M3_MIN_NORMAL = 2.0**-6  # below it a code is subnormal (or zero)
QUIET_TOKEN, QUIET_FACTOR = 7, 1e-3  # one token a thousand times quieter than the rest
OUTLIER_CHANNEL, OUTLIER_FACTOR = 5, 40.0  # one channel 40 times larger again than the other outlier channels
GRANULARITIES = [("per tensor", (256, 1024)), ("per row (token)", (1, 1024)), ("1 x 128 blocks", (1, 128)),
                 ("128 x 128 blocks", (128, 128))]  # fmt: skip


def granularity_activations(seed: int = 0) -> torch.Tensor:
    """The figure's activations [256, 1024]: rows of distinct magnitudes, outlier channels, one very large outlier
    channel and one quiet token."""
    x = random_matrix(256, 1024, checks.generator(seed), outliers=True)
    x[:, OUTLIER_CHANNEL] *= OUTLIER_FACTOR
    x[QUIET_TOKEN, :] *= QUIET_FACTOR
    return x


def granularity_stats(quantize_fn=quantize, seed: int = 0) -> dict:
    """What the figure shows and the text says of it, per granularity (GRANULARITIES' order): the relative error of
    the whole tensor and of each row, the fraction of codes subnormal or zero (|q| < 2^-6), of the whole tensor and
    of the quiet token, and the fraction of the quiet token's codes that are zero."""
    x = granularity_activations(seed)
    st = {"names": [], "error": [], "row_error": [], "tiny": [], "quiet_tiny": [], "quiet_zero": []}
    for name, block in GRANULARITIES:
        q, s = quantize_fn(x, block)
        d, qa = dequantize(q, s, block), q.float().abs()
        st["names"].append(name)
        st["error"].append(float((d - x).norm() / x.norm()))
        st["row_error"].append(((d - x).norm(dim=1) / x.norm(dim=1)).numpy())
        st["tiny"].append(float((qa < E4M3_MIN_NORMAL).float().mean()))
        st["quiet_tiny"].append(float((qa[QUIET_TOKEN] < E4M3_MIN_NORMAL).float().mean()))
        st["quiet_zero"].append(float((qa[QUIET_TOKEN] == 0).float().mean()))
    a = x.abs()
    st["amax_over_median"] = float(a.max() / a.median())
    int8 = torch.round(x / (a.max() / 127))  # int8's even grid, one scale per tensor
    st["int8_zero"] = float((int8 == 0).float().mean())
    return st


def granularity_figure(quantize_fn, seed: int = 0):
    """Relative error of x ≈ q·s on activations with outlier channels, per tensor / per row / per block."""
    import matplotlib.pyplot as plt

    st = granularity_stats(quantize_fn, seed)
    names, errs = st["names"], st["error"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    a.bar(names, errs, color=["tab:red", "tab:orange", "tab:green", "tab:blue"])
    a.set_ylabel("‖q·s − x‖ / ‖x‖")
    a.set_yscale("log")
    a.set_title("whole tensor")
    for i, e in enumerate(errs):
        a.text(i, e, f"{e:.2%}", ha="center", va="bottom", fontsize=8)
    a.tick_params(axis="x", labelsize=8)
    for name, r in zip(names, st["row_error"], strict=True):
        b.semilogy(r, label=name, lw=1)
    b.set_xlabel("row (token)")
    b.set_ylabel("relative error of the row")
    b.set_title(quiet_title(st), fontsize=9)
    b.legend(fontsize=8)
    fig.suptitle("e4m3 error against scaling granularity, on activations with outlier channels")
    fig.tight_layout()
    return fig


def quiet_title(st: dict) -> str:
    """The per-row panel's title: what one scale per tensor does to the quiet token, from the figure's data."""
    return (f"per row: token {QUIET_TOKEN} has {st['quiet_tiny'][0]:.0%} of its codes subnormal or zero per tensor, "
            f"{st['quiet_tiny'][2]:.0%} in 1 x 128 blocks")  # fmt: skip


def claims() -> dict[str, float]:
    """The numbers the chapter's text quotes (`<!-- claim: fp8 | key -->`, tests/test_text_claims.py), computed
    from the figure's data with the reference quantizer and from the H200's record, in the unit the text uses."""
    st = granularity_stats()
    keys = ["per tensor", "per row", "1x128", "128x128"]
    out = {f"error {k}": 100 * e for k, e in zip(keys, st["error"], strict=True)}
    out |= {
        f"quiet error {k}": 100 * float(r[QUIET_TOKEN]) for k, r in zip(keys, st["row_error"], strict=True)
    }
    out |= {f"quiet tiny {k}": 100 * v for k, v in zip(keys, st["quiet_tiny"], strict=True)}
    out |= {f"quiet zero {k}": 100 * v for k, v in zip(keys, st["quiet_zero"], strict=True)}
    out |= {f"tiny {k}": 100 * v for k, v in zip(keys, st["tiny"], strict=True)}
    h200 = roofline_model.H200
    return out | {
        "amax over median": st["amax_over_median"],
        "int8 zero per tensor": 100 * st["int8_zero"],
        "quiet factor": 1 / QUIET_FACTOR,
        "e4m3 normal range": E4M3_MAX / E4M3_MIN_NORMAL,
        "fp8 over bf16": h200["fp8_flops"] / h200["bf16_flops"],
        "prefill bar": 100 * PREFILL_THRESHOLD,  # the grading's, quoted where the text states the bar
    }


# ----------------------------------------------------------------------------------------------------------
# Predictions, the comparison of paths, the benchmark

# Recorded on the course's H200 (docs/bench-h200.json, eager) at M = 1, N x K = 28672 x 8192.
H200_RECORDED_US = recorded.decode_us(
    "fp8 decode",
    {
        "dense bf16 (cuBLAS)": "dense bf16 (cuBLAS)",
        "torch._scaled_mm (row-wise)": "torch._scaled_mm rowwise",
        "fp8_decode": "solution fp8_decode",
    },
    1, *BANDWIDTH_SHAPE,
)  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    N, K = BANDWIDTH_SHAPE
    shown = roofline_model.predictions(env, ["fp8"], (1, 16, 4096), naive="fp8", shape=(N, K),
                                       note=" (floors at the bf16 matmul rate)")  # fmt: skip
    if shown and not env.has_gpu:
        fp8_rate = roofline_model.H200["fp8_flops"]
        t = flops(4096, N, K) / fp8_rate
        bf16_rate = roofline_model.H200["bf16_flops"]
        print(f"With the H200's fp8 tensor cores ({fp8_rate / 1e12:.0f} TFLOP/s recorded, against {bf16_rate / 1e12:.0f} "
              f"in bf16: {fp8_rate / bf16_rate:.2f}×, where the peak is 2×), the M=4096 floor drops to {t * 1e6:.0f} "
              "µs: prefill is compute-bound.")  # fmt: skip


def compare_paths(env, matmul_fn, decode_fn, M: int = 1):
    """Time the dense matmul, the naive path, torch._scaled_mm and the learner's kernels at decode."""
    N, K = BANDWIDTH_SHAPE
    rows = compare.decode_rows(M, N, K, bytes_moved, bytes_moved_naive, "torch._scaled_mm (row-wise)",
                               "fp8_matmul (tiled)", "fp8_decode")  # fmt: skip

    def fns():
        g = checks.generator(0, "cuda")
        xq, sx, wq, sw = timing_problem(max(M, 16), N, K, g)
        xq, sx = xq[:M], sx[:M].contiguous()
        w = torch.randn(N, K, device="cuda", generator=g).to(env.act_dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(env.act_dtype)
        return [lambda: x @ w.T, lambda: naive(xq, sx, wq, sw, env.act_dtype), lambda: scaled_mm(xq, sx, wq, sw),
                lambda: matmul_fn(xq, sx, wq, sw), lambda: decode_fn(xq, sx, wq, sw)]  # fmt: skip

    return compare.compare_paths(env, rows, fns, H200_RECORDED_US, M=M, shape=(N, K), where_known=True)
