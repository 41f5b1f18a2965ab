"""Checks that only a CUDA GPU can show (run on the lent H200; skipped elsewhere)."""

import pytest
import torch

from qmatmul import checks, w8a16
from qmatmul.checks import CheckFailed

# One xdist group with tests/test_mma_decode.py's GPU tests: on one worker, one after another, so that no other test's
# kernels share the GPU with a timed one (two workers' GPU tests at once measured the solution at 41 % of copy).
pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.xdist_group("gpu"),
]


def test_solution_passes_the_bandwidth_cell(w8a16_solution):
    w8a16.check_decode_bandwidth(w8a16_solution.w8a16_decode)


def test_naive_path_fails_the_bandwidth_cell():
    def naive(x, q, s, out=None):
        return out.copy_(w8a16.naive(x, q, s))

    with pytest.raises(CheckFailed, match="of the copy bandwidth"):
        w8a16.check_decode_bandwidth(naive)


def test_work_on_another_stream_is_timed(w8a16_solution):
    """A decode that launches on a side stream and never joins it back must not look faster: the harness's clock
    stops after the whole device synchronizes (an event pair on the current stream would have seen none of it),
    and the unjoined stream cannot be captured in a graph, so only the eager figure stands."""
    from qmatmul.checks import harness

    side = torch.cuda.Stream()

    def hidden(x, q, s, out=None):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            w8a16_solution.w8a16_decode(x, q, s, out=out)
        return out

    N, K = w8a16.BANDWIDTH_SHAPE
    kw = dict(
        module="qmatmul.w8a16", N=N, K=K, M=1, out_dtype=torch.bfloat16, nbytes=w8a16.bytes_moved(1, N, K)
    )
    t = harness.time_calls(hidden, what="side stream", **kw)
    honest = harness.time_calls(w8a16_solution.w8a16_decode, what="plain", **kw)
    print(t.describe(), honest.describe(), sep="\n")
    assert t.graph_ms is None
    assert t.eager_ms > 0.8 * honest.eager_ms


@pytest.mark.parametrize("M, N, K", [(1, 1000, 784), (5, 4100, 28680), (16, 8200, 8200), (3, 20000, 5000)])
def test_split_k_decode_on_ragged_shapes_and_in_a_graph(M, N, K):
    """The expert W8A16 decode with K split (each strip's last program adds the partials, a counter per strip left
    at 0): every output right at the GPU's own configs on ragged shapes, three calls in a row with other inputs,
    and replayed in a CUDA graph."""
    from qmatmul.kernels import expert

    x, q, s = w8a16.random_problem(M, N, K, torch.bfloat16, "cuda", checks.generator(M + N))
    tol = checks.tolerance_for(torch.bfloat16)
    for scale in (1, -2, 3):
        want = w8a16.reference(x * scale, q, s).float().cpu()
        assert not checks.mismatch(expert.w8a16_decode_split(x * scale, q, s).float().cpu(), want, tol).any()
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    expert.w8a16_decode_split(x, q, s, out=out)  # compiled and its scratch made before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        expert.w8a16_decode_split(x, q, s, out=out)
    for _ in range(3):
        out.zero_()
        graph.replay()
    assert not checks.mismatch(out.float().cpu(), w8a16.reference(x, q, s).float().cpu(), tol).any()


STORE_MASK = {  # the output's mask in each chapter's decode solution
    "w8a16": "y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)",
    "mxfp4": "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),\n    )\n    ### END SOLUTION",
}


@pytest.mark.parametrize("chapter", ["w8a16", "mxfp4"])
def test_an_unmasked_row_store_is_named_on_the_gpu(chapter):
    """No interpreter audit holds an unmasked store back on a GPU: the rows of NaN below every checked output
    (checks.common.GUARD_ROWS) take the decode's stray rows, the visible check names them, and CUDA still works.
    Not yet run on a GPU (written 2026-12-05, the session's device time spent)."""
    import importlib

    from autograder import grade_direct
    from qmatmul import course

    src = {c.grade_id: c.source for c in grade_direct.solution_cells(chapter) if c.grade_id}["ex3_decode"]
    mask = STORE_MASK[chapter]
    assert mask in src
    mod = course.load_notebook_code(chapter, overrides={"ex3_decode": src.replace(mask, mask.replace(
        "(offs_m[:, None] < M) & (offs_n[None, :] < N)", "offs_n[None, :] < N"))}, name=f"unmasked_{chapter}")  # fmt: skip
    with pytest.raises(CheckFailed, match=r"stored past the last row of the output: rows m = .*offs_m < M"):
        importlib.import_module(f"qmatmul.{chapter}").check_decode(getattr(mod, f"{chapter}_decode"))
    y = torch.ones(4, device="cuda") * 2
    torch.cuda.synchronize()
    assert float(y.sum()) == 8.0


def test_the_layouts_chapter_grades_its_kernel_on_the_gpu():
    """Chapter "layouts": its solution's Gluon kernel passes both kernel cells (correct on ragged shapes and split K,
    at least 50 % of the copy bandwidth at M = 1), through the trusted grader; the kernel whose permute would move
    values between lanes and the host matmul earn nothing there. Not yet run on a GPU (written 2026-12-05)."""
    from autograder import demo, grade_direct

    cells = ["test_decode", "test_decode_bandwidth"]
    got = grade_direct.grade("layouts", cells_filter=cells)
    assert [got[c].points for c in cells] == [3, 3], {c: got[c].message for c in cells}
    for name in ("wrong_permute", "host_matmul"):
        student = next(s for s in demo.students("layouts") if s.name == name)
        got = grade_direct.grade("layouts", student.changed_cells(), cells_filter=["test_decode"])
        assert got["test_decode"].points == 0, name


def test_the_stack_times_every_step_on_inputs_of_its_own():
    """The capstone's stack cell captures STACK_REPS steps, each on inputs of its own, as one CUDA graph, and checks
    every step's outputs against the sum the timed run answered with: the solution still clears STACK_SPEEDUP. Not
    yet run on a GPU (written 2026-12-05)."""
    from qmatmul import capstone, course

    sol = course.load_notebook_code("capstone", name="capstone_stack_gpu")
    capstone.check_stack_speed(sol.QuantLinear)


def test_the_capture_exercise_grades_on_the_gpu(capsys):
    """Capstone exercise 5 on a GPU, in-process: the solution's capture passes the visible and hidden checks (their
    timings printed); a capture that hands the step back (eager) loses the cell on time, one whose replay forgets to
    copy its inputs on the answers, each with the message that names it. Written 2026-12-06."""
    from qmatmul import capstone, course

    sol = course.load_notebook_code("capstone", name="capstone_capture_gpu")
    capstone.check_capture(sol.capture)
    capstone.check_capture(sol.capture, hidden=True)
    with capsys.disabled():
        print(capsys.readouterr().out)
    with pytest.raises(CheckFailed, match="a replay may take at most"):
        capstone.check_capture(lambda step, *example: step)

    def no_copy(step, *example):
        replay = sol.capture(step, *example)
        static = [x.clone() for x in example]
        return lambda *inputs: replay(*static)

    with pytest.raises(CheckFailed, match="answered the example's outputs for new inputs"):
        capstone.check_capture(no_copy)
