"""FP8: the reference against independent oracles, the platform facts it relies on, every check shown to fail."""

import math
import re

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import HAS_GPU

from qmatmul import checks, fp8
from qmatmul.checks import CheckFailed

E4M3 = torch.float8_e4m3fn


# ---------------------------------------------------------------------------------------------------------
# Platform facts (seen here, not promised)


def test_fact_torch_cpu_cast_saturates_here_but_the_checks_do_not_rely_on_it():
    """torch 2.13's CPU cast clamps to ±448 (inf too); torch 2.11 on the GPU and ml_dtypes give NaN."""
    v = torch.tensor([500.0, 1e6, float("inf")])
    plain = v.to(E4M3).float()
    assert torch.isnan(plain).all() or torch.equal(plain, torch.tensor([448.0] * 3))
    assert np.isnan(
        np.array([500.0, 1e6], np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    ).all()
    with fp8.NonSaturatingCasts():
        emulated = v.to(E4M3)
    assert torch.isnan(emulated.float()).all()
    assert emulated.view(torch.uint8).tolist() == [0x7F, 0x7F, 0x7F]


def test_non_saturating_mode_keeps_in_range_values_and_covers_copy():
    v = torch.tensor([448.0, 463.0, -464.0, 465.0, -1e4, float("nan"), 0.1])
    with fp8.NonSaturatingCasts():
        a = v.to(E4M3)
        b = torch.empty(7, dtype=E4M3).copy_(v)
    for t in (a, b):
        assert t.view(torch.uint8).tolist()[:3] == [0x7E, 0x7E, 0xFE]
        assert torch.isnan(t.float()[3:6]).all() and t.view(torch.uint8)[4] == 0xFF
        assert t.view(torch.uint8)[6] == v[6:7].to(E4M3).view(torch.uint8)[0]


@pytest.mark.skipif(HAS_GPU, reason="interpreter facts")
def test_fact_interpreter_runs_fp8_dot_and_bitcasts(env):
    """Triton 3.9's interpreter runs a float8e4nv tl.dot exactly (3.6's has no fp8 dot), and a uint8 dot is refused."""
    import triton
    import triton.language as tl

    @triton.jit
    def k(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
        o = tl.arange(0, B)
        a = tl.load(a_ptr + o[:, None] * B + o[None, :]).to(tl.float8e4nv, bitcast=True)
        b = tl.load(b_ptr + o[:, None] * B + o[None, :]).to(tl.float8e4nv, bitcast=True)
        tl.store(c_ptr + o[:, None] * B + o[None, :], tl.dot(a, b))

    g = checks.generator(0)
    a = (torch.randn(16, 16, generator=g) * 10).to(E4M3)
    b = (torch.randn(16, 16, generator=g) * 10).to(E4M3)
    c = torch.empty(16, 16)
    k[(1,)](a.view(torch.uint8), b.view(torch.uint8), c, B=16)
    assert torch.equal(c, a.float() @ b.float())


# ---------------------------------------------------------------------------------------------------------
# The reference against independent oracles


E4M3_VALUES = np.array([fp8.decode_bits(c) for c in range(256)])


def test_decode_bits_matches_torch_and_ml_dtypes():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for fmt, dtype, mld in (
        ("e4m3fn", E4M3, ml_dtypes.float8_e4m3fn),
        ("e5m2", torch.float8_e5m2, ml_dtypes.float8_e5m2),
    ):
        ours = np.array([fp8.decode_bits(c, fmt) for c in range(256)])
        theirs = codes.view(dtype).float().numpy()
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(ours, codes.numpy().view(mld).astype(np.float64))
    assert (
        fp8.decode_bits(0x7E) == 448 and math.isnan(fp8.decode_bits(0x7F)) and fp8.decode_bits(1) == 2.0**-9
    )


def numpy_saturate(v: np.ndarray) -> np.ndarray:
    """An independent saturating cast: the nearest of the 254 finite e4m3 values, ties to the even code."""
    v = np.asarray(v, np.float64)
    finite = np.array([c for c in range(256) if not math.isnan(E4M3_VALUES[c])])
    vals = E4M3_VALUES[finite]
    out = np.empty(v.shape, np.uint8)
    for i, x in enumerate(v.flat):
        if math.isnan(x):
            out.flat[i] = 0x7F
            continue
        x = min(max(x, -448.0), 448.0)
        d = np.abs(vals - x)
        best = finite[d == d.min()]
        if E4M3_VALUES[best[0]] == 0:  # rounds to zero: ±0 carries the sign of x
            best = [0x80 if math.copysign(1, x) < 0 else 0]
        elif len(best) > 1:  # a tie between two neighbours: the even mantissa
            best = [c for c in best if c & 1 == 0]
        out.flat[i] = best[0]
    return out


def test_saturate_matches_numpy_oracle_and_ml_dtypes():
    g = checks.generator(3)
    v = torch.cat([torch.randn(2000, generator=g) * torch.logspace(-5, 3, 2000),
                   torch.tensor([464.0, 465.0, 479.0, 3e38, float("inf"), float("-inf"), 2.0**-10, 3 * 2.0**-11,
                                 1.0625, 1.1875, -0.0])])  # fmt: skip
    ours = fp8.saturate(v).view(torch.uint8).numpy()
    np.testing.assert_array_equal(ours, numpy_saturate(v.numpy()))
    clamped = np.clip(v.numpy(), -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(ours, clamped)


def numpy_quantize(x: np.ndarray, block):
    x = x.astype(np.float32)
    R, C = x.shape
    br, bc = block
    nr, nc = -(-R // br), -(-C // bc)
    s = np.ones((nr, nc), np.float32)
    q = np.empty((R, C), np.float32)
    for i in range(nr):
        for j in range(nc):
            blk = x[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            amax = np.abs(blk).max()
            if amax > 0:
                s[i, j] = amax / np.float32(448)
            q[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = blk / s[i, j]
    return np.clip(q, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8), s


@pytest.mark.parametrize("block", [(None, None), (1, None), (1, 128), (128, 128), (7, 33)])
def test_reference_quantizer_matches_numpy_oracle(block):
    g = checks.generator(5)
    x = fp8.random_matrix(200, 300, g, outliers=True)
    x[3] = 0
    x[:, 130:140] = 0
    nb = fp8.normalize_block(block, x.shape)
    q, s = fp8.quantize(x, nb)
    qn, sn = numpy_quantize(x.numpy(), nb)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), qn)
    np.testing.assert_array_equal(s.numpy(), sn)


def test_bytes_model():
    assert fp8.bytes_moved(1, 28672, 8192) == 28672 * 8192 + 8192 + 4 * 28673 + 2 * 28672
    assert abs(fp8.bytes_per_weight(8192, (128, 128)) - (1 + 4 / 16384)) < 1e-12


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: wrong casts and quantizers are caught and named


def _good_quantizer(x, block, cast=fp8.saturate, divide=True):
    x = x.float()
    amax = fp8.block_amax(x, block)
    s = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
    se = fp8.expand_scales(s, tuple(x.shape), block)
    return cast(x / se if divide else x * se), s


WRONG_CASTS = {
    "missing saturation": lambda v: v.float().to(E4M3),
    "clamped to ±240": lambda v: v.float().clamp(-240, 240).to(E4M3),
    "missing saturation.": lambda v: (
        v.float().clamp(-57344, 57344).to(E4M3)
    ),  # e5m2's max: NaN beyond 464 too
    "must return a float8_e4m3fn": lambda v: v.float().clamp(-448, 448),
}


@pytest.mark.parametrize("name", WRONG_CASTS)
def test_wrong_cast_is_named(name):
    with pytest.raises(CheckFailed, match=name.replace("±", "±")):
        fp8.check_saturate(WRONG_CASTS[name], hidden=True, seed=2)


WRONG_QUANTIZERS = {
    "scale multiplied where it should divide": lambda x, b: _good_quantizer(x, b, divide=False),
    "missing saturation": lambda x, b: ((x.float() / fp8.expand_scales(torch.where(fp8.block_amax(x, b) > 0, fp8.block_amax(x, b) / 480, 1.0), tuple(x.shape), b)).to(E4M3), torch.where(fp8.block_amax(x, b) > 0, fp8.block_amax(x, b) / 480, 1.0)),
    "multiplied by the reciprocal": lambda x, b: (fp8.saturate(x.float() * fp8.expand_scales(torch.where(fp8.block_amax(x, b) > 0, 448 / fp8.block_amax(x, b), 1.0), tuple(x.shape), b)), _good_quantizer(x, b)[1]),
    "max instead of max |x|": lambda x, b: fp8.quantize(x.float().clamp_min(0), b)[0:1] + (torch.where(fp8.block_amax(x.float().clamp_min(0), b) > 0, fp8.block_amax(x.float().clamp_min(0), b) / 448, 1.0),),
    "240 instead of 448": lambda x, b: (fp8.saturate(x.float() / fp8.expand_scales(torch.where(fp8.block_amax(x, b) > 0, fp8.block_amax(x, b) / 240, 1.0), tuple(x.shape), b)), torch.where(fp8.block_amax(x, b) > 0, fp8.block_amax(x, b) / 240, 1.0)),
    "use a ceiling division": lambda x, b: (fp8.quantize(x, b)[0], fp8.quantize(x, b)[1][: x.shape[0] // b[0], : x.shape[1] // b[1]]),
    "scale grid is transposed": lambda x, b: (fp8.quantize(x, b)[0], fp8.quantize(x, b)[1].T.contiguous()),
    "must be float32": lambda x, b: (fp8.quantize(x, b)[0], fp8.quantize(x, b)[1].double()),
    "compute the scale in float32": lambda x, b: (fp8.quantize(x, b)[0], torch.where(fp8.block_amax(x, b) > 0, (fp8.block_amax(x, b).half() / 448).float(), 1.0)),
    "all-zero block got scale": lambda x, b: (fp8.quantize(x, b)[0], fp8.block_amax(x, b) / 448),
}  # fmt: skip


@pytest.mark.parametrize("name", WRONG_QUANTIZERS)
def test_wrong_quantizer_is_named(name):
    with pytest.raises(CheckFailed, match=name.replace("|", r"\|")):
        fp8.check_quantizer(WRONG_QUANTIZERS[name], hidden=True, seed=4)


def test_reference_passes_its_own_checks():
    for seed in range(3):
        fp8.check_quantizers(fp8.saturate, fp8.quantize, hidden=True, seed=seed)
        fp8.check_quantizers(fp8.saturate, fp8.quantize, seed=seed)


def test_quantizer_that_modifies_x_is_caught():
    def in_place(x, b):
        q, s = fp8.quantize(x, b)
        x.zero_()
        return q, s

    with pytest.raises(CheckFailed, match="modified its input x"):
        fp8.check_quantizer(in_place, seed=1)


# ---------------------------------------------------------------------------------------------------------
# Exercise 2: the decoder


def test_decoder_mistakes_are_named(monkeypatch):
    # torch's own e4m3 cast in place of a kernel is named (the decoder's call is audited)...
    with pytest.raises(CheckFailed, match="let PyTorch decode float8_e4m3fn values"):
        fp8.check_decoder(lambda c: c.view(E4M3).to(torch.float16))
    # ... and the stand-ins below are torch emulations of learners' decoders: the rule is set aside for them
    monkeypatch.setattr(checks, "_raise_format_casts", lambda what, ops: None)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    right = codes.view(E4M3).to(torch.float16)

    def bias_uncorrected(c):
        return (
            (c.view(E4M3).to(torch.float16) / 256)
            .nan_to_num(480 / 256)[: len(c)]
            .where(~torch.isnan(c.view(E4M3).float()), torch.tensor(float("nan"), dtype=torch.float16))
        )

    def nan_as_480(c):
        return (
            c.view(E4M3).to(torch.float16).nan_to_num(480.0)
            * torch.where(c >= 128, -1, 1).to(torch.float16).abs()
        )

    def positive_zero(c):
        return c.view(E4M3).to(torch.float16).where(c != 0x80, torch.tensor(0.0, dtype=torch.float16))

    fp8.check_decoder(lambda c: c.view(E4M3).to(torch.float16), hidden=True, seed=1)
    with pytest.raises(CheckFailed, match="exponent bias not corrected"):
        fp8.check_decoder(bias_uncorrected)
    with pytest.raises(CheckFailed, match="NaN not handled"):
        fp8.check_decoder(lambda c: torch.where((c & 0x7F) == 0x7F, torch.tensor(480.0, dtype=torch.float16) * torch.where(c > 127, -1.0, 1.0).half(), c.view(E4M3).to(torch.float16)))  # fmt: skip
    with pytest.raises(CheckFailed, match="-0.0"):
        fp8.check_decoder(positive_zero)
    with pytest.raises(CheckFailed, match="float16 values"):
        fp8.check_decoder(lambda c: right.float())
    del nan_as_480


# ---------------------------------------------------------------------------------------------------------
# Exercises 3 and 4: the kernels


@pytest.fixture(scope="module")
def fp8_solution(env):
    from qmatmul import course

    return course.load_notebook_code("fp8")


def test_solution_passes_every_check(fp8_solution):
    fp8.check_quantizers(fp8_solution.saturate_e4m3, fp8_solution.quantize_fp8, hidden=True, seed=0)
    fp8.check_decoder(fp8_solution.decode_e4m3, hidden=True, seed=0)
    for seed in range(2):
        fp8.check_matmul(fp8_solution.fp8_matmul, hidden=True, seed=seed)
        fp8.check_decode(fp8_solution.fp8_decode, hidden=True, seed=seed)
    fp8.check_matmul(fp8_solution.fp8_matmul)
    fp8.check_decode(fp8_solution.fp8_decode)


def test_both_paths_agree_with_the_reference(fp8_solution):
    xq, sx, wq, sw = fp8.random_problem(40, 72, 200, "cpu", checks.generator(2))
    ref = fp8.reference(xq, sx, wq, sw)
    for path in (False, True):
        with fp8.use_path(path):
            y = fp8_solution.fp8_matmul(xq, sx, wq, sw).float()
        assert not checks.mismatch(y, ref, 2.0**-9).any()


@pytest.mark.parametrize(
    "name",
    ["scales divided where they should multiply", "scales missing", "activation scale missing",
     "weight scale missing", "exponent bias not corrected", "row scale on the wrong axis"],
)  # fmt: skip
def test_kernel_mistakes_are_named(name):
    xq, sx, wq, sw = fp8.random_problem(24, 24, 70, "cpu", checks.generator(5))
    mistakes = fp8.kernel_mistakes(xq, sx, wq, sw)
    wrong = next(m for m in mistakes if m.name == name).output.to(torch.bfloat16)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, fp8.reference(xq, sx, wq, sw), what="k", rtol=checks.tolerance_for(torch.bfloat16),
                       mistakes=mistakes)  # fmt: skip


FP8_SPLIT_MISTAKES = {  # name: (the decode solution's line, the mistake's)
    "the parts of K not added": (
        "fp8.finish(acc * sx[:, None] * sw[None, :], y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)",
        "tl.store(y, (acc * sx[:, None] * sw[None, :]).to(y_ptr.dtype.element_ty), mask=y_mask)",
    ),
    "every program sums all of K": ("range(lo, hi, BLOCK_K)", "range(0, K, BLOCK_K)"),
}


@pytest.mark.parametrize("name", FP8_SPLIT_MISTAKES)
@pytest.mark.parametrize("hidden", [False, True])
def test_split_mistakes_are_named_on_every_run(env, name, hidden):
    """Exercise 4's split mistakes, visible and hidden, whatever the seed (W8A16's exercise 3 has the same)."""
    from autograder import grade_direct
    from qmatmul import course

    src = {c.grade_id: c.source for c in grade_direct.solution_cells("fp8") if c.grade_id}["ex4_decode"]
    old, new = FP8_SPLIT_MISTAKES[name]
    assert old in src
    wrong = course.load_notebook_code(
        "fp8", {"ex4_decode": src.replace(old, new)}, name=f"fp8_{name[:9]}".replace(" ", "_")
    )
    for seed in range(2):
        with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
            fp8.check_decode(wrong.fp8_decode, hidden=hidden, seed=seed)


def test_decode_splits_k_and_the_checks_force_it(fp8_solution, capsys):
    assert fp8.decode_split(1, 64, 1000, "cpu") == 2 and "SPLIT_K" not in fp8.decode_config(
        1, 64, 1000, "cpu"
    )
    with fp8.use_split(3):
        assert fp8.decode_split(1, 64, 1000, "cpu") == 3
    fp8.check_decode(fp8_solution.fp8_decode, seed=0)
    assert "in 3 and in 1" in capsys.readouterr().out


def test_overflowing_mistake_is_named():
    xq, sx, wq, sw = fp8.random_problem(24, 24, 70, "cpu", checks.generator(5))
    mistakes = fp8.kernel_mistakes(xq, sx, wq, sw)
    y = (mistakes[0].output).to(torch.float16)
    assert torch.isinf(y).any()
    report = fp8.name_overflowing("k: 576 differ\nLargest error", y, mistakes, torch.float16)
    assert "known mistake: scales divided where they should multiply" in report.splitlines()[1]


def test_dropped_k_tail_is_named():
    xq, sx, wq, sw = fp8.random_problem(9, 40, 70, "cpu", checks.generator(5))
    mistakes = fp8.kernel_mistakes(xq, sx, wq, sw)
    wrong = next(m for m in mistakes if "BLOCK_K = 64" in m.name).output.half()
    with pytest.raises(CheckFailed, match="last partial K block dropped"):
        checks.compare(wrong, fp8.reference(xq, sx, wq, sw), what="k", rtol=2**-9, mistakes=mistakes)


def _reduced_precision_sum(products: torch.Tensor, bits: int = 14, step: int = 32) -> float:
    """A running sum kept to `bits` significant bits, `step` products at a time (a model of Hopper's fp8 MMA)."""
    acc = 0.0
    for part in products.double().split(step):
        acc += float(part.sum())
        if acc:
            e = math.floor(math.log2(abs(acc))) - (bits - 1)
            acc = round(acc / 2.0**e) * 2.0**e
    return acc


def test_the_visible_check_catches_reduced_precision_accumulation_every_run():
    """The deterministic accumulation case: a running sum of 24 bits (fp32) is exact; one of 21 bits or fewer
    (Hopper's fp8 MMA keeps about 14) loses the small terms, and the visible check names it, on every run (the
    timed recheck's random inputs show it on some seeds only)."""
    xq, sx, wq, sw = fp8.accumulation_problem(32, 64, 1024, "cpu")
    products = xq[0].float() * wq[0].float()
    exact = (1024 - 512) / 2048
    assert fp8.reference(xq, sx, wq, sw)[0, 0] == products.sum() == exact
    assert _reduced_precision_sum(products, 24) == exact
    for bits in (14, 21):
        lossy = _reduced_precision_sum(products, bits)
        assert abs(lossy - exact) > exact / 2

        def lossy_kernel(xq, sx, wq, sw, out=None, lossy=lossy):
            return out.fill_(lossy)

        with pytest.raises(
            CheckFailed,
            match="This matches a known mistake: fp8 partial sums accumulated in reduced precision",
        ):
            fp8.check_accumulation(lossy_kernel, "fp8_matmul", "cpu")


def test_a_timed_batch_with_a_few_wrong_outputs_on_hopper_points_at_the_accumulation():
    few = "fp8_matmul (timed, graph): 35 of 33554432 elements (0.000104 %) differ from the reference (call 0)"
    many = (
        "fp8_matmul (timed, graph): 33554432 of 33554432 elements (100 %) differ from the reference (call 0)"
    )
    hint = fp8.accumulation_hint(few, imprecise=True).splitlines()[1]
    assert "a known mistake: fp8 partial sums accumulated in reduced precision" in hint
    assert "max_num_imprecise_acc=BLOCK_K" in hint
    assert (
        fp8.accumulation_hint(few, imprecise=False) == few
    )  # triton sets its imprecise fp8 default for sm_90 alone
    assert fp8.accumulation_hint(many, imprecise=True) == many
    assert (
        fp8.accumulation_hint("fp8_matmul raised TypeError", imprecise=True) == "fp8_matmul raised TypeError"
    )
    assert not fp8.imprecise_fp8_accumulation("cpu")


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda xq, sx, wq, sw: (xq.float(), sx, wq, sw), "xq must be a 2-D float8_e4m3fn"),
        (lambda xq, sx, wq, sw: (xq, sx, wq.view(torch.uint8), sw), "wq must be a 2-D float8_e4m3fn"),
        (lambda xq, sx, wq, sw: (xq, sx, wq[:, :-1].contiguous(), sw), "the K's differ"),
        (lambda xq, sx, wq, sw: (xq, sx.half(), wq, sw), "sx must be float32"),
        (lambda xq, sx, wq, sw: (xq, sx, wq, sw[:-1]), "sw must be float32"),
        (lambda xq, sx, wq, sw: (xq, sx, wq.t(), sw), "K's differ"),
    ],
)
def test_bad_input_gets_a_clear_message(fp8_solution, args, match):
    xq, sx, wq, sw = fp8.random_problem(4, 32, 48, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        fp8_solution.fp8_matmul(*args(xq, sx, wq, sw))


def test_scales_of_shape_m_by_1_are_accepted(fp8_solution):
    xq, sx, wq, sw = fp8.random_problem(4, 32, 48, "cpu", checks.generator(0))
    y = fp8_solution.fp8_decode(xq, sx[:, None], wq, sw[:, None])
    assert not checks.mismatch(y, fp8.reference(xq, sx, wq, sw), 2.0**-9).any()


def test_decode_refuses_large_m(fp8_solution):
    xq, sx, wq, sw = fp8.random_problem(17, 32, 48, "cpu", checks.generator(0))
    with pytest.raises(ValueError, match="at most 16 rows"):
        fp8_solution.fp8_decode(xq, sx, wq, sw)


def test_performance_cells_award_nothing_without_gpu(fp8_solution):
    if HAS_GPU:
        pytest.skip("measures on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        fp8.check_decode_bandwidth(fp8_solution.fp8_decode)
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        fp8.check_prefill_speed(fp8_solution.fp8_matmul)


def test_format_table_widget_figure_and_comparison_run_on_cpu(env, fp8_solution, capsys):
    fp8.show_bits()
    fp8.explain_format()
    fp8.predictions(env)
    assert fp8.describe_bits(500.0)["value"] == 448.0
    assert math.isnan(fp8.describe_bits(500.0, saturating=False)["value"]) or torch.__version__ >= "2.12"
    assert fp8.describe_bits(2.0**-9)["kind"] == "subnormal"
    fp8.bits_explorer()
    fig = fp8.granularity_figure(fp8.quantize)
    errs = [float(p.get_height()) for p in fig.axes[0].patches]
    assert errs[0] > errs[1] > errs[2]  # per tensor worst, 1x128 blocks best on outlier channels
    fig2 = fp8.compare_paths(env, fp8_solution.fp8_matmul, fp8_solution.fp8_decode)
    out = capsys.readouterr().out
    assert "448" in out and "floor" in out and fig2.axes


# ---------------------------------------------------------------------------------------------------------
# Exercise 5: the block-scaled GEMM


def test_block_reference_equals_the_per_block_sum():
    xq, sx, wq, sw = fp8.random_block_problem(20, 300, 333, "cpu", checks.generator(4))
    ref = fp8.block_reference(xq, sx, wq, sw).double()
    y = torch.zeros(20, 300, dtype=torch.float64)
    for kb in range(sx.shape[1]):
        k = slice(128 * kb, 128 * (kb + 1))
        part = xq[:, k].double() @ wq[:, k].double().T
        y += part * sx[:, kb, None].double() * sw[torch.arange(300) // 128, kb][None, :].double()
    assert torch.allclose(y, ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item())
    assert sx.shape == (20, 3) and sw.shape == (3, 3)


def test_solution_block_kernel_passes(fp8_solution):
    fp8.check_block_matmul(fp8_solution.fp8_block_matmul, seed=0)
    fp8.check_block_matmul(fp8_solution.fp8_block_matmul, hidden=True, seed=1)


@pytest.mark.parametrize(
    "index,name",
    [(0, "block-scale index off by a block"), (1, "block-scale index off by a block"),
     (2, "scales of the last K block applied in the epilogue"), (3, "scales missing"),
     (4, "exponent bias not corrected"), (5, "weight block scale missing"), (6, "activation block scale missing")],
)  # fmt: skip
def test_block_mistakes_are_named(index, name):
    xq, sx, wq, sw = fp8.random_block_problem(24, 200, 300, "cpu", checks.generator(6))
    mistakes = fp8.block_mistakes(xq, sx, wq, sw)
    wrong = mistakes[index].output.to(torch.bfloat16)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, fp8.block_reference(xq, sx, wq, sw), what="k",
                       rtol=checks.tolerance_for(torch.bfloat16), mistakes=mistakes)  # fmt: skip


@pytest.mark.parametrize(
    "args,match",
    [
        (
            lambda xq, sx, wq, sw: (xq, sx[:, :-1].contiguous(), wq, sw),
            r"sx must be float32 of shape \[4, 2\]",
        ),
        (lambda xq, sx, wq, sw: (xq, sx, wq, sw[:1].contiguous()), r"sw must be float32 of shape \[2, 2\]"),
        (lambda xq, sx, wq, sw: (xq, sx.half(), wq, sw), "sx must be float32"),
    ],
)
def test_block_bad_input_gets_a_clear_message(fp8_solution, args, match):
    xq, sx, wq, sw = fp8.random_block_problem(4, 160, 200, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        fp8_solution.fp8_block_matmul(*args(xq, sx, wq, sw))


def test_missing_decoder_is_pointed_at(fp8_solution):
    """A kernel right on the native path whose portable path hits the unfinished decoder: the message says so."""
    from qmatmul import course

    stub = "@triton.jit\ndef e4m3_to_fp16(b):\n    raise NotImplementedError()\n"
    src = course.solution_source("ex2_decoder")
    src = src[src.index("@triton.jit\ndef decode_e4m3_kernel") :]
    module = course.load_notebook_code("fp8", {"ex2_decoder": stub + "\n\n" + src}, name="no_decoder")
    with pytest.raises(CheckFailed, match="portable path calls e4m3_to_fp16"):
        fp8.check_matmul(module.fp8_matmul, seed=0)


# "max instead of max |x|" above zeroes the negative values too, which the visible per-tensor case reports without
# a name; the pitfalls the text names are all named on the visible inputs, every run.
VISIBLE_PITFALLS = ["scale multiplied where it should divide", "missing saturation", "multiplied by the reciprocal",
                    "240 instead of 448", "use a ceiling division", "all-zero block got scale"]  # fmt: skip


@pytest.mark.parametrize("name", VISIBLE_PITFALLS)
def test_visible_check_names_the_pitfalls_of_the_text(name):
    for seed in (0, 1):
        with pytest.raises(CheckFailed, match=name.replace("|", r"\|")):
            fp8.check_quantizer(WRONG_QUANTIZERS[name], seed=seed)


# ---------------------------------------------------------------------------------------------------------
# Issue 43: the pitfalls the text names show on every visible run, and are named


def _quantizer_in_x_dtype(x, block, keep_dtype):
    """The solution's quantizer without `x = x.float()`: max|x| / 448 and x / s in x's own dtype."""
    R, C = x.shape
    br, bc = block
    nr, nc = -(-R // br), -(-C // bc)
    padded = torch.nn.functional.pad(x.abs(), (0, nc * bc - C, 0, nr * br - R))
    amax = padded.view(nr, br, nc, bc).amax(dim=(1, 3))
    s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    s_full = s.repeat_interleave(br, dim=0).repeat_interleave(bc, dim=1)[:R, :C]
    return fp8.saturate(x / s_full), (s if keep_dtype else s.float())


def test_the_visible_16_bit_inputs_show_a_16_bit_scale():
    """Deterministic: on each 16-bit visible input, max|x| / 448 rounded to 16 bits differs from the float32 one in
    most blocks (for a bf16 max m·2^e, the two agree only where the 8-bit m is a multiple of 7)."""
    from qmatmul.checks.fp8_casts import sixteen_bit_pitfalls

    assert {x.dtype for x, _ in sixteen_bit_pitfalls()} == {torch.bfloat16, torch.float16}
    for x, block in sixteen_bit_pitfalls():
        nb = fp8.normalize_block(block, x.shape)
        s = fp8.quantize(x, nb)[1]
        s16 = _quantizer_in_x_dtype(x, nb, False)[1]
        assert (s16 != s).float().mean() > 0.4


@pytest.mark.parametrize("keep_dtype", [False, True], ids=["returned as float32", "returned in x's dtype"])
def test_a_scale_computed_in_16_bits_fails_every_visible_run_and_is_named(keep_dtype):
    def wrong(x, b):
        return _quantizer_in_x_dtype(x, b, keep_dtype)

    wrong(fp8.random_matrix(4, 256, checks.generator(0)), (1, 128))  # float32 x: right there
    for seed in range(4):
        for hidden in (False, True):
            with pytest.raises(CheckFailed, match="compute the scale in float32") as exc:
                fp8.check_quantizer(wrong, hidden=hidden, seed=seed)
            if not keep_dtype:
                assert "known mistake: scale computed in 16 bits" in str(exc.value)


def test_the_16_bit_scale_mutant_of_the_solution_is_the_same_mistake():
    from autograder import mutate

    [m] = [m for m in mutate.mutants("fp8") if m["kind"] == "dtype" and m["cell"] == "ex1_quantizer"]
    assert m["new"] == "x = x"


def _block_variant(fp8_solution, old: str, new: str, name: str):
    from qmatmul import course

    src = course.solution_source("ex5_block_matmul")
    assert old in src
    return course.load_notebook_code("fp8", {"ex5_block_matmul": src.replace(old, new)}, name=name)


_SOLUTION_STEP = """        if FP8_DOT:
            part = tl.dot(x.to(tl.float8e4nv, bitcast=True), w.to(tl.float8e4nv, bitcast=True))
        else:
            part = tl.dot(e4m3_to_fp16(x), e4m3_to_fp16(w))
        sx = tl.load(sx_ptr + offs_m * stride_sxm + kb * stride_sxk, mask=offs_m < M, other=0.0)
        sw = tl.load(sw_ptr + (offs_n // SCALE) * stride_swn + kb * stride_swk, mask=offs_n < N, other=0.0)
        acc += part * sx[:, None] * sw[None, :]
"""
_LOADS = """        sx = tl.load(sx_ptr + offs_m * stride_sxm + kb * stride_sxk, mask=offs_m < M, other=0.0)
        sw = tl.load(sw_ptr + (offs_n // SCALE) * stride_swn + kb * stride_swk, mask=offs_n < N, other=0.0)
"""
FOLDED_STEPS = {  # a learner's scales multiplied into the 16-bit tiles before the dot, on both paths
    "sw folded into the weights": _LOADS
    + "        part = tl.dot(e4m3_to_fp16(x), (e4m3_to_fp16(w) * sw[None, :]).to(tl.float16))\n"
    "        acc += part * sx[:, None]\n",
    "sx folded into the activations": _LOADS
    + "        part = tl.dot((e4m3_to_fp16(x) * sx[:, None]).to(tl.float16), e4m3_to_fp16(w))\n"
    "        acc += part * sw[None, :]\n",
}


@pytest.mark.parametrize("name", FOLDED_STEPS)
def test_block_scales_folded_into_a_tile_fail_every_visible_run_and_are_named(fp8_solution, name):
    """Exercise 5's rounding probes: the random problems alone passed such a kernel on 4 runs of 13."""
    module = _block_variant(fp8_solution, _SOLUTION_STEP, FOLDED_STEPS[name], name="folded")
    for seed in range(3):
        with pytest.raises(
            CheckFailed, match=f"known mistake: {name}. .*start each K block's product from zero"
        ):
            fp8.check_block_matmul(module.fp8_block_matmul, seed=seed)


def test_the_block_rounding_probes_are_exact_for_the_right_kernel_and_far_off_folded():
    from qmatmul.checks import fp8_block

    for ones, args in fp8.block_rounding_problems(16, 64, 256, "cpu"):
        ref = fp8.block_reference(*args)
        assert torch.allclose(ref, torch.full_like(ref, checks.common.PROBE_SCALE), rtol=1e-6)
        folded = {
            m.name: m.output for m in fp8.block_mistakes(*args, dtype=torch.float16) if "folded" in m.name
        }
        name = "sw folded into the weights" if ones == "x" else "sx folded into the activations"
        err = float(((folded[name] - ref) / ref).abs().max())
        assert err > 20 * checks.tolerance_for(torch.float16), (name, err)
    assert fp8_block.INDEX_SHAPE[1] > fp8.SCALE_BLOCK  # two weight blocks: a wrong row index shows


INDEX_NAMES = {
    "kb = k0 // SCALE + 1": "K-block index off by one (k0 // SCALE + 1)",
    "(offs_n // BLOCK_N)": "weight-scale row taken from the tile (offs_n // BLOCK_N)",
}


@pytest.mark.parametrize("new", INDEX_NAMES)
def test_a_wrong_block_index_is_named_as_such_on_every_visible_run(new):
    """The mutants of autograder/mutate.py: each reads past the end of the scales in the interpreter, which the memory
    audit had answered with "mask every load and store"; the diagnosis names the index instead."""
    from autograder import mutate
    from qmatmul import course

    [m] = [m for m in mutate.mutants("fp8") if m["kind"] == "index" and new in m["new"]]
    module = course.load_notebook_code("fp8", {m["cell"]: m["source"]}, name="index")
    for seed in range(3):
        with pytest.raises(CheckFailed, match=re.escape(f"known mistake: {INDEX_NAMES[new]}")) as exc:
            fp8.check_block_matmul(module.fp8_block_matmul, seed=seed)
        assert "Mask every load" not in str(exc.value)
    with pytest.raises(CheckFailed, match="K-block index|weight-scale row"):
        fp8.check_block_matmul(module.fp8_block_matmul, hidden=True, seed=5)


def test_every_index_mistake_is_told_apart_on_the_diagnosis_problem():
    """Where each wrong index's reads stay inside sx and sw, its output differs from the right one's and from every
    other wrong index's, so the diagnosis names one mistake (or none)."""
    from qmatmul.checks import fp8_block

    xq, sx, wq, sw = fp8_block.index_problem("cpu")
    ref = fp8.block_reference(xq, sx, wq, sw)
    outs = fp8_block.index_outputs(xq, sx, wq, sw, {16, 32, 64, 256})
    assert {name for name, *_ in outs} == {name for name, *_ in fp8_block.INDEX_MISTAKES}
    rtol = checks.tolerance_for(torch.float16)
    for i, (name, _, y, known) in enumerate(outs):
        assert known.float().mean() > 0.01, name
        assert checks.mismatch(y[known], ref[known], rtol).any(), name
        for other, _, z, known2 in outs[i + 1 :]:
            both = known & known2
            assert other == name or not both.any() or checks.mismatch(y[both], z[both], rtol).any(), (
                name,
                other,
            )


def test_the_forced_fp8_path_is_not_called_native_off_a_gpu():
    """On a CPU the checks force FP8_DOT=True in the interpreter whatever setup said about fp8 tensor cores: the
    failure names that path as emulated, not as the machine's native fp8 tl.dot."""
    from qmatmul.checks.fp8 import path_name

    assert "emulated by the interpreter" in path_name(True, "cpu") and "native" not in path_name(True, "cpu")
    assert path_name(True, "cuda") == "native fp8 tl.dot"
    assert path_name(False, "cpu") == path_name(False, "cuda") == "e4m3 decoded to fp16"
