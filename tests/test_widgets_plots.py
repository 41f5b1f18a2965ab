"""Figures and widgets build without a display, and show the right numbers."""

import matplotlib

matplotlib.use("Agg")

from qmatmul import checks, roofline, w8a16  # noqa: E402
from qmatmul.teaching import plots, widgets


def test_int8_code():
    c = widgets.int8_code(0.0123, 0.05)
    assert c["q"] == round(0.0123 / (0.05 / 127))
    assert c["bits"] == format(c["q"] & 0xFF, "08b")
    assert abs(c["error in steps"]) <= 0.5
    assert widgets.int8_code(-0.05, 0.05)["bits"] == "10000001"  # -127


def test_int8_explorer_builds():
    box = widgets.int8_explorer()
    assert "q = round(w / s)" in box.children[-1].value


def test_quantization_error_plot():
    w = w8a16.random_weight(32, 64, checks.generator(0))
    fig = plots.quantization_error(w, *w8a16.quantize(w))
    assert len(fig.axes) == 2


def test_roofline_plot_and_prediction(capsys):
    ceil = roofline.Ceilings("test GPU", 1e12, 100e12, True)
    t, bound = roofline.floor_seconds(1e9, 1e9, ceil)
    assert bound == "memory" and abs(t - 1e-3) < 1e-12
    assert roofline.floor_seconds(1e6, 1e12, ceil)[1] == "compute"
    fig = plots.roofline(ceil, [("kernel", 1.0, 0.5e12)])
    assert fig.axes
