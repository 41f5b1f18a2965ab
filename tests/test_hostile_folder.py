"""A submission's folder is hostile: nothing handed in beside the notebook is imported, and no file the learner's
process could have replaced by a link is followed by the trusted side."""

import os
from pathlib import Path

import pytest
import torch

from qmatmul.grader import notebook
from qmatmul.grader.files import read_regular, read_tensor
from qmatmul.grader.remote import Worker, import_path

PROGRAM = [
    ("setup", notebook.QUIET_START),
    ("imports", "import torch\nimport qmatmul\n"),
    (
        "learner",
        """
import sys
def where(x):
    import json
    return torch.tensor([len(qmatmul.__file__)]), qmatmul.__file__, json.__file__, sys.path[:3]

def plant(x, target):
    import os
    os.symlink(target, "planted")
    for name in os.listdir(os.environ["QMATMUL_WORKER_DIR"]):
        path = os.path.join(os.environ["QMATMUL_WORKER_DIR"], name)
        if name == "log":
            os.unlink(path)
            os.symlink(target, path)
    return x
""",
    ),
]


@pytest.fixture
def shadowing_folder(tmp_path):
    """A submission folder with a `qmatmul/` package and a `json.py` of its own beside the notebook."""
    (tmp_path / "qmatmul").mkdir()
    (tmp_path / "qmatmul" / "__init__.py").write_text("SHADOW = True\n")
    (tmp_path / "json.py").write_text("SHADOW = True\n")
    return tmp_path


def test_files_handed_in_beside_the_notebook_are_not_imported(shadowing_folder, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(shadowing_folder))  # nor does the environment put them on the path
    w = Worker(PROGRAM, cwd=shadowing_folder, timeout=60)
    try:
        result, _, _ = w.call("where", (torch.zeros(1),), {})
    finally:
        w.close()
    _, package, json_file, path = result
    assert not package.startswith(str(shadowing_folder)), package
    assert not json_file.startswith(str(shadowing_folder)), json_file
    assert all(not p.startswith(str(shadowing_folder)) for p in path)


def test_the_import_path_leaves_out_the_submission_and_the_current_directory(shadowing_folder, monkeypatch):
    monkeypatch.chdir(shadowing_folder)
    path = import_path(exclude=(shadowing_folder,))
    assert str(shadowing_folder) not in path and "" not in path
    assert all(not p.startswith(str(shadowing_folder)) for p in path)


def test_the_trusted_side_never_reads_through_a_link(tmp_path):
    secret = tmp_path / "gradebook.db"
    secret.write_text("every student's scores")
    link = tmp_path / "result.pt"
    link.symlink_to(secret)
    with pytest.raises(OSError):
        read_regular(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        read_regular(fifo)


def test_timed_outputs_are_read_as_the_trusted_side_expects_them_or_not_at_all(tmp_path):
    """read_tensor (a timed batch's outputs, raw bytes): the shape and dtype are the trusted side's; a file of another
    size, a link or a FIFO is refused, never read as something else."""
    want = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(torch.bfloat16)
    path = tmp_path / "outs"
    want.view(torch.uint8).numpy().tofile(path)
    assert torch.equal(read_tensor(path, (2, 3, 4), torch.bfloat16, "cpu"), want)
    for shape in ((2, 3, 5), (2, 3, 3)):
        with pytest.raises(OSError, match="bytes, not the"):
            read_tensor(path, shape, torch.bfloat16, "cpu")
    secret = tmp_path / "gradebook.db"
    secret.write_bytes(bytes(48))
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(OSError):
        read_tensor(link, (2, 3, 4), torch.bfloat16, "cpu")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        read_tensor(fifo, (2, 3, 4), torch.bfloat16, "cpu")


def test_a_link_left_in_the_workers_folder_is_not_followed_on_restart(tmp_path):
    """The learner's code replaces the worker's log by a link to a course file; the log is read without following
    it, a restarted worker starts in a new folder (nothing the last process left there, a link or a copy of the
    real weights, is seen), and the course file is untouched."""
    secret = tmp_path / "solution.ipynb"
    secret.write_text("the hidden tests")
    w = Worker(PROGRAM, timeout=60)
    try:
        w.call("plant", (torch.zeros(1), str(secret)), {})
        assert os.path.islink(w.dir / "log")
        assert "the hidden tests" not in w.log_tail()  # read without following the link
        first = w.dir
        w.stop()
        w.call("where", (torch.zeros(1),), {})  # a new worker, in a new folder: nothing the last one left
        assert w.dir != first and not first.exists()
        assert not os.path.islink(w.dir / "log") and not (w.scratch / "planted").exists()
    finally:
        w.close()
    assert secret.read_text() == "the hidden tests"


# ----------------------------------------------------------------------------------------------------------
# What the course takes in: regular files only (autograder/intake.py)


def _hostile(folder, solution):
    """A submitted folder holding each kind of entry the course refuses, beside a regular notebook."""
    folder.mkdir(parents=True)
    (folder / "w8a16.ipynb").write_text("{}")
    (folder / "answers.ipynb").symlink_to(solution)
    (folder / "linked_folder").symlink_to(solution.parent, target_is_directory=True)
    os.mkfifo(folder / "pipe")
    (folder / "notes.txt").write_text("mine")
    os.link(folder / "notes.txt", folder / "notes-again.txt")
    (folder / "sub").mkdir()
    (folder / "sub" / "deeper.html").symlink_to(solution)
    return folder


def test_every_entry_but_regular_files_is_named(tmp_path):
    from autograder import intake

    folder = _hostile(tmp_path / "submitted", tmp_path / "solution.ipynb")
    found = intake.problems(folder)
    assert sorted(f.split(":")[0] for f in found) == [
        "answers.ipynb",
        "linked_folder",
        "notes-again.txt",
        "notes.txt",
        "pipe",
        "sub/deeper.html",
    ]
    assert "symbolic link" in next(f for f in found if f.startswith("answers.ipynb"))
    assert "hard link" in next(f for f in found if f.startswith("notes.txt"))
    assert intake.problems(tmp_path / "missing") == []
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "w8a16.ipynb").write_text("{}")
    assert intake.refusal(tmp_path / "clean") is None
    assert "answers.ipynb: a symbolic link" in intake.refusal(folder)
    linked = tmp_path / "linked-submission"
    linked.symlink_to(tmp_path / "clean", target_is_directory=True)
    assert intake.problems(linked) == ["linked-submission: a symbolic link"]


def test_feedback_keeps_only_what_the_course_generated(tmp_path):
    from autograder import term

    secret = tmp_path / "gradebook.db"
    secret.write_text("scores")
    folder = tmp_path / "feedback" / "mallory" / "w8a16"
    folder.mkdir(parents=True)
    for name in ("w8a16.html", "timestamp.txt", "submission_secret.txt", "notes.html"):
        (folder / name).write_text(name)
    (folder / "grades.html").symlink_to(secret)
    (folder / "extra").mkdir()
    removed = term.prune_feedback("w8a16", tmp_path / "feedback")
    assert sorted(p.name for p in removed) == ["extra", "grades.html", "notes.html"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "submission_secret.txt",
        "timestamp.txt",
        "w8a16.html",
    ]
    assert secret.read_text() == "scores"


def _course(tmp_path):
    from autograder import classroom

    dirs = classroom.CourseDirs(
        submitted=str(tmp_path / "submitted"), autograded=str(tmp_path / "autograded"),
        feedback=str(tmp_path / "feedback"), release=str(tmp_path / "release"), db=str(tmp_path / "gradebook.db"),
    )  # fmt: skip
    assert classroom.nbgrader("generate_assignment", "w8a16", "--force", dirs=dirs).returncode == 0
    return dirs


@pytest.mark.slow
def test_a_linked_submission_is_refused_by_every_way_to_autograde(tmp_path):
    """A hand-copied submission whose notebook is a link to the solution (7/10 for no work before): classroom.py
    refuses it before nbgrader starts, and nbgrader's own autograde (Formgrader's button) refuses it in its first
    sanitizing step; the gradebook and the solution are untouched."""
    from autograder import classroom

    dirs = _course(tmp_path)
    solution = Path(__file__).resolve().parent.parent / "solutions" / "w8a16" / "w8a16.ipynb"
    before = solution.read_bytes()
    folder = tmp_path / "submitted" / "mallory" / "w8a16"
    folder.mkdir(parents=True)
    (folder / "w8a16.ipynb").symlink_to(solution)
    failures = classroom.autograde("w8a16", ["mallory"], dirs)
    assert "w8a16.ipynb: a symbolic link" in failures["mallory"], failures
    assert not (tmp_path / "autograded" / "mallory").exists()
    res = classroom.nbgrader("autograde", "w8a16", "--student=mallory", "--force", dirs=dirs)
    assert res.returncode != 0 and "SubmissionError: not graded" in res.stderr, res.stderr[-2000:]
    assert "a symbolic link" in classroom.nbgrader_error(res.returncode, res.stderr)
    assert not (tmp_path / "autograded" / "mallory" / "w8a16" / "w8a16.ipynb").exists()
    assert solution.read_bytes() == before and oct(solution.stat().st_mode & 0o777) != "0o444"


@pytest.mark.slow
def test_collect_takes_in_regular_files_only(tmp_path):
    """A student's inbound folder in the exchange holding a notebook that is a link to the solution, a link named
    like a feedback page, a FIFO and a regular file of their own: collect takes the regular file alone and names
    each entry it refused."""
    from autograder import term

    root = Path(__file__).resolve().parent.parent
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    (course / "solutions").symlink_to(root / "solutions")
    flags = [f"--CourseDirectory.root={course}", "--CourseDirectory.release_directory=release",
             f"--CourseDirectory.db_url=sqlite:///{course}/gradebook.db", f"--Exchange.root={exchange}"]  # fmt: skip
    inbound = exchange / "qmatmul" / "inbound" / "mallory+w8a16+2026-12-04 10:00:00.000000 UTC+abc"
    inbound.mkdir(parents=True)
    solution = root / "solutions" / "w8a16" / "w8a16.ipynb"
    (inbound / "w8a16.ipynb").symlink_to(solution)
    (inbound / "scores.html").symlink_to(course / "gradebook.db")
    os.mkfifo(inbound / "pipe")
    (inbound / "notes.txt").write_text("my notes")
    (inbound / "timestamp.txt").write_text("2026-12-04 10:00:00.000000 UTC")
    res = term.nbgrader("collect", "w8a16", "--update", "--CollectApp.check_owner=False", quiet=True,
                        flags=tuple(flags))  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = course / "autograder" / "submitted" / "mallory" / "w8a16"
    assert sorted(p.name for p in got.iterdir()) == ["notes.txt", "timestamp.txt"], res.stderr[-2000:]
    for name in ("w8a16.ipynb", "scores.html", "pipe"):
        assert f"{name}: " in res.stderr and "only regular files are collected" in res.stderr, res.stderr[
            -2000:
        ]


def test_the_oracle_libraries_are_not_importable_where_the_learners_code_runs():
    """torchao and ml_dtypes compute the formats' answers in one call: refused by any route, a string included."""
    from qmatmul.checks import LearnerError

    program = [
        ("setup", notebook.QUIET_START),
        (
            "learner",
            "import pickle\ndef fetch(x):\n    return pickle.loads(b'cml_dtypes\\nfloat8_e4m3fn\\n.')\n",
        ),
    ]
    w = Worker(program, timeout=60)
    try:
        with pytest.raises(LearnerError) as err:
            w.call("fetch", (torch.zeros(1),), {})
    finally:
        w.close()
    assert err.value.type_name in ("ImportError", "ModuleNotFoundError") and "answers" in str(err.value)


def test_modules_from_outside_the_stated_path_are_refused():
    """A copy of a course file written to the scratch folder and imported from there would run the answer's code
    from a file outside the course package: imports keep to the worker's stated path."""
    from qmatmul.checks import LearnerError

    program = [
        ("setup", notebook.QUIET_START),
        (
            "learner",
            "import sys, os\n"
            "def fetch(x):\n"
            "    with open('copied.py', 'w') as f:\n"
            "        f.write('VALUE = 1\\n')\n"
            "    sys.path.insert(0, os.getcwd())\n"
            "    import copied\n"
            "    return x\n",
        ),
    ]
    w = Worker(program, timeout=60)
    try:
        with pytest.raises(LearnerError) as err:
            w.call("fetch", (torch.zeros(1),), {})
    finally:
        w.close()
    assert "outside the course's environment" in str(err.value)
