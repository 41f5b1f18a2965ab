"""Workers forked from an interpreter that has already imported torch, triton and IPython (a CPU, plain mode).

A worker's start is mostly imports: about 1.7 s of CPU on the 2-core machine, paid twice a notebook there (the worker
and the compile worker) and more than the grading of a small notebook's cells. A zygote is an interpreter started as
a worker is (`python -I`, the worker's stated import path, its environment and limits) that imports those libraries
and then only forks: each child becomes one worker (a session of its own, its folder, descriptors and environment
variable set as `remote.Worker` would give them), runs `worker.main` and exits. The zygote never runs a learner's
code; what each child has from it is what a fresh worker would have after the same imports.

Used only where a worker starts unwrapped (plain mode: the sandbox starts each worker in a namespace of its own)
and no CUDA GPU is visible (the GPU's grading was measured with fresh workers). `QMATMUL_FORK_WORKERS=0` turns it
off. A zygote serves one environment and one import path; a worker with any other starts as before. If a zygote
cannot start or stops answering, workers start as before. The learner's process can reach its zygote (same user,
its parent): plain mode defends nothing against that (course.md, the threat model), as with the course package.

    spawn(...)   trusted side: a worker forked from the zygote of its environment, or None
    main(argv)   the zygote itself
"""

from __future__ import annotations

import array
import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["ENV", "PRELOAD", "usable", "spawn", "Forked", "main", "close_all"]

ENV = "QMATMUL_FORK_WORKERS"  # "0": every worker starts as a fresh interpreter
PRELOAD = (
    "torch",
    "triton",
    "triton.language",
    "numpy",
    "IPython.core.interactiveshell",
    "qmatmul.grader.worker",
)
START_TIMEOUT_S = 120.0  # the zygote's own imports
KEEP = 2  # zygotes kept a process (the worker's environment and the compile worker's)
BOOTSTRAP = "import sys; sys.path[:] = {path!r}; from qmatmul.grader import zygote; sys.exit(zygote.main(sys.argv[1:]))"
_MSG = 1 << 16
_FDS = 3  # descriptors a message carries at most


class Forked:
    """A worker forked by a zygote, as remote.Worker uses a subprocess.Popen: pid, stdin, poll, wait, kill. Its
    signals go through a pidfd (never to a reused pid); its exit status is the zygote's report (it reaps it)."""

    def __init__(self, zygote: _Zygote, pid: int, pidfd: int, stdin):
        self.zygote, self.pid, self.pidfd, self.stdin = zygote, pid, pidfd, stdin
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, self.pidfd)
            if self.returncode is not None:
                with contextlib.suppress(OSError):
                    os.close(self.pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)


class _Zygote:
    """The trusted side's end of one zygote: its process, its socket, the exit codes it reported."""

    def __init__(self, env: dict, path: list[str], limits):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        self.dead = False
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", BOOTSTRAP.format(path=path), str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), cwd="/", env=env, start_new_session=True, preexec_fn=limits,
            )  # fmt: skip
        finally:
            theirs.close()
        if not select.select([self.sock], [], [], START_TIMEOUT_S)[0] or self._recv() != {"ready": True}:
            self.close()
            raise OSError("the zygote did not start")

    def _recv(self, block: bool = True) -> dict | None:
        """One message: {"ready"}, {"pid"} (with the pidfd, kept in self.pidfd) or {"exit", "code"}; None when
        none is waiting (block=False) or the zygote is gone (then dead)."""
        try:
            data, fds = _recv_fds(self.sock, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:
            data, fds = b"", []
        if not data:
            self.dead = True
            return None
        msg = json.loads(data)
        if "exit" in msg:
            self.exits[int(msg["exit"])] = int(msg["code"])
        if fds:
            msg["pidfd"] = fds[0]
        return msg

    def fork(self, request: dict, fds: list[int]) -> tuple[int, int]:
        """(pid, pidfd) of a new worker, or OSError."""
        with self.lock:
            if self.dead:
                raise OSError("the zygote is gone")
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            except OSError:
                self.dead = True
                raise
            while True:
                if not select.select([self.sock], [], [], 30)[0]:
                    self.dead = True
                    raise OSError("the zygote did not answer")
                msg = self._recv()
                if msg is None:
                    raise OSError("the zygote is gone")
                if "pid" in msg:
                    return int(msg["pid"]), msg["pidfd"]

    def exit_code(self, pid: int, pidfd: int) -> int | None:
        with self.lock:
            while not self.dead and self._recv(block=False) is not None:
                pass
            if pid in self.exits:
                return self.exits.pop(pid)
            if self.dead and select.select([pidfd], [], [], 0)[0]:
                return 1  # it ended after its zygote did, which no longer reports exit statuses
            return None

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
            self.proc.wait(timeout=10)


def _recv_fds(sock, flags: int = 0) -> tuple[bytes, list[int]]:
    """One message and the descriptors it carries (socket.recv_fds, whose `flags` Python 3.11 ignores)."""
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(_MSG, socket.CMSG_LEN(_FDS * fds.itemsize), flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


_ZYGOTES: dict[tuple, _Zygote] = {}
_LOCK = threading.Lock()


def close_all() -> None:
    with _LOCK:
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()


atexit.register(close_all)


def usable(wrap) -> bool:
    """A zygote serves this worker: plain mode, no CUDA GPU, not turned off."""
    if wrap or os.environ.get(ENV, "1") == "0":
        return False
    import torch

    return not torch.cuda.is_available()


def spawn(env: dict, path: list[str], program: str, reply_w: int, log_w: int, cwd: str, memory: int | None,
          limits) -> Forked | None:  # fmt: skip
    """A worker forked from the zygote of `env` (QMATMUL_WORKER_DIR aside), `path` and `memory` (started on first
    use, with `limits` as its preexec): stdin a pipe, stdout and stderr `log_w`, `reply_w` kept, current directory
    `cwd`. None where no zygote serves (the caller starts the worker itself)."""
    own = {k: v for k, v in env.items() if k != "QMATMUL_WORKER_DIR"}
    key = (tuple(sorted(own.items())), tuple(path), memory)
    with _LOCK:
        z = _ZYGOTES.get(key)
        if z is not None and z.dead:
            z.close()
            del _ZYGOTES[key]
            z = None
        if z is None:
            while len(_ZYGOTES) >= KEEP:
                _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
            try:
                z = _ZYGOTES[key] = _Zygote(own, path, limits)
            except OSError:
                return None
    r, w = os.pipe()
    try:
        request = {"program": program, "cwd": cwd, "dir": env.get("QMATMUL_WORKER_DIR", "")}
        pid, pidfd = z.fork(request, [r, log_w, reply_w])
    except OSError:
        os.close(w)
        return None
    finally:
        os.close(r)
    return Forked(z, pid, pidfd, os.fdopen(w, "wb"))


# -- the zygote ----------------------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    import importlib

    sock = socket.socket(fileno=int(argv[0]))
    for name in PRELOAD:
        importlib.import_module(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds = _recv_fds(sock)
        except OSError:
            return 0
        if not data:  # the trusted side is gone
            return 0
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, sock, (wake_r, wake_w))  # never returns
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)


def _reap(sock) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _child(request: dict, fds: list[int], sock, wake: tuple[int, int]) -> None:
    """The forked worker: what remote.Worker's Popen would have set up, then worker.main. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(sock.detach())  # the zygote's socket is not the worker's to use
        for fd in wake:
            os.close(fd)
        os.setsid()
        stdin_r, log_w, reply_w = fds
        os.dup2(stdin_r, 0)
        os.dup2(log_w, 1)
        os.dup2(log_w, 2)
        os.close(stdin_r)
        os.close(log_w)
        os.chdir(request["cwd"])
        os.environ["QMATMUL_WORKER_DIR"] = request["dir"]
        sys.argv = ["-c", request["program"], str(reply_w)]
        from qmatmul.grader import worker

        code = worker.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the worker's own failure: its log says why, the trusted side sees the exit
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
