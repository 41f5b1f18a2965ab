"""`make release`: the student notebooks regenerated from solutions/, quiet about the one overwrite it expects.

    python -m autograder.release [ASSIGNMENT ...]   nbgrader generate_assignment ASSIGNMENT --force, each in turn

notebooks/ is committed, so on a fresh clone every chapter's release folder already exists and nbgrader says
`[GenerateAssignmentApp | WARNING] Removing existing assignment: .../notebooks/<chapter>` once a chapter: the
overwrite `--force` asks for. Those lines alone are left out (the one naming the chapter being generated); every
other line nbgrader writes, warnings and errors included, is passed on, and the first chapter that fails stops the
release with nbgrader's exit status, as the Makefile's loop did.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from autograder import nbgrader_cli

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = re.compile(
    r"^\[GenerateAssignmentApp \| WARNING\] Removing existing assignment: (?P<path>.+?)\s*$"
)


def expected(line: str, assignment: str) -> bool:
    """True for nbgrader's warning that it replaces `assignment`'s own release folder (what --force asks for)."""
    found = EXPECTED.match(line)
    return bool(found) and Path(found["path"]).name == assignment


def release(assignments: list[str], flags: tuple = (), cwd: Path = ROOT, err=None) -> int:
    """generate_assignment --force for each chapter, nbgrader's stderr passed on to `err` (default sys.stderr) less
    the expected overwrite warnings; its stdout is left as it is. Returns 0, or the first failing exit status."""
    err = err or sys.stderr
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for assignment in assignments:
        cmd = [*nbgrader_cli.COMMAND, "generate_assignment", assignment, "--force", *flags]
        with subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True) as proc:
            for line in proc.stderr:
                if not expected(line, assignment):
                    err.write(line)
                    err.flush()
        if proc.returncode != 0:
            return proc.returncode
    return 0


def main(argv: list[str] | None = None) -> int:
    from qmatmul.course import assignments

    args = sys.argv[1:] if argv is None else argv
    return release(args or assignments(ROOT))


if __name__ == "__main__":
    sys.exit(main())
