"""Drive nbgrader for a class: build the demo class, autograde with progress, print the gradebook.

    python -m autograder.classroom demo [ASSIGNMENT ...]      release into build/demo, grade the demo class
    python -m autograder.classroom autograde [ASSIGNMENT ...] grade autograder/submitted/ (a real class)
    python -m autograder.classroom gradebook [ASSIGNMENT ...] print the gradebook of autograder/gradebook.db

    --jobs N             grade N submissions at once (one nbgrader process each; needs a PostgreSQL gradebook:
                         QMATMUL_DB_URL, or QMATMUL_DEMO_DB_URL for the demo, which empties that database)
    --scheduler ADDRESS  grade on a Dask cluster (tcp://host:8786) instead of this host's pool
    --resume             skip the submissions already graded from the same files (the journal); for the demo,
                         go on with an interrupted one (one notebook at a time) instead of starting afresh
    --students A,B       demo: grade only these demo students of each chapter (e.g. correct)

Run from the repository root (nbgrader reads nbgrader_config.py there). Submitted notebooks are never
modified: nbgrader copies them to the autograded folder and grades the copies. The gradebook is read back and
printed by autograder/gradebook.py.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autograder import advice, demo, exchange, nbgrader_cli, parallel, rule, sandbox
from autograder.gradebook import gradebook, print_gradebook, reset_database, scored_submissions
from qmatmul.course import assignments, selected_assignments  # noqa: F401 - assignments: used by its callers
from qmatmul.grader import notebook

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "build" / "demo"
STUDENT_TIMEOUT = float(
    os.environ.get("QMATMUL_STUDENT_TIMEOUT", "3600")
)  # seconds for one student's notebook


@dataclass
class CourseDirs:
    """The folders and gradebook of one nbgrader course (the real class or the demo)."""

    submitted: str = "autograder/submitted"
    autograded: str = "autograder/autograded"
    feedback: str = "autograder/feedback"
    release: str = "notebooks"
    db: str = "autograder/gradebook.db"
    sandbox: bool = False  # run each student's code in bubblewrap (sandbox_exec.sh)
    db_url: str = ""  # a database URL (postgresql+psycopg://...) instead of the SQLite file `db`

    @property
    def url(self) -> str:
        return self.db_url or f"sqlite:///{ROOT / self.db}"

    @property
    def logs(self) -> Path:
        """logs/<assignment>/<student>.log: what nbgrader wrote on stderr the last time it graded that submission."""
        return ROOT / Path(self.autograded).parent / "logs"

    @property
    def journal(self) -> Path:
        """journal/<assignment>/<student>: the digest of the files last graded to the end (for --resume)."""
        return ROOT / Path(self.autograded).parent / "journal"

    def flags(self) -> list[str]:
        return [
            f"--CourseDirectory.submitted_directory={self.submitted}",
            f"--CourseDirectory.autograded_directory={self.autograded}",
            f"--CourseDirectory.feedback_directory={self.feedback}",
            f"--CourseDirectory.release_directory={self.release}",
            f"--CourseDirectory.db_url={self.url}",
        ]


DEMO_DIRS = CourseDirs(
    submitted="build/demo/submitted",
    autograded="build/demo/autograded",
    feedback="build/demo/feedback",
    release="build/demo/release",
    db="build/demo/gradebook.db",
)


def nbgrader(
    *args: str, dirs: CourseDirs, quiet: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run nbgrader with the course's folders. Output goes to files, not pipes (a process the student's code
    left behind cannot hold the grader up), and past `timeout` seconds nbgrader and its process group are
    killed."""
    cmd, env = nbgrader_command(*args, dirs=dirs)
    return parallel.run_command(cmd, cwd=ROOT, env=dict(os.environ, **env), timeout=timeout, quiet=quiet)


def nbgrader_command(*args: str, dirs: CourseDirs) -> tuple[list[str], dict]:
    """The nbgrader command line and what it adds to the environment (PATH: nbgrader runs alembic and jupyter,
    which must come from the course's environment)."""
    cmd = [*nbgrader_cli.COMMAND, *args, *dirs.flags()]
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "QMATMUL_BIN": str(Path(sys.executable).parent)}  # fmt: skip
    if dirs.sandbox and args and args[0] == "autograde":
        env["QMATMUL_SANDBOX"] = "1"  # nbgrader_config.py: sandbox.configure()
        private = [dirs.submitted, dirs.autograded, dirs.feedback, dirs.db, dirs.release]
        env[sandbox.EXTRA_ENV] = os.pathsep.join(str(ROOT / p) for p in private)
    return cmd, env


def sandbox_available() -> bool:
    return sandbox.available()


# ----------------------------------------------------------------------------------------------------------
# The demo class (autograder/demo.py reads the students' files and says what each one submits)


def build_submission(student: demo.DemoStudent, release: Path, dest: Path) -> None:
    """Write the student's notebook: the released notebook with its solution cells filled in."""
    solution = demo.solution(student.assignment)
    changed = student.changed_cells()
    dest.mkdir(parents=True, exist_ok=True)
    for nb_path in (release / student.assignment).glob("*.ipynb"):
        nb = notebook.load(nb_path)
        if not student.blank:
            for cell in nb["cells"]:
                meta = notebook.nbgrader_meta(cell)
                if meta.get("solution"):
                    gid = meta["grade_id"]
                    cell["source"] = changed.get(gid, solution[gid]).splitlines(keepends=True)
            # A cell holding only DELETED_CELL stands for a learner who deleted that cell.
            nb["cells"] = [c for c in nb["cells"] if notebook.cell_source(c).strip() != demo.DELETED_CELL]
        (dest / nb_path.name).write_text(json.dumps(nb, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------------------
# Grading and the gradebook


def autograde(assignment: str, students: list[str], dirs: CourseDirs) -> dict:
    """Grade student by student with progress; a failure is reported and the class goes on."""
    failures = {}
    for i, student in enumerate(students, 1):
        t0 = time.time()
        _journal(assignment, student, dirs).unlink(missing_ok=True)
        print(f"[{i}/{len(students)}] {assignment} · {student} ...", end=" ", flush=True)
        refused = file_problem(assignment, student, dirs)
        if refused:
            failures[student] = refused
            print(f"NOT GRADED: {refused}")
            continue
        res = nbgrader(
            "autograde", assignment, f"--student={student}", "--force", dirs=dirs, timeout=STUDENT_TIMEOUT
        )
        seconds = time.time() - t0
        why = nbgrader_failure(assignment, student, res.returncode, res.stderr, dirs)
        if why:
            failures[student] = why
            print(f"FAILED ({seconds:.0f} s): {why}")
        else:
            _record(assignment, student, dirs)
            print(f"done ({seconds:.0f} s)")
    return failures


def autograde_at_once(assignment: str, dirs: CourseDirs, exclude: tuple[str, ...] = ()) -> dict:
    """Every submission of `assignment` (but those of the students in `exclude`) in one `nbgrader autograde` run,
    as nbgrader's own command and Formgrader grade: each student saves nbgrader's and torch's imports (about 8 s on
    a CPU), but there is no progress line, no journal and one timeout for them all. Returns {"the class": why}
    when the run failed, else {}."""
    skip = (f"--CourseDirectory.student_id_exclude={','.join(exclude)}",) if exclude else ()
    res = nbgrader("autograde", assignment, "--force", *skip, dirs=dirs, timeout=STUDENT_TIMEOUT)
    why = nbgrader_failure(assignment, "the class", res.returncode, res.stderr, dirs)
    return {"the class": why} if why else {}


def autograde_class(pairs: list[tuple[str, str]], dirs: CourseDirs, jobs: int = 1, scheduler=None,
                    resume: bool = False, chapter_done=None) -> dict:  # fmt: skip
    """Grade (assignment, student) pairs: jobs=1 without a scheduler is `autograde` one assignment after
    another; otherwise N at once on this host, or on a Dask cluster, each pair its own nbgrader process, with
    progress for the whole class. Returns {(assignment, student): why} for the pairs that failed. With
    `resume`, pairs whose journal entry matches their submitted files are skipped. chapter_done(assignment,
    {student: why}) is called as soon as an assignment's last pair is graded (its gradebook can be printed
    then, not only at the end of a long run)."""
    if resume:
        scored = scored_submissions(dirs)
        pairs = [(a, s) for a, s in pairs if not graded_already(a, s, dirs, scored)]
        print(f"resume: {len(pairs)} submission(s) to grade", flush=True)
    if jobs <= 1 and scheduler is None:
        failures = {}
        for assignment in dict.fromkeys(a for a, _ in pairs):
            failed_here = autograde(assignment, [s for a, s in pairs if a == assignment], dirs)
            failures.update({(assignment, student): why for student, why in failed_here.items()})
            if chapter_done:
                chapter_done(assignment, failed_here)
        return failures
    if dirs.url.startswith("sqlite"):
        raise SystemExit(
            "Grading in parallel needs a gradebook that takes concurrent writers: SQLite takes one. Set "
            "QMATMUL_DB_URL (the demo: QMATMUL_DEMO_DB_URL) to a PostgreSQL database, e.g. "
            'postgresql+psycopg://grader@dbhost/qmatmul (course.md, "A class of hundreds"), or use --jobs 1.'
        )
    _create_students(sorted({s for _, s in pairs}), dirs)  # one writer creates them, not N at once
    work, failures = [], {}
    for assignment, student in pairs:
        refused = file_problem(assignment, student, dirs)
        if refused:
            failures[assignment, student] = refused
            print(f"{assignment} · {student}: NOT GRADED: {refused}")
            continue
        _journal(assignment, student, dirs).unlink(missing_ok=True)  # a job killed midway leaves no entry
        cmd, env = nbgrader_command("autograde", assignment, f"--student={student}", "--force", dirs=dirs)
        env.pop("PATH")  # the host that runs the job puts QMATMUL_BIN before its own PATH
        work.append(parallel.Job(assignment, student, cmd, env, str(ROOT), STUDENT_TIMEOUT))
    left = collections.Counter(job.assignment for job in work)

    def failed(res: parallel.Result) -> str | None:
        why = nbgrader_failure(res.job.assignment, res.job.student, res.returncode, res.stderr, dirs)
        if why:
            failures[res.job.assignment, res.job.student] = why
        else:
            _record(res.job.assignment, res.job.student, dirs)
        return why

    progress = parallel.Progress(len(work), failed)

    def done(res: parallel.Result) -> None:  # the progress line first, then a finished chapter's gradebook
        progress(res)
        left[res.job.assignment] -= 1
        if chapter_done and left[res.job.assignment] == 0:
            chapter_done(
                res.job.assignment, {s: w for (a, s), w in failures.items() if a == res.job.assignment}
            )

    refused = len(failures)
    for assignment in dict.fromkeys(a for a, _ in pairs):  # a chapter whose every submission was refused
        if chapter_done and not left[assignment]:
            chapter_done(assignment, {s: w for (a, s), w in failures.items() if a == assignment})
    t0 = time.time()
    if scheduler is None:
        parallel.run_local(work, jobs, done)
    else:
        parallel.run_dask(work, scheduler, done)
    print(
        rate_line(
            len(work) + refused - len(failures), len(work) + refused, time.time() - t0, rate_of=len(work)
        )
    )
    return failures


def rate_line(
    graded: int, notebooks: int, seconds: float, rate_of: int | None = None, serial: bool = False
) -> str:
    """A class run's closing line (tools/parallel_grading.py reads it): notebooks an hour over `rate_of` of them
    (default all; refused ones took no time)."""
    rate = (notebooks if rate_of is None else rate_of) / seconds * 3600 if seconds else 0.0
    count = f"{notebooks} notebooks one at a time" if serial else f"{graded}/{notebooks}"
    return f"graded {count} in {seconds:.0f} s ({rate:.0f} notebooks/hour)"


def file_problem(assignment: str, student: str, dirs: CourseDirs) -> rule.FileProblem | None:
    """Why a submission cannot be graded as handed in (links, a missing or unreadable notebook: rule.py), said
    before nbgrader is started, or None."""
    why = rule.submission_problem(
        ROOT / dirs.submitted / student / assignment, rule.chapter_notebooks(assignment)
    )
    return rule.FileProblem(why) if why else None


def exit_status(failures: dict) -> int:
    """0 when every submission was graded or failed for its own files (the class was graded; each such student's
    feedback says what to fix, so `make autograde && make feedback` goes on), 1 when grading itself failed."""
    files = [why for why in failures.values() if isinstance(why, rule.FileProblem)]
    if files:
        print(f"{len(files)} submission(s) not graded for their files (listed above): the gradebook, the export and "
              "`make feedback` give each student the reason")  # fmt: skip
    return 1 if len(files) < len(failures) else 0


def _create_students(students: list[str], dirs: CourseDirs) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(dirs.url) as gb:
        for student in students:
            gb.update_or_create_student(student)


def _journal(assignment: str, student: str, dirs: CourseDirs) -> Path:
    return dirs.journal / assignment / student


def _record(assignment: str, student: str, dirs: CourseDirs) -> None:
    path = _journal(assignment, student, dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(parallel.submission_digest(ROOT / dirs.submitted / student / assignment) + "\n")


def graded_already(assignment: str, student: str, dirs: CourseDirs, in_gradebook: set) -> bool:
    """True when the last grading of this submission ran to the end on the same files, and the gradebook
    holds its scores (a journal never outlives a gradebook that was replaced)."""
    path = _journal(assignment, student, dirs)
    folder = ROOT / dirs.submitted / student / assignment
    return (
        (assignment, student) in in_gradebook
        and path.exists()
        and (path.read_text().strip() == parallel.submission_digest(folder))
    )


def nbgrader_failure(
    assignment: str, student: str, returncode: int, stderr: str, dirs: CourseDirs
) -> str | None:
    """Why one `nbgrader autograde` run failed, or None when it graded. Its stderr is kept in dirs.logs either way
    and a failure names it.

    nbgrader exits non-zero when it could not grade a submission. Errors it logs and gets past are the notebook
    kernel's (a kernel that died, timed out, or whose shutdown raced its client: jupyter_client logs a ZMQError
    "Socket operation on non-socket" there once in a while under load), and the notebook kernel decides no grade
    (qmatmul/grader/nbhooks.py): they fail nothing."""
    log = dirs.logs / assignment / f"{student}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(stderr)
    if returncode == 0:
        return None
    return f"{nbgrader_error(returncode, stderr)}{advice.advise(stderr)} (nbgrader's log: {log})"


def nbgrader_error(returncode: int, stderr: str) -> str:
    """The most telling line of a failed nbgrader run: the exception, not 'see the above traceback'."""
    lines = [ln.strip() for ln in stderr.splitlines()]
    exceptions = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    if exceptions:
        return exceptions[-1][:300]
    errors = [ln for ln in lines if "ERROR" in ln and "see the the above traceback" not in ln]
    return (errors[-1] if errors else f"nbgrader exited {returncode}")[:300]


def students_in(dirs: CourseDirs, assignment: str) -> list[str]:
    base = ROOT / dirs.submitted
    return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir()) if base.is_dir() else []


# ----------------------------------------------------------------------------------------------------------


def demo_students(assignment: str, only: list[str] | None = None) -> list:
    """The chapter's demo students, or those of them named in `only` (`demo --students`)."""
    return [st for st in demo.students(assignment) if only is None or st.name in only]


def release_demo(assignment: str, dirs: CourseDirs, only: list[str] | None = None) -> list | None:
    """Release one chapter and build its demo students' submissions (those named in `only`, if given): the
    students ([] where it has none), or None if the release failed (nbgrader's error printed)."""
    students = demo_students(assignment, only)
    if not students:
        return []
    print(f"Releasing {assignment} (nbgrader generate_assignment) ...", flush=True)
    res = nbgrader("generate_assignment", assignment, "--force", dirs=dirs)
    if res.returncode != 0:
        print(res.stderr)
        return None
    for st in students:
        build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / assignment)
    return students


def run_demo(
    selected: list[str],
    sandbox: bool = False,
    jobs: int = 1,
    scheduler=None,
    resume: bool = False,
    only: list[str] | None = None,
) -> int:
    """Release the chapters into build/demo, grade the demo class (the students named in `only`, if given), print
    each gradebook against the students' expectations. `resume` goes on with an interrupted demo one notebook at a time (a call's time limit on a GPU
    box, say): what build/demo holds stays, and only the notebooks not graded to the end are graded."""
    dirs = dataclasses.replace(DEMO_DIRS, sandbox=sandbox, db_url=os.environ.get("QMATMUL_DEMO_DB_URL", ""))
    if resume and (jobs > 1 or scheduler is not None):
        raise SystemExit(
            "--resume goes on with a demo graded one notebook at a time (--jobs 1): a parallel demo's scratch "
            "gradebook is removed at its end"
        )
    resume = resume and DEMO_DIR.exists()
    if not resume:
        if DEMO_DIR.exists():
            shutil.rmtree(DEMO_DIR)
        DEMO_DIR.mkdir(parents=True)
    if jobs > 1 and scheduler is None and not dirs.db_url:
        from autograder import pgscratch

        if pgscratch.binaries():
            print(
                "The demo's gradebook for N jobs: a scratch PostgreSQL server, removed after the run",
                flush=True,
            )
            with pgscratch.server() as url:
                return _run_demo_parallel(
                    selected, dataclasses.replace(dirs, db_url=url), jobs, scheduler, only
                )
    if jobs > 1 or scheduler is not None:
        return _run_demo_parallel(selected, dirs, jobs, scheduler, only)
    if dirs.db_url and not resume:
        reset_database(dirs.db_url)
    status, notebooks, seconds = 0, 0, 0.0
    for assignment in selected:
        kept = resume and (ROOT / dirs.release / assignment).is_dir()
        students = demo_students(assignment, only) if kept else release_demo(assignment, dirs, only)
        if students is None:
            return 1
        if not students:
            continue
        todo = [s.name for s in students]
        if kept:
            scored = scored_submissions(dirs)
            todo = [name for name in todo if not graded_already(assignment, name, dirs, scored)]
            print(f"resume: {len(todo)} of {len(students)} {assignment} notebooks to grade", flush=True)
        t0 = time.time()
        failures = autograde(assignment, todo, dirs)
        notebooks, seconds = notebooks + len(todo), seconds + time.time() - t0
        rows = demo_gradebook(assignment, dirs)
        print_gradebook(assignment, rows, failures)
        status |= 1 if failures or not expectations_met(students, rows) else 0
    if notebooks:  # the same line as a parallel run's (autograde_class)
        print("\n" + rate_line(notebooks, notebooks, seconds, serial=True))
    _feedback_and_export(selected, dirs)
    return status


def _feedback_and_export(selected: list[str], dirs: CourseDirs) -> None:
    for assignment in selected:
        nbgrader("generate_feedback", assignment, "--force", dirs=dirs)
    res = nbgrader("export", f"--to={DEMO_DIR / 'grades.csv'}", dirs=dirs)
    if res.returncode == 0:
        print(f"\nGrades exported to {DEMO_DIR.relative_to(ROOT)}/grades.csv; feedback in {dirs.feedback}/")


def _run_demo_parallel(selected: list[str], dirs: CourseDirs, jobs: int, scheduler, only=None) -> int:
    """The demo class, every chapter released first, then every submission graded N at once."""
    if dirs.url.startswith("sqlite"):
        autograde_class([], dirs, jobs, scheduler)  # says why not, and exits
    reset_database(dirs.url)
    pairs, released = [], {}
    for assignment in selected:
        students = release_demo(assignment, dirs, only)
        if students is None:
            return 1
        released[assignment] = students
        pairs += [(assignment, st.name) for st in students]
    met = {}

    def chapter_done(assignment: str, failed_here: dict) -> None:
        rows = demo_gradebook(assignment, dirs)
        print_gradebook(assignment, rows, failed_here)
        met[assignment] = expectations_met(released[assignment], rows)

    failures = autograde_class(pairs, dirs, jobs, scheduler, chapter_done=chapter_done)
    _feedback_and_export(list(released), dirs)
    return 1 if failures or not all(met.get(a, False) for a in released if released[a]) else 0


def demo_gradebook(assignment: str, dirs: CourseDirs) -> list[dict]:
    """The demo's gradebook rows, without the "not submitted" line: each demo student takes some chapters only."""
    rows = gradebook(assignment, dirs)
    if rows:
        rows[0].pop("missing", None)
    return rows


def expectations_met(students: list, rows: list[dict]) -> bool:
    """Compare the gradebook with what each demo student's file expects (demo.unmet, the one rule) and say so."""
    import torch

    got = {r["student"]: ({c: p[0] for c, p in r["scores"].items()}, r["messages"]) for r in rows}
    missing = [st.name for st in students if st.name not in got]
    failed, checked = demo.unmet([st for st in students if st.name in got], got,
                                 "gpu" if torch.cuda.is_available() else "cpu")  # fmt: skip
    failed += [f"{students[0].assignment} · {name}: not in the gradebook" for name in missing]
    for line in failed:
        print("UNEXPECTED:", line)
    if not failed:
        print(f"Every expectation of the demo files held ({checked} checked).", flush=True)
    return not failed


def demo_jobs() -> int:
    """How many demo notebooks `make demo` grades at once when JOBS is not given: one a GPU on a CUDA machine
    (parallel.jobs_per_gpu says why); without a GPU, one a core up to
    four (two cores graded 1.9 times as many as one), where PostgreSQL is installed for the scratch gradebook."""
    import torch

    from autograder import pgscratch

    if torch.cuda.is_available():
        jobs = torch.cuda.device_count()
    else:
        jobs = min(os.cpu_count() or 1, 4)
    if jobs > 1 and not (os.environ.get("QMATMUL_DEMO_DB_URL") or pgscratch.binaries()):
        print(
            f"Grading the demo one notebook at a time: {jobs} at once needs PostgreSQL (`make system-deps`)"
        )
        return 1
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["demo", "autograde", "gradebook"])
    parser.add_argument("assignments", nargs="*", help="default: every assignment under solutions/")
    parser.add_argument("--sandbox", action="store_true", help="run each submission's kernel in bubblewrap")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("QMATMUL_JOBS") or 0) or None,
                        help="submissions graded at once on this host (needs a PostgreSQL gradebook); default 1, "
                        "and for the demo demo_jobs()")  # fmt: skip
    parser.add_argument("--scheduler", default=os.environ.get("QMATMUL_SCHEDULER") or None,
                        help="a Dask scheduler's address (tcp://host:8786): grade on its workers")  # fmt: skip
    parser.add_argument("--resume", action="store_true", help="skip what was graded from the same files")
    parser.add_argument(
        "--students",
        help="demo: grade only these demo students (comma-separated), e.g. correct: a serial and a parallel run "
        "of the same notebooks for tools/parallel_grading.py's figure comparison",
    )
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs takes a number of at least 1")
    selected = selected_assignments(args.assignments, parser.error)
    if args.command == "demo":
        jobs = args.jobs or (1 if args.scheduler or args.resume else demo_jobs())
        only = args.students.split(",") if args.students else None
        return run_demo(selected, args.sandbox, jobs, args.scheduler, resume=args.resume, only=only)
    args.jobs = args.jobs or 1
    dirs = CourseDirs(sandbox=args.sandbox, db_url=os.environ.get("QMATMUL_DB_URL", ""))
    if args.command == "autograde":
        print("sandbox: on (bubblewrap: course.md, threat model)" if args.sandbox else
              "sandbox: off (plain mode; for a class you do not trust: make autograde SANDBOX=1)")  # fmt: skip
    if args.command == "autograde" and (args.jobs > 1 or args.scheduler or args.resume):
        pairs = []
        for assignment in selected:
            students = students_in(dirs, assignment)
            if not students:
                print(f"{assignment}: no submissions under {dirs.submitted}/<student>/{assignment}/")
                continue
            # hand-copied folders: for due dates
            exchange.stamp_submissions(assignment, ROOT / dirs.submitted)
            pairs += [(assignment, s) for s in students]
        failures = autograde_class(pairs, dirs, args.jobs, args.scheduler, resume=args.resume,
                                   chapter_done=lambda a, failed: print_gradebook(a, gradebook(a, dirs), failed))  # fmt: skip
        return exit_status(failures)
    status = 0
    for assignment in selected:
        failures = {}
        if args.command == "autograde":
            students = students_in(dirs, assignment)
            if not students:
                print(f"{assignment}: no submissions under {dirs.submitted}/<student>/{assignment}/")
                continue
            # hand-copied folders: for due dates
            exchange.stamp_submissions(assignment, ROOT / dirs.submitted)
            failures = autograde(assignment, students, dirs)
            status |= exit_status(failures)
        print_gradebook(assignment, gradebook(assignment, dirs), failures)
    return status


if __name__ == "__main__":
    sys.exit(main())
