"""The learner's process runs only while its grader waits on it: between two jobs the worker and every process
descended from it are stopped (SIGSTOP), and continued (SIGCONT) when the next job is sent.

Why: the GPU's lock (qmatmul/timing/gpulock.py) orders the graders' own work, but code the learner's process runs
on its own (a background thread, a child process) holds no lock. Left running between jobs, it would run while
another notebook's timed window holds the GPU alone (graders sharing a GPU), or after its own cell has moved on.
Stopped, it runs only inside its own jobs, when its own cell holds the lock.

Which processes: the worker's and its descendants, found through /proc (`family`). Under the sandbox
(autograder/sandbox_exec.sh) the worker is bubblewrap with a PID namespace of its own, whose init is one of those
descendants: every process the learner's code starts lives in that namespace, and an orphan (a double fork, a new
session) is re-parented to the namespace's init, so none leaves the family. In plain mode an orphan is re-parented
outside it (plain mode defends nothing against a hostile submission: course.md, the threat model).

What it cannot stop: GPU work a learner's thread queued after the worker's last synchronize and before the stop
lands (the worker synchronizes its device before each reply; the stop follows the reply). That is a race of a
few milliseconds, left open (course.md, the threat model): graders share a GPU only where the instructor
sets QMATMUL_JOBS_PER_GPU.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["family", "stop", "cont", "state"]

STOP_WAIT_S = 0.5  # how long to wait for the signalled processes to show as stopped, a round
ROUNDS = 8  # rounds of find-and-stop: a process started while a round signalled is found in the next


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(c) for c in f.read().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        pass
    return out


def family(pid: int) -> list[int]:
    """pid and every process descended from it (children of every thread), parents first."""
    seen, i = [pid], 0
    while i < len(seen):
        seen += [c for c in _children(seen[i]) if c not in seen]
        i += 1
    return seen


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T, t, Z ...) or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _signal(pids, sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop(pid: int) -> set[int]:
    """Stop pid and its descendants, and those they start meanwhile: rounds of find and stop until a round finds
    nothing new, each waiting (at most STOP_WAIT_S) until what it signalled shows as stopped. The pids stopped."""
    stopped: set[int] = set()
    for _ in range(ROUNDS):
        new = [p for p in family(pid) if p not in stopped]
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        stopped.update(new)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and any(state(p) not in (None, "T", "t", "Z", "X") for p in new):
            time.sleep(0.0005)
    return stopped


def cont(pid: int, stopped=()) -> None:
    """Continue pid, its descendants and whatever else `stopped` holds."""
    _signal(set(family(pid)) | set(stopped), signal.SIGCONT)
