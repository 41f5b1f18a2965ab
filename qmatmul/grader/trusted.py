"""Grade one notebook: each test cell's checks run in this (trusted) process, on the learner's functions as
stand-ins that run in a worker process. What the worker says can only take points away; inputs, seeds,
references and every comparison stay here.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import time
from dataclasses import dataclass

from qmatmul import checks, environment
from qmatmul.checks import CheckFailed, LearnerError, harness
from qmatmul.grader import notebook, static
from qmatmul.grader.remote import RemoteFunction, Worker
from qmatmul.timing import gpulock

__all__ = ["Verdict", "trusted_namespace", "learner_source", "grade", "flags"]


@dataclass
class Verdict:
    index: int  # the cell's position in the notebook
    grade_id: str
    points: float
    max_points: float
    output: str  # what the checks printed
    error: tuple[str, str] | None  # (name, message) when the cell earns nothing
    seconds: float

    @property
    def message(self) -> str:
        return "" if self.error is None else f"{self.error[0]}: {self.error[1]}"


_NAMESPACES: dict = {}


def trusted_namespace(cells: list[notebook.Cell]) -> dict:
    """The names the test cells use (torch, the chapter modules, env), from the release's locked imports."""
    scaffold = notebook.scaffold_source(cells)
    if scaffold not in _NAMESPACES:
        ns = {"env": environment.start(quiet=True), "__name__": "qmatmul_trusted"}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(scaffold, "<course scaffolding>", "exec"), ns)  # noqa: S102
        _NAMESPACES[scaffold] = ns
    return dict(_NAMESPACES[scaffold])


def learner_source(cells: list[notebook.Cell], overrides: dict | None = None) -> static.Source:
    program = notebook.program(cells, overrides)
    learners = {c.grade_id for c in cells if c.role == "solution"}
    source = static.parse([(label, src, label in learners) for label, src in program])
    source.added = notebook.added_definitions(cells)  # cells the grader does not run: for its messages
    return source


def _names(src: str) -> set[str]:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _added_cells(message: str, called: set[str], source: static.Source | None) -> str:
    """A failed cell's message, with why a name it misses is missing when only a cell the grader does not run
    (one the learner added) defines it: a NameError for that name, or the function the test calls left unfilled
    in its exercise cell (its finished version written in such a cell)."""
    if source is None:
        return message
    names = {n for n in re.findall(r"name '(\w+)' is not defined", message) if n not in source.defs}
    if "is not implemented yet" in message:
        names |= called
    notes = [static.added_cell_note(n, source.added[n]) for n in sorted(names) if n in source.added]
    notes = [n for n in notes if n not in message]
    return " ".join([message.rstrip(), "; ".join(notes)]) if notes else message


def grade(cells: list[notebook.Cell], *, cwd=None, wrap=(), env=None, timeout: float = 240.0,
          deadline: float | None = None, overrides: dict | None = None, only=None, log=None) -> list[Verdict]:  # fmt: skip
    """Verdicts of the notebook's test cells (those whose grade_id contains one of `only`, if given). `deadline`
    (time.monotonic()) ends the notebook's grading: what is left of it bounds every start and call."""
    strict, checks.STRICT = checks.STRICT, True
    locking = gpulock.active()  # timed windows alone on their GPU, across the host's graders
    try:
        return _grade(cells, cwd=cwd, wrap=wrap, env=env, timeout=timeout, deadline=deadline, overrides=overrides,
                      only=only, log=log)  # fmt: skip
    finally:
        checks.STRICT = strict
        gpulock.active(locking)


def _grade(cells, *, cwd, wrap, env, timeout, deadline, overrides, only, log) -> list[Verdict]:
    ns = trusted_namespace(cells)
    worker = Worker(notebook.program(cells, overrides), source=learner_source(cells, overrides), release=ns,
                    cwd=cwd, wrap=wrap, env=env, timeout=timeout, deadline=deadline)  # fmt: skip
    verdicts = []
    profile = _Profile(worker) if log and harness.profiling() else None
    try:
        for cell in notebook.tests(cells):
            if only and not any(o in cell.grade_id for o in only):
                continue
            t0 = time.time()
            scope = dict(ns)
            for name in _names(cell.source) - set(ns) - set(dir(builtins)):
                scope[name] = RemoteFunction(worker, name)
            out = io.StringIO()
            error = None
            try:
                # The GPU's lock: shared until the cell's first timing, exclusive from there to its end.
                with contextlib.redirect_stdout(out), gpulock.cell():
                    exec(compile(cell.source, f"<test cell {cell.grade_id}>", "exec"), scope)  # noqa: S102
            except CheckFailed as exc:
                error = (type(exc).__name__, str(exc))
            except LearnerError as exc:
                error = (
                    "CheckFailed",
                    f"your code raised {exc.type_name}: {str(exc).splitlines()[0] if str(exc) else ''}",
                )
            except Exception as exc:  # noqa: BLE001 - the grader's own failure costs the cell, and is reported
                error = ("GraderError", f"the grader could not check this cell ({type(exc).__name__}: {exc})")
            if error is not None:
                error = (error[0], _added_cells(error[1], _names(cell.source), worker.source))
            v = Verdict(cell.index, cell.grade_id, 0.0 if error else cell.points, cell.points, out.getvalue(),
                        error, time.time() - t0)  # fmt: skip
            verdicts.append(v)
            if log:
                log(
                    f"{cell.grade_id}: {v.points:g}/{v.max_points:g} ({v.seconds:.1f} s){' ' + v.message.splitlines()[0][:200] if error else ''}"
                )
            if profile:
                profile.cell(v, log)
        if worker.source is not None and worker.source.escapes and log:
            for f in worker.source.escapes:
                log(f"flagged: {f.describe()}")
    finally:
        worker.close()
    if profile:
        profile.total(log)
    return verdicts


class _Profile:
    """QMATMUL_PROFILE=1: where a notebook's trusted grading spent its seconds, a log line a cell and one in all
    (the worker's start, which runs the notebook's cells; proving kernels (in the compile worker on a CPU); the GPU lock's
    waits and exclusive hold; the timed problems' own profile lines). Never a verdict."""

    def __init__(self, worker: Worker):
        self.worker, self.t0 = worker, time.monotonic()
        self.first = self.last = self._now()

    def _now(self) -> dict:
        return {"start_s": self.worker.start_s, "compile_s": self.worker.compile_s,
                "shared_waited_s": gpulock.shared_waited_s, "waited_s": gpulock.waited_s, "held_s": gpulock.held_s}  # fmt: skip

    def _line(self, head: str, since: dict) -> str:
        d = {f: v - since[f] for f, v in self.last.items()}
        return (f"profile {head}; worker start {d['start_s']:.1f} s, kernels proven in {d['compile_s']:.1f} s, "
                f"waited {d['shared_waited_s']:.1f} s to share the GPU and {d['waited_s']:.1f} s for it alone, "
                f"held it alone {d['held_s']:.1f} s")  # fmt: skip

    def cell(self, v: Verdict, log) -> None:
        since, self.last = self.last, self._now()
        log(self._line(f"cell {v.grade_id}: {v.seconds:.1f} s", since))
        for line in v.output.splitlines():
            if line.startswith("profile "):
                log(f"profile cell {v.grade_id}: {line.removeprefix('profile ')}")

    def total(self, log) -> None:
        log(self._line(f"trusted: {time.monotonic() - self.t0:.1f} s", self.first))


def flags(cells: list[notebook.Cell]) -> list[str]:
    """The constructs in the learner's cells that the instructor should see (static.ESCAPE_*)."""
    return [f.describe() for f in learner_source(cells).escapes]
