"""One GPU, many graders: a timed window runs alone on its GPU, across every grading process of a host.

A bandwidth figure measured while another student's kernels run on the same GPU is wrong, so under the trusted
grader every timed window (harness.time_calls' prepare/go/fetch with the worker, bench's timings) takes the
GPU's lock exclusively, and everything else that may run kernels on that GPU (a notebook cell in the learner's
kernel, a correctness test cell) takes it shared: correctness work shares the GPU, a timing waits until the GPU
is free of it and keeps it free until it is done. A graded cell of the trusted grader (`cell()`) keeps the GPU
exclusively from its first timed window to its end: its later windows wait for nobody. Giving it back after each
window made every window wait again for every other grader's running cell, so each performance cell paid that
wait once per shape and M (a convoy; docs/parallel-grading.md). The other convoy, a timing waiting for the rest of
every running correctness cell, is cut where the trusted grader hands the learner's process its next job: there a
shared holder lets a waiting timing pass (`let_timing_pass`). Work that runs nothing on the GPU (Triton compiling a
learner's kernel to prove it is one) holds nothing (`off_the_gpu`).

The lock is a pair of flock(2) files per physical GPU (named by the GPU's UUID, so processes that see the same
GPU under different CUDA_VISIBLE_DEVICES indices agree) in QMATMUL_GPU_LOCK_DIR (default /tmp/qmatmul-gpu-locks),
a folder every grading process on the host must share:
  <gpu>.gate  a writer holds it while it waits, so new readers queue behind a waiting timing (no starvation);
  <gpu>.rw    readers share it, a writer holds it alone.
The kernel releases a dead process's locks, so a killed or timed-out grader never leaves the GPU locked; a
wait longer than QMATMUL_GPU_LOCK_TIMEOUT (900 s) fails that cell as not graded (GraderError) rather than
hanging the class. The sandbox hides the folder from the learner's code (a submission holding the lock would
stall every grader of the GPU); in plain mode, like the gradebook, it is not defended.

What it cannot see: kernels a process left queued on the GPU when its shared section ended (a notebook cell
that launched work without waiting for it) may still run into the first moments of another grader's window;
the checks wait for their results, so this is at most what one cell queued.

It is a no-op unless the grader turned it on (`active()`, set by qmatmul.grader.trusted and nbhooks) and a CUDA
GPU is visible: a learner's own notebook never waits on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import time
from pathlib import Path

__all__ = [
    "ENV_DIR", "ENV_TIMEOUT", "ENV_OFF", "DEFAULT_DIR", "waited_s", "shared_waited_s", "held_s", "timeout_s", "lock_dir",
    "gpu_key", "active", "shared", "cell", "exclusive", "let_timing_pass", "off_the_gpu", "exclusively",
]  # fmt: skip

ENV_DIR = "QMATMUL_GPU_LOCK_DIR"
ENV_TIMEOUT = "QMATMUL_GPU_LOCK_TIMEOUT"  # seconds (default 900)
ENV_OFF = "QMATMUL_GPU_LOCK"  # "off": no lock (only to measure what it prevents: tests/test_parallel.py)
DEFAULT_DIR = "/tmp/qmatmul-gpu-locks"

_ACTIVE = False
_LOCK: _GpuLock | None = None
waited_s = 0.0  # seconds this process waited for its exclusive windows
shared_waited_s = 0.0  # seconds it waited to share the GPU (behind another grader's timed window)
held_s = 0.0  # seconds it held the GPU exclusively (the timed windows: what the GPU cannot share)


def timeout_s() -> float:
    """How long to wait for the lock before the cell is reported as not graded (never forever)."""
    return float(os.environ.get(ENV_TIMEOUT) or 900)


def lock_dir() -> Path:
    path = Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)
    path.mkdir(mode=0o1777, parents=True, exist_ok=True)
    return path


def gpu_key() -> str | None:
    """The current CUDA device's UUID (None without a CUDA GPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    if uuid:
        return f"gpu-{uuid}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    return f"gpu-index-{visible[torch.cuda.current_device()] if visible[0] else torch.cuda.current_device()}"


class _GpuLock:
    """A reader-writer lock with writer preference on two flock files; one per process and GPU."""

    def __init__(self, folder: Path, key: str):
        self.paths = (folder / f"{key}.gate", folder / f"{key}.rw")
        self.mode: str | None = None  # None, "shared" or "exclusive"
        self.sticky = False  # inside cell(): an exclusive window keeps the GPU until the cell ends
        self.since = 0.0  # when the exclusive hold began (monotonic seconds)
        self._fds: list[int] = []

    def _open(self, path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(PermissionError):
            os.chmod(path, 0o666)  # graders of several users may share the folder
        return fd

    def _wait(self, fd: int, how: int, path: Path, deadline: float) -> None:
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the GPU's lock {path} stayed taken for {timeout_s():.0f} s (a grader stuck, or a process "
                        "left behind holding it): this cell was not graded; grade the submission again"
                    ) from None
                time.sleep(0.02)

    def acquire(self, mode: str) -> None:
        global shared_waited_s
        t0 = time.monotonic()
        gate, rw = (self._open(p) for p in self.paths)
        deadline = time.monotonic() + timeout_s()
        try:
            self._wait(gate, fcntl.LOCK_EX, self.paths[0], deadline)  # behind any timing already waiting
            self._wait(rw, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH, self.paths[1], deadline)
        except BaseException:
            os.close(rw)
            os.close(gate)
            raise
        os.close(gate)  # releases the gate: the rw lock alone now says who holds the GPU
        self._fds = [rw]
        self.mode = mode
        if mode == "shared":
            shared_waited_s += time.monotonic() - t0

    def could_take(self, which: int, how: int) -> bool:
        """Whether paths[which] could be locked `how` (fcntl.LOCK_EX or LOCK_SH) now: taken and dropped at once."""
        fd = self._open(self.paths[which])
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # drops the lock if taken

    def timing_waits(self) -> bool:
        """Whether a timed window waits for this GPU: it holds the gate while it waits (a reader passing through
        the gate reads as one, for the moment it takes)."""
        return not self.could_take(0, fcntl.LOCK_EX)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing the descriptor drops its flock
        self._fds = []
        self.mode = None


def active(on: bool = True) -> bool:
    """Turn the lock on (the trusted grader) or off; returns the previous setting."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, on
    return previous


def _lock() -> _GpuLock | None:
    global _LOCK
    if not _ACTIVE or os.environ.get(ENV_OFF) == "off":
        return None
    if _LOCK is None:
        key = gpu_key()
        if key is None:
            return None
        _LOCK = _GpuLock(lock_dir(), key)
    return _LOCK


@contextlib.contextmanager
def shared():
    """Work that may run kernels on the GPU but times nothing: shares the GPU with other such work."""
    lock = _lock()
    if lock is None or lock.mode is not None:  # off, or already held (shared or exclusive)
        yield
        return
    lock.acquire("shared")
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def cell():
    """A graded cell: shared like any work that runs kernels until its first timed window, exclusive from that
    window to the cell's end (see the module's docstring)."""
    global held_s
    lock = _lock()
    if lock is None or lock.mode is not None:
        yield
        return
    lock.acquire("shared")
    lock.sticky = True
    try:
        yield
    finally:
        lock.sticky = False
        if lock.mode == "exclusive":
            held_s += time.monotonic() - lock.since
        lock.release()


@contextlib.contextmanager
def off_the_gpu():
    """Inside shared work, a step that runs nothing on the GPU (a compile): the GPU is given back for it (this
    process's queued work finished first) and taken shared again after, behind any timing that came meanwhile.
    Inside a cell's exclusive hold it changes nothing."""
    lock = _lock()
    if lock is None or lock.mode != "shared":
        yield
        return
    _finish_queued()
    lock.release()
    try:
        yield
    finally:
        lock.acquire("shared")


def _finish_queued() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextlib.contextmanager
def exclusive():
    """A timed window: waits until nothing else of any grader runs on this GPU, and keeps it so."""
    global waited_s, held_s
    lock = _lock()
    if lock is None or lock.mode == "exclusive":
        yield
        return
    previous = lock.mode
    if previous == "shared":
        lock.release()  # a shared holder waiting for exclusive would wait for itself
    t0 = time.monotonic()
    lock.acquire("exclusive")
    t1 = lock.since = time.monotonic()
    waited_s += t1 - t0
    try:
        yield
    finally:
        if not (lock.sticky and previous == "shared"):  # in a cell the GPU stays held (cell() releases it)
            held_s += time.monotonic() - t1
            lock.release()
            if previous == "shared":
                lock.acquire("shared")


def let_timing_pass() -> bool:
    """Between two operations of shared work (remote.Worker calls it before each job it sends the learner's
    process): when a timed window waits for this GPU, finish this process's queued work, give the GPU back and
    take it shared again behind that window. A waiting timing then waits for one operation of each running cell,
    not for the rest of the cell: with the whole cell held, eight FP8 notebooks on one H100 waited 22-24 s for
    each performance cell's windows (2026-12-06, docs/parallel-grading.md). Returns whether it let one pass."""
    lock = _lock()
    if lock is None or lock.mode != "shared" or not lock.timing_waits():
        return False
    _finish_queued()
    lock.release()
    lock.acquire("shared")
    return True


def exclusively(fn):
    """Decorator: fn is a timed window (see exclusive)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with exclusive():
            return fn(*args, **kwargs)

    return wrapper
