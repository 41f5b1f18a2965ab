"""nbgrader's exchange for a term: the folder and the students' config, and the timestamps that `nbgrader collect`
writes, for submissions copied in by hand.

    make_exchange(config_dir)          create the exchange (QMATMUL_EXCHANGE) and the students' config
    stamp_submissions(assignment)      write timestamp.txt into submissions that have none

`python -m autograder.term exchange | stamp` runs them (`make exchange`; `make autograde` stamps).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from autograder.nbgrader_cli import ROOT, SUBMITTED, students_with

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's (Exchange.timestamp_format), in UTC
COURSE_ID = "qmatmul"


# ----------------------------------------------------------------------------------------------------------
# The exchange


def exchange_root() -> Path:
    """The exchange nbgrader_config.py chooses (QMATMUL_EXCHANGE, or its default)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    return Path(config.Exchange.root).resolve()


def student_config(root: Path) -> str:
    return (
        "# nbgrader for the students of the qmatmul course (written by `make exchange`)\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(root)!r}\n"
    )


def make_exchange(config_dir: Path | None = None) -> Path:
    """Create the exchange folder, writable by everyone as nbgrader wants it (0777), and the students' config.

    The config (course id and exchange) goes to `<sys.prefix>/etc/jupyter/nbgrader_config.py`, which every
    Jupyter started from this environment reads: students who run the course's .venv see the course in their
    Assignment List. Students with an environment of their own need the same two lines in theirs (or in
    /etc/jupyter/nbgrader_config.py)."""
    root = exchange_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o777)  # nbgrader's ExchangeReleaseAssignment.ensure_root: rwx for all, no sticky bit
    except PermissionError:
        raise SystemExit(
            f"cannot create {root}: run `sudo mkdir -p {root} && sudo chmod 777 {root}` once, or choose a "
            "folder you own with QMATMUL_EXCHANGE=/path (students must be able to write to it)"
        ) from None
    config_dir = config_dir or Path(sys.prefix) / "etc" / "jupyter"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "nbgrader_config.py").write_text(student_config(root))
    print(f"exchange: {root} (mode 777)")
    print(f"students' nbgrader config: {config_dir / 'nbgrader_config.py'}")
    print("  (students with their own Jupyter: put these lines in ~/.jupyter/nbgrader_config.py)")
    print("  " + student_config(root).replace("\n", "\n  ").rstrip())
    return root


# ----------------------------------------------------------------------------------------------------------
# Timestamps of hand-copied submissions


def stamp_submissions(assignment: str, submitted: Path = SUBMITTED) -> list[str]:
    """Write timestamp.txt (the newest file's modification time, UTC) into every submission of `assignment`
    that has none, so that nbgrader can apply the due date. `nbgrader collect` writes its own; copy by hand
    with `cp -p` (or rsync -t, unzip) to keep the students' times. Returns the students stamped."""
    stamped = []
    for student in students_with(submitted, assignment):
        folder = submitted / student / assignment
        if (folder / "timestamp.txt").exists():
            continue
        files = [p for p in folder.rglob("*") if p.is_file()]
        if not files:
            continue
        newest = max(p.stat().st_mtime for p in files)
        when = dt.datetime.fromtimestamp(newest, dt.timezone.utc).strftime(TIMESTAMP_FORMAT)
        (folder / "timestamp.txt").write_text(when + "\n")
        stamped.append(student)
    if stamped:
        print(f"{assignment}: timestamp.txt written from the files' times for {', '.join(stamped)}")
    return stamped
