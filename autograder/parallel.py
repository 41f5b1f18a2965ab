"""Grading a class in parallel: one `nbgrader autograde --student X` process per (student, assignment).

nbgrader grades one notebook after another in one process; the unit of parallel work here is that process,
against one shared gradebook (PostgreSQL: SQLite takes one writer). A job that fails, hangs past its timeout or
whose process is killed costs only that student, who is graded again by the next `--resume` run.

    local    a pool of N threads on this host (`python -m autograder.classroom autograde --jobs N`), each job
             on one GPU of those visible (CUDA_VISIBLE_DEVICES per job, round robin over the slots)
    cluster  a Dask distributed scheduler (`--scheduler tcp://host:8786`): each job runs on a worker that
             offers the resource `grader` (course.md, "A class of hundreds", says how to start them)

Performance cells need a GPU per job. A timed window holds its GPU's lock exclusively (qmatmul/timing/gpulock.py) and the
notebooks' cells hold it shared, yet four notebooks at once on one H200 read wrong figures (docs/parallel-grading.md):
what the lock does not cover (the host's CPUs, GPU memory, work left queued) was enough. So a local pool on a CUDA
host grades at most one notebook per GPU (`pool_size`), and a Dask worker should offer one `grader` a GPU.
The job itself (qmatmul/grader/jobs.py) is in the course package, which every worker's environment has.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from qmatmul.grader.jobs import Job, Result, grade_job, run_command  # noqa: F401 - classroom.py uses them

RESOURCE = "grader"  # a Dask worker that grades says `--resources grader=J` (J jobs at once)
JOBS_PER_GPU_ENV = "QMATMUL_JOBS_PER_GPU"


def visible_gpus() -> list[str]:
    """The GPUs a local pool spreads its jobs over: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    res = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    return [ln.strip() for ln in res.stdout.splitlines() if ln.strip()] if res.returncode == 0 else []


def jobs_per_gpu() -> int:
    """Notebooks a GPU grades at once: 1, unless $QMATMUL_JOBS_PER_GPU says more. Every timed window holds the GPU's
    lock alone either way, and eight at a time graded the whole demo class with every expectation held
    (docs/parallel-grading.md); one is the default because GPU work a learner's background thread queues just before
    its process is stopped between jobs (grader/freeze.py) could still run during another notebook's timed window
    (course.md, the threat model)."""
    raw = os.environ.get(JOBS_PER_GPU_ENV) or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"${JOBS_PER_GPU_ENV} takes a whole number of at least 1, got {raw!r}")
    return int(raw)


def pool_size(n: int, gpus: list[str]) -> int:
    """How many jobs a local pool runs at once: n, but no more than jobs_per_gpu() a GPU on a host that has GPUs.
    On the H200 (2026-12-01) four FP8 notebooks graded at once on its one GPU read the solution's decode kernel at
    15 % of the copy bandwidth, where graded alone it passed its 50 % bar, and one prefill cell ran out of GPU memory
    (docs/grading-h200.md)."""
    cap = len(gpus) * jobs_per_gpu()
    if gpus and n > cap:
        print(f"Grading {cap} at once, not {n}: this host has {len(gpus)} GPU(s), and on a shared GPU a submission's "
              "background work could still reach another's timed window; QMATMUL_JOBS_PER_GPU=N allows N a GPU "
              "(course.md, the threat model).", flush=True)  # fmt: skip
        return cap
    return n


def run_local(jobs: list[Job], n: int, on_done: Callable[[Result], None]) -> list[Result]:
    """n jobs at a time on this host (at most one a GPU: pool_size); slot i runs on GPU i mod (number of GPUs)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    gpus = visible_gpus()
    n = pool_size(n, gpus)
    slots: queue.Queue = queue.Queue()
    for i in range(n):
        slots.put(gpus[i % len(gpus)] if gpus else None)
    threads = max(1, (os.cpu_count() or 1) // n)  # each job's share of the cores (grade_job)

    def one(job):
        gpu = slots.get()
        try:
            return grade_job(job, gpu, threads)
        finally:
            slots.put(gpu)

    results = []
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(one, j) for j in jobs]
        for fut in as_completed(futures):
            results.append(fut.result())
            on_done(results[-1])
    return results


def oversubscribed(slots: dict[str, float], gpus: dict[str, int]) -> list[str]:
    """The Dask workers that offer more `grader` slots than they have GPUs (on a GPU host), one line each: the
    local pool's rule (pool_size), for workers the grader does not start itself."""
    return [f"{addr} offers {RESOURCE}={n:g} with {gpus[addr]} GPU(s)" for addr, n in sorted(slots.items())
            if gpus.get(addr) and n > gpus[addr] * jobs_per_gpu()]  # fmt: skip


def _check_dask_workers(client) -> None:
    """Refuse a cluster whose GPU workers would grade several notebooks on one GPU (docs/parallel-grading.md)."""
    workers = client.scheduler_info().get("workers", {})
    slots = {addr: w.get("resources", {}).get(RESOURCE, 0) for addr, w in workers.items()}
    lines = oversubscribed(slots, {addr: len(g) for addr, g in client.run(visible_gpus).items()})
    if lines:
        raise SystemExit(
            "These Dask workers would grade several notebooks side by side on one GPU, which distorts the timed "
            "cells (docs/parallel-grading.md): " + "; ".join(lines) + f". Start each with `--resources "
            f"{RESOURCE}=G`, G its number of GPUs."
        )


def run_dask(jobs: list[Job], scheduler, on_done: Callable[[Result], None]) -> list[Result]:
    """Each job a Dask task needing one `grader` resource; a worker lost mid-job is replaced and its job
    rescheduled by Dask (up to its allowed-failures), after which the job counts as failed."""
    import sys

    import cloudpickle
    from distributed import Client, as_completed

    cloudpickle.register_pickle_by_value(
        sys.modules[__name__]
    )  # workers need not have autograder/ on their path
    client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    try:
        _check_dask_workers(client)
        futures = {}
        for job in jobs:
            fut = client.submit(grade_job, job, key=f"grade-{job.assignment}-{job.student}-{os.urandom(4).hex()}",
                                resources={RESOURCE: 1}, pure=False)  # fmt: skip
            futures[fut] = job
        results = []
        for fut in as_completed(futures):
            job = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker and friends: this job failed, not the class
                res = Result(job, -1, f"DaskError: {type(exc).__name__}: {exc}", 0.0, "dask")
            results.append(res)
            on_done(res)
        return results
    finally:
        if client is not scheduler:
            client.close()


class Progress:
    """One line per finished job for the whole class: count, the job, its time, elapsed and left."""

    def __init__(self, total: int, failed: Callable[[Result], str | None]):
        self.total, self.done, self.t0, self.failed = total, 0, time.time(), failed
        self.lock = threading.Lock()

    def __call__(self, res: Result) -> None:
        with self.lock:
            self.done += 1
            elapsed = time.time() - self.t0
            left = elapsed / self.done * (self.total - self.done)
            why = self.failed(res)
            status = f"FAILED ({res.seconds:.0f} s): {why}" if why else f"done ({res.seconds:.0f} s)"
            print(f"[{self.done}/{self.total}] {res.job.assignment} · {res.job.student} {status} · {res.where} · "
                  f"class {elapsed:.0f} s, about {left:.0f} s left", flush=True)  # fmt: skip


def submission_digest(folder: Path) -> str:
    """What a journal entry is valid for: every file of the submitted folder, names and bytes."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()
