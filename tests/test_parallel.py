"""A class graded in parallel equals the class graded one notebook at a time, whatever dies on the way.

The serial run is test_notebooks.py's (the roofline demo students it grades through nbgrader, reused: these
tests share its xdist group); the parallel runs write through a real PostgreSQL server (autograder/pgscratch.py,
Debian's postgresql from `make system-deps`). Two engines, two faults:
  * the local pool (`--jobs 2`) with a grading process killed at a random moment, then `--resume`;
  * Dask distributed on a LocalCluster of two CPU workers, one worker process killed at a random moment (Dask
    reschedules its job on the replacement).
Each ends with the gradebook compared with the serial one field by field: nothing lost, nothing doubled.
The GPU lock's tests need no nbgrader run; the GPU one (bandwidth figures, parallel against serial) runs on a GPU.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import pytest
from conftest import HAS_GPU, ROOT, skip_unless_required

from autograder import classroom, demo, parallel, pgscratch
from tools import parallel_grading

CHAPTER = "roofline"
POOL, DASK = {"blank", "correct"}, {"correct", "forgot_scales"}  # of test_notebooks' serial run (CI time)
REQUIRE = "QMATMUL_REQUIRE_POSTGRES"


@pytest.fixture(scope="module")
def db_url():
    if pgscratch.binaries() is None:
        skip_unless_required("PostgreSQL is not installed (`make system-deps` installs it)", REQUIRE)
    with pgscratch.server() as url:
        yield url


def snapshot(url: str, assignment: str, students: set[str]) -> dict:
    """Every score-bearing field of the gradebook for these students, and how many rows hold them."""
    from nbgrader.api import Comment, Grade, Gradebook, SubmittedAssignment, SubmittedNotebook

    with Gradebook(url) as gb:
        subs = [s for s in gb.find_assignment(assignment).submissions if s.student.id in students]
        ids = [s.id for s in subs]
        nbs = gb.db.query(SubmittedNotebook).filter(SubmittedNotebook.assignment_id.in_(ids)).all()
        nb_ids = [n.id for n in nbs]
        out = {"submissions": gb.db.query(SubmittedAssignment).filter(SubmittedAssignment.id.in_(ids)).count(),
               "notebooks": len(nbs),
               "grades": gb.db.query(Grade).filter(Grade.notebook_id.in_(nb_ids)).count(),
               "comments": gb.db.query(Comment).filter(Comment.notebook_id.in_(nb_ids)).count(),
               "students": sorted(s.student.id for s in subs), "cells": {}}  # fmt: skip
        for sub in subs:
            out["cells"][sub.student.id, "score"] = sub.score
            for nb in sub.notebooks:
                for g in nb.grades:
                    out["cells"][sub.student.id, nb.name, g.name] = (g.auto_score, g.manual_score, g.extra_credit,
                                                                     g.max_score, g.needs_manual_grade)  # fmt: skip
                for c in nb.comments:
                    out["cells"][sub.student.id, nb.name, c.name, "comment"] = c.auto_comment
    return out


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    import test_notebooks

    res = test_notebooks.demo_gradebook(CHAPTER, tmp_path_factory)
    assert not res["failures"], res["failures"]
    return res


def _dirs(base, url) -> classroom.CourseDirs:
    return classroom.CourseDirs(submitted=str(base / "submitted"), autograded=str(base / "autograded"),
                                feedback=str(base / "feedback"), release=str(base / "release"), db_url=url)  # fmt: skip


def _fresh_class(base, url, students) -> classroom.CourseDirs:
    classroom.reset_database(url)
    dirs = _dirs(base, url)
    res = classroom.nbgrader("generate_assignment", CHAPTER, "--force", dirs=dirs)
    assert res.returncode == 0, res.stderr[-3000:]
    for st in students:
        classroom.build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / CHAPTER)
    return dirs


def _killer(pick, when: tuple[float, float], rng: random.Random, killed: list) -> threading.Thread:
    """After a random delay, SIGKILL whatever `pick()` names (a process group id, or a pid with a - sign)."""

    def run():
        time.sleep(rng.uniform(*when))
        for _ in range(100):
            target = pick()
            if target:
                (os.killpg if target > 0 else os.kill)(abs(target), signal.SIGKILL)
                killed.append(target)
                return
            time.sleep(0.1)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _assert_same_gradebook(serial, dirs, students: set[str]):
    assert snapshot(dirs.url, CHAPTER, students) == snapshot(serial["dirs"].url, CHAPTER, students)
    rows = {
        r["student"]: r for r in classroom.gradebook(CHAPTER, dirs)
    }  # with the autograded notebooks' messages
    assert set(rows) == students
    for name in students:
        row = serial["rows"][name]
        got = rows[name]
        assert (got["scores"], got["messages"], got["total"]) == (
            row["scores"],
            row["messages"],
            row["total"],
        )


def test_make_passes_jobs_scheduler_and_resume():
    import subprocess

    def dry(*args):
        return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True).stdout

    assert "-m autograder.classroom autograde w8a16  --jobs 4 --scheduler tcp://h:8786 --resume" in dry(
        "autograde", "ASSIGNMENT=w8a16", "JOBS=4", "SCHEDULER=tcp://h:8786", "RESUME=1")  # fmt: skip
    assert "--jobs" not in dry("autograde") and "--jobs 2" in dry("demo", "JOBS=2")
    assert "postgresql" in dry("system-deps")


def test_parallel_with_sqlite_is_refused_with_a_reason(tmp_path):
    dirs = classroom.CourseDirs(db=str(tmp_path / "gradebook.db"), autograded=str(tmp_path / "autograded"))
    with pytest.raises(SystemExit, match="SQLite takes one.*QMATMUL_DB_URL"):
        classroom.autograde_class([(CHAPTER, "ann"), (CHAPTER, "ben")], dirs, jobs=2)


def test_a_dask_worker_with_more_grader_slots_than_gpus_is_named():
    """run_dask's rule for workers it does not start: a GPU worker offers at most one `grader` a GPU; CPU workers
    (no GPU: the interpreter) offer what they like."""
    slots = {"tcp://a:1": 4, "tcp://b:1": 1, "tcp://c:1": 2, "tcp://d:1": 3}
    gpus = {"tcp://a:1": 1, "tcp://b:1": 1, "tcp://c:1": 0, "tcp://d:1": 4}
    assert parallel.oversubscribed(slots, gpus) == ["tcp://a:1 offers grader=4 with 1 GPU(s)"]


def test_a_gpu_host_grades_one_notebook_a_gpu(capsys, monkeypatch):
    """A pool on a GPU host runs one job a GPU unless QMATMUL_JOBS_PER_GPU allows more: on a shared GPU, GPU work a
    submission's background thread queues just before its process is stopped could still run during another
    notebook's timed window (course.md, the threat model). Without GPUs (the interpreter) it runs what it is asked."""
    assert parallel.pool_size(4, ["0"]) == 1 and "Grading 1 at once, not 4" in capsys.readouterr().out
    assert parallel.pool_size(8, ["0", "1"]) == 2
    assert parallel.pool_size(2, ["0", "1", "2"]) == 2 and parallel.pool_size(4, []) == 4
    assert capsys.readouterr().out.count("at once, not") == 1
    monkeypatch.setenv(parallel.JOBS_PER_GPU_ENV, "3")  # a measurement of GPU sharing asks for more
    assert parallel.pool_size(8, ["0", "1"]) == 6 and parallel.pool_size(4, ["0", "1"]) == 4
    assert parallel.oversubscribed({"tcp://a:1": 3}, {"tcp://a:1": 1}) == []
    monkeypatch.setenv(parallel.JOBS_PER_GPU_ENV, "0")
    with pytest.raises(SystemExit, match="at least 1"):
        parallel.pool_size(2, ["0"])


def test_a_hung_or_failing_job_costs_only_itself(capsys, monkeypatch):
    """The pool's own rules, without nbgrader: a job past its timeout is killed (its process group with it),
    a failing one is reported, the others finish; progress counts the whole class; slots take GPUs in turn; each
    job's processes get their share of the cores (16 cores, 2 jobs: OMP_NUM_THREADS=8)."""
    import sys

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    code = {"hang": "import time; time.sleep(60)", "fail": "raise SystemExit(3)",
            "ok": "import os; assert os.environ['OMP_NUM_THREADS'] == '8'; print(os.environ['CUDA_VISIBLE_DEVICES'])"}  # fmt: skip
    jobs = [parallel.Job("w8a16", name, [sys.executable, "-c", src], {}, str(ROOT), 3.0)
            for name, src in [("hang", code["hang"]), ("fail", code["fail"]), ("ok1", code["ok"]), ("ok2", code["ok"])]]  # fmt: skip
    t0 = time.time()
    results = parallel.run_local(jobs, 2, parallel.Progress(len(jobs), lambda r: r.returncode or None))
    by = {r.job.student: r for r in results}
    assert time.time() - t0 < 30
    assert by["hang"].returncode == -9 and "ran past 3 s" in by["hang"].stderr
    assert by["fail"].returncode == 3 and by["ok1"].returncode == 0 == by["ok2"].returncode
    assert {r.where.split()[-1] for r in results} == {"0", "1"}
    out = capsys.readouterr().out
    assert "[4/4]" in out and "FAILED" in out


@pytest.mark.slow
@pytest.mark.xdist_group(CHAPTER)
def test_pool_killed_midway_then_resumed_equals_the_serial_run(serial, db_url, tmp_path, capsys):
    import psutil

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    students = [st for st in serial["students"] if st.name in POOL]
    dirs = _fresh_class(tmp_path, db_url, students)
    pairs = [(CHAPTER, st.name) for st in students]
    me = psutil.Process()

    def a_grading_process():
        procs = [p for p in me.children(recursive=True)
                 if "autograde" in " ".join(p.cmdline()) and "nbgrader" in " ".join(p.cmdline())]  # fmt: skip
        return rng.choice(procs).pid if procs else None

    killed, finished = [], []
    # 1-5 s in: every roofline notebook takes longer than that to grade (7-12 s on the 2-core machines), so the kill
    # always lands mid-grading (up to 12 s, a fast run had finished both: "nothing was killed", 1 run in about 10)
    killer = _killer(a_grading_process, (1.0, 5.0), rng, killed)
    failures = classroom.autograde_class(
        pairs, dirs, jobs=2, chapter_done=lambda a, f: finished.append((a, f))
    )
    killer.join()
    assert killed and failures, f"seed {seed}: nothing was killed"
    assert all(w for w in failures.values())
    # the chapter's gradebook could be printed once, when its last submission was graded, failures named
    assert finished == [(CHAPTER, {s: w for (_, s), w in failures.items()})]
    # the re-run grades exactly the students the kill cost, and the gradebook ends as the serial one
    again = classroom.autograde_class(pairs, dirs, jobs=2, resume=True)
    assert not again, again
    assert f"resume: {len(failures)} submission(s) to grade" in capsys.readouterr().out
    _assert_same_gradebook(serial, dirs, {st.name for st in students})


@pytest.mark.slow
@pytest.mark.xdist_group(CHAPTER)
def test_dask_cluster_with_a_worker_killed_equals_the_serial_run(serial, db_url, tmp_path):
    from distributed import Client, LocalCluster

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    students = [st for st in serial["students"] if st.name in DASK]
    dirs = _fresh_class(tmp_path, db_url, students)
    pairs = [(CHAPTER, st.name) for st in students]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={parallel.RESOURCE: 1},
                      dashboard_address=None, silence_logs=40) as cluster, Client(cluster) as client:  # fmt: skip
        client.wait_for_workers(2)

        def a_busy_worker():
            busy = [w for w, tasks in client.processing().items() if tasks]
            if not busy:
                return None
            return -client.run(os.getpid)[rng.choice(busy)]  # the worker process; its nbgrader dies with it

        killed = []
        killer = _killer(a_busy_worker, (1.0, 5.0), rng, killed)  # early: the pool test kills later
        failures = classroom.autograde_class(pairs, dirs, scheduler=client)
        killer.join()
    assert killed, f"seed {seed}: no worker was killed"
    assert not failures, f"seed {seed}: {failures}"
    _assert_same_gradebook(serial, dirs, {st.name for st in students})


# ----------------------------------------------------------------------------------------------------------
# The GPU lock


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    from qmatmul.timing import gpulock

    monkeypatch.setenv(gpulock.ENV_DIR, str(tmp_path))
    return tmp_path


@pytest.fixture
def grader_lock(lock_dir, monkeypatch):
    """This process as a grader with the lock on, for a fake GPU, its counters at zero; yields another grader's
    lock on the same GPU. The lock is off again afterwards."""
    from qmatmul.timing import gpulock

    monkeypatch.setattr(gpulock, "gpu_key", lambda: "gpu-test")
    monkeypatch.setattr(gpulock, "_LOCK", None)
    monkeypatch.setattr(gpulock, "held_s", 0.0)
    monkeypatch.setattr(gpulock, "waited_s", 0.0)
    previous = gpulock.active()
    try:
        yield gpulock._GpuLock(lock_dir, "gpu-test")
    finally:
        gpulock.active(previous)


def test_a_timing_waits_for_shared_work_and_new_shared_work_waits_for_it(lock_dir):
    """Reader-writer with writer preference: the timing (B) waits for the correctness work already running
    (A), and correctness work arriving while B waits (C) runs only after B."""
    from qmatmul.timing import gpulock

    events, t0 = [], time.monotonic()

    def hold(mode, start, seconds):
        time.sleep(start)
        lock = gpulock._GpuLock(lock_dir, "gpu-test")
        lock.acquire(mode)
        events.append((mode, start, time.monotonic() - t0, "in"))
        time.sleep(seconds)
        events.append((mode, start, time.monotonic() - t0, "out"))
        lock.release()

    threads = [threading.Thread(target=hold, args=a) for a in
               [("shared", 0.0, 0.6), ("exclusive", 0.15, 0.4), ("shared", 0.3, 0.1)]]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    at = {(m, s, what): when for m, s, when, what in events}
    assert at["exclusive", 0.15, "in"] >= at["shared", 0.0, "out"]  # no timing beside correctness work
    assert at["shared", 0.3, "in"] >= at["exclusive", 0.15, "out"]  # nor correctness work beside a timing


def _others_may_share(lock_dir) -> bool:
    """Whether another grader could take the fake GPU's lock shared right now."""
    import fcntl

    from qmatmul.timing import gpulock

    return gpulock._GpuLock(lock_dir, "gpu-test").could_take(1, fcntl.LOCK_SH)


def test_exclusive_inside_shared_gives_the_gpu_up_and_takes_it_back(lock_dir, grader_lock):
    from qmatmul.timing import gpulock

    with gpulock.shared():
        grader_lock.acquire("shared")  # another grader's correctness work shares the GPU
        grader_lock.release()
        with gpulock.exclusive():
            assert gpulock._LOCK.mode == "exclusive"
            assert not _others_may_share(lock_dir)  # nobody else gets in, not even to share
        assert gpulock._LOCK.mode == "shared"
    assert gpulock._LOCK.mode is None
    gpulock.active(False)
    with gpulock.exclusive():  # off (a learner's own notebook): never touches the lock
        assert gpulock._lock() is None


def test_a_graded_cell_keeps_the_gpu_from_its_first_window_to_its_end(lock_dir, grader_lock):
    """gpulock.cell(): after its first timed window a cell holds the GPU alone until it ends, so its next window
    waits for nobody; then the GPU is free for the others."""
    from qmatmul.timing import gpulock

    with gpulock.cell():
        assert gpulock._LOCK.mode == "shared" and _others_may_share(lock_dir)
        with gpulock.exclusive():
            pass
        assert gpulock._LOCK.mode == "exclusive" and not _others_may_share(lock_dir)  # kept between windows
        waited = gpulock.waited_s
        with gpulock.exclusive():
            assert gpulock._LOCK.mode == "exclusive"
        assert gpulock.waited_s == waited  # the second window waited for nobody
    assert gpulock._LOCK.mode is None and _others_may_share(lock_dir)
    grader_lock.acquire("exclusive")  # the GPU is free again, even for another grader's timing
    grader_lock.release()
    assert gpulock.held_s > 0


def test_shared_work_lets_a_waiting_timing_pass_between_two_jobs(lock_dir, grader_lock):
    """let_timing_pass (remote.Worker calls it before each job): with no timing waiting it keeps the GPU; with one
    waiting it gives the GPU up, the timing runs alone, and the shared work goes on after it. Inside a cell after
    its first window (exclusive) it does nothing."""
    from qmatmul.timing import gpulock

    events = []

    def timing():
        grader_lock.acquire("exclusive")  # waits (holding the gate) while this process shares the GPU
        events.append("timing in")
        time.sleep(0.2)
        events.append("timing out")
        grader_lock.release()

    with gpulock.cell():
        assert not gpulock.let_timing_pass() and gpulock._LOCK.mode == "shared"  # nobody waits: kept
        t = threading.Thread(target=timing)
        t.start()
        deadline = time.monotonic() + 5
        while not gpulock._LOCK.timing_waits():
            assert time.monotonic() < deadline, "the timing never came to the gate"
            time.sleep(0.01)
        assert not events  # it waits for this process's shared work
        assert gpulock.let_timing_pass()
        events.append("shared again")
        t.join()
        assert events == ["timing in", "timing out", "shared again"]
        assert gpulock._LOCK.mode == "shared"
        with gpulock.exclusive():
            pass
        assert not gpulock.let_timing_pass() and gpulock._LOCK.mode == "exclusive"  # a cell's windows keep it


def test_a_compile_holds_nothing_and_the_work_shares_the_gpu_again_after(lock_dir, grader_lock):
    """off_the_gpu (remote.Worker around a compile): another grader's timing may take the GPU meanwhile; the shared
    work takes it back afterwards, behind that timing. Inside a cell's exclusive hold it changes nothing."""
    from qmatmul.timing import gpulock

    with gpulock.cell():
        with gpulock.off_the_gpu():
            assert gpulock._LOCK.mode is None
            grader_lock.acquire("exclusive")  # a timing of another grader runs during the compile
            threading.Timer(0.2, grader_lock.release).start()
        assert gpulock._LOCK.mode == "shared" and grader_lock.mode is None  # back only once that timing ended
        with gpulock.exclusive():
            pass
        with gpulock.off_the_gpu():
            assert gpulock._LOCK.mode == "exclusive"  # held from the cell's first window to its end


def test_the_wait_to_share_again_after_a_compile_is_a_lock_wait_not_proving_time(monkeypatch):
    """QMATMUL_PROFILE's "kernels proven" is the compile's own seconds: the wait behind another grader's timing to
    take the GPU back after it (off_the_gpu) is counted once, as a lock wait (an H100 run read 23 s of "proving" a
    FP8 notebook, those waits counted twice)."""
    from qmatmul.grader.remote import Worker
    from qmatmul.timing import gpulock

    def compile_behind_a_timing(launch, what):
        time.sleep(0.35)  # 0.05 s compiling, then 0.3 s waiting to share the GPU again, as acquire counts it
        monkeypatch.setattr(gpulock, "shared_waited_s", gpulock.shared_waited_s + 0.3)

    w = object.__new__(Worker)
    w.compile_s = 0.0
    monkeypatch.setattr(w, "_compile_in_worker", compile_behind_a_timing, raising=False)
    w._compile({"name": "k"}, "k")
    assert 0.03 < w.compile_s < 0.2, w.compile_s


def test_each_timed_go_of_the_protocol_holds_the_gpu_alone(lock_dir, grader_lock, monkeypatch):
    """harness.time_calls through a worker (on the CPU, as test_grader's protocol test): the lock is taken
    exclusively around every go, and a go waits while another grader holds the GPU shared."""
    import torch
    from test_grader import TIMED

    from qmatmul.checks import harness
    from qmatmul.grader.remote import RemoteFunction, Worker
    from qmatmul.timing import gpulock

    other = grader_lock
    w = Worker(TIMED, timeout=60)
    real = gpulock._GpuLock.acquire

    def acquire(self, mode):
        if mode == "exclusive" and self is not other and other.mode is None and not gpulock.waited_s:
            other.acquire("shared")  # another grader's correctness cell runs when the first go comes, for 1 s
            threading.Timer(1.0, other.release).start()
        real(self, mode)

    monkeypatch.setattr(gpulock._GpuLock, "acquire", acquire)
    try:
        harness.time_calls(RemoteFunction(w, "decode"), what="decode", module="qmatmul.w8a16", N=48, K=64, M=2,
                           out_dtype=torch.float16, nbytes=1 << 20, device="cpu")  # fmt: skip
    finally:
        w.close()
    assert gpulock.held_s > 0 and gpulock.waited_s > 0.5, (gpulock.held_s, gpulock.waited_s)


def test_the_sandbox_hides_the_gpu_locks():
    from autograder import sandbox
    from qmatmul.timing import gpulock

    assert str(gpulock.lock_dir().resolve()) in sandbox.hidden()
    assert "--unsetenv QMATMUL_DB_URL" in (ROOT / "autograder" / "sandbox_exec.sh").read_text()


@pytest.mark.skipif(not HAS_GPU, reason="bandwidth figures need a CUDA GPU")
@pytest.mark.xdist_group("gpu")  # no other test's kernels beside its timings (tests/test_gpu.py)
def test_bandwidth_figures_of_a_parallel_run_match_a_serial_run():
    """Four graders of the W8A16 solution at once on one GPU read the decode bandwidth one grader alone reads
    (their timed windows never overlap). `python -m tools.parallel_grading gpu` measures the same, and also what four
    at once read without the lock."""
    alone, together = parallel_grading.bandwidth(1), parallel_grading.bandwidth(4)
    assert alone and len(together) == 4 * len(alone)
    print(f"W8A16 decode bandwidth, % of copy: alone {alone}; four graders at once {together}")
    assert parallel_grading.figures_agree(alone, together), (alone, together)


def test_the_recorded_h200_figures_of_a_parallel_run_match_the_serial_run():
    """The H200 run in docs/parallel-throughput.json (four graders at once against one alone) meets the same
    rule as the test above."""
    bw = json.loads((ROOT / "docs" / "parallel-throughput.json").read_text())["h200_bandwidth"]
    assert len(bw["four_at_once"]) == 4 * len(bw["alone"])
    assert parallel_grading.figures_agree(bw["alone"], bw["four_at_once"]), bw
    assert not parallel_grading.figures_agree([90.0, 88.0], [80.0, 78.0] * 4), (
        "the rule must fail on a 10-point drop"
    )


def test_demo_with_jobs_and_no_database_starts_a_scratch_server(monkeypatch, tmp_path):
    """`make demo JOBS=2` on a machine with PostgreSQL needs no database of the instructor's: the demo's
    gradebook goes to a scratch server that the run starts and removes."""
    if pgscratch.binaries() is None:
        skip_unless_required("PostgreSQL is not installed (`make system-deps` installs it)", REQUIRE)
    seen = {}

    def fake_parallel(selected, dirs, jobs, scheduler, only=None):
        import sqlalchemy as sa

        with sa.create_engine(dirs.db_url).connect() as conn:
            seen["answer"] = conn.execute(sa.text("select 1")).scalar()
        seen["url"] = dirs.db_url
        return 0

    monkeypatch.delenv("QMATMUL_DEMO_DB_URL", raising=False)
    monkeypatch.setattr(classroom, "_run_demo_parallel", fake_parallel)
    monkeypatch.setattr(classroom, "DEMO_DIR", tmp_path / "demo")
    assert classroom.run_demo(["roofline"], jobs=2) == 0
    assert seen["url"].startswith("postgresql+psycopg://") and seen["answer"] == 1


def test_the_class_time_model_in_the_docs_is_the_tools():
    """docs/parallel-grading.md shows the model computed from docs/parallel-throughput.json, the one data file
    (`python -m tools.parallel_grading model` prints it)."""
    table = parallel_grading.model_table()
    assert table in (ROOT / "docs" / "parallel-grading.md").read_text(), (
        "docs/parallel-grading.md is out of step with the data file: paste in\n" + table
    )


def test_the_model_weighs_each_chapter_by_its_own_rows():
    """A cheap chapter's fast parallel row is that chapter's rate, not the class's; a run whose expectations failed
    is no rate at all; a run of several chapters gives each its mean."""
    row = dict(machine="H200", mode="nbgrader", date="2026-12-06")
    rows = [
        dict(row, chapters=["w8a16"], jobs=1, notebooks=8, seconds=272),
        dict(row, chapters=["roofline"], jobs=4, notebooks=10, seconds=50),
        dict(row, chapters=["fp8"], jobs=4, notebooks=10, seconds=10, expectations_held=False),
        dict(row, chapters=["fp8", "mxfp4"], jobs=1, notebooks=10, seconds=400),
        dict(row, chapters=["nvfp4"], jobs=1, notebooks=1, seconds=1, machine="cpu-2-core"),
        dict(row, chapters=["layouts"], jobs=8, notebooks=10, seconds=60, machine="H100"),
        # the correct students alone (demo --students, for the figures' comparison): no rate of the class
        dict(row, chapters=["layouts"], jobs=8, notebooks=1, seconds=1, machine="H100", students=["correct"]),
    ]
    got = {c: per for c, (per, _) in parallel_grading.chapter_seconds(rows).items()}
    assert got == {"w8a16": 34, "roofline": 5, "fp8": 40, "mxfp4": 40, "layouts": 6}
    missed = {c: per for c, (per, _) in parallel_grading.chapter_seconds(rows, held=False).items()}
    assert missed == {"fp8": 1}  # the bound the model takes for a chapter without a held run (if slower)


def test_a_demo_of_some_students_grades_those_and_says_so_in_its_row(tmp_path, monkeypatch):
    """`classroom demo --students correct` (through `parallel_grading demo --students`): the same notebooks serially
    and in parallel, for the 2-point comparison of their figures; its row names them, so the model leaves it out."""
    import subprocess

    assert [st.name for st in classroom.demo_students("w8a16", ["correct", "naive", "nobody"])] == [
        "correct",
        "naive",
    ]
    assert len(classroom.demo_students("w8a16")) == len(demo.students("w8a16"))
    monkeypatch.setattr(classroom, "DEMO_DIR", tmp_path / "demo")
    data = tmp_path / "pt.json"
    data.write_text(json.dumps({"rows": [], "phases": []}))
    cmds = []

    def run(cmd, **kw):
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "graded 1/1 in 10 s (360 notebooks/hour)\n", "")

    monkeypatch.setattr(parallel_grading.subprocess, "run", run)
    monkeypatch.setattr(parallel_grading, "phases", lambda logdir: {})
    parallel_grading.measure_demo(["w8a16"], [1], "H100", tmp_path / "out", data, students=["correct"])
    assert cmds[0][-2:] == ["--students", "correct"]
    assert json.loads(data.read_text())["rows"][0]["students"] == ["correct"]


def test_make_demo_without_jobs_grades_a_notebook_a_core_where_it_can(monkeypatch, capsys):
    """`make demo` on a CPU machine with PostgreSQL grades one notebook a core (up to four); without PostgreSQL
    it grades one at a time and says why; on a CUDA machine one a GPU (classroom.demo_jobs)."""
    import torch

    monkeypatch.delenv("QMATMUL_DEMO_DB_URL", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(pgscratch, "binaries", lambda: ROOT)
    assert classroom.demo_jobs() == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert classroom.demo_jobs() == 4
    monkeypatch.setattr(pgscratch, "binaries", lambda: None)
    assert classroom.demo_jobs() == 1
    assert "needs PostgreSQL" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert classroom.demo_jobs() == 1


def test_a_killed_scratch_server_owner_still_stops_it():
    """pg_ctl leaves the server running in the background: a SIGTERM to the process that started it (a `kill` of
    `make demo`, a timeout) must still stop it and remove its folder."""
    import signal
    import socket
    import subprocess
    import sys
    from pathlib import Path

    if pgscratch.binaries() is None:
        skip_unless_required("PostgreSQL is not installed (`make system-deps` installs it)", REQUIRE)
    script = ("import time\nfrom autograder import pgscratch\n"
              "with pgscratch.server() as url:\n"
              "    print(url, flush=True)\n"
              "    time.sleep(120)\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        url = proc.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        # postmaster.pid's fourth line is the server's port: the folder of this run's server
        folders = [p.parent.parent for p in Path("/tmp").glob("qmatmul-pg-*/pgdata/postmaster.pid")
                   if p.read_text().splitlines()[3].strip() == str(port)]  # fmt: skip
        assert len(folders) == 1, (url, folders)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it serves
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert not folders[0].exists(), f"{folders[0]} is still there"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_an_interrupted_demo_resumes_with_the_notebooks_it_had_not_finished(tmp_path, monkeypatch):
    """`python -m autograder.classroom demo --resume` (a GPU call's time limit cut the demo): build/demo stays, and
    only the notebooks without a journal entry are graded again; the gradebook is read for the whole class. The
    grading itself is stubbed here (the journal, its digest and the selection are the real ones)."""
    import dataclasses

    from autograder import demo

    demo_dir = tmp_path / "demo"
    dirs = dataclasses.replace(classroom.DEMO_DIRS, **{f: str(demo_dir / f) for f in ("submitted", "autograded",
                               "feedback", "release")}, db=str(demo_dir / "gradebook.db"))  # fmt: skip
    monkeypatch.setattr(classroom, "DEMO_DIR", demo_dir)
    monkeypatch.setattr(classroom, "DEMO_DIRS", dirs)
    names = [st.name for st in demo.students(CHAPTER)]
    graded, asked, cut_after = set(), [], 2

    def release(assignment, d, only=None):
        (demo_dir / "release" / assignment).mkdir(parents=True, exist_ok=True)
        for st in demo.students(assignment):
            folder = demo_dir / "submitted" / st.name / assignment
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "nb.ipynb").write_text(st.name)
        return demo.students(assignment)

    def autograde(assignment, students, d):
        asked.append(list(students))
        for i, name in enumerate(students):
            if cut_after is not None and i == cut_after:
                raise SystemExit("the call's time limit")
            classroom._record(assignment, name, d)
            graded.add((assignment, name))
        return {}

    monkeypatch.setattr(classroom, "release_demo", release)
    monkeypatch.setattr(classroom, "autograde", autograde)
    monkeypatch.setattr(classroom, "scored_submissions", lambda d: set(graded))
    monkeypatch.setattr(classroom, "gradebook", lambda a, d: [])
    monkeypatch.setattr(classroom, "print_gradebook", lambda *a: None)
    monkeypatch.setattr(classroom, "expectations_met", lambda students, rows: len(graded) == len(students))
    monkeypatch.setattr(classroom, "_feedback_and_export", lambda *a: None)
    with pytest.raises(SystemExit):
        classroom.run_demo([CHAPTER])
    cut_after = None
    assert classroom.run_demo([CHAPTER], resume=True) == 0
    assert asked == [names, names[2:]] and len(graded) == len(names)
    with pytest.raises(SystemExit, match="one notebook at a time"):
        classroom.run_demo([CHAPTER], jobs=2, resume=True)
    assert classroom.run_demo([CHAPTER]) == 0 and asked[-1] == names  # without --resume: afresh


@pytest.mark.slow
def test_the_postgresql_recipe_of_course_md_grades_a_class_into_a_new_database(tmp_path):
    """course.md's recipe without sudo, line by line in a clone of the course, then `make autograde JOBS=2` into its
    database. What differs from a terminal: the port (a free one for 5433) and PASSWORD, typed into initdb's prompt
    and given to createdb's as PGPASSWORD; `make -o .venv/.installed` (the clone links this environment); under
    root, initdb, pg_ctl and createdb run as `nobody`, the grading account the recipe asks for (the server refuses
    root), and the cluster lives in its home."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from nbgrader.api import Gradebook
    from test_browser import course_clone

    from autograder import demo

    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):  # the recipe's PATH line: Debian's package
        skip_unless_required("Debian's postgresql is not installed (`make system-deps` installs it)", REQUIRE)
    text = (ROOT / "course.md").read_text().split("**The gradebook on PostgreSQL.**", 1)[1]
    recipe = text.split("```bash\n", 1)[1].split("```", 1)[0]
    port, password = str(pgscratch._free_port()), "s3cret-" + os.urandom(4).hex()
    assert "5433" in recipe and "PASSWORD@" in recipe and "make autograde JOBS=2" in recipe
    recipe = recipe.replace("5433", port).replace("PASSWORD@", f"{password}@")
    clone = course_clone(tmp_path / "course", chapters=(CHAPTER,))
    (clone / "roster.csv").write_text("id,first_name,last_name,email\ncorrect,Cy,Correct,\nblank,Bea,Blank,\n")  # fmt: skip
    for st in [
        st for st in demo.students(CHAPTER) if st.name in POOL
    ]:  # collected, from the committed release
        classroom.build_submission(st, ROOT / "notebooks", clone / "autograder" / "submitted" / st.name / CHAPTER)  # fmt: skip
    home = Path(tempfile.mkdtemp(prefix="qmatmul-recipe-"))  # the grading account's home: ~/qmatmul-pg
    root = os.geteuid() == 0
    prelude = 'set -euo pipefail\nmake() { command make --no-print-directory -o .venv/.installed "$@"; }\n'
    if root:
        shutil.chown(home, pgscratch.USER)
        prelude += "".join(f'{cmd}() {{ runuser -u {pgscratch.USER} -- env HOME="$HOME" PATH="$PATH" '
                           f'PGPASSWORD="$PGPASSWORD" {cmd} "$@"; }}\n' for cmd in ("initdb", "pg_ctl", "createdb"))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "QMATMUL_DB", "PG"))}
    env.update(HOME=str(home), PGPASSWORD=password)
    try:
        res = subprocess.run(["bash", "-c", prelude + recipe], cwd=clone, env=env, input=f"{password}\n" * 2,
                             capture_output=True, text=True, timeout=540, start_new_session=True)  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-5000:]
        assert "graded 2/2" in out and f"Gradebook · {CHAPTER}" in out, out[-5000:]
        with Gradebook(f"postgresql+psycopg://grader:{password}@localhost:{port}/qmatmul") as gb:
            assert {s.id: s.first_name for s in gb.students} == {"correct": "Cy", "blank": "Bea"}
            scores = {s.student.id: s.score for s in gb.find_assignment(CHAPTER).submissions}
        assert scores == {"correct": 7, "blank": 0}, out[-5000:]
    finally:
        stop = [str(pgscratch.binaries() / "pg_ctl"), "-D", str(home / "qmatmul-pg"), "-m", "immediate", "stop"]  # fmt: skip
        subprocess.run(["runuser", "-u", pgscratch.USER, "--", *stop] if root else stop, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_the_profile_lines_are_what_the_phases_tool_reads(monkeypatch):
    """QMATMUL_PROFILE=1's lines (the notebook's run in its kernel, each trusted cell, each timed problem, the
    trusted grading in all) are written by the grader's own functions and read back by `tools.parallel_grading
    phases`: a change of wording on either side fails here, not on a GPU run."""
    from types import SimpleNamespace

    from qmatmul.checks import harness
    from qmatmul.grader import nbhooks, trusted
    from qmatmul.timing import gpulock

    worker = SimpleNamespace(start_s=0.0, compile_s=0.0)
    lines = [nbhooks.execute_profile(12.5, 0.5, time.monotonic())]
    profile = trusted._Profile(worker)
    worker.start_s, worker.compile_s = 6.0, 2.0
    monkeypatch.setattr(gpulock, "held_s", gpulock.held_s + 3.0)
    timed = harness.timed_profile("decode 1x8192x8192", 400, 2, 2, 0.5, 1.5, 0.25)
    profile.cell(
        trusted.Verdict(3, "test_decode_bandwidth", 1, 1, f"{timed}\nsomething else\n", None, 14.0),
        lines.append,
    )
    profile.total(lines.append)
    got = parallel_grading.phases_of("\n".join(f"[AutogradeApp | INFO] {ln}" for ln in lines))
    assert got is not None, lines
    assert got["execute"] == 12.5 and got["lock_waits"] == 0.5 and got["before"] is not None
    assert (got["worker_start"], got["kernels_proven"], got["held_alone"]) == (6.0, 2.0, 3.0)
    assert (got["weights_built"], got["timed"], got["rechecked"]) == (0.5, 1.5, 0.2)
    assert got["checks"] == pytest.approx(float(lines[-1].split()[2]) - 8.0, abs=0.05)
    assert parallel_grading.phases_of("[AutogradeApp | INFO] test_decode: 1/1 (3.0 s)") is None


def test_phases_read_elsewhere_keep_the_runs_own_machine_and_versions(tmp_path, monkeypatch):
    """A run cut by a device's limit is read with `phases LOGDIR --label` on another machine: the entry takes the
    machine, date and versions of the run's own record (run.json beside the logs, as `demo` writes it), not of the
    machine that reads the logs."""
    from types import SimpleNamespace

    from qmatmul.grader import nbhooks, trusted

    worker = SimpleNamespace(start_s=1.0, compile_s=0.5)
    lines = [nbhooks.execute_profile(12.5, 0.5, time.monotonic())]
    profile = trusted._Profile(worker)
    profile.cell(trusted.Verdict(3, "test_decode", 1, 1, "", None, 4.0), lines.append)
    profile.total(lines.append)
    run = tmp_path / "jobs-8"
    (run / "logs" / "fp8").mkdir(parents=True)
    (run / "logs" / "fp8" / "correct.log").write_text(
        "\n".join(f"[AutogradeApp | INFO] {ln}" for ln in lines)
    )
    record = {
        "machine": "H200",
        "date": "2026-12-06",
        "python": "3.12.3",
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
    }
    (run / "run.json").write_text(json.dumps(record))
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"rows": [], "phases": []}))
    parallel_grading.main(["phases", str(run / "logs"), "--label", "cut at 250 s", "--jobs", "8", "--seconds", "250",
                           "--data", str(data)])  # fmt: skip
    (entry,) = json.loads(data.read_text())["phases"]
    assert {k: entry[k] for k in record} == record and entry["chapter"] == "fp8" and entry["jobs"] == 8


def test_a_parallel_run_whose_figure_moved_more_than_two_points_is_named():
    """Issue 44's rule: every graded figure of a parallel run within 2 points of the serial run's, cell by cell."""
    serial = {"w8a16/correct/test_decode_bandwidth": [91, 88], "layouts/correct/test_speed": [77]}
    assert parallel_grading.figures_apart(serial, {**serial, "layouts/correct/test_speed": [79]}) == []
    moved = parallel_grading.figures_apart(serial, {**serial, "layouts/correct/test_speed": [74]})
    assert moved == ["layouts/correct/test_speed: [77] serially, [74] in parallel"]
    assert parallel_grading.figures_apart(serial, {"w8a16/correct/test_decode_bandwidth": [91, 88]}) == [
        "layouts/correct/test_speed: [77] serially, None in parallel"
    ]


def test_the_figures_compared_are_the_graded_ones(tmp_path):
    """A bandwidth cell's figures are its graph-replay % of copy; a compute-bound cell's (FP8's prefill) the % of the
    library's speed it is graded on, not its few % of copy."""
    decode = ("fp8_decode M=1, N=28672, K=8192: graph replay 60.5 µs = 91% of copy, eager 77.9 µs = 71% of copy\n"
              "fp8_decode M=16, N=28672, K=8192: graph replay 61.0 µs = 92% of copy, eager 80.0 µs = 70% of copy\n")  # fmt: skip
    prefill = ("fp8_matmul M=4096, N=8192, K=8192: graph replay 948.0 µs = 4% of copy, eager 1015.3 µs = 4% of copy\n"
               "✓ fp8_matmul: 45% of torch._scaled_mm's TFLOP/s (threshold 40%)\n")  # fmt: skip
    cells = [{"cell_type": "code", "metadata": {"nbgrader": {"grade_id": gid}}, "outputs": [{"text": text}]}
             for gid, text in (("test_decode_bandwidth", decode), ("test_prefill_speed", prefill))]  # fmt: skip
    (tmp_path / "correct" / "fp8").mkdir(parents=True)
    (tmp_path / "correct" / "fp8" / "fp8.ipynb").write_text(json.dumps({"cells": cells}))
    assert parallel_grading.figures(tmp_path) == {
        "fp8/correct/test_decode_bandwidth": [91, 92],
        "fp8/correct/test_prefill_speed": [45],
    }


def test_the_demo_tool_reads_the_class_runs_closing_line():
    """`tools.parallel_grading demo` takes notebooks, seconds and the rate from classroom.py's closing line, serial
    or parallel (classroom.rate_line writes both)."""
    serial = classroom.rate_line(11, 11, 284.4, serial=True)
    assert parallel_grading.demo_rate(f"...\n{serial}\n") == (11, 284.0, 139)
    par = classroom.rate_line(10, 11, 99.6, rate_of=11)
    assert par == "graded 10/11 in 100 s (398 notebooks/hour)"
    assert parallel_grading.demo_rate(par) == (11, 100.0, 398)
    assert parallel_grading.demo_rate("graded nothing") is None


def test_a_demo_run_reads_its_own_logs_alone(tmp_path, monkeypatch):
    """Two `demo` runs into one --out with the same job count (2026-12-06: layouts, then W8A16, eight at a time):
    the second run's phases are read from its own logs, not from the first run's left beside them."""
    import shutil
    import subprocess

    demo_dir = tmp_path / "demo"
    monkeypatch.setattr(classroom, "DEMO_DIR", demo_dir)
    data = tmp_path / "pt.json"
    data.write_text(json.dumps({"rows": [], "phases": []}))

    def graded(chapter):
        def run(cmd, **kw):
            (demo_dir / "logs" / chapter).mkdir(parents=True)
            (demo_dir / "logs" / chapter / "correct.log").write_text("graded")
            return subprocess.CompletedProcess(cmd, 0, "graded 1/1 in 10 s (360 notebooks/hour)\n", "")

        return run

    seen = []
    monkeypatch.setattr(
        parallel_grading, "phases", lambda logdir: seen.append(sorted(logdir.glob("*/*.log"))) or {}
    )
    for chapter in ("layouts", "w8a16"):
        shutil.rmtree(demo_dir, ignore_errors=True)  # classroom's demo starts afresh
        monkeypatch.setattr(parallel_grading.subprocess, "run", graded(chapter))
        parallel_grading.measure_demo([chapter], [8], "H100", tmp_path / "out", data)
    assert [[p.parent.name for p in logs] for logs in seen] == [["layouts"], ["w8a16"]]
