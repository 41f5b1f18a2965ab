"""The instructor's path: a term through nbgrader's exchange, the make targets, the grades export, feedback.

The round trip runs the real nbgrader CLI on W8A16 in a course folder of its own (the repository's solutions,
its own release folder, gradebook, exchange and student home): release_assignment, a student's
fetch_assignment and submit, collect, a hand-copied submission, autograde, generate_feedback, the export,
release_feedback and the student's fetch_feedback. The other tests need no nbgrader run.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder import export, feedback, preprocessors
from autograder.exchange import make_exchange, stamp_submissions

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(600)
CHAPTER = "w8a16"


def _nbgrader(*args, cwd=ROOT, flags=(), env=None):
    env = dict(os.environ, **(env or {}))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    res = subprocess.run([sys.executable, "-m", "nbgrader", *args, *flags], cwd=cwd, env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{res.stderr[-3000:]}"
    return res


def _warnings(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if "WARNING" in ln or "not recognized" in ln]


# ----------------------------------------------------------------------------------------------------------
# Configuration


def test_config_is_absolute_and_names_only_known_options(tmp_path):
    res = _nbgrader("db", "assignment", "list", flags=[f"--CourseDirectory.db_url=sqlite:///{tmp_path}/x.db"])
    noise = [ln for ln in res.stderr.splitlines() if "is not absolute" in ln or "not recognized" in ln]
    assert not noise, noise
    text = (ROOT / "nbgrader_config.py").read_text()
    assert "allow_errors" not in text  # nbgrader's Execute ignores it and says so
    assert "QMATMUL_EXCHANGE" in text


def test_a_run_fails_on_nbgraders_exit_status_not_on_the_notebook_kernels_logged_errors(tmp_path):
    """The CI log of a demo class: nbgrader graded and exited 0, but jupyter_client had logged a ZMQError from the
    notebook kernel's shutdown, and the old rule ("ERROR" anywhere on stderr) failed the submission. Both runs keep
    their stderr, and a failure names where."""
    from autograder import classroom

    dirs = classroom.CourseDirs(autograded=str(tmp_path / "autograded"))
    raced = ("[AutogradeApp | ERROR] Socket operation on non-socket\nTraceback (most recent call last):\n"
             "zmq.error.ZMQError: Socket operation on non-socket\n[AutogradeApp | INFO] test_decode: 2/2\n")  # fmt: skip
    assert classroom.nbgrader_failure("w8a16", "racy", 0, raced, dirs) is None
    assert (tmp_path / "logs" / "w8a16" / "racy.log").read_text() == raced
    failed = "[AutogradeApp | ERROR] There was an error processing assignment\nValueError: bad notebook\n"
    why = classroom.nbgrader_failure("w8a16", "broken", 1, failed, dirs)
    assert (
        why.startswith("ValueError: bad notebook") and str(tmp_path / "logs" / "w8a16" / "broken.log") in why
    )
    unreleased = ("[AutogradeApp | ERROR] No assignment with ID 'fp8' exists in the database\n"
                  "nbgrader.converters.base.NbGraderException: No assignment with ID 'fp8' exists in the database\n")  # fmt: skip
    assert "run `make release` first" in classroom.nbgrader_failure("fp8", "fresh", 1, unreleased, dirs)


def test_bonus_cells_are_graded_cells_the_guide_calls_bonus():
    guide = (ROOT / "course.md").read_text()
    for chapter, cells in export.BONUS.items():
        nb = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())
        graded = {c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
                  if c["metadata"].get("nbgrader", {}).get("grade")}  # fmt: skip
        assert cells <= graded, (chapter, cells - graded)
        for cell in cells:
            assert re.search(rf"\| `{cell}` \| bonus", guide), (
                f"course.md does not call {chapter}·{cell} bonus"
            )


def test_make_targets_take_one_chapter_or_the_course():
    def dry(*args):
        return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True)

    assert "-m autograder.term feedback w8a16" in dry("feedback", "ASSIGNMENT=w8a16").stdout
    assert "-m autograder.classroom autograde w8a16" in dry("autograde", "ASSIGNMENT=w8a16").stdout
    assert re.search(r"-m autograder\.term feedback\s*$", dry("feedback").stdout, re.M)
    res = dry("hand-out")
    assert res.returncode != 0 and "ASSIGNMENT=" in res.stderr
    assert "db student import roster.csv" in dry("students", "ROSTER=roster.csv").stdout


def test_feedback_skips_chapters_with_nothing_graded(tmp_path, capsys, monkeypatch):
    from qmatmul.course import assignments

    (tmp_path / "alice" / CHAPTER).mkdir(parents=True)
    calls = []
    monkeypatch.setattr(
        feedback, "nbgrader", lambda *a, **k: calls.append(a) or subprocess.CompletedProcess(a, 0, "", "")
    )
    assert feedback.feedback(assignments(), export=False, autograded=tmp_path) == 0
    assert calls == [("generate_feedback", CHAPTER, "--force")]
    out = capsys.readouterr().out
    for other in set(assignments()) - {CHAPTER}:
        assert f"{other}: nothing graded yet" in out


def test_the_gradebook_summary_shortens_a_message_at_a_word(capsys):
    """A long verdict is cut at a word with a mark that it goes on (the whole is in the student's feedback); the
    cells not measured on this machine are said once for everyone."""
    from autograder import classroom

    hint = "broadcast it as s[None, :] along the N offsets, not along the rows (M) of the output tile. " * 5
    rows = [{"student": "ada", "scores": {"test_prefill": (0.0, 3.0), "test_speed": (0.0, 3.0)}, "total": 0.0,
             "max": 6.0, "messages": {"test_prefill": "CheckFailed: " + hint, "test_speed": "NotMeasured: no GPU"},
             "unmeasured": ["test_speed"]}]  # fmt: skip
    classroom.print_gradebook(CHAPTER, rows)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  ada · prefill: "))
    assert line.endswith(" …") and len(line) <= len("  ada · prefill: ") + 300
    assert line.removesuffix(" …").split()[-1] in hint.split()
    assert "(everyone) · speed: not measured on this machine, no points (no GPU)" in out
    assert "WARNING" not in out


def test_a_cell_one_notebook_passed_is_measurable_for_the_class_whatever_another_said():
    """rule.unmeasurable: a cell leaves the class's maximum when a notebook could not measure it and none passed it.
    Before, any one notebook's "not measured" took it out of every maximum: the capstone's capture cell decides it
    from the course's step timed in the learner's window, which the learner's own process could keep busy."""
    from autograder import rule

    nm = rule.NOT_MEASURED
    on_a_cpu = [{"test_capture": nm, "test_fit": None}, {"test_capture": nm, "test_fit": "CheckFailed"}]
    assert rule.unmeasurable(on_a_cpu) == {"test_capture"}
    one_busy = [{"test_capture": None}, {"test_capture": nm}, {"test_capture": "CheckFailed"}]
    assert rule.unmeasurable(one_busy) == set()
    assert rule.unmeasurable(iter(one_busy)) == set()  # a generator, as the gradebook passes it
    assert rule.unmeasurable([{"test_capture": "CheckFailed"}, {"test_capture": nm}]) == {"test_capture"}
    # a notebook whose grading wrote no verdict (no output at all) is no evidence that the machine measured
    cells = [{"cell_type": "code", "source": "", "outputs": outs, "metadata": {"nbgrader": {"grade": True,
              "grade_id": "test_capture", "points": 2}}} for outs in ([], [{"output_type": "stream", "text": "ok"}])]  # fmt: skip
    assert [rule.error_names([c]) for c in cells] == [
        {"test_capture": rule.NO_VERDICT},
        {"test_capture": None},
    ]
    assert rule.unmeasurable([rule.error_names(cells[:1]), {"test_capture": nm}]) == {"test_capture"}


def test_the_gradebook_warns_of_a_cell_not_measured_for_some_where_it_measured_others(capsys):
    """A check whose "not measured" depends on the notebook (the capstone's capture gap, timed while other graders
    shared the GPU, 2026-12-06): the cell stays in the maximum (rule.unmeasurable), the notebook earns 0 of it, and
    the summary says so."""
    from autograder import classroom

    rows = [{"student": s, "scores": {"test_capture": (got, 2.0)}, "total": got, "max": 2.0, "unmeasured": [],
             "messages": {"test_capture": why} if why else {}}
            for s, got, why in [("ada", 2.0, ""), ("bob", 0.0, "NotMeasured: a capture gains nothing measurable here")]]  # fmt: skip
    classroom.print_gradebook(CHAPTER, rows)
    out = capsys.readouterr().out
    assert "bob · capture: NotMeasured: a capture gains nothing" in out and "(everyone)" not in out
    assert "WARNING · capture: not measured for 1 notebook(s) (bob) where this machine measured others" in out


def test_stamp_uses_the_files_time_in_nbgraders_format(tmp_path):
    from nbgrader.utils import parse_utc

    folder = tmp_path / "alice" / CHAPTER
    folder.mkdir(parents=True)
    (folder / f"{CHAPTER}.ipynb").write_text("{}")
    when = dt.datetime(2027, 1, 15, 23, 59, 30, tzinfo=dt.timezone.utc)
    os.utime(folder / f"{CHAPTER}.ipynb", (when.timestamp(), when.timestamp()))
    (tmp_path / "bob" / CHAPTER).mkdir(parents=True)
    (tmp_path / "bob" / CHAPTER / "timestamp.txt").write_text("2027-01-01 00:00:00.000000 UTC\n")
    assert stamp_submissions(CHAPTER, tmp_path) == ["alice"]
    assert parse_utc((folder / "timestamp.txt").read_text().strip()) == when.replace(tzinfo=None)
    assert stamp_submissions(CHAPTER, tmp_path) == []  # never overwritten


def test_make_exchange_creates_it_open_to_all_and_the_students_config(tmp_path, monkeypatch):
    monkeypatch.setenv("QMATMUL_EXCHANGE", str(tmp_path / "srv" / "exchange"))
    root = make_exchange(config_dir=tmp_path / "etc")
    assert root == tmp_path / "srv" / "exchange" and root.stat().st_mode & 0o777 == 0o777
    cfg = (tmp_path / "etc" / "nbgrader_config.py").read_text()
    assert f"c.Exchange.root = '{root}'" in cfg and "course_id = 'qmatmul'" in cfg


def _cell(source, grade_id, points=1, outputs=()):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                                 "solution": False}  # fmt: skip
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def test_student_feedback_hides_hidden_tests_and_tracebacks():
    src = "check(f)  # visible\n### BEGIN HIDDEN TESTS\ncheck(f, hidden=True)\n### END HIDDEN TESTS"
    err = {"output_type": "error", "ename": "CheckFailed", "evalue": f"wrong scale axis in {ROOT}/x.py",
           "traceback": ["\x1b[31mTraceback ...", f"File {ROOT}/qmatmul/checks.py:50", "CheckFailed: ..."]}  # fmt: skip
    img = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
    nb = nbformat.v4.new_notebook(cells=[_cell(src, "test_x", outputs=[err, img])])
    out, res = preprocessors.StudentFeedback().preprocess(nb, {})
    assert (
        out.cells[0].cell_type == "markdown"
        and "| [x](#test_x) | 0 / 1 | not graded: CheckFailed" in out.cells[0].source
    )
    cell = out.cells[1]
    assert "hidden=True" not in cell.source and "check(f)  # visible" in cell.source
    assert preprocessors.HIDDEN_NOTE in cell.source
    assert cell.outputs[0].traceback == ["CheckFailed: wrong scale axis in x.py"]
    assert cell.outputs[1].metadata["image/png"]["alt"]
    assert any("pre-wrap" in css for css in res["inlining"]["css"])
    nb = nbformat.v4.new_notebook(cells=[_cell(src, "test_x")])
    shown, _ = preprocessors.StudentFeedback(show_hidden_tests=True).preprocess(nb, {})
    assert "hidden=True" in shown.cells[1].source


# ----------------------------------------------------------------------------------------------------------
# The export's rules, on a gradebook built through nbgrader's API


@pytest.mark.filterwarnings("ignore:Object of type:Warning")  # nbgrader's add_submission, not ours
def test_export_bonus_outside_the_denominator_not_measured_apart_unassigned_left_out(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    monkeypatch.setenv(
        "PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )  # its alembic

    db = tmp_path / "gradebook.db"
    cells = {"w4a16": [("test_quantizer", 2), ("test_decode_bandwidth", 3), ("test_from_gptq", 1)],
             "fp8": [("test_quantizer", 2)]}  # fmt: skip
    with Gradebook(f"sqlite:///{db}") as gb:
        for chapter, graded in cells.items():
            gb.add_assignment(chapter)
            gb.add_notebook(chapter, chapter)
            for name, pts in graded:
                gb.add_grade_cell(name, chapter, chapter, max_score=pts, cell_type="code")
        gb.add_student("ann", first_name="Ann", last_name="Ames", email="ann@example.org")
        gb.add_student("ben")
        gb.add_submission("w4a16", "ann")  # fp8 was never assigned: no submission at all
        for name, score in [("test_quantizer", 2), ("test_decode_bandwidth", 0), ("test_from_gptq", 1)]:
            grade = gb.find_grade(name, "w4a16", "w4a16", "ann")
            grade.auto_score = score
        gb.db.commit()
    graded = tmp_path / "autograded" / "ann" / "w4a16"
    graded.mkdir(parents=True)
    nm = {"output_type": "error", "ename": "NotMeasured", "evalue": "Performance not measured: no CUDA GPU",
          "traceback": []}  # fmt: skip
    nb = nbformat.v4.new_notebook(cells=[_cell("x", "test_decode_bandwidth", 3, [nm])])
    nbformat.write(nb, graded / "w4a16.ipynb")

    exp = export.collect(db, tmp_path / "autograded")
    assert exp.chapters == ["w4a16"]
    ann = exp.course("ann")
    assert (ann["points"], ann["bonus"], ann["max"], ann["not_measured"]) == (2, 1, 5, 3)
    assert ann["total"] == 3 and ann["percent"] == pytest.approx(150.0)  # 2 + 1 bonus over the 2 measurable
    status = {(c.student, c.cell): c.status for c in exp.cells}
    assert status["ann", "test_decode_bandwidth"] == "not measured"
    assert status["ann", "test_from_gptq"] == "passed"
    assert status["ben", "test_quantizer"] == "not submitted" and exp.course("ben")["total"] == 0
    paths = export.write(exp, tmp_path / "out")
    rows = list(csv.DictReader(paths[0].open()))
    assert [r["student_id"] for r in rows] == ["ann", "ben"] and "fp8" not in rows[0]
    assert rows[0]["last_name"] == "Ames" and rows[0]["w4a16"] == "3" and rows[0]["max"] == "5"
    assert {r["status"] for r in csv.DictReader(paths[2].open())} >= {
        "not measured",
        "passed",
        "not submitted",
    }


# ----------------------------------------------------------------------------------------------------------
# The round trip through nbgrader's exchange


@pytest.mark.slow
def test_round_trip_through_the_exchange(tmp_path):
    course, home, exchange = tmp_path / "course", tmp_path / "dave", tmp_path / "exchange"
    course.mkdir()
    home.mkdir()
    (course / "solutions").symlink_to(ROOT / "solutions")
    flags = [f"--CourseDirectory.root={course}", "--CourseDirectory.release_directory=release",
             f"--CourseDirectory.db_url=sqlite:///{course}/gradebook.db", f"--Exchange.root={exchange}"]  # fmt: skip
    student = [f"--Exchange.root={exchange}", "--CourseDirectory.course_id=qmatmul"]
    data = {"JUPYTER_DATA_DIR": str(tmp_path / "data")}  # the student's nbgrader cache, not this user's

    # instructor: generate, the exchange, release, the roster
    _nbgrader("generate_assignment", CHAPTER, "--force", flags=flags)
    os.environ["QMATMUL_EXCHANGE"] = str(exchange)
    try:
        make_exchange(config_dir=tmp_path / "etc")
    finally:
        del os.environ["QMATMUL_EXCHANGE"]
    _nbgrader("release_assignment", CHAPTER, "--force", flags=flags)
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\ndave,Dave,Doe,dave@example.org\nerin,Erin,Eng,\n")
    _nbgrader("db", "student", "import", str(roster), flags=flags)

    # student dave: fetch, solve the quantizer, submit
    _nbgrader("fetch_assignment", CHAPTER, cwd=home, flags=student, env=data)
    path = home / CHAPTER / f"{CHAPTER}.ipynb"
    nb = nbformat.read(path, as_version=4)
    solution = next(c for c in nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", 4).cells
                    if c.metadata.get("nbgrader", {}).get("grade_id") == "ex1_quantizer")  # fmt: skip
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex1_quantizer":
            cell.source = "\n".join(ln for ln in solution.source.splitlines() if "### " not in ln)
    nbformat.write(nb, path)
    _nbgrader("submit", CHAPTER, "--student=dave", cwd=home, flags=student, env=data)

    # instructor: collect (timestamped), erin's notebook copied by hand with a test cell edited away
    _nbgrader("collect", CHAPTER, "--update", "--CollectApp.check_owner=False", flags=flags)
    submitted = course / "autograder" / "submitted"  # nbgrader_config.py's folders, under root
    assert (submitted / "dave" / CHAPTER / "timestamp.txt").exists()
    erin = submitted / "erin" / CHAPTER
    erin.mkdir(parents=True)
    nb = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_decode_bandwidth":
            cell.source = "pass  # an edited test cell"
    nbformat.write(nb, erin / f"{CHAPTER}.ipynb")
    assert stamp_submissions(CHAPTER, submitted) == ["erin"]

    # autograde: hidden tests restored quietly; only the cell erin edited is reported (and restored)
    res = _nbgrader("autograde", CHAPTER, "--force", flags=flags)
    changed = re.findall(r"Attribute '(\w+)' for cell (\w+) has changed", res.stderr)
    assert changed == [("checksum", "test_decode_bandwidth")], res.stderr[-3000:]
    assert "[AutogradeApp | INFO] Cell test_quantizer: hidden tests restored from the gradebook" in res.stderr
    assert not [w for w in _warnings(res) if "not absolute" in w or "not recognized" in w]

    # feedback: readable, and the export
    res = _nbgrader("generate_feedback", CHAPTER, "--force", flags=flags)
    assert not [w for w in _warnings(res) if "Removing existing" not in w], _warnings(res)
    html = (course / "autograder" / "feedback" / "dave" / CHAPTER / f"{CHAPTER}.html").read_text()
    assert "BEGIN HIDDEN TESTS" not in html and "hidden=True" not in html and "pre-wrap" in html
    assert "Traceback" not in html.replace("Generic.Traceback", "") and str(ROOT) not in html
    exp = export.collect(course / "gradebook.db", course / "autograder" / "autograded")
    by = {c.student: c for c in exp.by_chapter}
    assert (by["dave"].points, by["dave"].max, by["dave"].not_measured) == (2, 10, 3)
    assert by["dave"].timestamp and by["erin"].timestamp  # both can be compared with a due date
    assert {s["id"]: s["last_name"] for s in exp.students} == {"dave": "Doe", "erin": "Eng"}

    # feedback back through the exchange to dave; erin's is listed for the instructor to send
    assert feedback.hand_back(CHAPTER, course / "autograder" / "feedback", flags=tuple(flags)) == 0
    _nbgrader("fetch_feedback", CHAPTER, "--student=dave", cwd=home, flags=student, env=data)
    assert list((home / CHAPTER / "feedback").glob(f"*/{CHAPTER}.html"))


# ----------------------------------------------------------------------------------------------------------
# The same round trip in a browser: Formgrader for the instructor, the Assignment List for the student


def _dismiss(page, expect, what: str) -> str:
    """Wait for Formgrader's success dialog of `what`, return its log, close it."""
    modal = page.locator("#success-modal")
    error = page.locator("#error-modal")
    expect(modal.or_(error)).to_be_visible(timeout=240_000)
    assert not error.is_visible(), f"{what}: {error.inner_text()[:3000]}"
    text = modal.inner_text()
    modal.locator("button", has_text="OK").click()
    expect(modal).to_have_count(0, timeout=10_000)
    return text


@pytest.mark.slow
@pytest.mark.xdist_group("browser")
def test_round_trip_in_jupyterlab(tmp_path):
    from conftest import skip_unless_required
    from nbgrader.utils import get_username
    from test_browser import CHROMIUM, CHROMIUM_ARGS, LAB_SETTINGS, REQUIRE, _free_port

    if not Path(CHROMIUM).exists():
        skip_unless_required("Debian's chromium is not installed (`make system-deps` installs it)", REQUIRE)
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        skip_unless_required("playwright is not installed (`make setup` installs it)", REQUIRE)

    # One machine, one Jupyter server: the instructor's Formgrader and the student's Assignment List (the
    # student is this OS user, as nbgrader's exchange identifies students).
    course, exchange, cfg = tmp_path / "course", tmp_path / "exchange", tmp_path / "cfg"
    course.mkdir()
    (course / "solutions").symlink_to(ROOT / "solutions")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(ROOT / 'nbgrader_config.py')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        "c.CourseDirectory.release_directory = 'release'\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{course}/gradebook.db'\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
    )
    os.environ["QMATMUL_EXCHANGE"] = str(exchange)
    try:
        make_exchange(config_dir=cfg)  # the students' config: Jupyter's config dir of this server
    finally:
        del os.environ["QMATMUL_EXCHANGE"]
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(cfg), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"))  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for name, value in LAB_SETTINGS.items():
        (tmp_path / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "settings" / name).write_text(json.dumps(value))
    _nbgrader("generate_assignment", CHAPTER, "--force", cwd=course, env=env)
    student = get_username()

    port, token = _free_port(), "t" + os.urandom(8).hex()
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.expose_app_in_browser=True"],
        cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    shot = ROOT / "build" / "test-artifacts" / "browser-round-trip.png"  # Formgrader at the end
    shot.parent.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                for _ in range(240):
                    try:
                        page.goto(f"{base}/formgrader?token={token}")
                        break
                    except Exception:
                        if proc.poll() is not None:
                            pytest.fail(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                        time.sleep(0.5)
                row = page.locator("tr", has_text=CHAPTER)
                # instructor: Release (Formgrader)
                row.locator(".glyphicon-cloud-upload").click()
                assert "Released as: qmatmul w8a16" in _dismiss(page, expect, "release")

                # student: Fetch, work, Submit (the Assignment List in JupyterLab)
                lab = browser.new_page(viewport={"width": 1400, "height": 1000})
                lab.goto(f"{base}/lab?token={token}")
                lab.wait_for_function(
                    "window.jupyterapp && window.jupyterapp.commands.hasCommand('nbgrader:open-assignment-list')",
                    timeout=120_000,
                )
                lab.evaluate("window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
                lab.locator("#released_assignments_list").get_by_role("button", name="Fetch").click()
                submit = lab.locator("#fetched_assignments_list").get_by_role("button", name="Submit")
                expect(submit).to_be_visible(timeout=60_000)
                work = course / CHAPTER / f"{CHAPTER}.ipynb"
                nb = nbformat.read(work, as_version=4)
                src = next(c for c in nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", 4).cells
                           if c.metadata.get("nbgrader", {}).get("grade_id") == "ex1_quantizer").source  # fmt: skip
                for cell in nb.cells:
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == "ex1_quantizer":
                        cell.source = "\n".join(ln for ln in src.splitlines() if "### " not in ln)
                nbformat.write(nb, work)
                submit.click()
                expect(lab.locator("#submitted_assignments_list")).to_contain_text(" UTC", timeout=60_000)

                # instructor: Collect, Autograde, Generate and Release feedback (Formgrader)
                page.reload()
                row.locator(".glyphicon-cloud-download").click()
                assert f"Collecting submission: {student} {CHAPTER}" in _dismiss(page, expect, "collect")
                page.goto(f"{base}/formgrader/manage_submissions/{CHAPTER}?token={token}")
                page.locator("tr", has_text=student).locator(".glyphicon-flash").click()
                graded = _dismiss(page, expect, "autograde")
                assert "has changed" not in graded, graded  # hidden tests restored without a warning
                page.goto(f"{base}/formgrader?token={token}")
                row.locator(".glyphicon-comment").click()
                _dismiss(page, expect, "generate feedback")
                row.locator(".glyphicon-envelope").click()
                _dismiss(page, expect, "release feedback")

                # student: Fetch Feedback
                lab.bring_to_front()
                lab.locator("#refresh_assignments_list").click()
                lab.locator("#submitted_assignments_list").get_by_role(
                    "button", name="Fetch Feedback"
                ).click()
                for _ in range(120):
                    if list((course / CHAPTER / "feedback").glob(f"*/{CHAPTER}.html")):
                        break
                    lab.wait_for_timeout(500)
                lab.screenshot(path=str(shot.with_name("browser-round-trip-student.png")))
            finally:
                page.screenshot(path=str(shot), full_page=True)
                browser.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    fetched = list((course / CHAPTER / "feedback").glob(f"*/{CHAPTER}.html"))
    assert fetched and "BEGIN HIDDEN TESTS" not in fetched[0].read_text()
    exp = export.collect(course / "gradebook.db", course / "autograder" / "autograded")
    row = next(c for c in exp.by_chapter if c.student == student)
    assert (row.points, row.max, row.not_measured) == (2, 10, 3) and row.timestamp


# ----------------------------------------------------------------------------------------------------------
# One grading rule (autograder/rule.py) in every view; no silent zero (issue 45, items 2-5; issue 43, items 4, 6)

W8A16_CELLS = [("test_quantizer", 2), ("test_prefill", 3), ("test_decode", 2), ("test_decode_bandwidth", 3)]
NOT_MEASURED_OUT = {"output_type": "error", "ename": "NotMeasured", "traceback": [],
                    "evalue": "Performance not measured: no CUDA GPU here. This cell awards its points only on a GPU"}  # fmt: skip


@pytest.fixture
def small_term(tmp_path, monkeypatch):
    """A W8A16 gradebook as a CPU left it: sol (7 of the 7 measurable), empty (the release untouched), broken
    (invalid JSON: nbgrader failed, no scores, no autograded notebook), deleted (test_decode put back from the
    release and passed) and missing (in the roster, nothing handed in)."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv(
        "PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )  # its alembic
    db = tmp_path / "gradebook.db"
    scores = {"sol": [2, 3, 2, 0], "empty": [0, 0, 0, 0], "broken": [None] * 4, "deleted": [2, 3, 2, 0]}
    with Gradebook(f"sqlite:///{db}") as gb:
        gb.add_assignment(CHAPTER)
        gb.add_notebook(CHAPTER, CHAPTER)
        for name, pts in W8A16_CELLS:
            gb.add_grade_cell(name, CHAPTER, CHAPTER, max_score=pts, cell_type="code")
        for student in [*scores, "missing"]:
            gb.add_student(student)
        for student, got in scores.items():
            gb.add_submission(CHAPTER, student)
            for (name, _), score in zip(W8A16_CELLS, got, strict=True):
                gb.find_grade(name, CHAPTER, CHAPTER, student).auto_score = score
        gb.db.commit()
    for student in scores:
        (tmp_path / "submitted" / student / CHAPTER).mkdir(parents=True)
        text = '{"cells": [oops' if student == "broken" else '{"cells": []}'
        (tmp_path / "submitted" / student / CHAPTER / f"{CHAPTER}.ipynb").write_text(text)
    for student in ["sol", "empty", "deleted"]:
        cells = [_cell("x", name, pts, [NOT_MEASURED_OUT] if name == "test_decode_bandwidth" else [])
                 for name, pts in W8A16_CELLS]  # fmt: skip
        if student == "deleted":
            cells[
                2
            ].source = "# This cell (id:test_decode) was missing from the submission. It was added back\n\nx"
        (tmp_path / "autograded" / student / CHAPTER).mkdir(parents=True)
        nbformat.write(
            nbformat.v4.new_notebook(cells=cells),
            tmp_path / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb",
        )
    (tmp_path / "logs" / CHAPTER).mkdir(parents=True)
    (tmp_path / "logs" / CHAPTER / "broken.log").write_text("nbformat.reader.NotJSONError: not JSON\n")
    return tmp_path


@pytest.mark.filterwarnings("ignore:Object of type:Warning")
def test_the_export_counts_every_student_against_one_maximum_and_gives_reasons(small_term):
    """Before: the student who handed in nothing was divided by 10 (not_measured 0) and the empty notebook by 7,
    the broken file's GPU-only cell was 'failed', and no view said why a chapter earned nothing."""
    exp = export.collect(small_term / "gradebook.db", small_term / "autograded")
    for student in ["sol", "empty", "broken", "deleted", "missing"]:
        course = exp.course(student)
        assert (course["max"], course["not_measured"], course["max_measured"]) == (10, 3, 7), student
    assert exp.course("sol")["percent"] == 100 and exp.course("deleted")["percent"] == 100
    status = {(c.student, c.cell): c.status for c in exp.cells}
    assert (
        status["broken", "test_decode_bandwidth"]
        == "not measured"
        == status["empty", "test_decode_bandwidth"]
    )
    assert (
        status["broken", "test_quantizer"] == "not graded"
        and status["missing", "test_quantizer"] == "not submitted"
    )
    why = {c.student: c.reason for c in exp.by_chapter}
    assert "not a readable notebook (invalid JSON" in why["broken"] and why["missing"] == "not submitted"
    assert "test_decode deleted" in why["deleted"] and why["sol"] == why["empty"] == ""
    out = small_term / "out"
    paths = export.write(exp, out, [CHAPTER])
    assert [p.name for p in paths] == [
        "grades-w8a16.csv",
        "grades-w8a16-by-chapter.csv",
        "grades-w8a16-by-cell.csv",
    ]
    rows = {r["student_id"]: r for r in csv.DictReader(paths[0].open())}
    assert rows["missing"]["percent"] == "0.0" and rows["missing"]["reasons"] == "w8a16: not submitted"
    assert "invalid JSON" in rows["broken"]["reasons"] and not (out / "grades.csv").exists()
    assert (
        "invalid JSON"
        in next(r for r in csv.DictReader(paths[1].open()) if r["student_id"] == "broken")["reason"]
    )


@pytest.mark.filterwarnings("ignore:Object of type:Warning")
def test_the_gradebook_print_counts_as_the_export_and_says_why(small_term, capsys):
    from autograder import classroom, gradebook

    dirs = classroom.CourseDirs(submitted=str(small_term / "submitted"), autograded=str(small_term / "autograded"),
                                db=str(small_term / "gradebook.db"))  # fmt: skip
    rows = gradebook.gradebook(CHAPTER, dirs)
    assert {r["student"]: r["max"] for r in rows} == {"broken": 7, "deleted": 7, "empty": 7, "sol": 7}
    gradebook.print_gradebook(CHAPTER, rows)
    out = capsys.readouterr().out
    assert (
        re.search(r"^sol .* 7/7$", out, re.M) and "broken: not graded: w8a16.ipynb is not a readable" in out
    )
    assert "deleted: test cell test_decode deleted from the notebook: graded from the release's copy" in out
    assert "not submitted (1, 0 points each): missing" in out


def test_a_damaged_notebook_is_not_graded_and_does_not_fail_the_class(tmp_path, monkeypatch, capsys):
    """classroom.py says what is wrong with the file before nbgrader starts, and `make autograde` exits 0 when every
    failure is a student's own file (so `make autograde && make feedback` gives them the reason)."""
    from autograder import classroom, rule

    dirs = classroom.CourseDirs(
        submitted=str(tmp_path / "submitted"), autograded=str(tmp_path / "autograded")
    )
    for student, text in [("broken", '{"cells": [oops'), ("renamed", None)]:
        (tmp_path / "submitted" / student / CHAPTER).mkdir(parents=True)
        name = f"{CHAPTER}.ipynb" if text else "my work.ipynb"
        (tmp_path / "submitted" / student / CHAPTER / name).write_text(text or "{}")
    monkeypatch.setattr(
        classroom, "nbgrader", lambda *a, **k: pytest.fail("nbgrader started on a damaged file")
    )
    failures = classroom.autograde(CHAPTER, ["broken", "renamed"], dirs)
    assert all(isinstance(w, rule.FileProblem) for w in failures.values())
    assert "invalid JSON" in failures["broken"] and "it holds my work.ipynb" in failures["renamed"]
    assert classroom.exit_status(failures) == 0
    assert classroom.exit_status({**failures, "crashed": "nbgrader exited 1"}) == 1
    assert "2 submission(s) not graded for their files" in capsys.readouterr().out


def test_nbgraders_own_words_come_with_what_to_do(tmp_path):
    from autograder import advice, classroom

    dirs = classroom.CourseDirs(autograded=str(tmp_path / "autograded"))
    said = {
        "sqlite3.OperationalError: database is locked": "Formgrader's Autograde",
        "psycopg.OperationalError: connection failed: Connection refused": "start it",
        'psycopg.OperationalError: FATAL:  password authentication failed for user "grader"': "create them",
        "sqlite3.OperationalError: no such table: assignment": "make students ROSTER=roster.csv",
        "nbformat.reader.NotJSONError: Notebook does not appear to be JSON": "make feedback",
        "killed: ran past 3600 s": "QMATMUL_STUDENT_TIMEOUT",
    }
    for stderr, what in said.items():
        why = classroom.nbgrader_failure(CHAPTER, "ann", 1, stderr + "\n", dirs)
        assert what in why and "nbgrader's log" in why, (stderr, why)
    assert advice.advise("something nobody has seen") == ""


def test_a_deleted_test_cell_is_put_back_from_the_release_and_graded(tmp_path, monkeypatch):
    """Before: nbgrader's add_missing_cells was off, so a deleted test cell was a silent 0 that Formgrader could not
    grade by hand; nbgrader's own placement raised KeyError when the cell before it was deleted too."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import compute_checksum

    from autograder import rule

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    release = []
    for name in ["setup", "ex1", "test_a", "ex2", "test_b"]:
        cell = _cell(f"check_{name}()", name)
        if not name.startswith("test_"):  # setup: locked; ex1, ex2: solution cells, not graded
            cell.metadata["nbgrader"].update(grade=False, solution=name != "setup", locked=name == "setup")
            cell.metadata["nbgrader"].pop("points")
        cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
        release.append(cell)
    with Gradebook(url) as gb:
        gb.add_assignment(CHAPTER)
        gb.add_notebook(CHAPTER, CHAPTER)
        for cell in release:
            meta = cell.metadata["nbgrader"]
            gb.add_source_cell(meta["grade_id"], CHAPTER, CHAPTER, cell_type="code", locked=meta["locked"],
                               source=cell.source, checksum=meta["checksum"])  # fmt: skip
            if meta["grade"]:
                gb.add_grade_cell(meta["grade_id"], CHAPTER, CHAPTER, max_score=1, cell_type="code")
            if meta["solution"]:
                gb.add_solution_cell(meta["grade_id"], CHAPTER, CHAPTER)
    nb = nbformat.v4.new_notebook(cells=release[:3])  # ex2 and test_b deleted
    step = preprocessors.OverwriteCells()
    assert step.add_missing_cells
    out, _ = step.preprocess(nb, {"nbgrader": {"notebook": CHAPTER, "assignment": CHAPTER, "db_url": url}})
    assert [c.metadata["nbgrader"]["grade_id"] for c in out.cells] == ["setup", "ex1", "test_a", "test_b"]
    assert "check_test_b()" in out.cells[-1].source and rule.restored_cells_in(out) == ["test_b"]


FORGED = [{"output_type": "stream", "name": "stdout", "text": "not measured here: Performance not measured\n"},
          {"output_type": "error", "ename": "CheckFailed", "traceback": [],
           "evalue": "your code raised RuntimeError: Performance not measured: no CUDA GPU here (NotMeasured)"}]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Object of type:Warning")
def test_a_students_not_measured_text_leaves_no_cell_out_of_the_maximum(small_term, capsys):
    """Before: any graded notebook whose cell printed or raised "not measured" took that cell out of every student's
    maximum, so a student whose decode raised RuntimeError("not measured") lost nothing for it and moved the class's
    maximum. Now only the trusted grader's error name counts (rule.error_names, rule.unmeasurable): in the export,
    the gradebook print and the feedback page alike."""
    from autograder import classroom, gradebook

    path = small_term / "autograded" / "sol" / CHAPTER / f"{CHAPTER}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].outputs = [nbformat.from_dict(o) for o in FORGED]  # sol's test_decode "says" not measured
    nbformat.write(nb, path)
    exp = export.collect(small_term / "gradebook.db", small_term / "autograded")
    assert {exp.course(s)["max_measured"] for s in ["sol", "empty", "deleted", "missing"]} == {7}
    status = {(c.student, c.cell): c.status for c in exp.cells}
    assert status["sol", "test_decode"] == "passed" and status["empty", "test_decode"] == "failed"
    dirs = classroom.CourseDirs(submitted=str(small_term / "submitted"), autograded=str(small_term / "autograded"),
                                db=str(small_term / "gradebook.db"))  # fmt: skip
    rows = gradebook.gradebook(CHAPTER, dirs)
    assert {r["max"] for r in rows} == {7} and rows[0]["unmeasured"] == ["test_decode_bandwidth"]
    cells = [_cell("x", name, pts, FORGED if name == "test_decode" else
                   [NOT_MEASURED_OUT] if name == "test_decode_bandwidth" else []) for name, pts in W8A16_CELLS]  # fmt: skip
    for cell, score in zip(cells, [2, 3, 0, 0], strict=True):
        cell.metadata["nbgrader"]["score"] = score
    resources = {"nbgrader": {"assignment": CHAPTER, "notebook": CHAPTER, "late_penalty": 0},
                 "metadata": {"path": str(small_term / "autograded" / "empty" / CHAPTER)}}  # fmt: skip
    preprocessors._class_errors.cache_clear()
    out, _ = preprocessors.StudentFeedback().preprocess(nbformat.v4.new_notebook(cells=cells), resources)
    assert out.cells[0].source.startswith("## w8a16: 5 of 7 points (71 %)")
    assert "| [decode](#test_decode) | 0 / 2 | failed" in out.cells[0].source


@pytest.mark.filterwarnings("ignore:Object of type:Warning")
def test_the_gradebook_print_leaves_bonus_cells_out_of_the_maximum_as_the_export_does(
    small_term, monkeypatch, capsys
):
    """Before: the print counted bonus cells in its maximum (W4A16's demo: 9/9 where the export said 7 + 2 bonus)."""
    from autograder import classroom, gradebook, rule

    monkeypatch.setitem(rule.BONUS, CHAPTER, {"test_decode"})
    exp = export.collect(small_term / "gradebook.db", small_term / "autograded")
    dirs = classroom.CourseDirs(submitted=str(small_term / "submitted"), autograded=str(small_term / "autograded"),
                                db=str(small_term / "gradebook.db"))  # fmt: skip
    rows = gradebook.gradebook(CHAPTER, dirs)
    assert {r["max"] for r in rows} == {exp.course("sol")["max_measured"]} == {5}
    gradebook.print_gradebook(CHAPTER, rows)
    assert "the bonus cells (decode) add to the total, not to the maximum" in capsys.readouterr().out


def test_the_feedback_leads_with_the_points_and_each_exercise_and_a_broken_file_gets_a_page(small_term):
    from autograder import feedback

    cells = []
    for (name, pts), score in zip(W8A16_CELLS, [2, 3, 0, 0], strict=True):
        err = {"output_type": "error", "ename": "CheckFailed", "evalue": "w8a16_decode is not implemented yet",
               "traceback": []}  # fmt: skip
        cell = _cell(
            "x",
            name,
            pts,
            [NOT_MEASURED_OUT] if name == "test_decode_bandwidth" else [err] if not score else [],
        )
        cell.metadata["nbgrader"]["score"] = score
        cells.append(cell)
    resources = {"nbgrader": {"assignment": CHAPTER, "notebook": CHAPTER, "late_penalty": 0},
                 "metadata": {"path": str(small_term / "autograded" / "empty" / CHAPTER)}}  # fmt: skip
    out, res = preprocessors.StudentFeedback().preprocess(nbformat.v4.new_notebook(cells=cells), resources)
    lead = out.cells[0].source
    assert lead.startswith("## w8a16: 5 of 7 points (71 %)")
    assert "**3 more points could not be measured on the grading machine** (decode_bandwidth)" in lead
    assert (
        "| [decode](#test_decode) | 0 / 2 | failed: CheckFailed: w8a16_decode is not implemented yet |"
        in lead
    )
    assert "| [decode bandwidth](#test_decode_bandwidth) | – / 3 | not measured" in lead
    assert any("padding" in css and "td" in css for css in res["inlining"]["css"])
    (small_term / "submitted" / "broken" / CHAPTER / "submission_secret.txt").write_text("s3cret")
    (small_term / "submitted" / "broken" / CHAPTER / "timestamp.txt").write_text("2027-01-01 00:00:00 UTC")
    pages = feedback.problem_pages(CHAPTER, autograded=small_term / "autograded")
    assert pages == [small_term / "feedback" / "broken" / CHAPTER / f"{CHAPTER}.html"]
    assert "not a readable notebook (invalid JSON" in pages[0].read_text()
    assert (pages[0].parent / "submission_secret.txt").read_text() == "s3cret"  # make hand-back returns it


def test_show_solution_takes_the_chapter_or_the_running_notebooks(monkeypatch, capsys):
    """Before: show_solution("ex2_prefill") in W8A16 printed MXFP4's solution (the first chapter holding the id)."""
    from qmatmul import course

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(ROOT)
    with pytest.raises(LookupError, match="several chapters .*w8a16.*chapter="):
        course.solution_source("ex2_prefill")
    course.show_solution("ex2_prefill", chapter="w8a16")
    assert "w8a16_matmul_kernel" in capsys.readouterr().out
    monkeypatch.chdir(ROOT / "notebooks" / "w8a16")  # where the notebook's kernel runs
    assert "w8a16_matmul_kernel" in course.solution_source("ex2_prefill")
    monkeypatch.setenv("JPY_SESSION_NAME", str(ROOT / "notebooks" / "mxfp4" / "mxfp4.ipynb"))
    assert "w8a16_matmul_kernel" not in course.solution_source("ex2_prefill")


# ----------------------------------------------------------------------------------------------------------
# make release (issue 45, item 5): quiet about the overwrite it expects, nothing else hidden


def test_make_release_hides_only_the_expected_overwrite_warning(tmp_path):
    """Before: a fresh clone's `make release` printed "Removing existing assignment" for each of the seven committed
    chapters. The real nbgrader runs twice into one release folder (the second run overwrites, as on a clone);
    a flag nbgrader does not know shows that its other warnings still come through."""
    import io

    from autograder import release

    chapter = "roofline"
    flags = (f"--CourseDirectory.root={tmp_path}", "--CourseDirectory.release_directory=release",
             f"--CourseDirectory.db_url=sqlite:///{tmp_path / 'gradebook.db'}")  # fmt: skip
    (tmp_path / "solutions").symlink_to(ROOT / "solutions")
    raw = _nbgrader("generate_assignment", chapter, "--force", flags=flags)
    assert "Removing existing assignment" not in raw.stderr  # the first time, nothing to remove
    raw = _nbgrader("generate_assignment", chapter, "--force", flags=flags)
    said = [ln for ln in raw.stderr.splitlines() if "Removing existing assignment" in ln]
    assert said == [
        f"[GenerateAssignmentApp | WARNING] Removing existing assignment: {tmp_path / 'release' / chapter}"
    ]
    assert release.expected(said[0] + "\n", chapter) and not release.expected(said[0], "w8a16")
    err = io.StringIO()
    assert release.release([chapter], (*flags, "--CourseDirectory.no_such_option=1"), err=err) == 0
    out = err.getvalue()
    assert "Removing existing assignment" not in out and "Converting notebook" in out
    assert re.search(r"WARNING.*no_such_option", out), out
    assert (tmp_path / "release" / chapter / f"{chapter}.ipynb").is_file()
    dry = subprocess.run(
        ["make", "-n", "release"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "-m autograder.release" in dry and "generate_assignment" not in dry
    err = io.StringIO()
    assert release.release(["no_such_chapter"], flags, err=err) != 0 and "ERROR" in err.getvalue()
