"""The course in a real browser: JupyterLab on loopback, a student notebook in headless Chromium.

Debian's chromium driven by Playwright (PyPI) with the system browser. The test runs the notebook's setup
cell and its first widget cell, and checks that the smoke kernel printed its result and that the widget
rendered. The screenshot is kept under build/test-artifacts/. Without chromium or playwright the tests
skip, unless QMATMUL_REQUIRE_BROWSER=1 (set by .ci/run, which installs both) makes that a failure.

An instructor's walk-through (issue 45) runs a small roofline term in a clone of the course: Formgrader releases
and collects, one student submits in the Assignment List, two from a terminal (a damaged file, the untouched
release), one never does; `make autograde`, `feedback`, `gradebook`, `export` and `hand-back` run in the clone; the
test reads every view (the print, the export files, the feedback pages, Formgrader's pages) for the same totals and
reasons (its outputs: build/test-artifacts/walk-through.txt).
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import skip_unless_required

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "build" / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling out of a machine with no network.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
# JupyterLab 4 leaves cells outside the window out of the page unless windowing is off; no news pop-up.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}
REQUIRE = "QMATMUL_REQUIRE_BROWSER"
# The server starts every kernel 5 s late, as a loaded CI machine once did: a cell run before the notebook has its
# kernel is dropped without a word, so the test must wait for the kernel on every run, not only on a slow one.
SLOW_KERNEL_START = """
import asyncio
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

class SlowStart(AsyncMappingKernelManager):
    async def start_kernel(self, **kwargs):
        await asyncio.sleep(5)
        return await super().start_kernel(**kwargs)

c.ServerApp.kernel_manager_class = SlowStart
"""
NOTEBOOK = "w8a16"  # its cells 0-6: title, setup, imports, format text and table, widget text, the widget

pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.timeout(600)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on loopback serving a copy of the student notebook; yields its URL."""
    work = tmp_path / "course"  # a clone as a learner has it: the package beside the notebooks
    (work / "notebooks" / NOTEBOOK).mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb", work / "notebooks" / NOTEBOOK)
    (work / "qmatmul").symlink_to(ROOT / "qmatmul")
    port, token = _free_port(), secrets.token_hex(16)
    settings = tmp_path / "settings"
    for name, value in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "jupyter_server_config.py").write_text(SLOW_KERNEL_START)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_SETTINGS_DIR=str(settings))  # fmt: skip
    env.pop("TRITON_INTERPRET", None)  # the setup cell must choose the interpreter itself
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 60 s")
        yield f"{base}/lab/tree/notebooks/{NOTEBOOK}/{NOTEBOOK}.ipynb?token={token}", work
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_setup_and_widget_cells_in_jupyterlab(lab):
    if not Path(CHROMIUM).exists():
        skip_unless_required("Debian's chromium is not installed (`make system-deps` installs it)", REQUIRE)
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        skip_unless_required("playwright is not installed (`make setup` installs it)", REQUIRE)
    url, work = lab
    released = (ROOT / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb").read_bytes()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"browser-{NOTEBOOK}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            page.goto(url)
            cells = page.locator(".jp-Notebook .jp-Cell")
            expect(cells.nth(6)).to_be_attached(timeout=120_000)
            # Wait for the kernel (SLOW_KERNEL_START). The toolbar's indicator reads "idle" before the session
            # starts; the status bar names the kernel's state only once it has one.
            kernel_state = page.locator(
                "#jp-main-statusbar .jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")
            )
            expect(kernel_state, "the notebook's kernel never started").to_be_visible(timeout=180_000)
            # Run cells 0-6 one by one. A key pressed before the notebook has focus is lost (CI once ran only
            # cells 0-5 of seven presses), so each cell is selected by a click and its run shown by the next
            # cell becoming the active one before the next press, and a code cell's by its prompt.
            for i in range(7):
                cells.nth(i).click()
                page.keyboard.press("Escape")  # command mode
                expect(cells.nth(i)).to_have_class(re.compile(r"\bjp-mod-active\b"))
                page.keyboard.press("Shift+Enter")
                expect(cells.nth(i + 1)).to_have_class(re.compile(r"\bjp-mod-active\b"), timeout=30_000)
                if "jp-CodeCell" in (cells.nth(i).get_attribute("class") or ""):
                    prompt = cells.nth(i).locator(".jp-InputPrompt")
                    expect(prompt, f"cell {i} was not run").not_to_have_text(
                        re.compile(r"\[ \]"), timeout=30_000
                    )
            outputs = page.locator(".jp-OutputArea-output")
            expect(outputs.filter(has_text=re.compile(r"smoke kernel for W8A16: ok"))).to_have_count(
                1, timeout=240_000
            )
            expect(outputs.filter(has_text="Triton interpreter")).not_to_have_count(0)
            widget = page.locator(".jp-OutputArea-output .jupyter-widgets")
            expect(widget.first).to_be_visible(timeout=120_000)
            expect(page.locator(".jp-OutputArea-output .widget-slider").first).to_be_visible()
            assert page.locator(".jp-OutputArea-output", has_text="Traceback").count() == 0
            widget.first.scroll_into_view_if_needed()
        finally:
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
    assert shot.stat().st_size > 10_000
    assert (ROOT / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb").read_bytes() == released  # Lab had a copy


# ----------------------------------------------------------------------------------------------------------
# An instructor's walk-through (issue 45, item 6): a small term in a clone of the course, through Formgrader, the
# Assignment List and the make targets, with a correct, a broken, an empty and a missing submission


def course_clone(dest: Path, chapters: tuple[str, ...] = ()) -> Path:
    """A clone of the course as an instructor has it, for `make` to run in: the Makefile, nbgrader_config.py and
    autograder/ copied (their paths are computed from where they lie), solutions/ and .venv linked to this
    repository's (the package comes from the environment's editable install; `chapters`: only those chapters'
    folders). `make -o .venv/.installed` takes the environment as set up."""
    dest.mkdir(parents=True)
    for name in ("Makefile", "nbgrader_config.py"):
        shutil.copy(ROOT / name, dest / name)
    student_data = ("submitted", "autograded", "feedback", "logs", "journal", "gradebook.db", "grades*.csv")
    shutil.copytree(ROOT / "autograder", dest / "autograder",
                    ignore=shutil.ignore_patterns(*student_data, "__pycache__"))  # fmt: skip
    if chapters:
        (dest / "solutions").mkdir()
        for chapter in chapters:
            (dest / "solutions" / chapter).symlink_to(ROOT / "solutions" / chapter)
    else:
        (dest / "solutions").symlink_to(ROOT / "solutions")
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def make(clone: Path, *args: str, env: dict) -> str:
    """`make ARGS` in the clone; its output (stdout and stderr together)."""
    env = {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    res = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", *args], cwd=clone, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=480)  # fmt: skip
    assert res.returncode == 0, f"make {' '.join(args)} exited {res.returncode}:\n{res.stdout[-4000:]}"
    return res.stdout


def _student_submits(who: str, text: str, home: Path, env: dict) -> None:
    """A student's notebook handed in from a terminal (`nbgrader submit`), the exchange's config in env."""
    (home / WALK).mkdir(parents=True)
    (home / WALK / f"{WALK}.ipynb").write_text(text)
    env = dict(env, JUPYTER_DATA_DIR=str(home / "data"))  # the student's own nbgrader cache
    res = subprocess.run([sys.executable, "-m", "nbgrader", "submit", WALK, f"--student={who}"], cwd=home, env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]


def _open_formgrader(page, url: str, proc, tmp_path: Path) -> None:
    for _ in range(240):
        try:
            page.goto(url)
            return
        except Exception:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    pytest.fail("Formgrader did not answer within 120 s")


def _formgrader_done(page, expect, what: str) -> str:
    """Wait for Formgrader's success dialog of `what`, return its log, close it."""
    modal, error = page.locator("#success-modal"), page.locator("#error-modal")
    expect(modal.or_(error)).to_be_visible(timeout=240_000)
    assert not error.is_visible(), f"{what}: {error.inner_text()[:3000]}"
    text = modal.inner_text()
    modal.locator("button", has_text="OK").click()
    expect(modal).to_have_count(0, timeout=10_000)
    return text


WALK = "roofline"  # the cheapest chapter to grade: 8 points, 1 of them (the measured round trip) GPU-only


@pytest.mark.slow
def test_an_instructors_term_with_a_broken_an_empty_and_a_missing_submission(tmp_path, monkeypatch):
    """Before (issue 45): the broken file was a silent 0 in the gradebook print and feedback, the missing student
    divided by 8 where the others by 7, and nothing said which of Formgrader's numbers was the grade."""
    if not Path(CHROMIUM).exists():
        skip_unless_required("Debian's chromium is not installed (`make system-deps` installs it)", REQUIRE)
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        skip_unless_required("playwright is not installed (`make setup` installs it)", REQUIRE)
    from nbgrader.utils import get_username

    from autograder import demo
    from autograder.exchange import make_exchange

    clone, exchange, cfg = course_clone(tmp_path / "course", (WALK,)), tmp_path / "exchange", tmp_path / "cfg"
    monkeypatch.setenv("QMATMUL_EXCHANGE", str(exchange))
    make_exchange(config_dir=cfg)  # the students' config, in this server's Jupyter config dir
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(cfg), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"))  # fmt: skip
    for name in ("QMATMUL_DB_URL", "QMATMUL_SANDBOX", "QMATMUL_JOBS", "QMATMUL_SCHEDULER"):
        env.pop(name, None)
    for name, value in LAB_SETTINGS.items():
        (tmp_path / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "settings" / name).write_text(json.dumps(value))
    me = get_username()  # the Assignment List's student: this OS user
    (clone / "roster.csv").write_text(f"id,first_name,last_name,email\n{me},Ann,Able,\nbroken,Bo,Broke,\n"
                                      "empty,Em,Empty,\nmissing,Mo,Miss,\n")  # fmt: skip
    make(clone, "release", env=env)  # the clone's one chapter
    make(clone, "students", env=env)

    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={clone}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.expose_app_in_browser=True"],
        cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    shot = ARTIFACTS / "browser-walk-through.png"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                _open_formgrader(page, f"{base}/formgrader?token={token}", proc, tmp_path)
                row = page.locator("tr", has_text=WALK)
                row.locator(".glyphicon-cloud-upload").click()  # Release
                assert f"Released as: qmatmul {WALK}" in _formgrader_done(page, expect, "release")

                # Ann (this OS user) fetches, solves every exercise and submits in the Assignment List
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
                work = clone / WALK / f"{WALK}.ipynb"
                nb = json.loads(work.read_text())
                solution = demo.solution(WALK)
                for cell in nb["cells"]:
                    gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
                    if cell["metadata"].get("nbgrader", {}).get("solution") and gid in solution:
                        cell["source"] = solution[gid]
                work.write_text(json.dumps(nb))
                submit.click()
                expect(lab.locator("#submitted_assignments_list")).to_contain_text(" UTC", timeout=60_000)

                # Bo hands in a damaged file, Em the release untouched (from a terminal); Mo nothing
                released = (clone / "notebooks" / WALK / f"{WALK}.ipynb").read_text()
                _student_submits("broken", released[: len(released) // 2], tmp_path / "bo", env)
                _student_submits("empty", released, tmp_path / "em", env)

                page.reload()
                row.locator(".glyphicon-cloud-download").click()  # Collect
                collected = _formgrader_done(page, expect, "collect")
                for who in (me, "broken", "empty"):
                    assert f"Collecting submission: {who} {WALK}" in collected, collected

                # the instructor grades, writes the feedback and hands it back with make
                graded = make(clone, "autograde", f"ASSIGNMENT={WALK}", env=env)
                feedback = make(clone, "feedback", f"ASSIGNMENT={WALK}", env=env)
                printed = make(clone, "gradebook", f"ASSIGNMENT={WALK}", env=env)
                exported = make(clone, "export", f"ASSIGNMENT={WALK}", env=env)
                handed = make(clone, "hand-back", f"ASSIGNMENT={WALK}", env=env)

                # Formgrader's own pages: what they show for the same term
                page.goto(f"{base}/formgrader/manage_submissions/{WALK}?token={token}")
                expect(page.locator("tbody tr")).to_have_count(3, timeout=60_000)
                submissions = {r.locator("td").nth(1).inner_text().strip(): r.inner_text()
                               for r in page.locator("tbody tr").all()}  # fmt: skip
                page.goto(f"{base}/formgrader/manage_students?token={token}")
                expect(page.locator("tbody tr")).to_have_count(4, timeout=60_000)
                students = {r.locator("td").nth(1).inner_text().strip(): r.inner_text()
                            for r in page.locator("tbody tr").all()}  # fmt: skip

                # Ann fetches her feedback in the Assignment List
                lab.bring_to_front()
                lab.locator("#refresh_assignments_list").click()
                lab.locator("#submitted_assignments_list").get_by_role(
                    "button", name="Fetch Feedback"
                ).click()
                for _ in range(120):
                    if list((clone / WALK / "feedback").glob(f"*/{WALK}.html")):
                        break
                    lab.wait_for_timeout(500)
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
    (ARTIFACTS / "walk-through.txt").write_text("\n\n".join(
        [graded, feedback, printed, exported, handed, json.dumps([submissions, students], indent=1)]))  # fmt: skip
    names = {me: "Ann", "broken": "Bo", "empty": "Em", "missing": "Mo"}
    _check_views(
        clone, tmp_path, me, graded, feedback, printed, exported, handed, submissions, students, names
    )


def _text(page: Path) -> str:
    """What a reader of an HTML page sees: its text without styles, scripts or tags, spaces collapsed."""
    import html

    text = re.sub(r"<(style|script)\b.*?</\1>", " ", page.read_text(), flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def _check_views(
    clone, tmp_path, me, graded, feedback, printed, exported, handed, submissions, students, names
):
    """The walk-through's views, one after the other: the rule (7 of 8 points measurable on a CPU, for all four
    alike) and the reasons (the broken file's, the missing student's) in each."""
    broken_why = "roofline.ipynb is not a readable notebook (invalid JSON"
    # make autograde: the class graded, the broken file refused with its reason, exit status 0 (make() checked)
    assert f"roofline · broken ... NOT GRADED: {broken_why}" in graded, graded
    assert (
        re.search(rf"roofline · {re.escape(me)} \.\.\. done", graded)
        and "roofline · empty ... done" in graded
    )
    # make feedback: a page for the broken file, the others from nbgrader
    assert f"its feedback says why: autograder/feedback/broken/{WALK}/{WALK}.html" in feedback, feedback
    # the export (make export ASSIGNMENT=roofline, and make feedback's course-wide grades.csv): one maximum for all
    assert f"grades exported: autograder/grades-{WALK}.csv" in exported
    for name in (f"grades-{WALK}", "grades"):
        with (clone / "autograder" / f"{name}.csv").open() as f:
            rows = {r["student_id"]: r for r in csv.DictReader(f)}
        assert {who: (r["first_name"], r["max"], r["not_measured"]) for who, r in rows.items()} == {
            who: (first, "8", "1") for who, first in names.items()
        }, name
        assert {who: (r["total"], r["percent"]) for who, r in rows.items()} == {
            me: ("7", "100.0"),
            "broken": ("0", "0.0"),
            "empty": ("0", "0.0"),
            "missing": ("0", "0.0"),
        }, name
        assert rows["broken"]["reasons"].startswith(f"{WALK}: not graded: {broken_why}"), rows["broken"]
        assert rows["missing"]["reasons"] == f"{WALK}: not submitted" and rows["empty"]["reasons"] == ""
        assert rows[me]["reasons"] == ""
    with (clone / "autograder" / f"grades-{WALK}-by-cell.csv").open() as f:
        status = {(r["student_id"], r["cell"]): r["status"] for r in csv.DictReader(f)}
    assert {who: status[who, "test_naive_measured"] for who in names} == {
        **dict.fromkeys(names, "not measured"),
        "missing": "not submitted",
    }  # the broken file's too
    assert (status[me, "test_floor"], status["empty", "test_floor"]) == ("passed", "failed")
    assert (status["broken", "test_floor"], status["missing", "test_floor"]) == (
        "not graded",
        "not submitted",
    )
    # the feedback pages: the header's points over what could be measured; the broken student's page says why
    pages = {who: _text(clone / "autograder" / "feedback" / who / WALK / f"{WALK}.html") for who in names
             if who != "missing"}  # fmt: skip
    assert not (
        clone / "autograder" / "feedback" / "missing"
    ).exists()  # the export's "not submitted" is theirs
    assert f"{WALK}: 7 of 7 points (100 %)" in pages[me] and f"{WALK}: 0 of 7 points (0 %)" in pages["empty"]
    assert all("1 more point could not be measured on the grading machine (naive_measured)" in pages[w]
               for w in (me, "empty"))  # fmt: skip
    assert f"{WALK} (Score: 7.0 / 8.0)" in pages[me]  # nbgrader's own header, above the course's: its sum
    assert "your submission could not be graded" in pages["broken"] and broken_why in pages["broken"]
    # handed back through the exchange, and fetched: Ann in the Assignment List, Bo from a terminal
    assert all(
        f"roofline · {who}: feedback released to the exchange" in handed for who in (me, "broken", "empty")
    )
    fetched = list((clone / WALK / "feedback").glob(f"*/{WALK}.html"))
    assert fetched and f"{WALK}: 7 of 7 points (100 %)" in _text(fetched[0])
    env = dict(
        os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "bo" / "data")
    )
    res = subprocess.run([sys.executable, "-m", "nbgrader", "fetch_feedback", WALK, "--student=broken"],
                         cwd=tmp_path / "bo", env=env, capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    fetched = list((tmp_path / "bo" / WALK / "feedback").glob(f"*/{WALK}.html"))
    assert fetched and broken_why in _text(fetched[0])
    # Formgrader: nbgrader's own sums (every cell, the unmeasured one included), not the grade, as course.md says
    assert "**Which number is the grade**: the export's `percent`" in (ROOT / "course.md").read_text()
    assert set(submissions) == {me, "broken", "empty"}  # nothing submitted, nothing listed
    assert re.search(r"\bgraded\s+7 / 8\b", submissions[me]) and re.search(
        r"\bgraded\s+0 / 8\b", submissions["empty"]
    )
    assert "needs autograding" in submissions["broken"] and " / " not in submissions["broken"]
    assert {who: re.findall(r"\d+ / \d+", text) for who, text in students.items()} == {
        me: ["7 / 8"],
        "broken": ["0 / 8"],
        "empty": ["0 / 8"],
        "missing": ["0 / 8"],
    }
    # make gradebook's print (autograder/gradebook.py): the same totals over 7, and the reasons
    assert re.search(rf"^{re.escape(me)}\s.*\s7/7$", printed, re.M) and re.search(
        r"^empty\s.*\s0/7$", printed, re.M
    ), printed
    assert "(total: over the 7 points this machine could measure" in printed
    assert "missing" in printed.split("not submitted (")[-1]
    assert re.search(rf"^  broken: not graded: {re.escape(broken_why)}", printed, re.M), printed
    assert "not submitted (1, 0 points each): missing" in printed, printed
