"""What to do, for what nbgrader (and the database under it) reports in its own words: one sentence an instructor
can act on, appended to the error line classroom.py, feedback.py and the hand-back print.

    advise(stderr)   "" or " (what to do)" for the first known message in a failed run's stderr
"""

from __future__ import annotations

import re

# (what nbgrader or its database says, what the instructor does), most specific first.
ADVICE = [
    (r"No assignment with ID '(?P<a>[^']+)' exists in the database",
     "the chapter was never released into this gradebook: run `make release` first (with the same QMATMUL_DB_URL), "
     "then grade again"),
    (r"NotJSONError|Notebook does not appear to be JSON|Unreadable Notebook",
     "the student's notebook is not a readable notebook (a damaged file): `make feedback` tells them so; grade "
     "again once they submit a good one"),
    (r"SubmissionError: not graded",
     "the submission holds links or special files: ask the student to submit the notebook itself"),
    (r"database is locked",
     "another process is writing the SQLite gradebook (Formgrader's Autograde, a second `make autograde`): wait for "
     "it to finish, or grade in parallel on PostgreSQL (course.md, A class of hundreds)"),
    (r"password authentication failed|role \"[^\"]+\" does not exist|database \"[^\"]+\" does not exist",
     "QMATMUL_DB_URL names a user, password or database the PostgreSQL server does not have: create them "
     "(course.md, The gradebook on PostgreSQL)"),
    (r"Connection refused|could not connect to server|connection to server .* failed|No such file or directory\s+Is "
     r"the server running",
     "no PostgreSQL server answers at QMATMUL_DB_URL: start it (course.md, The gradebook on PostgreSQL) or unset "
     "QMATMUL_DB_URL for the SQLite gradebook"),
    (r"no such table|relation \"[^\"]+\" does not exist|UndefinedTable",
     "the gradebook is a new, empty database: run `make release` to record the chapters and `make students "
     "ROSTER=roster.csv` to import the class list"),
    (r"No such file or directory: '(alembic|jupyter)'|alembic: not found|alembic: command not found",
     "nbgrader's helpers are not on PATH: run it through `make` (it puts .venv/bin first) or activate .venv"),
    (r"ran past \d+ s",
     "the notebook's grading hung or ran too long: grade that student again, or raise QMATMUL_STUDENT_TIMEOUT"),
    (r"Permission denied",
     "the grader cannot write the course's folders: the account that grades must own autograder/ and the gradebook"),
    (r"No notebooks were matched|Source assignment .* doesn't exist|No source notebooks",
     "the chapter's notebooks are not where nbgrader_config.py says: run from the repository root, with solutions/ "
     "present"),
]  # fmt: skip


def advise(stderr: str) -> str:
    """' (what to do)' for the first message of ADVICE found in `stderr`, or ''."""
    for pattern, what in ADVICE:
        if re.search(pattern, stderr or ""):
            return f" ({what})"
    return ""
