"""The test suite's own machinery: what the other tests rely on to run once and together."""

import os

import pytest


@pytest.mark.xdist_group("suite-grouping")
def test_xdist_groups_keep_their_tests_on_one_worker(request):
    """Each chapter's tests share one release and one nbgrader grading per worker (tests/test_notebooks.py):
    that holds only while `--dist loadgroup` honours xdist_group, which pytest 9.2 with xdist 3.8 silently did
    not (the id suffix xdist writes was ignored)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not running under pytest-xdist")
    assert request.node.nodeid.endswith("@suite-grouping"), request.node.nodeid
