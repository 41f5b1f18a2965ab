# nbgrader configuration of the course. Paths are relative to the repository root (run nbgrader from there).
# solutions/<assignment>/ is the source; `nbgrader generate_assignment` writes the student notebooks to
# notebooks/<assignment>/. A class's submissions go to autograder/submitted/<student>/<assignment>/.
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "qmatmul"
c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
c.CourseDirectory.db_url = "sqlite:///autograder/gradebook.db"
c.CourseDirectory.source_with_tests_directory = "build/source_with_tests"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "build"]

# Triton compiles each kernel on first use (seconds on a GPU), and the interpreter runs kernels as numpy:
# a cell may take minutes, never hours. A hung kernel is interrupted and that cell gets no points.
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# --- trusted grader ---
# Scores come from the course's trusted grader (qmatmul/grader), never from the notebook's own kernel: test
# cells are set aside before Execute and graded afterwards, outside the process that runs the student's code.
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

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
    sys.path.insert(0, str(Path(__file__).resolve().parent / "autograder"))
    import sandbox  # noqa: E402

    sandbox.configure(c)
