"""Checks that only a CUDA GPU can show (run on the lent H200; skipped elsewhere)."""

import pytest
import torch

from qmatmul import w8a16
from qmatmul.checks import CheckFailed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_solution_passes_the_bandwidth_cell(w8a16_solution):
    w8a16.check_decode_bandwidth(w8a16_solution.w8a16_decode)


def test_naive_path_fails_the_bandwidth_cell():
    def naive(x, q, s, out=None):
        return out.copy_(w8a16.naive(x, q, s))

    with pytest.raises(CheckFailed, match="of the copy bandwidth"):
        w8a16.check_decode_bandwidth(naive)


def test_work_on_another_stream_is_caught(w8a16_solution):
    side = torch.cuda.Stream()

    def hidden(x, q, s, out=None):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            w8a16_solution.w8a16_decode(x, q, s, out=out)
            w8a16_solution.w8a16_decode(x, q, s, out=out)
        return out

    with pytest.raises(CheckFailed, match="outside the current stream|differ"):
        w8a16.check_decode_bandwidth(hidden)
