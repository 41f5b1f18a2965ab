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
