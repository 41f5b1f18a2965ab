"""The sandbox for untrusted classes, as nbgrader configuration: nbgrader_config.py calls configure() when
QMATMUL_SANDBOX=1, so every way to autograde (classroom.py, `nbgrader autograde`, Formgrader) honours it.

Both processes that run a submission's code go through sandbox_exec.sh (bubblewrap): the notebook kernel (its
outputs and figures) and the trusted grader's worker (the graded calls).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "autograder" / "sandbox_exec.sh"
KERNEL = "qmatmul-sandbox"
PACKAGE = ROOT / "qmatmul"  # the one folder of the checkout the sandbox shows (read-only)
EXTRA_ENV = (
    "QMATMUL_SANDBOX_EXTRA_HIDE"  # more paths to hide (os.pathsep-separated), e.g. a class's own folders
)


def available() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--unshare-user",
                            "--cap-drop", "ALL", "true"], capture_output=True)  # fmt: skip
    return probe.returncode == 0


def shown() -> list[str]:
    """What the sandbox shows read-only besides the system's folders (sandbox_exec.sh): the interpreter's
    prefixes, the worker's import path (qmatmul.grader.remote.import_path: the standard library, site-packages,
    a GPU box's wheel folders) and, of the course's checkout, the package alone (with the files its links name):
    the checkout itself is an empty folder there."""
    from qmatmul.grader.remote import import_path

    root = ROOT.resolve()
    out = [str(PACKAGE.resolve())]
    out += sorted({str(p.resolve()) for p in PACKAGE.rglob("*") if p.is_symlink()})  # bench-h200.json: docs/
    for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, *import_path()]:
        path = Path(p).resolve()
        if path != root and str(path) not in out and path.exists():
            out.append(str(path))
    return out


def hidden(exchange: str | None = None) -> list[str]:
    """Paths emptied inside what the sandbox shows: the checkout (the package is shown again on top), a class's
    folders given by EXTRA_ENV, the exchange (nbgrader's Exchange.root), and what parallel grading shares: the GPU locks, a local
    PostgreSQL server's socket folder. Most of them are not shown at all (sandbox_exec.sh builds its file system
    from shown()); hiding them too keeps them hidden where a course is installed under /opt or /usr."""
    from qmatmul.timing import gpulock

    extra = [p for p in os.environ.get(EXTRA_ENV, "").split(os.pathsep) if p]
    shared = [str(gpulock.lock_dir().resolve()), *[d for d in ("/run/postgresql",) if Path(d).is_dir()]]
    extra += [exchange] if exchange else []
    return [str(ROOT.resolve()), *[str(Path(p).resolve()) for p in extra], *shared]


def configure(c) -> None:
    """Point nbgrader's kernel and the trusted grader's worker at sandbox_exec.sh."""
    if not available():
        raise SystemExit(
            "QMATMUL_SANDBOX=1 needs bubblewrap with user namespaces: apt-get install bubblewrap"
        )
    spec = ROOT / "build" / "sandbox" / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(SCRIPT), sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (qmatmul sandbox)",
                                                  "language": "python"}))  # fmt: skip
    # nbgrader may read its configuration more than once: one runtime folder for the process.
    runtime = os.environ.get("QMATMUL_SANDBOX_RUNTIME") or tempfile.mkdtemp(
        prefix="qms-"
    )  # short: socket paths
    hide, read = ":".join(hidden(exchange=c.Exchange.root)), ":".join(shown())
    # The kernel's connection file goes to a temporary file: into the runtime folder, which the sandbox binds
    # (its own /tmp is private).
    os.environ["TMPDIR"] = tempfile.tempdir = runtime
    os.environ.update(JUPYTER_PATH=str(spec.parent.parent), JUPYTER_RUNTIME_DIR=runtime,
                      QMATMUL_SANDBOX_RUNTIME=runtime, QMATMUL_SANDBOX_HIDE=hide,
                      QMATMUL_SANDBOX_READ=read)  # fmt: skip
    c.Execute.kernel_name = KERNEL
    c.KernelManager.transport = "ipc"
    c.KernelManager.ip = f"{runtime}/kernel"
    c.TrustedGrades.sandbox = True
    c.TrustedGrades.sandbox_command = [str(SCRIPT)]
    c.TrustedGrades.sandbox_env = {"QMATMUL_SANDBOX_HIDE": hide, "QMATMUL_SANDBOX_READ": read}
