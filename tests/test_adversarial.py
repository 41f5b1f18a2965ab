"""Every way of cheating found so far, graded by the real nbgrader: each earns nothing it does not deserve,
and honest code in unusual shapes earns full marks. Plain mode and the sandbox.

The submissions live in autograder/adversarial/<chapter>/ (the demo class's format: cells that replace the
solution's, and `expect` lines). course.md's threat model says which families each mode defends.
"""

import time

import pytest
from conftest import ROOT, skip_unless_required

from autograder import classroom, demo

pytestmark = pytest.mark.slow
CORPUS = ROOT / "autograder" / "adversarial"
# Unsandboxed, these would really write into the package, or replace the gradebook by a link.
SANDBOX_ONLY = {"sandbox_escape", "plant_links"}
ALONE = {"sleeper"}  # spends a notebook's whole time budget: graded by a test of its own, with a short budget


def corpus(chapter: str) -> list:
    return [demo.load(p) for p in sorted((CORPUS / chapter).glob("*.py"))]


def grade(tmp_path, students, sandbox: bool, monkeypatch, together=(), chapter="w8a16",
          alone_first=False) -> tuple[dict, dict]:  # fmt: skip
    """The gradebook's rows and, for each student graded by a run of its own (classroom.py's path), the run's
    (start, end). The students named in `together` are graded in one nbgrader run (classroom.autograde_at_once):
    first, or after the others with `alone_first`."""
    dirs = classroom.CourseDirs(
        submitted=str(tmp_path / "submitted"), autograded=str(tmp_path / "autograded"),
        feedback=str(tmp_path / "feedback"), release=str(tmp_path / "release"), db=str(tmp_path / "gradebook.db"),
        sandbox=sandbox,
    )  # fmt: skip
    monkeypatch.setenv("ESCAPE_GRADEBOOK", str(tmp_path / "gradebook.db"))
    assert classroom.nbgrader("generate_assignment", chapter, "--force", dirs=dirs).returncode == 0

    def submit(group):
        for st in group:
            classroom.build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / chapter)

    alone = [st for st in students if st.name not in together]

    def at_once():
        group = [st for st in students if st.name in together]
        if group:
            submit(group)  # only these are submitted while nbgrader grades every submission it finds
            failures = classroom.autograde_at_once(
                chapter, dirs, exclude=tuple(st.name for st in alone) if alone_first else ()
            )
            assert not failures, failures

    if not alone_first:
        at_once()
    submit(alone)
    spans = {}  # student -> (started, ended), wall-clock seconds
    for st in alone:
        t0 = time.time()
        failures = classroom.autograde(chapter, [st.name], dirs)
        spans[st.name] = (t0, time.time())
        assert not failures, failures
    if alone_first:  # the run of those graded together leaves out the submissions graded alone before it
        at_once()
    rows = {r["student"]: r for r in classroom.gradebook(chapter, dirs)}
    classroom.print_gradebook(chapter, list(rows.values()))
    return rows, spans


def assert_expected(students, rows) -> None:
    """The gradebook against each student's expectations: classroom.expectations_met (demo.unmet, the one rule)
    prints every UNEXPECTED line, which pytest shows when this fails."""
    assert classroom.expectations_met(students, list(rows.values())), "see the UNEXPECTED lines above"


@pytest.mark.parametrize(
    "chapter", sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "w8a16")
)
def test_every_chapters_corpus_earns_what_it_deserves(tmp_path, monkeypatch, chapter):
    """The other chapters' cases, all of a chapter in one nbgrader run (plain mode)."""
    students = corpus(chapter)
    rows, _ = grade(tmp_path, students, sandbox=False, monkeypatch=monkeypatch,
                    together={s.name for s in students}, chapter=chapter)  # fmt: skip
    assert_expected(students, rows)


def _autograded(tmp_path, name):
    return tmp_path / "autograded" / name / "w8a16"


@pytest.mark.xdist_group("adversarial-plain")
def test_the_corpus_earns_what_it_deserves_without_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("DETACHED_MARKER", "detached-marker.txt")
    monkeypatch.setenv("DETACHED_SLEEP", "300")
    students = [s for s in corpus("w8a16") if s.name not in SANDBOX_ONLY | ALONE]
    together = {s.name for s in students} - {"detached"}  # the detached student's own run is timed
    rows, spans = grade(tmp_path, students, sandbox=False, monkeypatch=monkeypatch, together=together)
    assert_expected(students, rows)
    assert spans["detached"][1] - spans["detached"][0] < 200, "a detached process held the grader up"
    for st in students:  # the scores are the trusted grader's: every graded cell carries its verdict
        assert set(rows[st.name]["scores"]) == {
            "test_quantizer",
            "test_prefill",
            "test_decode",
            "test_decode_bandwidth",
        }


BUDGET = 25  # seconds: QMATMUL_NOTEBOOK_BUDGET for the sleeper (every cell of it earns 0 either way)


@pytest.mark.xdist_group("adversarial-plain")
def test_a_hang_costs_at_most_the_notebooks_budget(tmp_path, monkeypatch):
    """The sleeper's quantizer cell never ends: the run of the notebook's cells stops at the budget, and every
    test cell fails at once naming it (before: 300 s for the notebook's cell, then 300 s more per test cell)."""
    monkeypatch.setenv("QMATMUL_NOTEBOOK_BUDGET", str(BUDGET))
    students = [s for s in corpus("w8a16") if s.name in ALONE]
    rows, spans = grade(tmp_path, students, sandbox=False, monkeypatch=monkeypatch)
    assert_expected(students, rows)
    started, ended = spans["sleeper"]
    assert ended - started < BUDGET + 60, f"the sleeper held the class for {ended - started:.0f} s"


def _escape_line(notebook) -> str:
    import json

    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", ""))
            if out.get("output_type") == "stream" and "escape:" in text:
                return next(ln for ln in text.splitlines() if ln.startswith("escape:"))
    raise AssertionError(f"the escape attempt printed nothing in {notebook}")


DETACHED_SLEEP = 75  # seconds


@pytest.mark.xdist_group("adversarial-sandbox")
def test_the_sandbox_holds_what_plain_mode_cannot(tmp_path, monkeypatch):
    if not classroom.sandbox_available():
        skip_unless_required("bubblewrap with user namespaces is not available: `make system-deps`",
                             "QMATMUL_REQUIRE_SANDBOX")  # fmt: skip
    monkeypatch.setenv("DETACHED_MARKER", "detached-marker.txt")
    # Long enough that the write always falls after the detached student's own grading (about 25 s on a loaded
    # CI machine; its notebook kernel may legitimately live that long), short enough that the students graded
    # after it cover the wait.
    monkeypatch.setenv("DETACHED_SLEEP", str(DETACHED_SLEEP))
    # and the compile worker inside the sandbox: a kernel it must refuse, one it must accept
    names = {"sandbox_escape", "plant_links", "detached", "forge_channel", "patch_checks", "honest_toplevel",
             "python_in_kernel", "honest_functional_jit"}  # fmt: skip
    students = [s for s in corpus("w8a16") if s.name in names]
    package = (ROOT / "qmatmul" / "__init__.py").read_bytes()
    # The detached student's own run is timed, first; the others follow in one nbgrader run (each run of its own
    # spent nbgrader's and torch's imports again), which covers the wait.
    rows, spans = grade(tmp_path, students, sandbox=True, monkeypatch=monkeypatch,
                        together=names - {"detached"}, alone_first=True)  # fmt: skip
    assert_expected(students, rows)
    line = _escape_line(_autograded(tmp_path, "sandbox_escape") / "w8a16.ipynb")
    assert "REACHED" not in line, line
    assert (ROOT / "qmatmul" / "__init__.py").read_bytes() == package
    # the links planted where the code ran reached nothing nbgrader writes or publishes
    graded = _autograded(tmp_path, "plant_links")
    assert not (graded / "w8a16.ipynb").is_symlink() and not (graded / "scores.html").exists()
    assert (tmp_path / "gradebook.db").read_bytes().startswith(b"SQLite format 3")
    started, ended = spans["detached"]
    assert ended - started < DETACHED_SLEEP, (
        f"grading the detached student took {ended - started:.0f} s: raise DETACHED_SLEEP"
    )
    time.sleep(max(0.0, started + DETACHED_SLEEP + 5 - time.time()))
    marker = _autograded(tmp_path, "detached") / "detached-marker.txt"
    assert not marker.exists(), f"a detached process outlived its grading and wrote: {marker.read_text()}"
