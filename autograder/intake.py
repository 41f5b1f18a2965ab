"""What the course takes in from a student, and what it hands back: regular files only.

A student controls the folder they submit (their exchange inbound folder, or what they hand in by other means).
A symlink there makes every later step that reads or writes "their" file act on whatever the link names: collect
copies the solutions in as their notebook, autograde copies the gradebook beside it, feedback publishes it. So
nothing but regular files with one name (no symlinks, hard links, FIFOs, sockets or devices) is taken in, and
feedback hands back only the pages nbgrader generated.

    problems(folder)       what in a submitted folder is not a regular file or folder, one line each
    RegularFilesOnly       nbgrader's first sanitizing step (nbgrader_config.py): a submission that holds
                           anything else is not graded, whichever way autograde is started
    SafeCollect            nbgrader's collect (nbgrader_config.py: ExchangeFactory.collect), copying regular
                           files only, never through a link; what it refuses is logged by name
    feedback_extras(...)   files in a feedback folder that nbgrader did not generate (a submission's extras)
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns
from traitlets import Bool


def _kind(st: os.stat_result) -> str | None:
    """What is wrong with an entry, by its lstat, or None for a regular file of one name or a folder."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, socket or device)"
    if st.st_nlink > 1:
        return f"a hard link ({st.st_nlink} names for one file)"
    return None


def problems(folder: Path) -> list[str]:
    """Every entry under `folder` (itself included) that is not a regular file of one name or a folder, as
    'path: what', paths relative to the folder. Nothing is followed: a linked folder is reported, not entered."""
    folder = Path(folder)
    try:
        top = _kind(os.lstat(folder))
    except FileNotFoundError:
        return []
    if top is not None:
        return [f"{folder.name}: {top}"]
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):  # os.walk does not follow linked folders
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            what = _kind(os.lstat(path))
            if what is not None:
                out.append(f"{path.relative_to(folder)}: {what}")
    return out


def refusal(folder: Path) -> str | None:
    """The message for a submission that holds anything but regular files, or None."""
    found = problems(folder)
    if not found:
        return None
    shown = "; ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"not graded: the submission holds what the course takes in only as regular files ({shown}). "
        "Hand in the notebook itself (nbgrader's Assignment List does), then grade again"
    )


class SubmissionError(Exception):
    pass


class RegularFilesOnly(Preprocessor):
    """Refuse to grade a notebook whose submitted folder holds anything but regular files (`refusal`). It runs
    where nbgrader reads the submission (the sanitizing pass: resources' path is the submitted folder), for
    `make autograde`, `nbgrader autograde` and Formgrader alike; classroom.py says the same before it starts."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        folder = resources.get("metadata", {}).get("path")
        name = resources.get("unique_key")
        why = refusal(Path(folder)) if folder else None
        if why is None and folder and name:
            what = _kind(os.lstat(Path(folder) / f"{name}.ipynb"))
            why = f"not graded: {name}.ipynb is {what}" if what else None
        if why:
            raise SubmissionError(why)
        return nb, resources


def copy_regular(src: str, dst: str) -> str:
    """Copy one regular file without following a link at either end (a name that became a link after the
    folder was checked is refused here)."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        what = _kind(os.fstat(fd))
        if what is not None or not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{src} is {what or 'not a regular file'}")
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as o, os.fdopen(os.dup(fd), "rb") as i:
            shutil.copyfileobj(i, o)
    finally:
        os.close(fd)
    shutil.copystat(src, dst, follow_symlinks=False)
    return dst


class SafeCollect(ExchangeCollect):
    """nbgrader's collect, taking in regular files only: a symlink, hard link, FIFO or device in a student's
    inbound folder is left behind and logged as an error naming the student and the entry (a notebook that is a
    link is not collected at all: the student has handed in nothing)."""

    def do_copy(self, src, dest, log=None):
        refused = problems(Path(src))
        for line in refused:
            self.log.error("refused in %s: %s (only regular files are collected)", src, line)
        nbgrader_ignores = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                           max_file_size=self.coursedir.max_file_size, log=self.log)  # fmt: skip

        def ignore(directory, names):
            skipped = set(nbgrader_ignores(directory, names))
            return skipped | {n for n in names if _kind(os.lstat(os.path.join(directory, n))) is not None}

        if _kind(os.lstat(src)) is not None:
            return
        shutil.copytree(src, dest, symlinks=True, ignore=ignore, copy_function=copy_regular)


def feedback_extras(folder: Path, notebooks: list[str]) -> list[Path]:
    """What a student's feedback folder holds beyond the pages nbgrader generated for the assignment's notebooks
    (`<notebook>.html`) and the exchange's own files (timestamp.txt, submission_secret.txt, as regular files):
    nbgrader's generate_feedback copies a submission's other files there, and its release_feedback publishes
    every `*.html`."""
    keep = {f"{nb}.html" for nb in notebooks} | {"timestamp.txt", "submission_secret.txt"}
    out = []
    for entry in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        if (
            entry.name not in keep
            or _kind(os.lstat(entry)) is not None
            or stat.S_ISDIR(os.lstat(entry).st_mode)
        ):
            out.append(entry)
    return out
