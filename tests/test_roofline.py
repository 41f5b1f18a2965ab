"""Roofline (chapter 00): the byte models against the tensors the chapters really allocate, the checks pass the
solution, and every check fails on a known wrong answer with the message that names it."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from qmatmul import checks, fp8, mxfp4, nvfp4, roofline, w4a16, w8a16  # noqa: E402
from qmatmul.checks import CheckFailed, NotMeasured  # noqa: E402
from qmatmul.teaching import plots, recorded, widgets

HAS_GPU = torch.cuda.is_available()


# ---- an independent oracle: sum the nbytes of the tensors each chapter's quantizer produces


def allocated(fmt: str, M: int, N: int, K: int, G: int = 128) -> tuple[int, int]:
    """(fused, naive) bytes: the quantized operands, x and y as allocated; the naive path adds the 16-bit
    dequantized operands, written once and read once."""
    g = checks.generator(0)
    w = torch.randn(N, K, generator=g)
    x = torch.randn(M, K, generator=g).half()
    y = torch.empty(M, N, dtype=torch.float16)
    if fmt == "bf16":
        ops, deq = [w.bfloat16(), x], []
    elif fmt == "w8a16":
        q, s = w8a16.quantize(w)
        ops, deq = [q, s, x], [w8a16.dequantize(q, s).half()]
    elif fmt == "w4a16":
        p, s, z = w4a16.quantize(w, G)
        ops, deq = [p, s, z, x], [w4a16.dequantize(p, s, z, G).half()]
    elif fmt == "fp8":
        wq, sw = fp8.quantize(w, (1, K))
        xq, sx = fp8.quantize(x.float(), (1, K))
        ops, deq = (
            [wq, sw, xq, sx],
            [fp8.dequantize(wq, sw, (1, K)).half(), fp8.dequantize(xq, sx, (1, K)).half()],
        )
    elif fmt == "mxfp4":
        p, s = mxfp4.quantize(w)
        ops, deq = [p, s, x], [mxfp4.dequantize(p, s).half()]
    else:
        p, s, t = nvfp4.quantize(w)
        ops, deq = [p, s, t, x], [nvfp4.dequantize(p, s, t).half()]
    fused = sum(t.nbytes for t in ops) + y.nbytes
    return fused, fused + 2 * sum(t.nbytes for t in deq)


@pytest.mark.parametrize("fmt", roofline.FORMATS)
@pytest.mark.parametrize("M", [1, 5, 64])
def test_byte_models_match_allocated_tensors(fmt, M):
    for N, K, G in ((48, 256, 128), (33, 384, 32), (16, 128, 64)):
        if fmt != "w4a16" and G != 128:
            continue
        fused, naive = allocated(fmt, M, N, K, G)
        assert roofline.model_bytes(fmt, M, N, K, G) == fused, (fmt, M, N, K, G)
        assert roofline.model_bytes_naive(fmt, M, N, K, G) == naive, (fmt, M, N, K, G)
        assert sum(roofline.byte_parts(fmt, M, N, K, G).values()) == fused


def test_byte_models_come_from_the_chapter_modules():
    M, N, K = 16, 28672, 8192
    assert roofline.model_bytes("w8a16", M, N, K) == w8a16.bytes_moved(M, N, K)
    assert roofline.model_bytes("w4a16", M, N, K, 64) == w4a16.bytes_moved(M, N, K, 64)
    assert roofline.model_bytes("fp8", M, N, K) == fp8.bytes_moved(M, N, K)
    assert roofline.model_bytes("mxfp4", M, N, K) == mxfp4.bytes_moved(M, N, K)
    assert roofline.model_bytes("nvfp4", M, N, K) == nvfp4.bytes_moved(M, N, K)
    assert roofline.model_bytes_naive("w4a16", M, N, K) == w4a16.bytes_moved_naive(M, N, K)
    assert roofline.model_bytes("bf16", M, N, K) == w8a16.bytes_moved_dense(M, N, K)
    assert roofline.model_flops(M, N, K) == 2 * M * N * K
    with pytest.raises(ValueError, match="unknown format"):
        roofline.model_bytes("int3", 1, 1, 128)


# ---- the learner's functions: right, and each known wrong variant


def linear_bytes(fmt, M, N, K, group_size=128):
    return roofline.model_bytes(fmt, M, N, K, group_size)


def linear_flops(M, N, K):
    return 2 * M * N * K


def intensity(nbytes, nflops):
    return nflops / nbytes


def floor_time(nbytes, nflops, bandwidth, flops_rate):
    t_mem, t_math = nbytes / bandwidth, nflops / flops_rate
    return max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


def naive_bytes(fmt, M, N, K, group_size=128):
    return roofline.model_bytes_naive(fmt, M, N, K, group_size)


def naive_slowdown(fmt, M, N, K, bandwidth, flops_rate, group_size=128):
    f = linear_flops(M, N, K)
    naive = floor_time(naive_bytes(fmt, M, N, K, group_size), f, bandwidth, flops_rate)[0]
    return naive / floor_time(linear_bytes(fmt, M, N, K, group_size), f, bandwidth, flops_rate)[0]


@pytest.mark.parametrize("hidden", [False, True])
def test_checks_pass_the_right_answers(hidden, capsys):
    for seed in range(3):
        roofline.check_linear_bytes(linear_bytes, hidden=hidden, seed=seed)
        roofline.check_floor(linear_flops, intensity, floor_time, hidden=hidden, seed=seed)
        roofline.check_naive(naive_bytes, naive_slowdown, hidden=hidden, seed=seed)
    assert capsys.readouterr().out.count("✓") == 9


def test_float_and_tensor_answers_are_accepted():
    roofline.check_linear_bytes(lambda *a, **k: float(linear_bytes(*a, **k)), seed=0)
    roofline.check_linear_bytes(lambda *a, **k: torch.tensor(linear_bytes(*a, **k)), seed=0)


def _mistake_cases(mistakes_fn):
    """(fmt, name, index) of every named mistake, each format at the first visible shape."""
    seen = []
    for fmt in roofline.FORMATS:
        for i, (name, _, _) in enumerate(mistakes_fn(fmt, 1, 4096, 4096, 128)):
            seen.append((fmt, name, i))
    return seen


@pytest.mark.parametrize("fmt,name,index", _mistake_cases(roofline.bytes_mistakes))
def test_every_bytes_mistake_is_named(fmt, name, index):
    def wrong(f, M, N, K, group_size=128):
        if f == fmt:
            return roofline.bytes_mistakes(f, M, N, K, group_size)[index][2]
        return linear_bytes(f, M, N, K, group_size)

    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        roofline.check_linear_bytes(wrong, seed=0)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        roofline.check_linear_bytes(wrong, hidden=True, seed=5)


@pytest.mark.parametrize("fmt,name,index", _mistake_cases(roofline.naive_mistakes))
def test_every_naive_bytes_mistake_is_named(fmt, name, index):
    def wrong(f, M, N, K, group_size=128):
        if f == fmt:
            return roofline.naive_mistakes(f, M, N, K, group_size)[index][2]
        return naive_bytes(f, M, N, K, group_size)

    with pytest.raises(CheckFailed, match=f"known mistake: {name.replace('(', '.').replace(')', '.')}"):
        roofline.check_naive(wrong, naive_slowdown, seed=0)


def test_the_named_mistakes_the_brief_asks_for():
    names = {n for f in roofline.FORMATS for n, _, _ in roofline.bytes_mistakes(f, 1, 64, 256, 128)}
    assert {"forgot the scales", "forgot the activations/output", "counted the weight at 2 bytes",
            "int4 counted at 1 byte per weight", "zero points forgotten"} <= names  # fmt: skip


def test_an_unnamed_wrong_count_still_says_what_to_count():
    with pytest.raises(CheckFailed, match="Count every tensor") as exc:
        roofline.check_linear_bytes(lambda *a, **k: linear_bytes(*a, **k) + 7, seed=0)
    assert "linear_bytes('bf16', M=1, N=4096, K=4096) returned" in str(exc.value)


def test_non_numbers_and_unfinished_cells_are_reported():
    with pytest.raises(CheckFailed, match="must return a number"):
        roofline.check_linear_bytes(lambda *a, **k: None, seed=0)

    def unfinished(*a, **k):
        raise NotImplementedError()

    with pytest.raises(CheckFailed, match="linear_bytes is not implemented yet"):
        roofline.check_linear_bytes(unfinished, seed=0)
    with pytest.raises(CheckFailed, match="floor_time must return a pair"):
        roofline.check_floor(linear_flops, intensity, lambda *a: 1.0, seed=0)
    with pytest.raises(CheckFailed, match="Return the string 'memory' or 'compute'"):
        roofline.check_floor(linear_flops, intensity, lambda *a: (floor_time(*a)[0], "bandwidth"), seed=0)


FLOOR_MISTAKES = [
    ("FLOPs counted once, not twice", dict(flops=lambda M, N, K: M * N * K)),
    ("M forgotten", dict(flops=lambda M, N, K: 2 * N * K)),
    ("intensity inverted", dict(intensity=lambda b, f: b / f)),
    ("min instead of max", dict(floor=lambda b, f, bw, r: (min(b / bw, f / r), floor_time(b, f, bw, r)[1]))),
    ("sum instead of max", dict(floor=lambda b, f, bw, r: (b / bw + f / r, floor_time(b, f, bw, r)[1]))),
    ("bandwidth and FLOP rate swapped", dict(floor=lambda b, f, bw, r: (max(b / r, f / bw), "memory"))),
    ("microseconds instead of seconds", dict(floor=lambda b, f, bw, r: (floor_time(b, f, bw, r)[0] * 1e6, "memory"))),
    ("milliseconds instead of seconds", dict(floor=lambda b, f, bw, r: (floor_time(b, f, bw, r)[0] * 1e3, "memory"))),
    ("bound labels swapped", dict(floor=lambda b, f, bw, r: (floor_time(b, f, bw, r)[0],
                                                             {"memory": "compute", "compute": "memory"}[floor_time(b, f, bw, r)[1]]))),
]  # fmt: skip


@pytest.mark.parametrize("name,fns", FLOOR_MISTAKES, ids=[m[0] for m in FLOOR_MISTAKES])
def test_every_floor_mistake_is_named(name, fns):
    args = (fns.get("flops", linear_flops), fns.get("intensity", intensity), fns.get("floor", floor_time))
    for hidden in (False, True):
        with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
            roofline.check_floor(*args, hidden=hidden, seed=3)


def test_slowdown_mistakes_are_named():
    with pytest.raises(CheckFailed, match="known mistake: ratio inverted"):
        roofline.check_naive(naive_bytes, lambda *a, **k: 1 / naive_slowdown(*a, **k), seed=0)

    def bytes_ratio(fmt, M, N, K, bw, rate, group_size=128):
        return naive_bytes(fmt, M, N, K, group_size) / linear_bytes(fmt, M, N, K, group_size)

    with pytest.raises(CheckFailed, match="known mistake: the compute floor ignored"):
        roofline.check_naive(naive_bytes, bytes_ratio, seed=0)
    with pytest.raises(CheckFailed, match="make exercises 1 and 2 pass first"):
        roofline.check_naive(naive_bytes, lambda *a, **k: 1.0, seed=0)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU the cell measures")
def test_measured_cell_awards_nothing_without_a_gpu():
    with pytest.raises(NotMeasured, match="Performance not measured: no CUDA GPU"):
        roofline.check_naive_measured(naive_bytes, floor_time)


# ---- what the notebook shows


def test_cpu_ceilings_are_the_h200s_and_say_so(env, capsys):
    if env.has_gpu:
        pytest.skip("measures on a GPU")
    ceil = roofline.measure_ceilings(env)
    out = capsys.readouterr().out
    meta = recorded.meta()  # docs/bench-h200.json
    assert "No CUDA GPU here" in out and meta["date"] in out and f"{meta['copy_TBps']:.2f} TB/s" in out
    assert f"{meta['cublas_TFLOPs_8192']:.0f} TFLOP/s" in out
    assert (ceil.copy_bandwidth, ceil.matmul_flops, ceil.measured) == (
        meta["copy_TBps"] * 1e12, meta["cublas_TFLOPs_8192"] * 1e12, False
    )  # fmt: skip
    roofline.naive_gap(env, naive_bytes, floor_time)
    out = capsys.readouterr().out
    naive_us = recorded.figure("w8a16 decode", "naive: dequantize, matmul", 1, 28672, 8192, "us_eager")
    assert f"{naive_us:.0f} µs" in out and "No CUDA GPU here" in out


def test_layer_numbers_widget_and_figure():
    ceil = roofline.Ceilings("test GPU", 4.25e12, 720e12, True)
    n = roofline.layer_numbers("w4a16", 1, ceil)
    assert n["bound"] == "memory" and n["intensity"] < n["ridge"]
    assert roofline.layer_numbers("bf16", 4096, ceil)["bound"] == "compute"
    assert "µs: memory-bound" in widgets.layer_text("mxfp4", 1, ceil)
    box = widgets.roofline_explorer(ceil)
    assert "floor time" in box.children[-1].value
    fig = plots.roofline(ceil, [("w8a16 M=1", 1.0, 4e12)], extra_ceilings=[("fp8", 1300e12)])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("ridge 169" in t for t in texts) and any("fp8 1300" in t for t in texts)


def test_setup_cell_is_w8a16s_with_the_chapter_name():
    from qmatmul import course
    from qmatmul.grader import notebook

    def setup(ch):
        nb = course.repo_root() / "solutions" / ch / f"{ch}.ipynb"
        return next(c.source for c in notebook.read(nb) if c.grade_id == "setup")

    assert setup("roofline") == setup("w8a16").replace('start("W8A16")', 'start("Roofline")')


def test_the_naive_factor_the_hints_quote_comes_from_the_byte_models():
    """The bandwidth hints of W8A16, W4A16 and MXFP4 quote the naive path's bytes over the fused kernel's, computed
    (8.4x and 8.5x on the timed shapes), never typed: an earlier hint said "about nine times"."""
    from qmatmul.teaching import roofline_model

    N, K = mxfp4.BANDWIDTH_SHAPE
    assert roofline_model.naive_factor("mxfp4", 1, N, K) == roofline_model.model_bytes_naive(
        "mxfp4", 1, N, K
    ) / roofline_model.model_bytes("mxfp4", 1, N, K)
    assert 8 < roofline_model.naive_factor("mxfp4", 1, N, K) < 9
    assert 8 < roofline_model.naive_factor("w4a16", 1, *w4a16.BANDWIDTH_SHAPE, w4a16.BANDWIDTH_GROUP) < 9
    assert (
        4.9 < roofline_model.naive_factor("w8a16", 1, *w8a16.BANDWIDTH_SHAPE) < 5.1
    )  # the text's "about five times"
