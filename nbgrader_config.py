# nbgrader configuration of the course. nbgrader reads it from the directory it runs in (the repository root,
# as the Makefile and `jupyter lab` started there do); every path below is absolute, computed from this file's
# own location, so nbgrader, Formgrader and `autograder/classroom.py` agree wherever they start.
# solutions/<assignment>/ is the source; `nbgrader generate_assignment` writes the student notebooks to
# notebooks/<assignment>/. A class's submissions go to autograder/submitted/<student>/<assignment>/.
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821
ROOT = Path(__file__).resolve().parent
# nbgrader imports the autograder package's plug-ins (below) by name: a process started elsewhere (Formgrader's
# Jupyter server, the `nbgrader` script) has the checkout on its path only through this line.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

c.CourseDirectory.course_id = "qmatmul"
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
# The gradebook: SQLite in autograder/ for one grading process; for grading in parallel (`make autograde
# JOBS=N`, several writers at once) a PostgreSQL database named by QMATMUL_DB_URL, e.g.
# postgresql+psycopg://grader@dbhost/qmatmul (course.md, "A class of hundreds").
c.CourseDirectory.db_url = (
    os.environ.get("QMATMUL_DB_URL") or f"sqlite:///{ROOT / 'autograder' / 'gradebook.db'}"
)
c.CourseDirectory.source_with_tests_directory = "build/source_with_tests"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "build"]

# The exchange: where `nbgrader release_assignment` (Formgrader's Release) puts the notebooks, students'
# Assignment List fetches and submits, and `nbgrader collect` picks the submissions up. Choose it with
# QMATMUL_EXCHANGE (a folder every student can write to); `make exchange` creates it with nbgrader's
# permissions and writes the two lines students' Jupyter needs (see course.md, "Instructor guide").
c.Exchange.root = os.environ.get("QMATMUL_EXCHANGE") or "/srv/nbgrader/exchange"
# Collect takes in regular files only, never through a link a student left in their inbound folder.
c.ExchangeFactory.collect = "autograder.intake.SafeCollect"

# Triton compiles each kernel on first use (seconds on a GPU), and the interpreter runs kernels as numpy:
# a cell may take minutes, never hours. A hung kernel is interrupted and that cell gets no points. nbgrader
# runs every cell whatever the cells before it raised.
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True
# And one budget for a whole notebook, the run of its cells and the trusted grading together (seconds;
# QMATMUL_NOTEBOOK_BUDGET, default 900: qmatmul/grader/nbhooks.py): a hang costs its cells and at most this.

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# nbgrader restores the hidden tests of every test cell from the gradebook and logged that as a warning
# ("Attribute 'checksum' for cell test_quantizer has changed") even for an untouched notebook. This subclass
# does exactly what nbgrader's OverwriteCells does and logs the expected restoration at INFO; a locked cell a
# student really edited is still reported as a warning (and restored).
# The first step refuses a submission that holds anything but regular files (autograder/intake.py: a symlink
# there would make nbgrader read or write whatever it names).
c.Autograde.sanitize_preprocessors = [
    "autograder.intake.RegularFilesOnly",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "autograder.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Feedback HTML a student can read (autograder/preprocessors.py, StudentFeedback): hidden tests' code left out
# (set show_hidden_tests = True to show it), each error reduced to its message (no traceback through the
# grader), long lines wrapped.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "autograder.preprocessors.StudentFeedback",  # after the CSS one: it adds its CSS to that one's
]
c.StudentFeedback.show_hidden_tests = False
c.StudentFeedback.short_tracebacks = True

# Late submissions: nbgrader compares each submission's timestamp.txt (written by `nbgrader collect`, and by
# `make autograde` for hand-copied folders) with the assignment's due date (Formgrader's "Manage Assignments",
# or `nbgrader db assignment add w8a16 --duedate="2027-01-15 23:59 UTC"`). "zero" scores a late submission 0;
# "none" (nbgrader's default) only records how late it was.
c.LateSubmissionPlugin.penalty_method = "none"

# --- trusted grader ---
# Scores come from the course's trusted grader (qmatmul/grader), never from the notebook's own kernel: test
# cells are set aside before Execute and graded afterwards, outside the process that runs the student's code.
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

from qmatmul.grader.nbhooks import ResilientExecute, StashTests, TrustedGrades  # noqa: E402

c.Autograde.autograde_preprocessors = [
    StashTests, ResilientExecute, TrustedGrades, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]  # fmt: skip
c.TrustedGrades.timeout = float(os.environ.get("QMATMUL_CHECK_TIMEOUT", "240"))
if os.environ.get("QMATMUL_SANDBOX") == "1":  # untrusted classes: `make autograde SANDBOX=1`
    from autograder import sandbox  # noqa: E402

    sandbox.configure(c)
