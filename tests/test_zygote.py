"""Workers forked from a pre-imported interpreter (qmatmul/grader/zygote.py) start as fresh ones do, and a learner's
process that kills its zygote costs only itself."""

import os
import signal

import pytest
import torch

from qmatmul.grader import notebook, zygote
from qmatmul.grader.remote import RemoteFunction, Worker

DESCRIBE = [
    ("setup", notebook.QUIET_START),
    (
        "learner",
        """
import os, resource, sys

def describe(x):
    fds = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "profile_default" in target:  # IPython's history files: open or not as its saving thread goes
            continue
        target = target.replace(os.environ["QMATMUL_WORKER_DIR"], "WORKER_DIR")
        fds.append(target.split(":")[0] if ":[" in target else target)
    env = {k: v for k, v in os.environ.items() if k not in ("QMATMUL_WORKER_DIR", "QMATMUL_FORK_WORKERS")}
    return {
        "path": list(sys.path), "isolated": sys.flags.isolated, "stdout": type(sys.__stdout__.buffer).__name__, "write_through": sys.__stdout__.write_through,
        "cwd_is_scratch": os.getcwd() == os.path.join(os.environ["QMATMUL_WORKER_DIR"], "work"),
        "env": env, "session_leader": os.getsid(0) == os.getpid() == os.getpgid(0),
        "fsize": list(resource.getrlimit(resource.RLIMIT_FSIZE)), "as": list(resource.getrlimit(resource.RLIMIT_AS)),
        "fds": sorted(fds), "stdin": os.readlink("/proc/self/fd/0").split(":")[0],
        "meta_path_first": type(sys.meta_path[0]).__name__, "argv_len": len(sys.argv),
    }

def kill_parent(x):
    os.kill(os.getppid(), 9)
    return x + 1

def add_one(x):
    return x + 1
""",
    ),
]


def _worker_facts(monkeypatch, fork: str) -> tuple[dict, bool]:
    monkeypatch.setenv(zygote.ENV, fork)
    w = Worker(DESCRIBE, timeout=60)
    try:
        facts = RemoteFunction(w, "describe")(torch.ones(1))
        return facts, isinstance(w.proc, zygote.Forked)
    finally:
        w.close()


def test_a_forked_worker_starts_as_a_fresh_one(monkeypatch):
    """Its import path, flags, folder, environment, session, limits and open descriptors (no zygote socket) are a
    fresh interpreter's."""
    fresh, forked_fresh = _worker_facts(monkeypatch, "0")
    forked, was_forked = _worker_facts(monkeypatch, "1")
    assert not forked_fresh and was_forked
    assert forked == fresh
    assert fresh["isolated"] and fresh["cwd_is_scratch"] and fresh["session_leader"]
    assert "socket" not in forked["fds"] and forked["stdin"] == "pipe"


def test_a_worker_that_kills_its_zygote_costs_only_itself(monkeypatch):
    """The learner's process is the zygote's child and may kill it (plain mode): its own call still answers, the
    next worker starts (from a new zygote) and grades as before."""
    monkeypatch.setenv(zygote.ENV, "1")
    first = Worker(DESCRIBE, timeout=60)
    try:
        assert RemoteFunction(first, "kill_parent")(torch.ones(1)).item() == 2
        old = first.proc.zygote
        assert old.proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        first.close()
    second = Worker(DESCRIBE, timeout=60)
    try:
        assert RemoteFunction(second, "add_one")(torch.ones(1)).item() == 2
        assert isinstance(second.proc, zygote.Forked) and second.proc.zygote is not old
    finally:
        second.close()


def test_a_forked_workers_exit_status_is_reported(monkeypatch):
    """Reaped by its zygote, which reports the status: a signal as Popen says it (negative), an exit as itself."""
    monkeypatch.setenv(zygote.ENV, "1")
    w = Worker(DESCRIBE, timeout=60)
    try:
        w.start()
        assert isinstance(w.proc, zygote.Forked) and w.proc.poll() is None
        os.kill(w.proc.pid, signal.SIGKILL)  # stopped between jobs: only SIGKILL ends it now
        assert w.proc.wait(timeout=10) == -signal.SIGKILL
        with pytest.raises(ProcessLookupError):
            os.kill(w.proc.pid, 0)  # reaped
        w.proc.kill()  # through its pidfd: a pid the system may have reused is never signalled
    finally:
        w.close()
