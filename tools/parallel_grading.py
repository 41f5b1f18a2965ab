"""Throughput of parallel grading, and the model of a class's grading time built on it.

    python -m tools.parallel_grading cpu [--jobs 1,2] [--chapters roofline,w8a16] [--students blank,correct,...]
        the demo subset through the real nbgrader on a throwaway PostgreSQL (autograder/pgscratch.py), N jobs
        at a time; one row per N into docs/parallel-throughput.json
    python3 -m tools.parallel_grading gpu --out FILE [--data docs/parallel-throughput.json]
        on a CUDA GPU, no nbgrader needed: the trusted grader (autograder/grade_direct.py) of W8A16 demo
        students, N processes at once (N = 1, 4), with the seconds each held the GPU exclusively; and the
        decode bandwidth figures of the solution graded alone, four at once, four at once without the lock
    python -m tools.parallel_grading phases LOGDIR [--out FILE] [--label L --jobs N --seconds S [--machine M]]
        where each notebook's seconds went, from the logs of a run graded with QMATMUL_PROFILE=1 (e.g.
        `QMATMUL_PROFILE=1 python -m autograder.classroom demo w8a16`, logs in build/demo/logs): a table a
        chapter (means a notebook); --out: every notebook's phases as JSON; --label: the means kept in the data
        file's "phases" (the model's output shows them)
    python -m tools.parallel_grading demo CHAPTER ... --jobs 1,4 --machine H200 --out DIR [--data FILE] [--label L]
        [--timeout S] [--students correct]
        the demo class through the real nbgrader with QMATMUL_PROFILE=1, serially and N at a time on one GPU
        (QMATMUL_JOBS_PER_GPU=N): notebooks an hour, every expectation, the phases, the figures compared; rows and
        phases into the data file (default docs/parallel-throughput.json); exit 1 if a figure moved > 2 points
    python -m tools.parallel_grading compare SERIAL_AUTOGRADED PARALLEL_AUTOGRADED
        the graph-replay figures of two runs of the same notebooks, cell by cell: those more than 2 points apart
    python -m tools.parallel_grading model
        the class-time model (docs/parallel-grading.md holds its table; a test keeps the two in step)

docs/parallel-throughput.json is the one data file of these measurements.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "parallel-throughput.json"
DEMO_LABEL = "the demo class, profiled"
BANDWIDTH = re.compile(r"graph replay [\d.]+ µs = (\d+)% of copy")
# A compute-bound cell grades its speed against a library's (FP8's prefill: "✓ fp8_matmul: 44% of torch._scaled_mm's
# TFLOP/s"), its % of copy a few points whatever the kernel: that ratio is the cell's figure.
RATIO = re.compile(r"[✓✗] [\w.]+: (\d+)% of [\w.]+'s TFLOP/s")


def _versions() -> dict:
    import torch
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}


def _store(rows: list[dict], data: Path = DATA) -> None:
    """Replace the rows of the same (machine, mode, jobs, chapters, label) and keep the others."""
    whole = json.loads(data.read_text()) if data.exists() else {}
    old = whole.get("rows", [])
    key = lambda r: (r["machine"], r["mode"], r["jobs"], tuple(r["chapters"]), r.get("label", ""))  # noqa: E731
    new = {key(r) for r in rows}
    merged = [r for r in old if key(r) not in new] + rows
    merged.sort(key=lambda r: (r["machine"], r["mode"], r["jobs"]))
    data.write_text(json.dumps({**whole, "rows": merged}, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------------------
# The CPU machine: the real nbgrader, N at a time


CPU_STUDENTS = "blank,correct,min_not_max,wrong_axis"  # `cpu`'s demo students of each chapter


def measure_cpu(jobs: list[int], chapters: list[str], students: list[str], machine: str) -> list[dict]:
    from autograder import classroom, demo, pgscratch

    rows = []
    for n in jobs:
        with tempfile.TemporaryDirectory() as tmp, pgscratch.server() as url:
            base = Path(tmp)
            dirs = classroom.CourseDirs(submitted=str(base / "submitted"), autograded=str(base / "autograded"),
                                        feedback=str(base / "feedback"), release=str(base / "release"), db_url=url)  # fmt: skip
            pairs = []
            for chapter in chapters:
                res = classroom.nbgrader("generate_assignment", chapter, "--force", dirs=dirs)
                assert res.returncode == 0, res.stderr[-2000:]
                for st in demo.students(chapter):
                    if st.name in students:
                        classroom.build_submission(
                            st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / chapter
                        )
                        pairs.append((chapter, st.name))
            load = os.getloadavg()[0]
            t0 = time.time()
            failures = classroom.autograde_class(pairs, dirs, jobs=n)
            seconds = time.time() - t0
        rows.append({"machine": machine, "mode": "nbgrader", "jobs": n, "gpus": 0, "cpus": os.cpu_count(),
                     "notebooks": len(pairs), "failed": len(failures), "seconds": round(seconds, 1),
                     "per_hour": round(len(pairs) / seconds * 3600), "chapters": chapters,
                     "load_before": round(load, 2), "date": dt.date.today().isoformat(), **_versions()})  # fmt: skip
        print(rows[-1], flush=True)
    return rows


# ----------------------------------------------------------------------------------------------------------
# The demo class through the real nbgrader, serially and N at a time, profiled (a GPU host's run of issue 44)

DEMO_RATE = re.compile(
    r"graded (?:\d+/)?(\d+)(?: notebooks one at a time)? in (\d+) s \((\d+) notebooks/hour\)"
)


def demo_rate(output: str) -> tuple[int, float, int] | None:
    """(notebooks, seconds, an hour) from classroom.py's closing line, serial or parallel; None without one."""
    m = DEMO_RATE.search(output)
    return (int(m.group(1)), float(m.group(2)), int(m.group(3))) if m else None


def measure_demo(chapters: list[str], jobs: list[int], machine: str, out: Path, data: Path,
                 timeout: float = 3600, label: str = DEMO_LABEL, students: list[str] | None = None) -> list[str]:  # fmt: skip
    """`classroom demo CHAPTERS --jobs N` for each N with QMATMUL_PROFILE=1 (N > 1 with QMATMUL_JOBS_PER_GPU=N, so a
    GPU host grades N at once), each with a Triton cache of its own (each run compiles as much as the first); its
    output, logs and autograded notebooks kept in out/jobs-N; a row (notebooks an hour, expectations held) and the
    phases' means into `data`; then every graded figure of each parallel run against the first run's. Returns the
    figures more than 2 points apart."""
    import shutil

    from autograder import classroom, parallel

    rows, apart = [], []
    # The phases of some students are not the class's: their label says so.
    if students and label == DEMO_LABEL:
        label = f"{DEMO_LABEL}, only {', '.join(students)}"
    for n in jobs:
        here = out / f"jobs-{n}"
        here.mkdir(parents=True, exist_ok=True)
        # What the run was, beside its logs: `phases` read elsewhere (a run cut by a device's limit) reads it back.
        run = {"machine": machine, "label": label, "jobs": n, "chapters": chapters, "date": dt.date.today().isoformat(),
               **_versions(), **({"students": students} if students else {})}  # fmt: skip
        (here / "run.json").write_text(json.dumps(run, indent=1) + "\n")
        env = dict(os.environ, QMATMUL_PROFILE="1", TRITON_CACHE_DIR=str(here / "triton-cache"))
        if n > 1:
            env["QMATMUL_JOBS_PER_GPU"] = str(n)
        cmd = [sys.executable, "-m", "autograder.classroom", "demo", *chapters, "--jobs", str(n)]
        cmd += ["--students", ",".join(students)] if students else []
        try:
            res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            output, status = res.stdout + res.stderr, res.returncode
        except subprocess.TimeoutExpired as exc:
            output, status = (
                f"{exc.stdout or ''}{exc.stderr or ''}\n(stopped after {timeout:.0f} s)",
                "timeout",
            )
        (here / "demo.txt").write_text(output if isinstance(output, str) else output.decode(errors="replace"))
        # This run's logs and notebooks alone: an earlier run into the same --out left its own there.
        for name in ("logs", "autograded"):
            shutil.rmtree(here / name, ignore_errors=True)
            if (classroom.DEMO_DIR / name).is_dir():
                shutil.copytree(classroom.DEMO_DIR / name, here / name)
        rate = demo_rate(output)
        held = status == 0  # classroom's exit status: every notebook graded and every expectation held
        print(f"{n} at a time: exit {status}, {rate}", flush=True)
        if rate is None:
            continue
        notebooks, seconds, per_hour = rate
        rows.append({"machine": machine, "mode": "nbgrader", "jobs": n, "gpus": len(parallel.visible_gpus()),
                     "cpus": os.cpu_count(), "notebooks": notebooks, "seconds": seconds,
                     "per_hour": per_hour, "chapters": chapters, "expectations_held": held, "label": label,
                     **({"students": students} if students else {}),
                     **{k: run[k] for k in ("date", "python", "torch", "triton")},
                     "source": f"tools.parallel_grading demo ({label})"})  # fmt: skip
        store_phases(
            phases(here / "logs"), machine=machine, jobs=n, seconds=seconds, label=label, data=data, run=run
        )
        if n != jobs[0]:
            bad = figures_apart(figures(out / f"jobs-{jobs[0]}" / "autograded"), figures(here / "autograded"))
            rows[-1]["figures_apart"] = bad
            apart += bad
    _store(rows, data)
    return apart


# ----------------------------------------------------------------------------------------------------------
# The GPU: the trusted grader, N processes at once


def grade_one(assignment: str, student: str | None, cells: str | None) -> dict:
    """In a process of its own: grade one demo student (None: the solution) as nbgrader's TrustedGrades does."""
    from autograder import demo, grade_direct
    from qmatmul.grader import trusted
    from qmatmul.timing import gpulock

    overrides = None
    if student:
        st = next(s for s in demo.students(assignment) if s.name == student)
        overrides = grade_direct.student_overrides(st)
    t0 = time.time()
    verdicts = trusted.grade(grade_direct.solution_cells(assignment), overrides=overrides,
                             only=cells.split(",") if cells else None)  # fmt: skip
    import torch

    peak = torch.cuda.max_memory_reserved() / 2**30 if torch.cuda.is_available() else 0.0
    return {"seconds": time.time() - t0, "held_s": gpulock.held_s, "waited_s": gpulock.waited_s, "peak_gib": peak,
            "points": sum(v.points for v in verdicts), "outputs": {v.grade_id: v.output for v in verdicts}}  # fmt: skip


def _in_process(assignment: str, student: str | None, cells: str | None, lock: str = "on") -> dict:
    cmd = [sys.executable, "-m", "tools.parallel_grading", "_grade", assignment, student or "-", cells or "-"]
    env = dict(os.environ, QMATMUL_GPU_LOCK=lock)
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if res.returncode != 0 or line is None:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    return json.loads(line[7:])


def bandwidth(n: int, lock: str = "on") -> list[float]:
    """% of copy bandwidth of the W8A16 solution's decode kernel (graph replay, every M), n graders at once."""
    with ThreadPoolExecutor(n) as pool:
        results = list(
            pool.map(lambda _: _in_process("w8a16", None, "test_decode_bandwidth", lock), range(n))
        )
    return [float(x) for r in results for out in r["outputs"].values() for x in BANDWIDTH.findall(out)]


def figures_agree(alone: list[float], together: list[float]) -> bool:
    """The rule for "a parallel run's bandwidth figures match a serial run's within noise": the means differ by
    at most 5 % of the serial mean plus 2 points (the run-to-run spread of one grader alone)."""
    mean_alone, mean_together = sum(alone) / len(alone), sum(together) / len(together)
    return abs(mean_together - mean_alone) <= 0.05 * mean_alone + 2


def throughput(n: int, students: list[str], assignment: str = "w8a16") -> dict:
    t0 = time.time()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda s: _in_process(assignment, s, None), students))
    seconds = time.time() - t0
    return {"jobs": n, "notebooks": len(students), "seconds": round(seconds, 1),
            "per_hour": round(len(students) / seconds * 3600),
            "held_s_per_notebook": round(sum(r["held_s"] for r in results) / len(students), 2),
            "waited_s_per_notebook": round(sum(r["waited_s"] for r in results) / len(students), 2),
            "mean_notebook_s": round(sum(r["seconds"] for r in results) / len(students), 1),
            "trusted_peak_gib": round(max(r["peak_gib"] for r in results), 2)}  # fmt: skip


def measure_gpu(machine: str) -> dict:
    import torch

    info = {"machine": machine, "gpu": torch.cuda.get_device_name(), "date": dt.date.today().isoformat(),
            "cpus": os.cpu_count(), **_versions()}  # fmt: skip
    bw = {}
    for name, n, lock in (
        ("alone", 1, "on"),
        ("four_at_once", 4, "on"),
        ("four_at_once_without_lock", 4, "off"),
    ):
        bw[name] = bandwidth(n, lock)
        print(f"W8A16 decode, % of copy, {name}: {bw[name]}", flush=True)  # each phase as it ends
    students = ["blank", "correct", "naive", "wrong_axis"]
    rows = []
    for n, repeat in ((1, 1), (4, 2)):
        row = {
            **info,
            "mode": "trusted",
            "gpus": 1,
            "chapters": ["w8a16"],
            **throughput(n, students * repeat),
        }
        print(row, flush=True)
        rows.append(row)
    return {"bandwidth": bw, "rows": rows}


# ----------------------------------------------------------------------------------------------------------
# Where a notebook's seconds go: the QMATMUL_PROFILE=1 lines of nbgrader's logs

_NUM = r"([\d.]+) s"
PHASE_LINES = {
    "execute": re.compile(
        rf"profile execute: .* in its kernel in {_NUM} \(its start included; {_NUM} waiting to "
        rf"share the GPU\); the process had run ([\d.]+|\?) s before"
    ),  # fmt: skip
    "trusted": re.compile(
        rf"profile trusted: {_NUM}; worker start {_NUM}, kernels proven in {_NUM}, waited {_NUM} "
        rf"to share the GPU and {_NUM} for it alone, held it alone {_NUM}"
    ),  # fmt: skip
    "timed": re.compile(
        rf"profile cell \S+: .* built in {_NUM}, timed \(prepare, batches, hand-over\) in {_NUM}, "
        rf"rechecked in {_NUM}"
    ),  # fmt: skip
}
PHASES = ("before", "execute", "worker_start", "kernels_proven", "checks", "held_alone", "lock_waits",
          "weights_built", "timed", "rechecked")  # fmt: skip


def phases_of(log: str) -> dict | None:
    """One notebook's phases (seconds) from its nbgrader log, or None when it was not graded with the profile on.
    checks = the trusted grading less the worker's start and the kernels' proof (the checks' own work: references,
    calls, comparisons, timed problems); held_alone and the timed problems' parts are inside checks."""
    ex, tr = PHASE_LINES["execute"].search(log), PHASE_LINES["trusted"].search(log)
    if not (ex and tr):
        return None
    e_s, e_wait = map(float, ex.groups()[:2])
    before = None if ex.group(3) == "?" else float(ex.group(3))
    t_s, start, proven, wait_sh, wait_ex, held = map(float, tr.groups())
    timed = [tuple(map(float, m.groups())) for m in PHASE_LINES["timed"].finditer(log)]
    return {"before": before, "execute": e_s, "worker_start": start, "kernels_proven": proven,
            "checks": round(t_s - start - proven, 2), "held_alone": held, "lock_waits": round(e_wait + wait_sh + wait_ex, 2),
            "weights_built": round(sum(t[0] for t in timed), 2), "timed": round(sum(t[1] for t in timed), 2),
            "rechecked": round(sum(t[2] for t in timed), 2), "total": round((before or 0.0) + e_s + t_s, 2)}  # fmt: skip


def phases(logdir: Path) -> dict:
    """{assignment: {student: phases}} for every profiled log under logdir/<assignment>/<student>.log."""
    out: dict = {}
    for log in sorted(logdir.glob("*/*.log")):
        got = phases_of(log.read_text(errors="replace"))
        if got is not None:
            out.setdefault(log.parent.name, {})[log.stem] = got
    return out


def figures(autograded: Path) -> dict:
    """{assignment/student/cell: [% of copy, ...]}: the graph-replay figures each graded cell printed, or the % of a
    library's speed a compute-bound cell graded (RATIO), read from the autograded notebooks
    (autograded/<student>/<assignment>/*.ipynb)."""
    out = {}
    for path in sorted(autograded.glob("*/*/*.ipynb")):
        student, assignment = path.parent.parent.name, path.parent.name
        for cell in json.loads(path.read_text()).get("cells", []):
            text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
            found = [int(x) for x in RATIO.findall(text) or BANDWIDTH.findall(text)]
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if found and grade_id:
                out[f"{assignment}/{student}/{grade_id}"] = found
    return out


def figures_apart(serial: dict, parallel: dict) -> list[str]:
    """The cells whose figures differ by more than 2 points between two runs of the same notebooks (issue 44's
    rule), and those graded in one run only."""
    bad = []
    for key in sorted(serial.keys() | parallel.keys()):
        a, b = serial.get(key), parallel.get(key)
        if a is None or b is None or len(a) != len(b):
            bad.append(f"{key}: {a} serially, {b} in parallel")
        elif max(abs(x - y) for x, y in zip(a, b, strict=True)) > 2:
            bad.append(f"{key}: {a} serially, {b} in parallel")
    return bad


def phase_means(found: dict) -> dict:
    """{chapter: {"notebooks": n, phase: mean seconds a notebook}}."""
    cols = (*PHASES, "total")
    return {chapter: {"notebooks": len(students), **{c: round(sum(p[c] or 0.0 for p in students.values()) /
                                                            len(students), 1) for c in cols}}
            for chapter, students in found.items()}  # fmt: skip


def phases_table(means: dict, label: str = "") -> str:
    """One row a chapter (means: phase_means), or a row a stored run (means: {label: row})."""
    cols = (*PHASES, "total")
    lines = [f"| {label or 'chapter'} | notebooks | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
             "|---|---|" + "---|" * len(cols)]  # fmt: skip
    for name, row in means.items():
        lines.append(f"| {name} | {row['notebooks']} | " + " | ".join(f"{row[c]:.1f}" for c in cols) + " |")
    return "\n".join(lines)


def store_phases(
    found: dict,
    *,
    machine: str,
    jobs: int,
    seconds: float,
    label: str,
    data: Path = DATA,
    run: dict | None = None,
) -> None:
    """Keep a profiled run's means in the data file's "phases" (replacing the run of the same machine, label, jobs
    and chapter). `run`: the run's own record (its date and versions; measure_demo's run.json), else this process's."""
    whole = json.loads(data.read_text())
    made = {"date": dt.date.today().isoformat(), **_versions()}
    made |= {k: run[k] for k in ("date", "python", "torch", "triton") if run and k in run}
    new = [{"machine": machine, "label": label, "jobs": jobs, "chapter": chapter, "seconds": seconds, **made, **row}
           for chapter, row in phase_means(found).items()]  # fmt: skip
    key = lambda r: (r["machine"], r["label"], r["jobs"], r["chapter"])  # noqa: E731
    keep = [r for r in whole.get("phases", []) if key(r) not in {key(n) for n in new}]
    data.write_text(json.dumps({**whole, "phases": keep + new}, indent=1) + "\n")


def stored_phases_table(data: Path = DATA) -> str:
    """The data file's profiled runs, one row each: where a notebook's seconds went (means)."""
    rows = json.loads(data.read_text()).get("phases", [])
    return phases_table({f"{r['machine']}, {r['chapter']}, {r['jobs']} job{'s' if r['jobs'] > 1 else ''}: "
                         f"{r['label']} ({r['seconds']:g} s in all, {r['date']})": r for r in rows}, "run")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# The model

STUDENTS, GPUS = 300, (1, 8, 64)
GPUS_PER_HOST = 8


# The lent GPUs whose rows make the model: an H100 graded as fast as the H200 (layouts four at a time: 125 s on the
# H100, 137 on the H200, 2026-12-06): a notebook's seconds go to the CPU's work and the lock's waits, not to bandwidth.
MODEL_GPUS = ("H200", "H100")


def chapter_seconds(
    rows: list[dict], machines: tuple[str, ...] = MODEL_GPUS, held: bool = True
) -> dict[str, tuple[float, dict]]:
    """Each chapter's GPU seconds a notebook, from the real nbgrader's rows of `machines`: a run's wall time over its
    notebooks, for every chapter it graded (a run of several chapters gives each its mean), the best run a chapter
    (however many jobs it ran at once: that is how the chapter would be graded). {chapter: (seconds, row)}. With
    held=False, the runs whose expectations failed instead (the model's bound for a chapter without a held run)."""
    best: dict[str, tuple[float, dict]] = {}
    for r in rows:
        if (
            r["mode"] != "nbgrader"
            or not r["machine"].startswith(machines)
            or (r.get("expectations_held") is False) == held
            or r.get("students")  # a run of some demo students (the figures' comparison), not of the class
        ):
            continue
        per = r["seconds"] / r["notebooks"]
        for chapter in r["chapters"]:
            if chapter not in best or per < best[chapter][0]:
                best[chapter] = (per, r)
    return best


def model_table(data: Path = DATA) -> str:
    """Class time = students x (the chapters' seconds a notebook, summed) / GPUs + the last notebook in flight.

    A chapter's rate is measured, not derived: its best row of the real nbgrader on one H100 or H200
    (chapter_seconds), whatever its jobs. A chapter with no such row yet is taken as the slowest measured one, and
    the table says so. GPUs add
    their rates (one grader queue each, CUDA_VISIBLE_DEVICES per job; hosts through Dask)."""
    from qmatmul.course import assignments

    rows = json.loads(data.read_text())["rows"]
    measured, missed = chapter_seconds(rows), chapter_seconds(rows, held=False)
    chapters = list(assignments())
    slowest = max(measured.values(), key=lambda v: v[0])
    per_chapter, lines = (
        {},
        [
            "| machine | grading | jobs | notebooks | seconds | notebooks/hour | load before | date |",
            "|---|---|---|---|---|---|---|---|",
        ],
    )
    for r in rows:
        what = ", ".join(r["chapters"]) + (
            f"; {r['label']}" if r.get("label", DEMO_LABEL) != DEMO_LABEL else ""
        )
        lines.append(f"| {r['machine']} | {r['mode']} ({what}) | {r['jobs']} | {r['notebooks']} | "
                     f"{r['seconds']:g} | {r['per_hour']} | {r.get('load_before', '')} | {r['date']} |")  # fmt: skip
    lines += ["", "| chapter | GPU seconds a notebook | from |", "|---|---|---|"]
    for c in chapters:
        # without a run whose expectations held: the slower of the slowest chapter and its own runs that missed some
        per, r = measured.get(c) or max(slowest, missed.get(c, slowest), key=lambda v: v[0])
        per_chapter[c] = per
        jobs = f"{r['jobs']} job{'s' if r['jobs'] > 1 else ''} at a time"
        run = f"{r['machine']}: {', '.join(r['chapters'])}, {jobs}, {r['date']}"
        if c not in measured:
            run = (f"no run with every expectation held; its run that missed some ({run})" if c in r["chapters"]
                   else f"no run with every expectation held: taken as the slowest measured ({run})")  # fmt: skip
        lines.append(f"| {c} | {per:.0f} | {run} |")
    notebooks = STUDENTS * len(chapters)
    seconds = STUDENTS * sum(per_chapter.values())  # on one GPU
    t_nb = max(per_chapter.values())
    rate = round(notebooks / seconds * 3600)
    lines += ["", f"{STUDENTS} students x {len(chapters)} chapters = {notebooks} notebooks; one GPU (H100 or H200) grades "
              f"{rate} notebooks an hour across the chapters ({len(measured)} of {len(chapters)} measured)", "",
              "| GPUs | hosts (8 GPUs each) | rate | class time |", "|---|---|---|---|"]  # fmt: skip
    closing = []
    for g in GPUS:
        minutes = seconds / g / 60 + t_nb / 60  # and the tail: the last notebook in flight
        hosts = max(1, g // GPUS_PER_HOST)
        lines.append(f"| {g} | {hosts} | {g * rate}/h | {_duration(minutes)} |")
        closing.append(f"{_duration(minutes)} on {g} GPU{'s' if g > 1 else ''}")
    lines += ["", f"By the model, {STUDENTS} students take {', '.join(closing[:-1])} and {closing[-1]}."]
    if json.loads(data.read_text()).get("phases"):
        lines += ["", "Where a notebook's seconds went (QMATMUL_PROFILE=1; means a notebook, seconds):", "",
                  stored_phases_table(data)]  # fmt: skip
    return "\n".join(lines)


def _duration(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["cpu", "gpu", "demo", "phases", "compare", "model", "_grade"])
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--jobs", default="1,2")
    parser.add_argument("--chapters", default="roofline,w8a16")
    parser.add_argument(
        "--students",
        help="cpu: the demo students (default blank,correct,min_not_max,wrong_axis); "
        "demo: only these demo students of each chapter (default all)",
    )
    parser.add_argument("--machine", default=None)
    parser.add_argument("--out", help="gpu: write the results here; phases: every notebook's phases")
    parser.add_argument(
        "--label",
        help="phases: keep the run's means in the data file under this label; demo: the "
        "state of the code the run measured (a row of another label is kept beside it)",
    )
    parser.add_argument("--seconds", type=float, default=0.0, help="phases with --label: the run's wall time")
    parser.add_argument("--data", type=Path, default=None, help="also store the rows in this data file")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help="demo: stop a run after this many seconds (its logs are kept; `phases` reads them)",
    )
    args = parser.parse_args(argv)
    if args.what == "_grade":
        assignment, student, cells = args.rest
        res = grade_one(assignment, None if student == "-" else student, None if cells == "-" else cells)
        print("RESULT " + json.dumps(res))
        return 0
    if args.what == "cpu":
        rows = measure_cpu([int(j) for j in args.jobs.split(",")], args.chapters.split(","),
                           (args.students or CPU_STUDENTS).split(","), args.machine or f"cpu-{os.cpu_count()}-core")  # fmt: skip
        _store(rows, args.data or DATA)
        return 0
    if args.what == "gpu":
        res = measure_gpu(args.machine or "H200")
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        if args.data:
            _store(res["rows"], args.data)
        return 0
    if args.what == "phases":
        logdir = Path(args.rest[0]) if args.rest else ROOT / "build" / "demo" / "logs"
        found = phases(logdir)
        print(phases_table(phase_means(found)))
        if args.out:
            Path(args.out).write_text(json.dumps(found, indent=1) + "\n")
        if args.label:
            record = logdir.parent / "run.json"  # a demo run's own record, where it left one
            run = json.loads(record.read_text()) if record.exists() else None
            machine = args.machine or (run or {}).get("machine") or f"cpu-{os.cpu_count()}-core"
            store_phases(found, machine=machine, jobs=int(args.jobs), seconds=args.seconds, label=args.label,
                         data=args.data or DATA, run=run)  # fmt: skip
        return 0
    if args.what == "demo":
        apart = measure_demo(args.rest, [int(j) for j in args.jobs.split(",")], args.machine or "H200",
                             Path(args.out or ROOT / "build" / "throughput"), args.data or DATA, args.timeout,
                             args.label or DEMO_LABEL, args.students.split(",") if args.students else None)  # fmt: skip
        for line in apart:
            print("  more than 2 points apart: " + line)
        return 1 if apart else 0
    if args.what == "compare":
        serial, par = (figures(Path(p)) for p in args.rest)
        bad = figures_apart(serial, par)
        print(
            f"{len(serial)} cells with figures serially, {len(par)} in parallel; {len(bad)} more than 2 points apart"
        )
        for line in bad:
            print("  " + line)
        return 1 if bad else 0
    print(model_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
