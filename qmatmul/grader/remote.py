"""The trusted side of the worker: start it, call the learner's functions with a timeout, read their results.

Arguments travel as torch.save files the trusted side writes; results come back the same way and are read
with `torch.load(weights_only=True)`, so nothing the worker sends is ever unpickled as code (files.py: never
through a link). After a call, the worker's copies of the arguments are written back into the caller's tensors
(storage and all; results.py), so a check sees exactly what an in-process call would have left: what the kernel
wrote into `out` (and past it), inputs it modified, a result that is `out` itself.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from qmatmul.checks import WORKER_CONTEXTS, WORKER_STATE, CheckFailed, LearnerError, OpRecord
from qmatmul.grader import freeze, kernels, reach, static, zygote
from qmatmul.grader.files import create_new, load_result, read_regular, save_args, write_new
from qmatmul.grader.results import map_result, torch_dtype, write_back
from qmatmul.timing import gpulock

__all__ = [
    "GPU_FAULT", "ROOT", "MEMORY_ENV", "memory_limit", "import_path", "BOOTSTRAP", "WorkerGone",
    "HOST_READ_LIMIT", "Worker", "RemoteFunction",
]  # fmt: skip

GPU_FAULT = r"illegal memory access|misaligned address|unspecified launch failure|illegal instruction|device-side assert"
ROOT = Path(__file__).resolve().parent.parent.parent


# bytes of address space for a worker on a machine without a GPU; 0: none
MEMORY_ENV = "QMATMUL_WORKER_MEMORY"


def memory_limit() -> int | None:
    """The worker's address-space limit: 8 GiB (a CPU worker peaks under 1 GiB) where no CUDA GPU is used, none
    with one (the CUDA driver reserves far more address space than it touches, and a limit breaks it)."""
    if torch.cuda.is_available():
        return None
    limit = int(os.environ.get(MEMORY_ENV, 8 << 30))
    return limit or None


def _limits(memory: int | None):
    """What the worker's process starts under (and everything it starts, the sandbox included): no file it
    writes (its log, results, anything of the learner's) grows past 4 GiB, so a print loop cannot fill the disk;
    on a CPU, no more than `memory` bytes of address space."""

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return apply


def import_path(exclude=()) -> list[str]:
    """The worker's import path, stated: the folder that holds the course package, then those of this
    interpreter's entries that belong to an installation (the standard library and site-packages, inside the
    interpreter's prefixes) or that PYTHONPATH names (a GPU box's wheel folders), in their order. Left out: the
    current directory, a script's or test's folder, the user's site-packages, and anything under `exclude`
    (the submission's and the worker's folders). The worker starts isolated (python -I: no PYTHON* variables,
    no current directory, no user site) with exactly this list, so nothing a submission hands in beside its
    notebook is imported; the sandbox shows these folders and no others of the host (autograder/sandbox.py)."""
    import site

    banned = [Path(p).resolve() for p in exclude if p]
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    named = {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    user = Path(getattr(site, "getusersitepackages", lambda: "")() or "/nonexistent").resolve()
    out: list[str] = [str(ROOT)]
    for entry in sys.path:
        if not entry:
            continue
        here = Path(entry).resolve()
        installed = any(p == here or p in here.parents for p in prefixes)
        if not (installed or here in named) or here == user or here == ROOT:
            continue
        if any(here == b or b in here.parents for b in banned) or str(here) in out:
            continue
        out.append(str(here))
    return out


BOOTSTRAP = "import sys; sys.path[:] = {path!r}; from qmatmul.grader import worker; sys.exit(worker.main(sys.argv[1:]))"


class WorkerGone(Exception):
    pass


HOST_READ_LIMIT = 64  # values of one tensor a kernel exercise's call may read to the host (an input check)


class Worker:
    """One untrusted process per notebook: it runs `program` (label, source pairs) and then serves calls."""

    def __init__(self, program, *, source=None, release=None, cwd=None, wrap=(), env=None, timeout: float = 240.0,
                 start_timeout: float = 300.0, deadline: float | None = None):  # fmt: skip
        self.program, self.source, self.cwd = list(program), source, cwd
        # the release's namespace: what it gives, what it binds (course_problems)
        self.release = release or {}
        self._own_work: dict[str, list[str]] = {}
        self.wrap, self.env = list(wrap), env
        self.timeout, self.start_timeout = timeout, start_timeout
        # The notebook's one budget (time.monotonic() by which its grading ends, None: none): every start and
        # call waits at most what is left of it, so a hang costs its cells and never more than the budget.
        self.deadline = deadline
        self.start_failure: str | None = None  # the cells did not define their functions: no second try
        self.proc = None
        self.starts = 0
        self.start_s = 0.0  # seconds spent starting it and running the notebook's cells (QMATMUL_PROFILE)
        self.compile_s = 0.0  # seconds spent proving kernels in the compile worker, its start included
        self.compiler: Worker | None = None  # the compile worker (prove_kernels), started when first needed
        # a launch -> why it is not a kernel of the learner's, or None
        self.proven: dict[str, str | None] = {}
        self.last_launches: list = []
        self.last_reads: list = []  # [method, elements] of each tensor an audited call read into numpy or Python
        self._new_folder()
        self.failed_cells: list[str] = []
        self._buf = b""
        self._stopped: set[int] = set()  # the processes freeze.stop stopped after the last reply
        self.last_exchange_s = 0.0  # the last job's seconds from sending it to its reply (bench's clock)

    # -- process ------------------------------------------------------------------------------------------
    def _new_folder(self) -> None:
        """The worker's folder (its program, log, arguments and results) and, inside it, the scratch folder that
        is its current directory: empty, its own, never the submission."""
        self.dir = Path(tempfile.mkdtemp(prefix="qmatmul-worker-"))
        self.scratch = self.dir / "work"
        self.scratch.mkdir()

    def _wait(self, timeout: float, what: str) -> tuple[float, bool]:
        """How long the next wait may be: `timeout`, or what is left of the notebook's budget if less (then
        True). Raises CheckFailed when the budget is spent."""
        if self.deadline is None:
            return timeout, False
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CheckFailed(
                f"{what}: not run: the time budget for grading this notebook is spent (a cell or a call that ran "
                "for minutes used it up; see the cells before this one)"
            )
        return min(timeout, left), left < timeout

    def start(self) -> None:
        """Start the worker and run the notebook's cells. If they did not finish (or the process died) once,
        every later start fails at once with the same reason: the same cells would do the same again, and one
        hang must not cost a timeout per test cell."""
        if self.start_failure is not None:
            raise CheckFailed(self.start_failure)
        wait, budgeted = self._wait(self.start_timeout, "defining your notebook's functions")
        t0 = time.monotonic()
        try:
            self._start(wait, budgeted)
        finally:
            self.start_s += time.monotonic() - t0

    def _start(self, wait: float, budgeted: bool) -> None:
        if self.starts:  # a restart: a new folder, so nothing the last process left there is seen
            shutil.rmtree(self.dir, ignore_errors=True)
            self._new_folder()
        self.starts += 1
        program_path = self.dir / "program.json"
        write_new(program_path, json.dumps(self.program).encode())
        r, w = os.pipe()
        self.log_path = self.dir / "log"
        log = os.fdopen(create_new(self.log_path), "w")  # a restart: never through a link the last one left
        env = dict(self.env if self.env is not None else os.environ)
        env["QMATMUL_WORKER_DIR"] = str(self.dir)
        # Another virtualenv active where grading started (VIRTUAL_ENV): IPython, once imported, puts that venv's
        # site-packages on the path and the worker dies on a module "outside the course's environment". The worker
        # is this interpreter's, whatever shell started the grading.
        env.pop("VIRTUAL_ENV", None)
        # An isolated interpreter with its import path stated (import_path), started in a folder of its own: a
        # `qmatmul/` or `torch.py` handed in beside the notebook is never on the path, and whatever the
        # learner's code writes lands in the scratch folder, never where nbgrader writes afterwards.
        path = import_path(exclude=(self.cwd, self.dir))
        memory = memory_limit()
        # Forked from an interpreter that has imported torch, triton and IPython where one serves (zygote.py: plain
        # mode on a CPU), else a fresh interpreter: the same path, environment, folder, limits and descriptors.
        self.proc = (zygote.spawn(env, path, str(program_path), w, log.fileno(), str(self.scratch), memory,
                                  _limits(memory)) if zygote.usable(self.wrap) else None)  # fmt: skip
        if self.proc is None:
            bootstrap = BOOTSTRAP.format(path=path)
            cmd = [*self.wrap, sys.executable, "-I", "-u", "-c", bootstrap, str(program_path), str(w)]
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                         pass_fds=(w,), cwd=self.scratch, env=env, start_new_session=True,
                                         preexec_fn=_limits(memory))  # fmt: skip
        os.close(w)
        log.close()
        self.reply_fd, self._buf = r, b""
        try:
            ready = self._read(wait, None)
        except TimeoutError:
            self.stop()
            budget = " (what was left of the notebook's time budget)" if budgeted else ""
            self.start_failure = (
                f"your notebook's code did not finish defining its functions within {wait:.0f} s{budget} "
                "(a cell that runs forever?)"
            )
            raise CheckFailed(self.start_failure) from None
        except WorkerGone:
            why = self._death()
            self.stop()
            self.start_failure = f"the process running your notebook's cells died while defining them ({why})"
            raise CheckFailed(self.start_failure) from None
        self.failed_cells = ready.get("failed", [])
        self._stop_between_jobs()

    def _stop_between_jobs(self) -> None:
        """Stop the worker's processes until the next job (qmatmul/grader/freeze.py)."""
        if self.alive():
            self._stopped = freeze.stop(self.proc.pid)

    def _continue(self) -> None:
        if self.alive():
            freeze.cont(self.proc.pid, self._stopped)
        self._stopped = set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Kill the worker, its descendants (stopped ones too: freeze.py) and everything in its process group (a
        sandbox also takes its PID namespace)."""
        if self.proc is None:
            return
        for pid in freeze.family(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin,):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self.reply_fd)
        except OSError:
            pass
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self.compiler is not None:
            self.compiler.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return read_regular(self.log_path).decode(errors="replace")[-n:]
        except OSError:
            return ""

    def _death(self) -> str:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)  # its channel closed: it is exiting
            except subprocess.TimeoutExpired:
                code = None
        fault = next((ln for ln in self.log_tail().splitlines() if re.search(GPU_FAULT, ln)), None)
        if fault:
            return f"a GPU fault: {fault.strip()[:200]}"
        if code is None:
            return "it stopped answering"
        why = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        # An uncaught exception's last line (a missing package, say: the GPU image without IPython). The student's
        # process wrote the log, so this is a message, never a verdict.
        last = next((ln.strip() for ln in reversed(self.log_tail().splitlines()) if ln.strip()), "")
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", last):
            why += f"; its last line: {last[:200]}"
        return why

    def _read(self, timeout: float, nonce: str | None) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            if b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    raise CheckFailed("the process running your code wrote something the grader did not ask for "
                                      "on the grader's channel: flagged for your instructor") from None  # fmt: skip
                if nonce is not None and reply.get("nonce") != nonce:
                    raise CheckFailed("the process running your code sent a reply the grader did not ask for: "
                                      "flagged for your instructor")  # fmt: skip
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.reply_fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self.reply_fd, 1 << 16)
                if not chunk:
                    raise WorkerGone
                self._buf += chunk
            elif self.proc.poll() is not None:
                raise WorkerGone

    # -- calls --------------------------------------------------------------------------------------------
    def _exchange(self, job: dict, what: str, timeout: float | None = None) -> dict:
        """Send one job and read its reply (with this job's nonce). A hang, a crash or a forged reply end the
        worker (the next call starts a new one) and raise CheckFailed; the other cells keep their points."""
        if not self.alive():
            self.start()
        gpulock.let_timing_pass()  # between two jobs nothing of this cell runs on the GPU: a waiting timing goes first
        nonce = secrets.token_hex(16)
        job = {**job, "nonce": nonce, "state": dict(WORKER_STATE), "contexts": list(WORKER_CONTEXTS)}
        timeout, budgeted = self._wait(self.timeout if timeout is None else timeout, what)
        try:
            self._continue()
            t0 = time.perf_counter()
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._read(timeout, nonce)
            self.last_exchange_s = time.perf_counter() - t0
            self._stop_between_jobs()
            return reply
        except TimeoutError:
            self.stop()
            budget = " (what was left of the notebook's time budget)" if budgeted else ""
            raise CheckFailed(
                f"{what}: your code did not finish within {timeout:.0f} s{budget} and was stopped (a loop that "
                "never ends? a grid far larger than the output?). The other exercises keep their points."
            ) from None
        except (WorkerGone, BrokenPipeError):
            why = self._death()
            self.stop()
            if why.startswith("a GPU fault"):
                raise CheckFailed(
                    f"{what}: the kernel faulted on the GPU ({why[13:]}): usually an unmasked load or store past "
                    "the end of a tensor. It ran in a process of its own: the other exercises keep their points."
                ) from None
            raise CheckFailed(
                f"{what}: your code crashed the process that ran it ({why}), e.g. a load or store far outside a "
                "tensor. The grader ran it in a process of its own: the other exercises keep their points."
            ) from None
        except CheckFailed:
            self.stop()
            raise

    def _raise_for(self, reply: dict, name: str) -> None:
        status = reply.get("status")
        if status == "missing":
            raise LearnerError(
                "NameError", f"name '{name}' is not defined (its cell was deleted, or did not run)"
            )
        if status == "error":
            if re.search(GPU_FAULT, reply.get("message", "")):
                self.stop()  # a GPU fault poisons the worker's CUDA context
            raise LearnerError(reply.get("type", "Exception"), reply.get("message", ""),
                               unfilled=bool(reply.get("unfilled")), where=reply.get("where", ""),
                               compile_summary=reply.get("compile_summary", ""))  # fmt: skip

    def require_own_work(self, name: str, what: str) -> None:
        """Fail the cell when the learner's `name`, read from the submitted source, hands its work to the course's
        own answers or to a library that computes them (static.course_problems)."""
        if self.source is None:
            return
        if name not in self._own_work:
            given = static.given(self.release)
            self._own_work[name] = static.course_problems(self.source, name, given, set(self.release))
        if self._own_work[name]:
            raise CheckFailed(f"{what} earns nothing: " + "; ".join(self._own_work[name][:3]))

    def call(self, name: str, args, kwargs, *, grid=None, audit: bool = False, what: str | None = None,
             driver: str | None = None):  # fmt: skip
        """Run name(*args, **kwargs) (or name[grid](...), or driver(name, *args, **kwargs) with driver a course
        function "qmatmul.module:function") in the worker. Returns (result, ops, outside)."""
        what = what or name
        self.require_own_work(name, what)
        if not self.alive():
            self.start()  # first: a (re)start gives the worker a new folder, where the arguments then go
        token = secrets.token_hex(8)
        args_path, result_path = self.dir / f"args-{token}.pt", self.dir / f"result-{token}.pt"
        save_args(args_path, (list(args), dict(kwargs)))
        job = {"op": "call", "name": name, "grid": grid, "args": str(args_path), "result": str(result_path),
               "audit": audit, "driver": driver}  # fmt: skip
        if not audit and driver is None and grid is None:  # a plain call: watch which course code it runs
            job["given"] = {m: sorted(n) for m, n in static.given(self.release).items()}
        try:
            reply = self._exchange(job, what)
        finally:
            args_path.unlink(missing_ok=True)
        try:
            self._raise_for(reply, name)
            loaded = load_result(result_path)
        except (LearnerError, CheckFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever is in the file, it is not a result we can read
            raise CheckFailed(f"{what}: its result could not be read ({type(exc).__name__})") from None
        finally:
            result_path.unlink(missing_ok=True)
        originals = [*args, *kwargs.values()]
        copies = [*loaded["args"], *loaded["kwargs"].values()]
        write_back(originals, copies)
        result = map_result(loaded["result"], originals, copies)
        ops = [OpRecord(op[0], [tuple(s) for s in op[1]], [torch_dtype(d) for d in op[2]],
                        [torch_dtype(d) for d in (op[3] if len(op) > 3 else [])])
               for op in reply.get("ops", [])]  # fmt: skip
        self.last_launches = list(reply.get("launches", []))[: kernels.MAX_LAUNCHES] if audit else []
        self.last_reads = [r for r in reply.get("host_reads", []) if isinstance(r, list) and len(r) == 2]
        ran = [str(n) for n in reply.get("course", [])][:3]
        if ran:
            raise CheckFailed(
                f"{what} earns nothing: it ran the course's own {', '.join(f'`{n}`' for n in ran)}, which the "
                "chapter does not give (however it was reached). The course's functions are what your code is "
                "graded against: write this part yourself"
            )
        return result, ops, tuple(reply.get("outside", (0, 0)))

    def prove_kernels(self, launches: list, what: str) -> None:
        """Fail unless the call launched a Triton kernel and every kernel of the notebook's own that it launched
        is one Triton's compiler accepts and that stores something (kernels.py). The course's own kernels (the
        chapter's GIVEN scaffolding launches some) need no proof. Compiles run in the worker itself on a GPU, and under
        the interpreter in the compile worker, a second process that runs the same cells without it (compiles_itself);
        each distinct launch is compiled once."""
        if not launches:
            raise CheckFailed(
                f"{what} launched no Triton kernel: the exercise is a kernel of your own, launched as "
                "`kernel[grid](...)`. (A function called like a kernel but not made by triton.jit runs as plain "
                "Python and does not count.)"
            )
        given = reach.given_functions(
            static.given(self.release)
        )  # by where their code lives, as launches say
        for launch in launches:
            if reach.module_of(str(launch.get("file", ""))) is not None:
                if given & set(launch.get("course", [])):
                    continue  # a course kernel, launched by what the chapter gives
                raise CheckFailed(
                    f"{what} launched the course's own kernel `{launch.get('name', '?')}`, which the chapter does "
                    "not give: the exercise is a kernel of your own"
                )
            # one compile a distinct launch, however many times it ran (its count)
            key = json.dumps({k: v for k, v in launch.items() if k != "count"}, sort_keys=True, default=str)
            if key not in self.proven:
                self.proven[key] = self._compile(launch, what)
            problem = self.proven[key]
            if problem:
                raise CheckFailed(f"{what}: {problem}")

    def _compile(self, launch: dict, what: str) -> str | None:
        # The proof's own seconds: the wait to share the GPU again after it (off_the_gpu) is the lock's, not twice
        t0, waited0 = time.monotonic(), gpulock.shared_waited_s
        try:
            return self._compile_in_worker(launch, what)
        finally:
            self.compile_s += time.monotonic() - t0 - (gpulock.shared_waited_s - waited0)

    def compiles_itself(self) -> bool:
        """On a CUDA GPU the worker's kernels are Triton's JIT functions (no interpreter), so the worker puts a launch
        through the front end itself; under the interpreter (a CPU) they run as Python and a compile worker, a second
        process running the same cells without the interpreter, does it. Either is the learner's process: a reply
        that lies can only take the points it claims away (a kernel it calls compiled still had to run and match)."""
        env = self.env if self.env is not None else os.environ
        return torch.cuda.is_available() and env.get("TRITON_INTERPRET") != "1"

    def _compile_in_worker(self, launch: dict, what: str) -> str | None:
        if self.compiles_itself():
            with gpulock.off_the_gpu():  # Triton compiles on the CPU: a timing need not wait for it
                reply = self._exchange({"op": "compile", "launch": launch}, what)
            return self._compile_verdict(reply, launch)
        if self.compiler is None:
            env = {k: v for k, v in (self.env if self.env is not None else os.environ).items()
                   if k != "TRITON_INTERPRET"}  # fmt: skip
            env[kernels.COMPILE_ENV], env["TRITON_DEFAULT_FP_FUSION"] = "1", "1"
            self.compiler = Worker(self.program, cwd=self.cwd, wrap=self.wrap, env=env, timeout=self.timeout,
                                   start_timeout=self.start_timeout, deadline=self.deadline)  # fmt: skip
        reply = self.compiler._exchange({"op": "compile", "launch": launch}, what)
        return self._compile_verdict(reply, launch)

    @staticmethod
    def _compile_verdict(reply: dict, launch: dict) -> str | None:
        """Why a compile reply shows the launch is not a kernel of the learner's, or None."""
        name = launch.get("name", "?")
        status = reply.get("status")
        if status == "ok" and reply.get("stores") is False:
            return (f"your kernel `{name}` stores nothing (Triton compiled it for a GPU and found no tl.store or gl.store): "
                    "a kernel's results reach memory only through its stores")  # fmt: skip
        if status == "ok":
            return None
        if status == "rejected":
            return (f"your kernel `{name}` is not one Triton's compiler accepts ({reply.get('message', '')}). "
                    "Under the interpreter a kernel's body runs as Python, so numpy, torch or Python calls there "
                    "seem to work; compiled for a GPU (as the grader checks it) only Triton code is allowed")  # fmt: skip
        if status == "missing":
            return (f"your kernel `{name}` is not defined at the top level of an exercise cell, where the grader "
                    "can compile it: define kernels with @triton.jit or @gluon.jit (or triton.jit(fn)) at a cell's top level")  # fmt: skip
        return f"your kernel `{name}` could not be compiled ({reply.get('type', status)}: {reply.get('message', '')[:200]})"


class RemoteFunction:
    """Stands for a function of the learner's inside the trusted process: calling it runs it in the worker."""

    __qmatmul_remote__ = True

    def __init__(self, worker: Worker, name: str, grid=None):
        self.worker, self.__name__, self.grid = worker, name, grid

    def __call__(self, *args, **kwargs):
        return self.worker.call(self.__name__, args, kwargs, grid=self.grid)[0]

    def audited(self, *args, what: str | None = None, **kwargs):
        """The call, with the aten ops it ran and its out-of-bounds accesses; the kernels it launched must be
        the learner's own, proven by Triton's compiler (Worker.prove_kernels)."""
        result, ops, outside = self.worker.call(
            self.__name__, args, kwargs, grid=self.grid, audit=True, what=what
        )
        what = what or self.__name__
        self.worker.prove_kernels(self.worker.last_launches, what)
        big = [(m, n) for m, n in self.worker.last_reads if int(n) > HOST_READ_LIMIT]
        if big:
            method, n = big[0]
            raise CheckFailed(
                f"{what} read the values of a {n}-element tensor into numpy or Python (`.{method}`): what is "
                "computed there no audit sees, so a kernel exercise leaves it to its kernel (an input check may "
                f"read a few values: at most {HOST_READ_LIMIT} a tensor)"
            )
        return result, ops, outside

    def drive(self, driver: str, *args, what: str | None = None, **kwargs):
        """driver(this function or class, *args, **kwargs), run in the worker: a course function ("qmatmul.m:f")
        that builds and exercises what the learner defined (a class, a model transform) and returns data."""
        return self.worker.call(self.__name__, args, kwargs, what=what, driver=driver)[0]

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        return RemoteFunction(self.worker, self.__name__, tuple(int(g) for g in grid))

    def own_kernel_problems(self) -> list[str]:
        """Reasons, read from the submitted source, why this function does not compute in its own Triton kernel."""
        src = self.worker.source
        if src is None:
            return []
        problems = static.own_kernel_problems(src, self.__name__)
        if src.escapes:
            shown = "; ".join(f.describe() for f in src.escapes[:3])
            more = f" and {len(src.escapes) - 3} more" if len(src.escapes) > 3 else ""
            problems.append(
                f"your notebook uses constructs that could hide work from the grader ({shown}{more}): kernel "
                "exercises earn nothing while they are there; flagged for your instructor"
            )
        return problems

    def __repr__(self):
        return f"<your {self.__name__}, run by the grader in a process of its own>"
