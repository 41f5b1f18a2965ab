"""One time budget per notebook: a cell that hangs costs its cells and at most the budget, never a timeout per
test cell; and the worker's resources are bounded (file size always, address space on a CPU)."""

import time

import pytest
import torch

from qmatmul.checks import CheckFailed, LearnerError
from qmatmul.grader import notebook
from qmatmul.grader.remote import Worker

SLEEPER = [
    ("setup", notebook.QUIET_START),
    ("learner", "import time\ntime.sleep(1000)\ndef f(x):\n    return x\n"),
]


def test_a_hang_while_defining_costs_the_budget_once():
    w = Worker(SLEEPER, timeout=240, start_timeout=300, deadline=time.monotonic() + 6)
    try:
        t0 = time.monotonic()
        with pytest.raises(
            CheckFailed, match="did not finish defining its functions within [0-9]+ s .what was left"
        ):
            w.call("f", (torch.zeros(1),), {})
        assert time.monotonic() - t0 < 20
        t0 = time.monotonic()
        for _ in range(3):  # every later cell fails at once, naming the same reason: no second start
            with pytest.raises(CheckFailed, match="did not finish defining"):
                w.call("f", (torch.zeros(1),), {})
        assert time.monotonic() - t0 < 1 and not w.alive()
    finally:
        w.close()


def test_a_spent_budget_runs_nothing_more():
    program = [
        ("setup", notebook.QUIET_START),
        ("learner", "import time\ndef nap(x):\n    time.sleep(100)\n"),
    ]
    w = Worker(program, timeout=240, deadline=time.monotonic() + 15)
    try:
        with pytest.raises(CheckFailed, match="what was left of the notebook's time budget"):
            w.call("nap", (torch.zeros(1),), {})
        with pytest.raises(CheckFailed, match="time budget for grading this notebook is spent"):
            w.call("nap", (torch.zeros(1),), {})
    finally:
        w.close()


def test_the_worker_runs_under_a_memory_limit_on_a_cpu():
    if torch.cuda.is_available():
        pytest.skip("no address-space limit where the CUDA driver runs")
    program = [("setup", notebook.QUIET_START), ("learner", "def hog(x):\n    return bytearray(12 << 30)\n")]
    w = Worker(program, timeout=60)
    try:
        with pytest.raises(LearnerError) as err:
            w.call("hog", (torch.zeros(1),), {})
        assert err.value.type_name == "MemoryError"
    finally:
        w.close()
