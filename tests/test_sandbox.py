"""The sandbox for untrusted submissions: no network, no other students' work, no gradebook, no solutions."""

import json
import socket

import pytest
from conftest import HAS_GPU, ROOT, skip_unless_required

from autograder import classroom, demo

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def _needs_bubblewrap():
    if classroom.sandbox_available():
        return
    skip_unless_required(
        "bubblewrap (bwrap) with user namespaces is not available here: `make system-deps` enables this test",
        "QMATMUL_REQUIRE_SANDBOX",
    )


def _snoop_line(notebook) -> str:
    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", ""))
            if out.get("output_type") == "stream" and "snoop:" in text:
                return next(ln for ln in text.splitlines() if ln.startswith("snoop:"))
    raise AssertionError(f"the snoop printed nothing in {notebook}")


@pytest.mark.parametrize("sandbox", [False, True])
def test_snoop_sees_everything_without_and_nothing_with_the_sandbox(tmp_path, monkeypatch, sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    monkeypatch.setenv("SNOOP_PORT", str(listener.getsockname()[1]))
    # What a class leaves beside the autograded folders (another student's log and journal entry, the exports)
    # and an exchange with another student's submission.
    for path in ("logs/w8a16/other.log", "journal/w8a16/other", "grades-by-cell.csv"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("another student's scores\n")
    inbound = tmp_path / "exchange" / "qmatmul" / "inbound" / "other+w8a16+2026-12-04"
    inbound.mkdir(parents=True)
    (inbound / "w8a16.ipynb").write_text("another student's notebook\n")
    monkeypatch.setenv("QMATMUL_EXCHANGE", str(tmp_path / "exchange"))
    monkeypatch.setenv("SNOOP_EXCHANGE", str(tmp_path / "exchange"))
    dirs = classroom.CourseDirs(
        submitted=str(tmp_path / "submitted"), autograded=str(tmp_path / "autograded"),
        feedback=str(tmp_path / "feedback"), release=str(tmp_path / "release"), db=str(tmp_path / "gradebook.db"),
        sandbox=sandbox,
    )  # fmt: skip
    assert classroom.nbgrader("generate_assignment", "w8a16", "--force", dirs=dirs).returncode == 0
    students = [s for s in demo.students("w8a16") if s.name == "snoop"]
    for st in students:
        classroom.build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / "w8a16")
    failures = classroom.autograde("w8a16", [s.name for s in students], dirs)
    listener.close()
    assert not failures
    rows = {r["student"]: r for r in classroom.gradebook("w8a16", dirs)}
    assert rows["snoop"]["total"] == (10 if HAS_GPU else 7), rows["snoop"]["messages"]  # graded all the same
    line = _snoop_line(tmp_path / "autograded" / "snoop" / "w8a16" / "w8a16.ipynb")
    if sandbox:
        assert "network blocked" in line and "other notebooks read 0" in line, line
        assert "gradebook read 0" in line and "solutions read 0" in line, line
        assert "class results read 0" in line and "exchange read 0" in line, line
    else:  # the same code, unsandboxed, finds what the sandbox hides: the test above can fail
        assert "network open" in line and "gradebook read 1" in line and "solutions read 0" not in line, line
        assert "class results read 0" not in line and "exchange read 1" in line, line
