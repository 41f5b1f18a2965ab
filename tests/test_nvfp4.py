"""NVFP4: the two-level reference against an independent oracle, and every check shown to fail."""

import ml_dtypes
import numpy as np
import pytest
import torch

from qmatmul import checks, fp4, nvfp4
from qmatmul.checks import CheckFailed
from qmatmul.checks import nvfp4 as nvfp4_checks


@pytest.fixture(scope="module")
def nvfp4_solution(env):
    from qmatmul import course

    return course.load_notebook_code("nvfp4")


def numpy_quantize(w: np.ndarray):
    """torchao's rule (nvfp4_quantize with a per-tensor scale) in numpy float32 with ml_dtypes' casts."""
    w = w.astype(np.float32)
    N, K = w.shape
    amax = np.float32(np.abs(w).max())
    g = np.float32(amax / np.float32(448 * 6)) if amax > 0 else np.float32(1)
    b = w.reshape(N, K // 16, 16)
    s = np.clip((np.abs(b).max(axis=2) / np.float32(6)) / g, np.float32(2**-6), np.float32(448)).astype(
        np.float32
    )
    s8 = s.astype(ml_dtypes.float8_e4m3fn)
    r = ((np.float32(1) / g) / s8.astype(np.float32)).astype(np.float32)  # torchao 0.18: times the reciprocal
    v = np.clip(b * r[..., None], -6, 6).astype(np.float32)
    codes = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(N, K)
    return codes, s8.view(np.uint8), g


@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_numpy_oracle(seed):
    g = checks.generator(seed)
    for w in (nvfp4.random_weight(48, 256, g), nvfp4.adversarial_weight(8, 128, g), torch.zeros(4, 32),
              nvfp4.tie_weight(4, 128, 0.37 + seed)):  # fmt: skip
        codes, scales, gs = nvfp4.quantize_codes(w)
        co, so, go = numpy_quantize(w.numpy())
        assert np.array_equal(codes.numpy(), co) and np.array_equal(scales.numpy(), so)
        assert float(gs) == float(go)


def test_e4m3_codec_matches_ml_dtypes():
    bits = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8)
    ours = fp4.e4m3_decode(bits).numpy()
    oracle = bits.numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    finite = np.isfinite(oracle)
    assert np.array_equal(ours[finite], oracle[finite])
    v = torch.tensor([448.0, 2.0**-6, 2.0**-9, 17.267, 1.0625, 1.1875])
    assert torch.equal(
        fp4.e4m3_encode(v).view(torch.float8_e4m3fn).float(), v.to(torch.float8_e4m3fn).float()
    )


def test_the_largest_block_gets_scale_448():
    w = nvfp4.random_weight(4, 64, checks.generator(0))
    w[2, 20] = 5.0
    _, scales, g = nvfp4.quantize_codes(w)
    assert float(fp4.e4m3_decode(scales[2, 1])) == 448.0 and float(g) == pytest.approx(5.0 / 2688)


def test_bytes_model():
    assert nvfp4.bytes_per_weight() == 0.5625
    assert nvfp4.bytes_moved(1, 28672, 8192) == 28672 * 4096 + 28672 * 512 + 4 + 2 * (8192 + 28672)


def test_widget_text_and_figure_run():
    text = nvfp4.block_text(torch.randn(16) * 0.01, 0.5)
    assert "g = max|W|" in text and "e4m3" in text
    fig = nvfp4.compare_figure()
    assert fig.axes


WRONG_QUANTIZERS = {
    "known mistake: tensor scale missing": lambda w: (lambda c, s, g: (fp4.pack_nibbles(c), s, g))(*nvfp4.quantize_codes(w, two_level=False)),
    "known mistake: block scale not rounded before dividing": lambda w: (lambda c, s, g: (fp4.pack_nibbles(c), s, g))(*nvfp4.quantize_codes(w, round_scale=False)),
    "blocks of 32 instead of 16": lambda w: (lambda c, s, g: (fp4.pack_nibbles(c), s, g))(*nvfp4.quantize_codes(w, block=32)),
    "known mistake: nibble order": lambda w: (lambda p, s, g: (fp4.swap_nibbles(p), s, g))(*nvfp4.quantize(w)),
    "known mistake: sign bit lost": lambda w: (lambda c, s, g: (fp4.pack_nibbles(c & 7), s, g))(*nvfp4.quantize_codes(w)),
    "g must be a float32": lambda w: (lambda p, s, g: (p, s, g.double()))(*nvfp4.quantize(w)),
    "must return a triple": lambda w: nvfp4.quantize(w)[:2],
}  # fmt: skip


@pytest.mark.parametrize("name", WRONG_QUANTIZERS)
def test_wrong_quantizer_is_named(name):
    with pytest.raises(CheckFailed, match=name):
        nvfp4.check_quantizer(WRONG_QUANTIZERS[name], seed=3)
    with pytest.raises(CheckFailed, match=name):
        nvfp4.check_quantizer(WRONG_QUANTIZERS[name], hidden=True, seed=4)


def test_float8_scales_are_accepted():
    nvfp4.check_quantizer(
        lambda w: (lambda p, s, g: (p, s.view(torch.float8_e4m3fn), g))(*nvfp4.quantize(w)), seed=1
    )


def test_solution_passes(nvfp4_solution):
    nvfp4.check_quantizer(nvfp4_solution.quantize_nvfp4, hidden=True, seed=0)
    nvfp4.check_prefill(nvfp4_solution.nvfp4_matmul, hidden=True, seed=0)
    nvfp4.check_decode(nvfp4_solution.nvfp4_decode, hidden=True, seed=0)


@pytest.mark.parametrize("name", ["tensor scale missing", "tensor scale applied twice", "e4m3 scale decoded as E8M0",
                                  "nibble order", "blocks of 32 instead of 16"])  # fmt: skip
def test_kernel_mistakes_are_named(name):
    x, packed, scales, g = nvfp4.random_problem(9, 40, 96, torch.float16, "cpu", checks.generator(5))
    mistakes = nvfp4.kernel_mistakes(x, packed, scales, g)
    wrong = next(m for m in mistakes if m.name == name).output.to(torch.float16)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, nvfp4.reference(x, packed, scales, g), what="k", rtol=checks.tolerance_for(torch.float16),
                       mistakes=mistakes)  # fmt: skip


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda x, p, s, g: (x.float(), p, s, g), "x must be float16 or bfloat16"),
        (lambda x, p, s, g: (x, p, s[:, ::2].contiguous(), g), "scales must be uint8 e4m3 bits"),
        (lambda x, p, s, g: (x, p, s, g.double()), "g must be a float32"),
        (lambda x, p, s, g: (x, p[:, :-8].contiguous(), s, g), "the K's differ"),
    ],
)
def test_bad_input_gets_a_clear_message(nvfp4_solution, args, match):
    x, packed, scales, g = nvfp4.random_problem(4, 32, 64, torch.float16, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        nvfp4_solution.nvfp4_matmul(*args(x, packed, scales, g))


def test_bandwidth_cell_awards_nothing_without_gpu(nvfp4_solution, env, capsys):
    nvfp4.predictions(env)
    assert "NVFP4 fused" in capsys.readouterr().out
    if torch.cuda.is_available():
        pytest.skip("measures on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        nvfp4.check_decode_bandwidth(nvfp4_solution.nvfp4_decode)


def test_hidden_prefill_shapes_keep_activations_unlike_the_weight(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(
        nvfp4_checks, "check_kernel", lambda fn, what, shapes, *a, **k: seen.extend(shapes) or 0
    )
    for seed in range(500):
        nvfp4.check_prefill(None, hidden=True, seed=seed)
    capsys.readouterr()
    assert not [s for s in seen if s[0] in (s[1], s[2])]


def _dividing_quantizer(w):
    """torchao <= 0.17's numerics: w / (g · s) instead of w · ((1 / g) / s)."""
    c, s, g = nvfp4.quantize_codes(w, reciprocal=False)
    return fp4.pack_nibbles(c), s, g


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_visible_check_names_division_by_g_times_s(seed):
    with pytest.raises(CheckFailed, match="known mistake: divided by g · s"):
        nvfp4.check_quantizer(_dividing_quantizer, seed=seed)


def test_tie_weight_is_mostly_ties():
    w = nvfp4.tie_weight()
    new, old = nvfp4.quantize_codes(w)[0], nvfp4.quantize_codes(w, reciprocal=False)[0]
    assert 0.1 < float((new != old).float().mean()) < 0.5


def test_prefill_dequantize_first_path(nvfp4_solution):
    """The path the wrapper takes on a GPU at M >= DEQUANTIZE_FIRST_M: decode W once, then the plain Triton GEMM
    with the tensor scale in its epilogue. Run here directly (K = 176: BLOCK_K 16), against the reference."""
    x, packed, scales, g = nvfp4.random_problem(37, 72, 176, torch.float16, "cpu", checks.generator(7))
    w = nvfp4_solution.nvfp4_dequantize(packed, scales, x.dtype)
    out = nvfp4.decoded_gemm(x, w, torch.empty(37, 72, dtype=x.dtype), g)
    checks.compare(out, nvfp4.reference(x, packed, scales, g), what="y", rtol=checks.tolerance_for(x.dtype))
