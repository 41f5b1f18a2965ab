"""Interactive widgets (ipywidgets) to play with the encodings."""

from __future__ import annotations

from qmatmul.teaching import roofline_model


def text_view(text, **controls):
    """An HTML view of text(**values) as preformatted text, drawn now and again whenever one of the controls (an
    ipywidgets control per keyword of text) changes: what each explorer of the course shows under its controls."""
    import ipywidgets as W

    out = W.HTML()

    def show(**values) -> None:
        out.value = "<pre>" + text(**values) + "</pre>"

    W.interactive_output(show, controls)
    show(**{name: control.value for name, control in controls.items()})
    return out


def int8_code(w: float, amax: float) -> dict:
    """Everything the W8A16 explorer shows, for one weight w in a row whose largest magnitude is amax."""
    import torch

    s = torch.tensor(amax / 127 if amax > 0 else 1.0, dtype=torch.float32)
    ratio = torch.tensor(w, dtype=torch.float32) / s
    q = int(torch.round(ratio).clamp(-127, 127))
    back = q * float(s)
    return {
        "scale": float(s),
        "w / s": float(ratio),
        "q": q,
        "bits": format(q & 0xFF, "08b"),
        "dequantized": back,
        "error": back - w,
        "error in steps": (back - w) / float(s),
    }


def int8_explorer():
    """Sliders for a weight and its row's max |w|: see the scale, the int8 code, its bits and the error."""
    import ipywidgets as W

    def text(w: float, amax: float) -> str:
        c = int8_code(w, amax)
        clipped = " (clipped: |w| > max|w| cannot happen with the right scale)" if abs(w) > amax else ""
        return (
            f"scale s = max|w| / 127 = {c['scale']:.6g}\n"
            f"w / s               = {c['w / s']:.4f}\n"
            f"q = round(w / s)    = {c['q']:>4d}   bits {c['bits']} (two's complement){clipped}\n"
            f"q * s               = {c['dequantized']:.6g}\n"
            f"error               = {c['error']:+.3g}  ({c['error in steps']:+.3f} steps of s)"
        )

    w = W.FloatSlider(value=0.0123, min=-0.1, max=0.1, step=0.0001, readout_format=".4f", description="w")
    amax = W.FloatSlider(
        value=0.05, min=0.001, max=0.1, step=0.0005, readout_format=".4f", description="max |w|"
    )
    return W.VBox([w, amax, text_view(text, w=w, amax=amax)])


def layer_text(fmt: str, M: int, ceil, group_size: int = 128) -> str:
    """What the roofline explorer shows for one format and M (a 28672 x 8192 Linear layer)."""
    n = roofline_model.layer_numbers(fmt, M, ceil, group_size=group_size)
    N, K = roofline_model.LAYER_SHAPE
    side = "below" if n["intensity"] < n["ridge"] else "above"
    return (
        f"{roofline_model.FORMAT_TEXT[fmt]}\n"
        f"layer N x K = {N} x {K}, M = {M}: {n['bytes_per_weight']:.4f} bytes per weight\n"
        f"bytes moved      {n['bytes'] / 1e6:>12.1f} MB\n"
        f"FLOPs            {n['flops'] / 1e9:>12.1f} GFLOP\n"
        f"intensity        {n['intensity']:>12.1f} FLOP/byte ({side} the ridge, {n['ridge']:.0f})\n"
        f"floor time       {n['seconds'] * 1e6:>12.1f} µs: {n['bound']}-bound\n"
        f"naive path floor {n['naive_seconds'] * 1e6:>12.1f} µs ({n['naive_bytes'] / 1e6:.1f} MB, "
        f"{n['naive_seconds'] / n['seconds']:.2f}x)\n"
        f"ceilings: {ceil.describe()}"
    )


def roofline_explorer(ceil=None):
    """Pick a format and M: see the bytes, the arithmetic intensity and the floor time of a Linear layer."""
    import ipywidgets as W

    ceil = ceil or roofline_model.recorded_ceilings()
    fmt = W.Dropdown(options=list(roofline_model.FORMATS), value="w8a16", description="format")
    m = W.SelectionSlider(options=[2**i for i in range(14)], value=1, description="M (tokens)")
    group = W.Dropdown(options=[32, 64, 128], value=128, description="W4A16 group")
    out = text_view(
        lambda fmt, M, group_size: layer_text(fmt, M, ceil, group_size), fmt=fmt, M=m, group_size=group
    )
    return W.VBox([W.HBox([fmt, group]), m, out])
