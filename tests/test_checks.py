"""The shared checks: each is shown to fail on a wrong answer, with a message that says why."""

import pytest
import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed


def test_call_learner_names_unfilled_exercises():
    def stub(*a):
        raise NotImplementedError()

    with pytest.raises(CheckFailed, match="is not implemented yet"):
        checks.call_learner(stub, what="f")


def test_call_learner_reports_other_errors_in_one_line():
    def broken(x):
        return x[10]

    with pytest.raises(CheckFailed, match="f raised IndexError"):
        checks.call_learner(broken, torch.zeros(3), what="f")


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a @ b.T,
        lambda a, b: torch.nn.functional.linear(a, b),
        lambda a, b: torch.einsum("mk,nk->mn", a, b),
        lambda a, b: torch.addmm(torch.zeros(a.shape[0], b.shape[0]), a, b.T),
        lambda a, b: torch.bmm(a[None], b.T[None])[0],
    ],
)
def test_audit_catches_torch_matmul(op):
    a, b = torch.randn(4, 8), torch.randn(6, 8)
    _, ops = checks.run_audited(op, a, b, what="f")
    with pytest.raises(CheckFailed, match="computed the product with PyTorch"):
        checks.assert_fused(ops, what="f", weight_shape=(6, 8))


def test_audit_catches_a_materialized_weight():
    q = torch.randint(-127, 127, (6, 8), dtype=torch.int8)
    _, ops = checks.run_audited(lambda: q.to(torch.float16) * 2, what="f")
    with pytest.raises(CheckFailed, match="naive dequantize-then-matmul"):
        checks.assert_fused(ops, what="f", weight_shape=(6, 8))


def test_audit_lets_small_copies_through_and_names_arithmetic():
    q = torch.randint(-127, 127, (6, 8), dtype=torch.int8)
    _, ops = checks.run_audited(lambda: (q[:2].float(), torch.empty(4, 6)), what="f")
    checks.assert_fused(ops, what="f", weight_shape=(6, 8))  # a float copy smaller than the weight: not naive
    _, ops = checks.run_audited(lambda: q[:2].float().sum(), what="f")
    with pytest.raises(CheckFailed, match=r"computed with PyTorch outside your Triton kernel \(torch.sum\)"):
        checks.assert_fused(ops, what="f", weight_shape=(6, 8))


def test_compare_passes_within_tolerance_and_rejects_nan():
    ref = torch.randn(8, 8)
    checks.compare(ref.half(), ref, what="y", rtol=checks.tolerance_for(torch.float16))
    bad = ref.half().clone()
    bad[3, 4] = float("nan")
    with pytest.raises(CheckFailed, match="1 of 64 elements"):
        checks.compare(bad, ref, what="y", rtol=checks.tolerance_for(torch.float16))


def test_compare_reports_location_and_size():
    ref = torch.ones(4, 5)
    got = ref.clone()
    got[2, 3] = 3.0
    with pytest.raises(CheckFailed) as info:
        checks.compare(got, ref, what="y", rtol=1e-3)
    text = str(info.value)
    assert "Largest error 2 at [2, 3]: got 3, expected 1" in text
    assert "rows 2 of 0..3 and columns 3 of 0..4" in text


def test_compare_rejects_wrong_shape():
    with pytest.raises(CheckFailed, match=r"shape \[4, 4\], expected \[4, 5\]"):
        checks.compare(torch.zeros(4, 4), torch.zeros(4, 5), what="y", rtol=1e-3)


def test_compare_says_nothing_was_written():
    with pytest.raises(CheckFailed, match="wrote nothing into the output buffer"):
        checks.compare(torch.full((3, 3), float("nan")), torch.ones(3, 3), what="y", rtol=1e-3, poisoned=True)


def test_index_ranges():
    assert checks.index_ranges([0, 1, 2, 5, 7, 8]) == "0..2, 5, 7..8"
    assert "more ranges" in checks.index_ranges(list(range(0, 40, 2)))


def test_audit_does_not_take_a_copy_of_x_or_out_for_the_weight():
    """The interpreter copies x and out; with M == K a copy of x has the weight's shape [N, K] when N == M."""
    ops = [checks.OpRecord("_to_copy", [(64, 64)], [torch.float16])]
    checks.assert_fused(ops, what="f", weight_shape=(64, 64), allowed_shapes=[(64, 64)])
    with pytest.raises(CheckFailed, match="materialized"):
        checks.assert_fused(ops, what="f", weight_shape=(64, 64), allowed_shapes=[(64, 32)])


def test_a_mistake_that_overflows_is_still_named():
    ref = torch.ones(2, 3)
    wrong = torch.tensor([[float("inf"), 1.0, 1.0], [1.0, float("nan"), 1.0]])
    m = checks.Mistake("overflow", "no saturation", wrong.clone())
    with pytest.raises(CheckFailed, match="known mistake: overflow"):
        checks.compare(wrong, ref, what="y", rtol=1e-3, mistakes=[m])


# ----------------------------------------------------------------------------------------------------------
# The rounding probe (qmatmul/kernels/configs.py): scales folded into 16-bit weights fail on every run, exact ones never


def _folded(chapter_name):
    """A stand-in for a learner's kernel (torch here; the op audit is bypassed below) that dequantizes in float32
    and, with fold, rounds the weights to x's dtype before the dot, as a kernel feeding tl.dot 16-bit weights does."""
    from qmatmul import w4a16
    from qmatmul.formats import fp4

    def w8(x, q, s, out=None, fold=True):
        w = q.float() * s.float()[:, None]
        return out.copy_((x.float() @ (w.to(x.dtype).float() if fold else w).T).to(x.dtype))

    def w4(x, p, s, z, G, out=None, fold=True):
        w = (w4a16.unpack(p).float() - z.float().repeat_interleave(G, 1)) * s.float().repeat_interleave(G, 1)
        return out.copy_((x.float() @ (w.to(x.dtype).float() if fold else w).T).to(x.dtype))

    def nv(x, p, s, g, out=None, fold=True):
        w = fp4.e2m1_decode(fp4.unpack_nibbles(p)) * fp4.e4m3_decode(s).repeat_interleave(16, 1) * g.float()
        return out.copy_((x.float() @ (w.to(x.dtype).float() if fold else w).T).to(x.dtype))

    def f8(xq, sx, wq, sw, out=None, fold=True, operand="w"):  # FP8: fold sw into the weights or sx into x
        x, w = xq.float() * sx.float()[:, None], wq.float() * sw.float()[:, None]
        if fold:
            x, w = (x.to(out.dtype).float(), w) if operand == "x" else (x, w.to(out.dtype).float())
        return out.copy_((x @ w.T).to(out.dtype))

    return {"w8a16": w8, "w4a16": w4, "nvfp4": nv, "fp8": f8}[chapter_name]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("G", [32, 64, 128])
def test_the_rounding_probe_separates_folded_scales_from_exact_ones(G, dtype):
    from qmatmul import nvfp4, w4a16, w8a16

    for chapter, args in ((w4a16, (2, 64, 2 * G, G)), (w8a16, (2, 64, 2 * G)), (nvfp4, (2, 64, 2 * G))):
        name = chapter.__name__.removeprefix("qmatmul.")
        tensors, extra = chapter.rounding_probe(*args, dtype, "cpu"), args[3:]
        ref = chapter.reference(*tensors, *extra)
        out = torch.empty(2, 64, dtype=dtype)
        folded = _folded(name)(*tensors, *extra, out=out.clone())
        exact = _folded(name)(*tensors, *extra, out=out.clone(), fold=False)
        assert checks.mismatch(folded, ref, checks.tolerance_for(dtype)).all(), (name, G, dtype)
        assert not checks.mismatch(exact, ref, checks.tolerance_for(dtype)).any(), (name, G, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp8s_rounding_probes_separate_either_folded_scale_from_exact_ones(dtype):
    from qmatmul import fp8

    for ones, args in fp8.rounding_problems(16, 64, 128, "cpu"):
        out = torch.empty(16, 64, dtype=dtype)
        ref = fp8.reference(*args)
        for operand in "xw":
            folded = _folded("fp8")(*args, out=out.clone(), operand=operand)
            assert checks.mismatch(folded, ref, checks.tolerance_for(dtype)).all() == (operand != ones), (
                operand
            )
        exact = _folded("fp8")(*args, out=out.clone(), fold=False)
        assert not checks.mismatch(exact, ref, checks.tolerance_for(dtype)).any()


@pytest.mark.parametrize("check", ["w8a16.check_prefill", "w8a16.check_decode", "w4a16.check_prefill",
                                   "w4a16.check_decode", "nvfp4.check_prefill", "nvfp4.check_decode",
                                   "fp8.check_matmul", "fp8.check_decode"])  # fmt: skip
def test_a_kernel_that_folds_the_scale_into_16_bit_weights_fails_every_run(check, monkeypatch):
    """Random problems alone caught it in 2 to 77 runs of 100; with the probe every run names it, visible and
    hidden, and the same kernel with exact weights passes every run."""
    import importlib

    name, fn_name = check.split(".")
    check_fn = getattr(importlib.import_module(f"qmatmul.{name}"), fn_name)
    monkeypatch.setattr(checks, "run_audited", lambda fn, *a, out=None, what=None: (fn(*a, out=out), []))
    learner = _folded(name)
    named = "(sw|sx) folded into the" if name == "fp8" else "weights rounded to 16 bits"
    for seed in range(4):
        for hidden in (False, True):
            for operand in "xw" if name == "fp8" else "w":
                kw = {"operand": operand} if name == "fp8" else {}
                with pytest.raises(CheckFailed, match=f"known mistake: {named}"):
                    check_fn(lambda *a, out=None, kw=kw: learner(*a, out=out, **kw), seed=seed, hidden=hidden)
            check_fn(lambda *a, out=None: learner(*a, out=out, fold=False), seed=seed, hidden=hidden)


def test_an_infinite_output_is_named_not_measured_as_the_largest_error():
    """Dividing by a scale of 0 fills outputs with inf: the report says so and where, never "Largest error 0"."""
    from qmatmul import checks
    from qmatmul.checks import CheckFailed

    want = torch.ones(4, 8)
    got = want.clone()
    got[1, 3] = float("inf")
    got[2, 5] = -float("inf")
    with pytest.raises(CheckFailed) as exc:
        checks.compare(got, want, what="out", rtol=1e-3)
    msg = str(exc.value)
    assert "2 infinite values (the first at [1, 3]" in msg and "Largest error" not in msg
    got[1, 3], got[2, 5] = 1.5, 1.0  # a finite error keeps its size
    with pytest.raises(CheckFailed, match=r"Largest error 0\.5 at \[1, 3\]"):
        checks.compare(got, want, what="out", rtol=1e-3)


def test_a_failed_check_shows_its_message_not_the_graders_traceback():
    """In a Jupyter kernel after the setup cell's hook: a failing check's cell ends in an error (status and output,
    ename CheckFailed) whose traceback is the message alone; the learner's own errors keep their tracebacks."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import torch\nfrom qmatmul import checks, environment\nenvironment.show_failures_briefly()"
        ),
        nbformat.v4.new_code_cell("checks.compare(torch.ones(2, 2), torch.zeros(2, 2), what='y', rtol=1e-3)"),
        nbformat.v4.new_code_cell("def mine():\n    return 1 / 0\nmine()"),
    ]
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True)
    client.execute()
    failed, mine = nb.cells[1].outputs, nb.cells[2].outputs
    assert [o.output_type for o in failed] == ["error"] and failed[0].ename == "CheckFailed"
    assert len(failed[0].traceback) == 1 and "y: 4 of 4 elements" in failed[0].traceback[0]
    assert mine[-1].ename == "ZeroDivisionError" and len(mine[-1].traceback) > 1
    nb.cells = nb.cells[:2]
    with pytest.raises(CellExecutionError):  # the cell's status is an error: Run All stops there
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()


def test_a_store_below_the_last_row_is_named_where_no_audit_holds_it_back():
    """On a GPU no interpreter audit holds an unmasked row store back: the rows of NaN kept below every checked
    output (common.GUARD_ROWS) take it, and the check names the rows and the mask it needs."""
    from qmatmul.checks import common

    M, N, K = 3, 8, 16
    full, out = common.poisoned_out(M, N, torch.float16, "cpu", strided=False)
    assert out.shape == (M, N) and out.is_contiguous() and full.shape[0] == M + common.GUARD_ROWS
    expected = torch.ones(M, N)
    out.copy_(expected)
    full[M : M + 13] = 0.5  # what a 16-row tile's unmasked store leaves
    with pytest.raises(
        CheckFailed, match=r"stored past the last row of the output: rows m = 3\.\.15 .*offs_m < M"
    ):
        checks.verify_kernel_result(out, [], what="k", inputs={}, before={}, out=out, full=full,
                                    weight_shape=(N, K), dtype=torch.float16, expected=expected)  # fmt: skip
    full[M:] = float("nan")
    checks.verify_kernel_result(out, [], what="k", inputs={}, before={}, out=out, full=full,
                                weight_shape=(N, K), dtype=torch.float16, expected=expected)  # fmt: skip
