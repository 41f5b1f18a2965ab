"""The notebooks end to end: in sync, clean, runnable, and graded by the real nbgrader as expected."""

import hashlib
import json
import subprocess
import sys

import pytest
from conftest import HAS_GPU, ROOT

from autograder import classroom, demo
from tools.run_all import run_notebook

ASSIGNMENTS = classroom.assignments()
pytestmark = pytest.mark.slow


def test_every_assignment_has_a_student_notebook_and_a_demo_class():
    assert ASSIGNMENTS, "no solution notebooks found"
    for a in ASSIGNMENTS:
        assert list((ROOT / "notebooks" / a).glob("*.ipynb")), f"notebooks/{a} is missing: run `make release`"
        names = {s.name for s in demo.students(a)}
        assert {"correct", "blank"} <= names, f"demo class of {a} lacks a correct or a blank submission"


def test_notebooks_are_committed_without_outputs():
    res = subprocess.run(
        [sys.executable, "-m", "tools.notebook_format", "--check", "solutions", "notebooks"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, f"run `make format`:\n{res.stdout}"


_CACHE: dict = {}


def released(assignment: str, tmp_path_factory) -> classroom.CourseDirs:
    """A fresh `nbgrader generate_assignment` of one assignment into a scratch course (once per worker)."""
    key = ("release", assignment)
    if key not in _CACHE:
        base = tmp_path_factory.mktemp(f"course-{assignment}")
        dirs = classroom.CourseDirs(
            submitted=str(base / "submitted"), autograded=str(base / "autograded"), feedback=str(base / "feedback"),
            release=str(base / "release"), db=str(base / "gradebook.db"),
        )  # fmt: skip
        res = classroom.nbgrader("generate_assignment", assignment, "--force", dirs=dirs)
        assert res.returncode == 0, res.stderr
        _CACHE[key] = dirs
    return _CACHE[key]


# Each assignment's tests share one release and one grading: keep them on one xdist worker. The group is this
# file's own: named after the chapter alone it merged with test_capstone.py's "capstone" and test_parallel.py's
# "roofline" groups, which share nothing with it, and put both on one worker.
PER_ASSIGNMENT = [pytest.param(a, marks=pytest.mark.xdist_group(f"notebooks-{a}")) for a in ASSIGNMENTS]


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_student_notebook_is_generated_from_the_solution(assignment, tmp_path_factory):
    dirs = released(assignment, tmp_path_factory)
    for committed in (ROOT / "notebooks" / assignment).glob("*.ipynb"):
        fresh = (ROOT / dirs.release / assignment / committed.name).read_text()
        assert committed.read_text() == fresh, (
            f"{committed.relative_to(ROOT)} differs from a fresh generation of solutions/{assignment}: "
            "run `make release` and commit the result"
        )


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_solution_notebook_runs_top_to_bottom(assignment, tmp_path):
    """Run All, as a learner would (under TRITON_INTERPRET=1 without a GPU): no cell may raise, since Jupyter stops
    at the first error; performance cells say "not measured here" instead. Every cell is executed even past an
    error, so one run reports all of them."""
    failures = [
        f for path in (ROOT / "solutions" / assignment).glob("*.ipynb") for f in run_notebook(path, tmp_path)
    ]
    assert not failures, "Run All stops here:\n" + "\n".join(failures)


def _digest(folder):
    return {
        p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


def demo_gradebook(assignment: str, tmp_path_factory) -> dict:
    """The demo class of one assignment, graded by the real `nbgrader autograde` (once per worker): the whole class
    in one nbgrader run (classroom.autograde_at_once); classroom.py's run per student is graded by
    tests/test_adversarial.py and tests/test_parallel.py."""
    key = ("demo", assignment)
    if key not in _CACHE:
        dirs = released(assignment, tmp_path_factory)
        students = [st for st in demo.students(assignment) if st.e2e]
        for st in students:
            classroom.build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / assignment)
        before = _digest(ROOT / dirs.submitted)
        failures = classroom.autograde_at_once(assignment, dirs)
        after = _digest(ROOT / dirs.submitted)
        rows = {r["student"]: r for r in classroom.gradebook(assignment, dirs)}
        classroom.print_gradebook(assignment, list(rows.values()), failures)
        _CACHE[key] = dict(
            students=students, rows=rows, failures=failures, unchanged=before == after, dirs=dirs
        )
    return _CACHE[key]


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_demo_class_grades_as_its_files_expect(assignment, tmp_path_factory):
    """Through the real nbgrader: the students marked e2e (correct, blank and a few whose point is nbgrader's
    handling: a crash, a deleted cell, a known mistake)."""
    res = demo_gradebook(assignment, tmp_path_factory)
    assert not res["failures"], res["failures"]
    rows = {name: (row["scores"], row["messages"]) for name, row in res["rows"].items()}
    assert _expectations_met(res["students"], rows) >= 3 * len(res["students"])
    # What leaves the class's maximum is what the grading machine could not measure for the correct student (the
    # trusted grader's NotMeasured), never a cell a student's own message says "not measured" of
    # (autograder/demo_class/w8a16/forged_not_measured.txt).
    correct = res["rows"]["correct"]
    machine = {c for c, m in correct["messages"].items() if m.startswith("NotMeasured")}
    assert {c for row in res["rows"].values() for c in row["unmeasured"]} == machine
    assert len({row["max"] for row in res["rows"].values()}) == 1


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_every_demo_student_grades_as_its_file_expects(assignment):
    """Every demo student not graded through nbgrader above (e2e), through the trusted grader directly
    (autograder/grade_direct.py: the grading nbgrader runs, without the notebook kernel)."""
    from autograder import grade_direct

    where = "gpu" if HAS_GPU else "cpu"
    students = [st for st in demo.students(assignment) if not st.e2e]
    for st in students:
        st.changed_cells()  # every patch still applies to the solution
    # A student whose every expectation here is the correct submission's (a GPU-only mistake, such as a forward
    # that cannot be captured, graded on a CPU) shows nothing the correct student does not: graded where it differs.
    students = [st for st in students if st.name == "correct" or not _like_correct(st, where)]
    rows = {}
    for st in students:
        res = grade_direct.grade(assignment, grade_direct.student_overrides(st))
        rows[st.name] = (
            {gid: (r.points, None) for gid, r in res.items()},
            {gid: r.message for gid, r in res.items()},
        )
    assert _expectations_met(students, rows) >= 3 * len(students)


def _like_correct(student, where: str) -> bool:
    """Every expectation of `student` in scope `where` is the correct submission's (points, and a message the
    correct one's contains)."""
    correct = next(st for st in demo.students(student.assignment) if st.name == "correct")

    def scoped(st):
        return {
            cell: (points, message) for scope, cell, points, message in st.expects if scope in ("any", where)
        }

    mine, theirs = scoped(student), scoped(correct)
    return mine.keys() == theirs.keys() and all(
        p == theirs[c][0] and m in theirs[c][1] for c, (p, m) in mine.items()
    )


def _expectations_met(students, rows) -> int:
    """rows: name -> (scores, messages) with scores grade_id -> (points, max)."""
    rows = {
        name: ({c: p[0] for c, p in scores.items()}, messages) for name, (scores, messages) in rows.items()
    }
    failed, checked = demo.unmet(students, rows, "gpu" if HAS_GPU else "cpu")
    assert not failed, "\n".join(failed)
    return checked


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_correct_submission_ranks_above_every_wrong_one(assignment, tmp_path_factory):
    rows = demo_gradebook(assignment, tmp_path_factory)["rows"]
    correct = rows["correct"]["total"]
    unmeasured = {c for c, m in rows["correct"]["messages"].items() if m.startswith("NotMeasured")}
    assert HAS_GPU or unmeasured, "without a GPU the performance cells must say they measured nothing"
    best = sum(mx for c, (_, mx) in rows["correct"]["scores"].items() if c not in unmeasured)
    assert correct == best, rows["correct"]["messages"]
    for name, row in rows.items():
        if name != "correct":
            assert row["total"] < correct, f"{name} scored {row['total']}, the correct submission {correct}"


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_submitted_notebooks_are_never_modified(assignment, tmp_path_factory):
    assert demo_gradebook(assignment, tmp_path_factory)["unchanged"]


@pytest.mark.parametrize("assignment", PER_ASSIGNMENT)
def test_autograded_copy_keeps_hidden_tests(assignment, tmp_path_factory):
    """nbgrader restores the hidden tests from the gradebook, whatever the student's copy holds."""
    res = demo_gradebook(assignment, tmp_path_factory)
    for nb in (ROOT / res["dirs"].autograded / "correct" / assignment).glob("*.ipynb"):
        text = json.loads(nb.read_text())
        assert any("hidden=True" in "".join(c["source"]) for c in text["cells"])
