"""Chapter NVFP4, the teaching cells: the format explained (explain_format), the explorer of one block's two
scale levels, the figure that compares NVFP4 with MXFP4 and int4 (MXFP4's weights and baseline:
qmatmul/teaching/mxfp4.py), what this machine can run of NVFP4's native path, and the roofline's predictions.
Here, as in the notebook, `g` is the global (per-tensor) scale and `gen` a torch.Generator."""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks.nvfp4 import BANDWIDTH_SHAPE, tie_weight
from qmatmul.formats import fp4
from qmatmul.formats import mxfp4 as mxfp4_format
from qmatmul.formats.nvfp4 import BLOCK, bytes_per_weight, dequantize, quantize, quantize_codes
from qmatmul.teaching import mxfp4 as mxfp4_teaching
from qmatmul.teaching import plots, roofline_model, widgets


def explain_format() -> None:
    print("NVFP4 stores E2M1 codes (as in MXFP4), two per byte, and two levels of scale:")
    print(
        "  a block scale per 16 weights along K, in e4m3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits):"
    )
    print(
        "    positive values from 2^-9 to 448, 3 significant bits: it can be 1.25 or 1.75, not only a power of two;"
    )
    print(
        "  one float32 scale g per tensor, g = max|W| / (448 · 6): it moves the block scales to where e4m3 is precise."
    )
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("MXFP4 (E8M0 per 32)", mxfp4_format.bytes_per_weight()),
        ("NVFP4 (e4m3 per 16)", bytes_per_weight()),
    ]
    print("Bytes per weight:")
    for name, b in rows:
        print(f"  {name:<24} {b:.5f} B  ({8 * b:.2f} bits)")


# ----------------------------------------------------------------------------------------------------------
# The widget: the two scale levels of one block


def block_text(block_values, tensor_amax: float) -> str:
    """One block of 16 values inside a tensor whose largest magnitude is tensor_amax."""
    v = torch.as_tensor(block_values, dtype=torch.float32).reshape(1, BLOCK)
    amax_t = max(float(v.abs().max()), tensor_amax)
    w = torch.cat([v, torch.full((1, BLOCK), 0.0)], dim=0)
    w[1, 0] = amax_t  # another block holds the tensor's largest magnitude
    codes, scales, g = quantize_codes(w)
    s = float(fp4.e4m3_decode(scales[0, 0]))
    raw = float(v.abs().max()) / 6 / float(g)
    back = fp4.e2m1_decode(codes[0]) * s * float(g)
    lines = [
        f"tensor: max|W| = {amax_t:.5g}  ->  g = max|W| / (448 · 6) = {float(g):.6g}",
        f"block:  amax = {float(v.abs().max()):.5g}  ->  (amax / 6) / g = {raw:.5g}  ->  e4m3 {int(scales[0, 0]):08b} = {s:g}",
        f"        total scale g · s = {float(g) * s:.6g};  r = (1 / g) / s = {(1 / float(g)) / s:.6g}",
        f"{'i':>3} {'w':>10} {'w · r':>10} {'code':>5} {'E2M1':>6} {'code·s·g':>10}",
    ]
    for i in range(BLOCK):
        c = int(codes[0, i])
        lines.append(
            f"{i:>3} {float(v[0, i]):>10.4g} {float(v[0, i]) * ((1 / float(g)) / s):>10.3f} {c:04b}  "
            f"{float(fp4.e2m1_decode(torch.tensor(c))):>6g} {float(back[i]):>10.4g}"
        )
    err = float((back - v[0]).norm() / v[0].norm().clamp_min(1e-30))
    lines.append(f"relative error of the block: {err:.3%}")
    return "\n".join(lines)


def block_explorer():
    import ipywidgets as W

    def text(seed: int, block_scale: float, tensor_amax: float) -> str:
        gen = checks.generator(seed)
        v = torch.randn(BLOCK, generator=gen) * 10**block_scale
        return block_text(v, 10**tensor_amax)

    seed = W.IntSlider(value=0, min=0, max=50, description="block")
    bs = W.FloatSlider(value=-2, min=-6, max=1, step=0.1, description="log10 block σ")
    ta = W.FloatSlider(value=-1, min=-4, max=3, step=0.1, description="log10 max|W|")
    out = widgets.text_view(text, seed=seed, block_scale=bs, tensor_amax=ta)
    return W.VBox([W.HBox([seed, bs, ta]), out])


FIGURE_KINDS = ("gaussian", "heavy-tailed")


def compare_tables(seed: int = 0) -> dict:
    """The figure's data: for each kind of weight, (format, bits per weight, relative error) rows."""
    tables = {}
    for k in FIGURE_KINDS:
        w = mxfp4_teaching.realistic_weights(k, seed=seed)

        def rel(deq, w=w):
            return float((deq - w).norm() / w.norm())

        p, s, g = quantize(w)
        codes1, s1, g1 = quantize_codes(w, two_level=False)
        mp, ms = mxfp4_format.quantize(w)
        tables[k] = [
            ("NVFP4 (e4m3 per 16, fp32 per tensor)", 4.5, rel(dequantize(p, s, g))),
            ("NVFP4 without the tensor scale", 4.5, rel(dequantize(fp4.pack_nibbles(codes1), s1, g1))),
            ("MXFP4 (E8M0 per 32)", 4.25, rel(mxfp4_format.dequantize(mp, ms))),
            ("int4 g=16, bf16 scale", 5.0, rel(mxfp4_teaching.int4_groupwise(w, 16))),
        ]
    return tables


def compare_figure(seed: int = 0):
    """NVFP4 against MXFP4 and int4 g=16 on the same weights."""
    return plots.error_bars(compare_tables(seed), "512 × 2048 weights: relative error by format")


def _disagreements(w: torch.Tensor) -> int:
    """How many codes the two rules (w · ((1 / g) / s) and w / (g · s)) give differently."""
    return int((quantize_codes(w)[0] != quantize_codes(w, reciprocal=False)[0]).sum())


def claims() -> dict[str, float]:
    """The numbers the chapter's text quotes (`<!-- claim: nvfp4 | key -->`, tests/test_text_claims.py), computed
    from the figure's weights and the visible test's tie weights, in the unit the text uses (% or a count)."""
    out = {}
    for k, rows in compare_tables().items():
        out |= {f"error {k}": 100 * rows[0][2], f"error without g {k}": 100 * rows[1][2]}
        w = mxfp4_teaching.realistic_weights(k, seed=0)
        _, s1, _ = quantize_codes(w, two_level=False)
        out[f"clamped without g {k}"] = 100 * float((fp4.e4m3_decode(s1) == 2.0**-6).float().mean())
        wb = w.bfloat16().float()  # as a checkpoint stores it
        out[f"disagreements bf16 {k}"] = _disagreements(wb)
        out[f"codes per disagreement bf16 {k}"] = wb.numel() / max(1, out[f"disagreements bf16 {k}"])
    ties = tie_weight()
    return out | {"tie disagreement": 100 * _disagreements(ties) / ties.numel()}


def blackwell_status() -> str:
    """Say what this machine can run of NVFP4's native path."""
    if not torch.cuda.is_available():
        return "no CUDA GPU: the hand-decoded kernels run in Triton's interpreter."
    cap = torch.cuda.get_device_capability()
    if cap in ((10, 0), (12, 0)) or cap >= (10, 0):
        return (f"sm_{cap[0]}{cap[1]} has fp4 tensor cores. The course has not run an NVFP4 tl.dot_scaled kernel on "
                "Blackwell: try it as an extension (rhs_format 'e2m1' with e4m3 scales), and compare. With bf16 "
                "activations triton 3.9 upcasts the weights to bf16 there too (docs/gpu-fit.md): the fp4 tensor "
                "cores need low-precision activations as well.")  # fmt: skip
    return (f"sm_{cap[0]}{cap[1]} has no fp4 tensor cores, and tl.dot_scaled with e4m3 scales crashed triton 3.6's "
            "compiler on Hopper: the hand-decoded kernels are the path here.")  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["nvfp4"], (1, 16), naive="nvfp4", shape=BANDWIDTH_SHAPE)
