"""W8A16: the reference against independent oracles, and every check shown to fail on a wrong answer."""

import warnings

import numpy as np
import pytest
import torch

from qmatmul import checks, w8a16
from qmatmul.checks import CheckFailed


def numpy_quantize(w: np.ndarray):
    """An independent implementation: numpy float32, np.rint (round half to even)."""
    w = w.astype(np.float32)
    amax = np.abs(w).max(axis=1)
    s = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    return np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8), s


def adversarial_weights():
    g = checks.generator(7)
    w = w8a16.random_weight(12, 256, g)
    w[0] = 0  # all zeros
    w[1, :6] = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 127.0])  # exact ties: amax 127, so s = 1
    w[1, 6:] = 0
    w[2] = -w[2].abs()  # all negative
    w[3, 0] = 1e4  # one huge outlier
    w[4] = 1e-30  # subnormal-sized row
    return w


@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_numpy_oracle(seed):
    w = w8a16.random_weight(64, 300, checks.generator(seed))
    for case in (w, adversarial_weights()):
        q, s = w8a16.quantize(case)
        qn, sn = numpy_quantize(case.numpy())
        assert torch.equal(q, torch.from_numpy(qn)) and torch.equal(s, torch.from_numpy(sn))


def test_reference_matches_torch_quantize_per_channel():
    if not hasattr(torch, "quantize_per_channel"):
        pytest.skip("torch.quantize_per_channel was removed from this torch")
    for w in (w8a16.random_weight(64, 512, checks.generator(3)), adversarial_weights()):
        q, s = w8a16.quantize(w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qt = torch.quantize_per_channel(
                w, s.double(), torch.zeros(len(s), dtype=torch.long), 0, torch.qint8
            )
        assert torch.equal(qt.int_repr(), q)


def test_ties_round_half_to_even():
    q, s = w8a16.quantize(adversarial_weights())
    assert float(s[1]) == 1.0
    assert q[1, :6].tolist() == [0, 2, 2, 0, -2, 127]
    assert float(s[0]) == 1.0 and not q[0].any()


def test_bytes_model():
    assert w8a16.bytes_moved(1, 28672, 8192) == 28672 * 8192 + 4 * 28672 + 2 * (8192 + 28672)
    assert w8a16.bytes_moved_naive(1, 8, 8) - w8a16.bytes_moved(1, 8, 8) == 4 * 64
    assert abs(w8a16.bytes_per_weight(8192) - 1.00049) < 1e-5


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: every wrong quantizer is caught, with a message that names it


def _q(fn):
    def quantizer(w):
        w = w.float()
        return fn(w)

    return quantizer


WRONG_QUANTIZERS = {
    "127 replaced by 128": _q(lambda w: (torch.round(w / torch.where(w.abs().amax(1) > 0, w.abs().amax(1) / 128, 1.0)[:, None]).clamp(-127, 127).to(torch.int8), torch.where(w.abs().amax(1) > 0, w.abs().amax(1) / 128, 1.0))),
    "truncation instead of rounding": _q(lambda w: ((w / (w.abs().amax(1).clamp_min(1e-30) / 127)[:, None]).to(torch.int8), torch.where(w.abs().amax(1) > 0, w.abs().amax(1) / 127, 1.0))),
    "max instead of max |w|": _q(lambda w: (torch.round(w / torch.where(w.amax(1) > 0, w.amax(1) / 127, 1.0)[:, None]).clamp(-127, 127).to(torch.int8), torch.where(w.amax(1) > 0, w.amax(1) / 127, 1.0))),
    "reduced over the output channels": _q(lambda w: (torch.round(w / (w.abs().amax(0) / 127)[None]).to(torch.int8), w.abs().amax(0) / 127)),
    "squeeze it": _q(lambda w: (w8a16.quantize(w)[0], w8a16.quantize(w)[1][:, None])),
    "must be float32": _q(lambda w: (w8a16.quantize(w)[0], w8a16.quantize(w)[1].half())),
    "all-zero row got scale": _q(lambda w: (torch.round(w / (w.abs().amax(1) / 127)[:, None]).nan_to_num().to(torch.int8), w.abs().amax(1) / 127)),
}  # fmt: skip


@pytest.mark.parametrize("name", WRONG_QUANTIZERS)
def test_wrong_quantizer_is_named(name):
    with pytest.raises(CheckFailed, match=name.replace("|", r"\|")):
        w8a16.check_quantizer(WRONG_QUANTIZERS[name], hidden=True, seed=11)


def test_per_tensor_scale_is_named():
    def per_tensor(w):
        w = w.float()
        s = torch.full((w.shape[0],), float(w.abs().max()) / 127)
        return torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8), s

    with pytest.raises(CheckFailed, match="differs from the reference"):
        w8a16.check_quantizer(per_tensor, hidden=True, seed=11)


def test_in_place_quantizer_is_caught():
    def in_place(w):
        q, s = w8a16.quantize(w)
        w.zero_()
        return q, s

    # The check hands the learner a copy; mutating it is harmless but the input itself must stay intact.
    w8a16.check_quantizer(in_place, seed=1)


def test_reference_quantizer_passes_hidden_checks():
    for seed in range(3):
        w8a16.check_quantizer(w8a16.quantize, hidden=True, seed=seed)


# ---------------------------------------------------------------------------------------------------------
# Exercises 2 and 3: the solution passes, each known mistake is named


def test_solution_kernels_pass(w8a16_solution):
    for seed in range(2):
        w8a16.check_prefill(w8a16_solution.w8a16_matmul, hidden=True, seed=seed)
        w8a16.check_decode(w8a16_solution.w8a16_decode, hidden=True, seed=seed)
    w8a16.check_prefill(w8a16_solution.w8a16_matmul)
    w8a16.check_decode(w8a16_solution.w8a16_decode)


@pytest.mark.parametrize("name", ["scale missing", "scale applied twice", "weights read as unsigned",
                                  "scale on the wrong axis"])  # fmt: skip
def test_kernel_mistakes_are_named(name):
    g = checks.generator(5)
    x, q, s = w8a16.random_problem(9, 40, 70, torch.float16, "cpu", g)
    mistakes = w8a16.kernel_mistakes(x, q, s)
    wrong = next(m for m in mistakes if m.name == name).output.to(torch.float16)
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, w8a16.reference(x, q, s), what="k", rtol=checks.tolerance_for(torch.float16),
                       mistakes=mistakes)  # fmt: skip


def _decode_variant(old: str, new: str, name: str):
    """The decode solution with one line changed (a known mistake of exercise 3)."""
    from autograder import grade_direct
    from qmatmul import course

    src = {c.grade_id: c.source for c in grade_direct.solution_cells("w8a16") if c.grade_id}["ex3_decode"]
    assert old in src
    return course.load_notebook_code("w8a16", {"ex3_decode": src.replace(old, new)}, name=f"w8a16_{name}")


SPLIT_MISTAKES = {  # name: (the solution's line, the mistake's)
    "the parts of K not added": (
        "w8a16.finish(acc * s[None, :], y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)",
        "tl.store(y, (acc * s[None, :]).to(y_ptr.dtype.element_ty), mask=y_mask)",
    ),
    "every program sums all of K": ("range(lo, hi, BLOCK_K)", "range(0, K, BLOCK_K)"),
}


def test_parts_added_into_y_are_explained(env):
    """W4A16's way of adding the parts (tl.atomic_add into y) on the NaN-filled output the check hands over."""
    old = SPLIT_MISTAKES["the parts of K not added"][0]
    new = "tl.atomic_add(y, (acc * s[None, :]).to(y_ptr.dtype.element_ty), mask=y_mask)"
    wrong = _decode_variant(old, new, name="atomic_into_y").w8a16_decode
    with pytest.raises(CheckFailed, match=r"(?s)wrote nothing.*adds into it \(tl.atomic_add\)"):
        w8a16.check_decode(wrong, seed=0)


@pytest.mark.parametrize("name", SPLIT_MISTAKES)
@pytest.mark.parametrize("hidden", [False, True])
def test_split_mistakes_are_named_on_every_run(env, name, hidden):
    """Exercise 3's split mistakes, in the visible and the hidden check, whatever the seed: the case with K forced into
    three slices that each hold part of K fails them on every device (on a GPU the slice that stores last varies)."""
    wrong = _decode_variant(*SPLIT_MISTAKES[name], name=name.replace(" ", "_")).w8a16_decode
    for seed in range(3):
        with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
            w8a16.check_decode(wrong, hidden=hidden, seed=seed)


def test_decode_is_checked_split_and_unsplit(w8a16_solution, capsys):
    w8a16.check_decode(w8a16_solution.w8a16_decode, seed=0)
    out = capsys.readouterr().out
    assert "K split 3 ways (forced)" in out and "K split 1 way (forced)" in out
    assert w8a16.decode_config(1, 64, 1000, "cpu")["SPLIT_K"] == 2  # the interpreter's own launch splits too


def test_a_race_between_slices_is_named_element_by_element():
    """On a GPU each strip's y holds whichever slice stored last: a mistake given as a tuple of outputs matches
    element by element."""
    g = checks.generator(5)
    x, q, s = w8a16.random_problem(3, 40, 700, torch.float16, "cpu", g)
    with w8a16.use_split(3):
        mistakes = w8a16.split_mistakes(x, q, s)
    parts = next(m for m in mistakes if m.name == "the parts of K not added").output
    got = torch.cat([parts[2][:, :20], parts[0][:, 20:]], dim=1).half()  # two strips, two different winners
    with pytest.raises(CheckFailed, match="known mistake: the parts of K not added"):
        checks.compare(got, w8a16.reference(x, q, s), what="k", rtol=2**-9, mistakes=mistakes)


def test_dropped_k_tail_is_named():
    g = checks.generator(5)
    x, q, s = w8a16.random_problem(9, 40, 70, torch.float16, "cpu", g)
    mistakes = w8a16.kernel_mistakes(x, q, s)
    wrong = next(m for m in mistakes if "BLOCK_K = 64" in m.name).output.half()
    with pytest.raises(CheckFailed, match="last partial K block dropped"):
        checks.compare(wrong, w8a16.reference(x, q, s), what="k", rtol=2**-9, mistakes=mistakes)


def test_unwritten_edge_is_located():
    g = checks.generator(5)
    x, q, s = w8a16.random_problem(9, 40, 70, torch.float16, "cpu", g)
    ref = w8a16.reference(x, q, s)
    got = ref.half().clone()
    got[:, 32:] = float("nan")
    with pytest.raises(CheckFailed) as info:
        checks.compare(got, ref, what="k", rtol=2**-9, poisoned=True)
    assert "left 72 of 360 output elements unwritten" in str(info.value)
    assert "columns 32..39 of 0..39" in str(info.value)


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda x, q, s: (x.float(), q, s), "x must be float16 or bfloat16"),
        (lambda x, q, s: (x, q.to(torch.int32), s), "q must be a 2-D int8"),
        (lambda x, q, s: (x, q[:, :-1].contiguous(), s), "the K's differ"),
        (lambda x, q, s: (x, q, s.half()), "s must be float32 of shape"),
        (lambda x, q, s: (x, q, s[:-1]), "s must be float32 of shape"),
        (lambda x, q, s: (x[0], q, s), "x must be 2-D"),
        (lambda x, q, s: (x, q.t(), s), "K's differ"),
    ],
)
def test_bad_input_gets_a_clear_message(w8a16_solution, args, match):
    x, q, s = w8a16.random_problem(4, 32, 48, torch.float16, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        w8a16_solution.w8a16_matmul(*args(x, q, s))


def test_bad_out_gets_a_clear_message(w8a16_solution):
    x, q, s = w8a16.random_problem(4, 32, 48, torch.float16, "cpu", checks.generator(0))
    with pytest.raises(ValueError, match="out must be"):
        w8a16_solution.w8a16_decode(x, q, s, out=torch.empty(4, 31, dtype=torch.float16))


def test_decode_refuses_large_m(w8a16_solution):
    x, q, s = w8a16.random_problem(17, 32, 48, torch.float16, "cpu", checks.generator(0))
    with pytest.raises(ValueError, match="at most 16 rows"):
        w8a16_solution.w8a16_decode(x, q, s)


def test_bandwidth_cell_awards_nothing_without_gpu_but_audits_traffic(w8a16_solution, capsys):
    if torch.cuda.is_available():
        pytest.skip("measures on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        w8a16.check_decode_bandwidth(w8a16_solution.w8a16_decode)
    assert "read each weight byte once" in capsys.readouterr().out


def test_traffic_audit_sees_repeated_weight_reads(w8a16_solution, capsys):
    """The tiled kernel at M=128 with BLOCK_M=32 reads every weight tile once per M tile: 4 times."""
    if torch.cuda.is_available():
        pytest.skip("an interpreter feature")
    from qmatmul.checks import traffic

    x, q, s = w8a16.random_problem(128, 256, 512, torch.float16, "cpu", checks.generator(0))
    out = torch.empty(128, 256, dtype=torch.float16)
    t = traffic.audit(w8a16_solution.w8a16_matmul, dict(x=x, q=q, s=s), out)
    assert t.times_read("q") == 4.0 and t.stored["out"] == out.numel() * 2
    twice = w8a16_solution.w8a16_decode
    w8a16.traffic_feedback(lambda x, q, s, out: (twice(x, q, s, out=out), twice(x, q, s, out=out))[1])
    assert "read each weight byte 2.0 times" in capsys.readouterr().out


def test_predictions_and_comparison_run_on_cpu(env, w8a16_solution, capsys):
    w8a16.predictions(env)
    w8a16.explain_format()
    fig = w8a16.compare_paths(env, w8a16_solution.w8a16_matmul, w8a16_solution.w8a16_decode)
    out = capsys.readouterr().out
    assert "floor" in out and "ridge point" in out and "1.00049 B" in out
    assert fig.axes and ("not measured" in out or torch.cuda.is_available())


def test_a_cached_result_is_caught(w8a16_solution):
    """A 'kernel' that remembers its first answer per shape fails on the next inputs of the same shape."""
    cache = {}

    def cached(x, q, s, out=None):
        key = (tuple(x.shape), tuple(q.shape))
        if key not in cache:
            cache[key] = w8a16_solution.w8a16_decode(x, q, s).clone()
        return out.copy_(cache[key])

    with pytest.raises(CheckFailed, match="differ from the reference"):
        w8a16.check_decode(cached, hidden=True, seed=3)


def test_output_aliasing_an_input_is_caught(w8a16_solution):
    def aliasing(x, q, s, out=None):
        w8a16_solution.w8a16_decode(x, q, s, out=out)
        return x  # not the output

    with pytest.raises(CheckFailed, match="must write into and return the `out`"):
        w8a16.check_decode(aliasing, seed=3)


@pytest.mark.parametrize("name", WRONG_QUANTIZERS)
def test_visible_check_names_every_wrong_quantizer(name):
    """The visible inputs hold what the text warns about (an all-zero row, a negative-dominated row), every run."""
    for seed in (0, 1):
        with pytest.raises(CheckFailed, match=name.replace("|", r"\|")):
            w8a16.check_quantizer(WRONG_QUANTIZERS[name], seed=seed)


def test_prefill_converts_first_only_where_measured(w8a16_solution):
    """The wrapper's decode-first path (its GEMM: tests/test_gemm.py's column-scale tests) starts at 512 rows, above
    every graded shape, and only where decoded_gemm's TMA GEMM runs: never on the CPU, so never in an interpreter
    check."""
    assert w8a16_solution.DEQUANTIZE_FIRST_M == 512
    x = torch.zeros(600, 64, dtype=torch.float16)
    assert not w8a16.decode_first(x, torch.empty(600, 32, dtype=torch.float16))


def test_the_given_decoded_gemm_opens_no_naive_path():
    """as_16bit and decoded_gemm are given to the learner's cell (GIVEN) for the wrapper's M >= 512 path. A wrapper
    that takes that path for every M converts a weight-sized copy first, and the check refuses it by name."""

    def every_m(x, q, s, out=None):
        M, N, K, out = w8a16.prepare(x, q, s, out)
        return w8a16.decoded_gemm(x, w8a16.as_16bit(q, x.dtype), out, sw=s)

    with pytest.raises(CheckFailed, match="naive dequantize-then-matmul"):
        w8a16.check_prefill(every_m, seed=3)
