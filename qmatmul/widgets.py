"""Interactive widgets (ipywidgets) to play with the encodings."""

from __future__ import annotations


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

    out = W.HTML()

    def show(w: float, amax: float) -> None:
        c = int8_code(w, amax)
        clipped = " (clipped: |w| > max|w| cannot happen with the right scale)" if abs(w) > amax else ""
        out.value = (
            "<pre>"
            f"scale s = max|w| / 127 = {c['scale']:.6g}\n"
            f"w / s               = {c['w / s']:.4f}\n"
            f"q = round(w / s)    = {c['q']:>4d}   bits {c['bits']} (two's complement){clipped}\n"
            f"q * s               = {c['dequantized']:.6g}\n"
            f"error               = {c['error']:+.3g}  ({c['error in steps']:+.3f} steps of s)"
            "</pre>"
        )

    w = W.FloatSlider(value=0.0123, min=-0.1, max=0.1, step=0.0001, readout_format=".4f", description="w")
    amax = W.FloatSlider(
        value=0.05, min=0.001, max=0.1, step=0.0005, readout_format=".4f", description="max |w|"
    )
    W.interactive_output(show, {"w": w, "amax": amax})
    show(w.value, amax.value)
    return W.VBox([w, amax, out])
