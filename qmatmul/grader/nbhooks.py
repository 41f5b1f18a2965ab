"""nbgrader preprocessors that make the trusted verdicts the gradebook's scores (nbgrader_config.py lists them).

    StashTests        before Execute: test cells are not run in the learner's kernel (their code is kept)
    ResilientExecute  nbgrader's Execute, but a kernel that dies (a segfault, a GPU fault) ends only the run
                      of the notebook's own cells: the grading goes on; each cell holds the GPU's lock shared
                      (qmatmul/timing/gpulock.py: no other grader's timed window runs meanwhile). It starts the
                      notebook's one time budget (`budget`, NOTEBOOK_BUDGET s): no cell runs past it
    TrustedGrades     after Execute: test cells get their code back and, as outputs, the trusted verdicts
                      (a printed line when passed, an error when not): nbgrader's SaveAutoGrades scores those

Every way to autograde (classroom.py, `nbgrader autograde`, Formgrader's button) runs this pipeline, since
nbgrader reads it from nbgrader_config.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Dict, Float, List, Unicode

from qmatmul.grader import notebook

# One wall-clock budget for a notebook, the run of its own cells and the trusted grading together: a cell that
# hangs costs its cells and at most this, never a timeout per test cell. An honest notebook grades in 1-2 minutes
# on the 2-core CPU machine and the H200 (docs/grading-h200.md); the slowest, the capstone on a CPU, in 3.
NOTEBOOK_BUDGET = float(os.environ.get("QMATMUL_NOTEBOOK_BUDGET", "900"))

PLACEHOLDER = (
    "# Graded by the course's trusted grader, outside this notebook's kernel: this code runs there.\n"
)


class StashTests(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        stash = {}
        for i, cell in enumerate(nb.cells):
            if notebook.role(cell) == "test":  # graded code that is not an answer
                stash[i] = cell.source
                cell.source = PLACEHOLDER
        resources.setdefault("qmatmul", {})["tests"] = stash
        return nb, resources


class ResilientExecute(Execute):
    budget = Float(
        NOTEBOOK_BUDGET, help="seconds for the whole notebook: its own cells and the trusted grading"
    ).tag(config=True)

    def preprocess(self, nb, resources, *args, **kwargs):
        # The deadline TrustedGrades passes on to the worker: the run of the notebook's cells spends from it too.
        resources.setdefault("qmatmul", {})["deadline"] = self._deadline = time.monotonic() + self.budget
        from qmatmul.checks import AUTOGRADE_ENV

        before = os.environ.get(AUTOGRADE_ENV)
        os.environ[AUTOGRADE_ENV] = (
            "1"  # the notebook's kernel inherits it: cells that award nothing may skip
        )

        from qmatmul.checks import harness
        from qmatmul.timing import gpulock

        previous = gpulock.active()
        t0, waited0 = time.monotonic(), gpulock.shared_waited_s
        try:
            return super().preprocess(nb, resources, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - DeadKernelError and friends: the notebook's own cells stop here
            self.log.warning(
                "the notebook's kernel stopped (%s: %s); grading goes on", type(exc).__name__, exc
            )
            resources.setdefault("qmatmul", {})["kernel_stopped"] = f"{type(exc).__name__}: {exc}"
            return nb, resources
        finally:
            if harness.profiling():
                self.log.info(execute_profile(time.monotonic() - t0, gpulock.shared_waited_s - waited0, t0))
            if before is None:
                os.environ.pop(AUTOGRADE_ENV, None)
            else:
                os.environ[AUTOGRADE_ENV] = before
            gpulock.active(previous)

    def preprocess_cell(self, cell, resources, index):
        """Each cell the learner's kernel runs may launch kernels: it shares the GPU, never beside a timing. No
        cell runs for longer than what is left of the notebook's budget; once it is spent, no cell runs. Between
        two code cells the kernel's processes are stopped (qmatmul/grader/freeze.py), so what the learner's code
        started in the background runs only inside a cell, while the cell holds the GPU shared; after the last
        code cell the kernel runs on to its shutdown."""
        from qmatmul.grader import freeze
        from qmatmul.timing import gpulock

        pid = getattr(getattr(getattr(self, "km", None), "provisioner", None), "pid", None)
        if pid is not None:
            freeze.cont(pid)
        left = self._deadline - time.monotonic()
        if cell.cell_type != "code" or left <= 0:
            return cell, resources
        timeout = self.timeout
        self.timeout = max(1, int(min(timeout, left))) if timeout else max(1, int(left))
        try:
            with gpulock.shared():
                out = super().preprocess_cell(cell, resources, index)
        finally:
            self.timeout = timeout
        # not after a cell that raised (a timeout, a dead kernel): the kernel is then shut down, and a stopped one
        # would make its shutdown wait
        later = any(c.cell_type == "code" for c in self.nb.cells[index + 1 :])
        if pid is not None and later and time.monotonic() < self._deadline:
            freeze.stop(pid)
        return out


def execute_profile(seconds: float, waited: float, t0: float) -> str:
    """QMATMUL_PROFILE=1's line for the run of the notebook's own cells (tools/parallel_grading.py reads it)."""
    return (
        f"profile execute: the notebook's own cells ran in its kernel in {seconds:.1f} s (its start included; "
        f"{waited:.1f} s waiting to share the GPU); the process had run {_since_process_start(t0)} s before"
    )


def _since_process_start(t: float) -> str:
    """Seconds from this process's start to time.monotonic() `t` (its imports, nbgrader's set-up), from Linux's
    /proc; "?" elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        started = uptime - ticks / os.sysconf("SC_CLK_TCK")  # seconds ago
        return f"{started - (time.monotonic() - t):.1f}"
    except (OSError, ValueError, IndexError):
        return "?"


class TrustedGrades(NbGraderPreprocessor):
    sandbox = Bool(False, help="run the learner's code in the sandbox (bubblewrap)").tag(config=True)
    sandbox_command = List(Unicode(), [], help="the command that wraps the worker in the sandbox").tag(
        config=True
    )
    sandbox_env = Dict({}, help="environment for the sandbox command (paths to hide)").tag(config=True)
    timeout = Float(240.0, help="seconds one call of the learner's code may take").tag(config=True)

    def preprocess(self, nb, resources):
        from qmatmul.grader import trusted

        for i, src in resources.get("qmatmul", {}).get("tests", {}).items():
            nb.cells[i].source = src
        cells = notebook.cells_of(nb)
        cwd = resources.get("metadata", {}).get("path") or None
        wrap, env = (), None
        if self.sandbox:
            if not self.sandbox_command:
                raise RuntimeError("TrustedGrades.sandbox is set but no sandbox_command is configured")
            wrap, env = self.sandbox_command, {**os.environ, **self.sandbox_env}
        deadline = resources.get("qmatmul", {}).get("deadline")
        verdicts = trusted.grade(cells, cwd=cwd, wrap=wrap, env=env, timeout=self.timeout, deadline=deadline,
                                 log=self.log.info)  # fmt: skip
        for v in verdicts:
            outputs = []
            if v.output:
                outputs.append(NotebookNode(output_type="stream", name="stdout", text=v.output))
            if v.error:
                name, message = v.error
                outputs.append(NotebookNode(output_type="error", ename=name, evalue=message,
                                            traceback=[f"{name}: {message}"]))  # fmt: skip
            nb.cells[v.index].outputs = outputs
            nb.cells[v.index].execution_count = None
        return nb, resources
