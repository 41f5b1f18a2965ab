"""One grading job: a command (`nbgrader autograde --student X`) run to its end or its timeout, on whatever
host runs it (a thread of autograder/parallel.py's pool, or a Dask worker). Here, in the installed course
package, so that every worker of the course's environment can import it: Dask sends the job by reference.
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

__all__ = ["run_command", "Job", "Result", "grade_job"]


def _die_with_parent() -> None:
    """In the child, before exec: if the process that started it dies, so does it (Linux prctl(2)).
    A grading process orphaned by a killed pool or Dask worker would otherwise go on writing the gradebook
    while the re-run grades the same student."""
    with contextlib.suppress(Exception):
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:
    import ctypes

    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def run_command(cmd: list[str], *, cwd, env: dict, timeout: float | None, quiet: bool = True
                ) -> subprocess.CompletedProcess:  # fmt: skip
    """Run cmd in its own process group. Output goes to files, not pipes (a process the student's code left
    behind cannot hold the grader up); past `timeout` seconds the process group is killed (code -9)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out if quiet else None, stderr=err if quiet else None,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                preexec_fn=_die_with_parent if _PRCTL else None)  # fmt: skip
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
            err.write(f"\nTimeoutError: {' '.join(cmd[2:4])} ran past {timeout:.0f} s and was stopped\n")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the run left behind in its process group
            except (ProcessLookupError, PermissionError):
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            cmd, code, out.read() if quiet else "", err.read() if quiet else ""
        )


@dataclass
class Job:
    assignment: str
    student: str
    cmd: list[str]
    env: dict  # added to the environment of the host that runs it
    cwd: str
    timeout: float | None


@dataclass
class Result:
    job: Job
    returncode: int
    stderr: str
    seconds: float
    where: str = ""  # host and GPU
    extra: dict = field(default_factory=dict)


def grade_job(job: Job, gpu: str | None = None, threads: int | None = None) -> Result:
    """Run one job on this host (a pool thread or a Dask worker). `threads`: the CPU threads each of its processes'
    torch and numpy may use (OMP_NUM_THREADS, unless the host's environment sets it): a pool of N jobs gives each its
    share of the cores, where each process would otherwise start one thread a core (eight jobs of three processes
    on 16 cores: 384 threads)."""
    env = dict(os.environ, **job.env)
    env["PATH"] = f"{job.env.get('QMATMUL_BIN', '')}{os.pathsep}{os.environ.get('PATH', '')}"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if threads is not None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    t0 = time.time()
    res = run_command(job.cmd, cwd=job.cwd, env=env, timeout=job.timeout)
    where = socket.gethostname() + (
        f" gpu {env['CUDA_VISIBLE_DEVICES']}" if env.get("CUDA_VISIBLE_DEVICES") else ""
    )
    return Result(job, res.returncode, res.stderr, time.time() - t0, where)
