"""Test setup: without a CUDA GPU, Triton's interpreter must be chosen before triton is imported."""

import os
from pathlib import Path

import pytest

# One thread a process for torch's and numpy's thread pools, set before they load: `make test` runs two xdist
# workers on a 2-core machine, and each grading runs a notebook kernel, a worker and a compile worker beside
# pytest itself. With their default pools (a thread per core in every process), their threads spun against
# each other: two gradings at once took twice as long as with one thread a process (two capstone demo students
# graded directly, twice at once: 97 s against 47). Child processes (nbgrader, its kernels, the workers, the
# sandbox) inherit it. A value already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

HAS_GPU = torch.cuda.is_available()


def skip_unless_required(why: str, flag: str) -> None:
    """Skip for a missing system tool, or fail where `flag`=1 says it must be there (.ci/run sets the flags)."""
    if os.environ.get(flag) == "1":
        pytest.fail(f"{why} ({flag}=1)")
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _grading_semantics(monkeypatch):
    """Tests call the checks as the trusted grader does: a check that cannot measure raises NotMeasured (in a
    learner's notebook it only says so; tests of that set checks.STRICT to False themselves)."""
    from qmatmul import checks

    monkeypatch.setattr(checks, "STRICT", True)


@pytest.fixture(scope="session")
def env():
    from qmatmul import environment

    return environment.start(quiet=True)


@pytest.fixture(scope="session")
def w8a16_solution(env):
    from qmatmul import course

    return course.load_notebook_code("w8a16")


def pytest_collection_modifyitems(items):
    """The slow tests (notebooks and nbgrader end to end, a minute or more each) first, each keeping its order: the
    two xdist workers then end on the many short tests and finish together, where a slow test handed out last
    left one worker running it alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
