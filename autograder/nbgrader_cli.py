"""nbgrader's command line, run from the repository root on the real class's folders (nbgrader_config.py's).

    nbgrader(*args, quiet, flags)   one nbgrader command, the course's environment first on PATH
    students_with(base, assignment) the students with a folder for an assignment under submitted/ or autograded/
    COMMAND                         how the course starts nbgrader: `python -m nbgrader` less one slow import

classroom.py runs nbgrader its own way (output to files, a timeout, the demo's folders): CourseDirs there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBMITTED = ROOT / "autograder" / "submitted"
AUTOGRADED = ROOT / "autograder" / "autograded"
FEEDBACK = ROOT / "autograder" / "feedback"
# How the course starts nbgrader: `python -m nbgrader ARGS`, in a process where `rfc3987_syntax` cannot be imported.
# jsonschema imports it eagerly, if installed, for the "iri" string format, which no notebook schema uses (optional
# there: jsonschema goes on without it), and it builds about 35 Earley parsers at import: 2.7 s of every grading
# process's start on the 2-core machine, a tenth of a notebook's grading (jsonschema issue #1428; still eager in
# 4.26). Self-contained, so it runs from any folder.
COMMAND = [
    sys.executable,
    "-c",
    "import sys; sys.modules['rfc3987_syntax'] = None; sys.argv[0] = 'nbgrader'; "
    "from nbgrader.apps.nbgraderapp import main; main()",
]


def students_with(base: Path, assignment: str) -> list[str]:
    """Students that have a folder for this assignment under base (submitted/ or autograded/)."""
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir())


def nbgrader(*args: str, quiet: bool = False, flags: tuple = ()) -> subprocess.CompletedProcess:
    """Run nbgrader from the repository root with the course's environment first on PATH; `flags` override
    nbgrader_config.py (tests point the course at folders of their own)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [*COMMAND, *args, *flags]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=quiet, text=True)
