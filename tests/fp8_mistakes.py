"""Shared by the tests of FP8's exercises 6 and 7 (test_fp8_fused.py, test_fp8_rows.py): a solution cell with one
known mistake put in, and the assertion that every visible run fails it and names it."""

import re

import pytest

from qmatmul.checks import CheckFailed


def mistaken_sources(src: str, changes: dict, bodies: dict) -> dict[str, tuple[str, str]]:
    """A learner's kernel -> (the mistake it is named as, its cell's source). changes: kernel -> (name, the solution's
    snippet, the learner's), each snippet found exactly once; bodies: kernel -> (name, a whole solution region)."""
    out = {}
    for kernel, (name, old, new) in changes.items():
        assert src.count(old) == 1, kernel
        out[kernel] = (name, src.replace(old, new))
    head, tail = src[: src.index("    ### BEGIN SOLUTION")], src[src.index("    ### END SOLUTION") :]
    for kernel, (name, body) in bodies.items():
        out[kernel] = (name, head + "    ### BEGIN SOLUTION\n" + body + tail)
    return out


def fails_every_visible_run_and_is_named(check, fn, name: str) -> None:
    """check(fn) fails on two visible seeds naming the mistake, and fails a hidden run."""
    for seed in range(2):
        with pytest.raises(CheckFailed, match=f"known mistake: [^\n]*{re.escape(name)}"):
            check(fn, seed=seed)
    with pytest.raises(CheckFailed):
        check(fn, hidden=True, seed=7)
