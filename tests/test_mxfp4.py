"""MXFP4: the codecs and the reference against independent oracles, and every check shown to fail."""

import ml_dtypes
import numpy as np
import pytest
import torch

from qmatmul import checks, fp4, mxfp4
from qmatmul.checks import CheckFailed
from qmatmul.checks import mxfp4 as mxfp4_checks


@pytest.fixture(scope="module")
def mxfp4_solution(env):
    from qmatmul import course

    return course.load_notebook_code("mxfp4")


def ml_dtypes_quantize(w: np.ndarray):
    """An independent implementation: float64 log2 for the exponent, ml_dtypes' own E2M1 and E8M0 casts."""
    N, K = w.shape
    b = w.astype(np.float32).reshape(N, K // 32, 32)
    amax = np.abs(b).max(axis=2).astype(np.float64)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2, -127).clip(-127, 127)
    X = np.exp2(e)
    scales = X.astype(np.float32).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    v = (b.astype(np.float64) / X[..., None]).astype(np.float32)
    codes = np.clip(v, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(N, K)
    return codes, scales


def inputs(seed):
    g = checks.generator(seed)
    return [mxfp4.random_weight(48, 256, g), mxfp4.adversarial_weight(8, 320, g)]


@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_ml_dtypes_oracle(seed):
    for w in inputs(seed):
        codes, scales = mxfp4.quantize_codes(w)
        codes_o, scales_o = ml_dtypes_quantize(w.numpy())
        assert np.array_equal(scales.numpy(), scales_o)
        assert np.array_equal(codes.numpy(), codes_o)


def test_e2m1_codec_matches_ml_dtypes_on_every_tie_and_code():
    grid = np.concatenate(
        [np.arange(-8, 8.001, 0.125), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 1e-40, -1e-40, 7.99]]
    )
    ours = fp4.e2m1_encode(torch.tensor(grid, dtype=torch.float32)).numpy()
    oracle = np.clip(grid, -6, 6).astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert np.array_equal(ours, oracle)
    table = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert np.array_equal(fp4.e2m1_decode(torch.arange(16)).numpy(), table)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    assert fp4.e2m1_encode(ties).tolist() == [0, 2, 2, 4, 4, 6, 6]


def test_e8m0_decode_matches_torch_and_ml_dtypes():
    codes = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8)
    ours = fp4.e8m0_decode(codes)
    via_torch = codes.view(torch.float8_e8m0fnu).float()
    via_np = codes.numpy().view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    assert torch.equal(ours[:255], via_torch[:255]) and np.array_equal(ours[:255].numpy(), via_np[:255])
    assert torch.isnan(ours[255]) and torch.isnan(via_torch[255])
    e = torch.arange(-127, 128)
    assert torch.equal(
        fp4.e8m0_from_exponent(e),
        torch.ldexp(torch.ones(255), e.float()).to(torch.float8_e8m0fnu).view(torch.uint8),
    )


def test_adversarial_blocks():
    w = torch.zeros(2, 64)
    X = 2.0**-5
    w[0, :8] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0]) * X  # amax 5X -> X
    w[0, 32:34] = torch.tensor([4 * X, -0.1 * X])  # amax exactly a power of two (4X), and a -0
    w[1, :2] = torch.tensor([7.5 * X, -6.5 * X])  # clip to ±6
    codes, scales = mxfp4.quantize_codes(w)
    assert scales.tolist() == [[122, 122], [122, 0]]  # -5 + 127; an all-zero block gets code 0 (2^-127)
    assert codes[0, :8].tolist() == [0, 2, 2, 4, 4, 6, 6, 14]
    assert codes[0, 32:34].tolist() == [6, 8]
    assert codes[1, :2].tolist() == [7, 15]
    packed, _ = mxfp4.quantize(w)
    assert packed[0, 0] == 0x20 and packed[0, 16] == 0x86  # element 2i in the low nibble
    assert torch.equal(mxfp4.dequantize(packed, scales)[0, :8], torch.tensor([0, 1, 1, 2, 2, 4, 4, -4]) * X)


def test_subnormal_block_and_floor_log2():
    a = torch.tensor([2.0**-149, 2.0**-127, 1.5 * 2.0**-130, 1.0, 0.999999, 2.0**127, 3.0])
    assert fp4.floor_log2(a).tolist() == [-149, -127, -130, 0, -1, 127, 1]
    w = torch.randn(1, 32) * 1e-41
    codes, scales = mxfp4.quantize_codes(w)
    assert scales.item() == 0  # floor(log2(amax)) - 2 < -127: clamped
    assert torch.equal(codes, torch.from_numpy(ml_dtypes_quantize(w.numpy())[0]))


def test_ceil_rule_differs_from_floor_only_where_expected():
    amax = torch.tensor([4.0, 5.0, 6.0, 6.5, 7.9, 8.0, 0.3])
    floor = mxfp4.shared_exponent(amax, "floor")
    ceil = mxfp4.shared_exponent(amax, "ceil")
    assert floor.tolist() == [0, 0, 0, 0, 0, 1, -4]
    assert ceil.tolist() == [0, 0, 0, 1, 1, 1, -4]


def test_bytes_model():
    assert mxfp4.bytes_per_weight() == 0.53125
    assert mxfp4.bytes_moved(1, 28672, 8192) == 28672 * 8192 // 2 + 28672 * 256 + 2 * (8192 + 28672)


def test_figure_and_widget_text_run():
    text = mxfp4.block_text(torch.linspace(-7, 7, 32) * 2.0**-6)
    assert "E8M0 code" in text and "clipped to ±6" in text
    table = mxfp4.error_table(mxfp4.realistic_weights("heavy-tailed", 64, 256))
    errs = {m: e for m, _, e in table}
    assert errs["MXFP4, spec (floor)"] < errs["MXFP4, ceil(log2(amax/6))"]


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: every wrong quantizer is caught, with a message that names it


def _codes_quantizer(codes_fn, scales_fn=None, pack=fp4.pack_nibbles):
    def quantizer(w):
        codes, scales = mxfp4.quantize_codes(w)
        return pack(codes_fn(w, codes)), (scales_fn(w, scales) if scales_fn else scales)

    return quantizer


WRONG_QUANTIZERS = {
    "known mistake: nibble order": _codes_quantizer(lambda w, c: c, pack=lambda c: (c[:, 0::2] << 4) | c[:, 1::2]),
    "known mistake: E8M0 bias off by one": _codes_quantizer(lambda w, c: c, lambda w, s: s + 1),
    "known mistake: ceil instead of floor": lambda w: (fp4.pack_nibbles(mxfp4.quantize_codes(w, "ceil")[0]), mxfp4.quantize_codes(w, "ceil")[1]),
    "known mistake: missing saturation": _codes_quantizer(lambda w, c: mxfp4_checks.no_saturation_codes(w)),
    "known mistake: sign bit lost": _codes_quantizer(lambda w, c: c & 7),
    "round half to the EVEN code": _codes_quantizer(lambda w, c: torch.where(torch.isin(c & 7, torch.tensor([2, 4, 6], dtype=torch.uint8)) & _is_tie_from_below(w), c - 1, c)),
    "pack two codes per byte": lambda w: (mxfp4.quantize_codes(w)[0], mxfp4.quantize_codes(w)[1]),
    "not the float scales": lambda w: (mxfp4.quantize(w)[0], fp4.e8m0_decode(mxfp4.quantize(w)[1])),
    "modified its input": lambda w: (mxfp4.quantize(w), w.zero_())[0],
}  # fmt: skip


def _is_tie_from_below(w):
    """Elements sitting exactly on a midpoint whose tie goes up (0.75, 1.75, 3.5): a round-half-down quantizer
    would give the lower code."""
    N, K = w.shape
    _, scales = mxfp4.quantize_codes(w)
    v = torch.ldexp(w.float(), -(scales.int() - 127).repeat_interleave(32, 1).float()).abs()
    return (v == 0.75) | (v == 1.75) | (v == 3.5)


@pytest.mark.parametrize("name", WRONG_QUANTIZERS)
def test_wrong_quantizer_is_named(name):
    with pytest.raises(CheckFailed, match=name):
        mxfp4.check_quantizer(WRONG_QUANTIZERS[name], seed=11)
    with pytest.raises(CheckFailed, match=name):
        mxfp4.check_quantizer(WRONG_QUANTIZERS[name], hidden=True, seed=12)


def test_reference_quantizer_passes_hidden_checks():
    for seed in range(3):
        mxfp4.check_quantizer(mxfp4.quantize, hidden=True, seed=seed)


def test_solution_quantizer_matches_reference(mxfp4_solution):
    for seed in range(3):
        mxfp4.check_quantizer(mxfp4_solution.quantize_mxfp4, hidden=True, seed=seed)
    mxfp4.check_quantizer(mxfp4_solution.quantize_mxfp4)


# ---------------------------------------------------------------------------------------------------------
# Exercises 2 to 4: the solution passes, each known mistake is named


def test_solution_kernels_pass(mxfp4_solution):
    mxfp4.check_prefill(mxfp4_solution.mxfp4_matmul, hidden=True, seed=0)
    mxfp4.check_decode(mxfp4_solution.mxfp4_decode, hidden=True, seed=0)
    mxfp4.check_prefill(mxfp4_solution.mxfp4_matmul)
    mxfp4.check_decode(mxfp4_solution.mxfp4_decode)


def test_dot_scaled_bonus_passes_or_says_why(mxfp4_solution):
    ok, why = mxfp4.dot_scaled_status()
    if ok:
        mxfp4.check_dot_scaled(mxfp4_solution.mxfp4_matmul_dot_scaled, seed=0)
    else:
        with pytest.raises(checks.NotMeasured, match="cannot run here"):
            mxfp4.check_dot_scaled(mxfp4_solution.mxfp4_matmul_dot_scaled, seed=0)


@pytest.mark.parametrize(
    "index,name",
    [(0, "nibble order"), (1, "E8M0 bias off by one"), (2, "E8M0 bias off by one"), (3, "block scale missing"),
     (4, "sign bit lost"), (5, "block index off")],
)  # fmt: skip
def test_kernel_mistakes_are_named(index, name):
    x, packed, scales = mxfp4.random_problem(9, 40, 96, torch.float16, "cpu", checks.generator(5))
    mistakes = mxfp4.kernel_mistakes(x, packed, scales)
    wrong = mistakes[index].output.to(torch.float16)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, mxfp4.reference(x, packed, scales), what="k", rtol=checks.tolerance_for(torch.float16),
                       mistakes=mistakes)  # fmt: skip


def test_dropped_k_tail_is_named():
    x, packed, scales = mxfp4.random_problem(9, 40, 96, torch.float16, "cpu", checks.generator(5))
    mistakes = mxfp4.kernel_mistakes(x, packed, scales)
    wrong = next(m for m in mistakes if "BLOCK_K = 64" in m.name).output.half()
    with pytest.raises(CheckFailed, match="last partial K block dropped"):
        checks.compare(wrong, mxfp4.reference(x, packed, scales), what="k", rtol=2**-9, mistakes=mistakes)


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda x, p, s: (x.float(), p, s), "x must be float16 or bfloat16"),
        (lambda x, p, s: (x, p.to(torch.int8), s), "packed must be a 2-D uint8"),
        (lambda x, p, s: (x, p[:, :-1].contiguous(), s), "the K's differ"),
        (lambda x, p, s: (x, p, s.float()), "scales must be uint8 E8M0 codes"),
        (lambda x, p, s: (x, p, s[:, :-1].contiguous()), "scales must be uint8 E8M0 codes"),
        (lambda x, p, s: (x[:, :40], p[:, :20].contiguous(), s), "multiple of 32"),
        (lambda x, p, s: (x[0], p, s), "x must be 2-D"),
    ],
)
def test_bad_input_gets_a_clear_message(mxfp4_solution, args, match):
    x, packed, scales = mxfp4.random_problem(4, 32, 64, torch.float16, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        mxfp4_solution.mxfp4_matmul(*args(x, packed, scales))


def test_decode_refuses_large_m(mxfp4_solution):
    x, packed, scales = mxfp4.random_problem(17, 32, 64, torch.float16, "cpu", checks.generator(0))
    with pytest.raises(ValueError, match="at most 16 rows"):
        mxfp4_solution.mxfp4_decode(x, packed, scales)


def test_bandwidth_cell_awards_nothing_without_gpu(mxfp4_solution):
    if torch.cuda.is_available():
        pytest.skip("measures on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        mxfp4.check_decode_bandwidth(mxfp4_solution.mxfp4_decode)


def test_predictions_and_comparison_run_on_cpu(env, mxfp4_solution, capsys):
    mxfp4.predictions(env)
    mxfp4.explain_format()
    fig = mxfp4.compare_paths(env, mxfp4_solution.mxfp4_matmul, mxfp4_solution.mxfp4_decode)
    out = capsys.readouterr().out
    assert "floor" in out and "0.53125 B" in out
    recorded_us = mxfp4.H200_RECORDED_US["mxfp4_decode"]  # the H200's recorded times on a CPU
    assert fig.axes and (f"{recorded_us:.1f} µs" in out or torch.cuda.is_available())


def test_hidden_prefill_shapes_keep_activations_unlike_the_weight(monkeypatch, capsys):
    """The fused audit flags float tensors shaped like the weight; the interpreter copies x and out inside the
    call, so a hidden shape with M == N or M == K would fail a correct kernel (seen once in the demo class)."""
    seen = []
    monkeypatch.setattr(
        mxfp4_checks, "check_kernel", lambda fn, what, shapes, *a, **k: seen.extend(shapes) or 0
    )
    for seed in range(500):
        mxfp4.check_prefill(None, hidden=True, seed=seed)
    capsys.readouterr()
    assert not [s for s in seen if s[0] in (s[1], s[2])]


def test_hidden_quantizer_inputs_include_a_row_longer_than_31_blocks(mxfp4_solution):
    """A mutant that reshapes with K // 31 survived every row of fewer than 31 blocks (32 j // 31 == j)."""
    import inspect

    src = inspect.getsource(mxfp4_solution.quantize_mxfp4)
    assert "K // 32, 32" in src
    scope = dict(vars(mxfp4_solution))
    exec(src.replace("K // 32, 32", "K // 31, 32"), scope)  # noqa: S102 - the solution's own source
    with pytest.raises(CheckFailed):
        mxfp4.check_quantizer(scope["quantize_mxfp4"], hidden=True, seed=0)


@pytest.mark.parametrize("chapter,fn_name,line", [("mxfp4", "mxfp4_decode", "ks = k0 // 32"),
                                                  ("nvfp4", "nvfp4_decode", "ks = k0 // 16")])  # fmt: skip
def test_hidden_decode_cases_include_a_long_row(env, chapter, fn_name, line):
    """`k0 // 31` for `k0 // 32` (MXFP4) and `// 15` for `// 16` (NVFP4) survived the short CPU shapes."""
    import importlib
    import json

    from qmatmul import course

    nb = json.loads((course.repo_root() / "solutions" / chapter / f"{chapter}.ipynb").read_text())
    src = next(
        "".join(c["source"])
        for c in nb["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex3_decode"
    )
    assert line in src
    wrong = line.replace("32", "31") if "32" in line else line.replace("16", "15")
    module = course.load_notebook_code(
        chapter, {"ex3_decode": src.replace(line, wrong)}, name=f"{chapter}_k31"
    )
    # The kernel has no K masks (BLOCK_K divides K), so the wrong index shows as a read past the scales or as a
    # wrong answer, depending on the shape.
    with pytest.raises(CheckFailed, match="differ from the reference|outside its tensors"):
        importlib.import_module(f"qmatmul.{chapter}").check_decode(
            getattr(module, fn_name), hidden=True, seed=1
        )


def _float_log2_quantizer(w):
    """The pitfall exercise 1 warns about: floor(torch.log2(amax)) in float32."""
    w = w.float()
    N, K = w.shape
    b = w.reshape(N, K // 32, 32)
    amax = b.abs().amax(2)
    E = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2, torch.tensor(-127.0)).clamp(-127, 127)
    v = b / torch.exp2(E)[:, :, None]
    return fp4.pack_nibbles(fp4.e2m1_encode(v).reshape(N, K)), (E + 127).to(torch.uint8)


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_visible_check_names_the_float_log2_pitfall(seed):
    with pytest.raises(CheckFailed, match=r"known mistake: floor\(torch.log2\(amax\)\) rounded up"):
        mxfp4.check_quantizer(_float_log2_quantizer, seed=seed)


def test_float_log2_mistake_names_nothing_where_it_equals_the_reference():
    w = mxfp4.adversarial_weight(8, 256, checks.generator(0))
    assert not [m for m in mxfp4_checks.quantizer_mistakes(w) if m[0].startswith("floor(torch.log2")]
    assert [
        m for m in mxfp4_checks.quantizer_mistakes(mxfp4.log2_weight()) if m[0].startswith("floor(torch.log2")
    ]


def test_prefill_dequantize_first_path(mxfp4_solution):
    """The path the wrapper takes on a GPU at M >= DEQUANTIZE_FIRST_M: decode W once, then the plain Triton GEMM.
    The CPU never takes it, so it is run here directly, on a ragged shape (K = 96: BLOCK_K 32), against the
    reference."""
    x, packed, scales = mxfp4.random_problem(37, 72, 96, torch.float16, "cpu", checks.generator(7))
    w = mxfp4_solution.mxfp4_dequantize(packed, scales, x.dtype)
    assert torch.equal(w, mxfp4.dequantize(packed, scales).half())
    out = mxfp4.decoded_gemm(x, w, torch.empty(37, 72, dtype=x.dtype))
    checks.compare(out, mxfp4.reference(x, packed, scales), what="y", rtol=checks.tolerance_for(x.dtype))


@pytest.mark.parametrize("chapter", ["mxfp4", "nvfp4"])
def test_the_decode_tiles_keep_two_scale_blocks_a_step(chapter):
    """The decode wrappers' BLOCK_K divides K and is never below 64 (NVFP4's decode at BLOCK_K = 16, one scale a
    step, gave wrong results on the H200); a K without such a divisor is padded with zeros that change nothing."""
    import importlib

    from qmatmul.kernels import configs as ch

    mod = importlib.import_module(f"qmatmul.{chapter}")
    g = torch.Generator().manual_seed(0)
    blk = mod.BLOCK
    for K, block_k, want in ((8192, 512, (512, 8192)), (128, 512, (128, 128)), (192, 512, (64, 192)),
                             (5 * blk, 512, (64, 64 * -(-5 * blk // 64))), (8192, 32, (64, 8192))):  # fmt: skip
        N = 40
        x = torch.randn(3, K, generator=g).to(torch.float16)
        weights = mod.timing_weights(N, K, g)
        packed, scales = weights[0], weights[1]
        xp, pp, sp, bk = mod.divisible_k(x, packed, scales, block_k)
        assert (bk, xp.shape[1]) == want and bk >= ch.MIN_DECODE_BLOCK_K and xp.shape[1] % bk == 0
        assert (pp.shape[1], sp.shape[1]) == (xp.shape[1] // 2, xp.shape[1] // blk)
        if xp.shape[1] == K:
            assert xp is x and pp is packed and sp is scales
        else:
            assert torch.equal(xp[:, :K], x) and not xp[:, K:].any() and not pp[:, K // 2 :].any()
            assert torch.equal(pp[:, : K // 2], packed) and torch.equal(sp[:, : K // blk], scales)
            rest = weights[2:]
            torch.testing.assert_close(
                mod.reference(xp, pp, sp, *rest), mod.reference(x, packed, scales, *rest)
            )
