"""Mutation testing of the grader: does every small bug in a solution lose points?

    python -m autograder.mutate [ASSIGNMENT ...] [--sample N] [--seed S] [--timeout SECONDS]

Each solution region of each solution notebook is mutated one change at a time (a constant ±1, an operator,
a comparison, a shift, a mask or broadcast axis, a reduction dim, an index offset, a dropped line), and every
mutant is graded by the course's own test cells, hidden tests included (`grade_direct.grade`: the trusted grader
that nbgrader runs). A mutant is killed when it scores less than the solution. Survivors are printed; those listed
in autograder/equivalent_mutants.json with a reason are counted as equivalent. Exit status 1 when a chapter's
kill rate over non-equivalent mutants is under --target (0.9).

Mutants are graded by the trusted grader, each in a worker process of its own (a crash counts as killed).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

from qmatmul.grader import notebook

ROOT = Path(__file__).resolve().parent.parent

EQUIVALENT = ROOT / "autograder" / "equivalent_mutants.json"

# (name, pattern, replacement): each match in a solution line yields one mutant.
OPERATORS = [
    ("constant", r"(?<![\w.])(\d+)(?![\w.])", None),  # handled specially: n -> n+1 and n -> n-1
    ("comparison", r"<(?!=)", "<="),
    ("comparison", r"<=", "<"),
    ("comparison", r"(?<!>)>(?![>=])", ">="),
    ("operator", r"(?<=\s)\+(?=\s)", "-"),
    ("operator", r"(?<=\s)-(?=\s)", "+"),
    ("operator", r"(?<=\s)\*(?=\s)", "/"),
    ("operator", r"(?<=\s)/(?=\s)", "*"),
    ("mask", r"(?<=\s)&(?=\s)", "|"),
    ("shift", r">>", "<<"),
    ("shift", r"<<", ">>"),
    ("axis", r"\[:, None\]", "[None, :]"),
    ("axis", r"\[None, :\]", "[:, None]"),
    ("axis", r"dim=1", "dim=0"),
    ("axis", r"dim=0", "dim=1"),
    ("offset", r"\bprogram_id\((\d)\)", r"program_id(\1) + 1"),
    ("offset", r"\b(offs_\w+)\[", r"(\1 + 1)["),
    ("dtype", r"\.to\(x\.dtype\)", ".to(tl.float32)"),
    ("call", r"torch\.round\(", "torch.trunc("),
    ("call", r"\.abs\(\)", ""),
]

# Mistakes a chapter's text names that the operators above never make, as one-line mutants of its solution:
# (kind, pattern, replacement), matched like OPERATORS in that chapter's solution lines only.
CHAPTER_OPERATORS = {
    "fp8": [
        # exercise 5: the K block off by one; the weight-scale row of the tile, not of the scale block
        ("index", r"\bk0 // SCALE\b", "k0 // SCALE + 1"),
        ("index", r"\(offs_n // SCALE\)", "(offs_n // BLOCK_N)"),
        # exercise 1: the scale computed in x's own 16-bit dtype
        ("dtype", r"^(\s*)x = x\.float\(\)$", r"\1x = x"),
    ],
}


def solution_cells(assignment: str) -> dict[str, str]:
    """grade_id -> source of each solution cell, markers included (mutants change the lines between them)."""
    return {
        c.grade_id: c.source
        for c in notebook.read_folder(ROOT / "solutions" / assignment)
        if c.role == "solution"
    }


def mutants(assignment: str) -> list[dict]:
    """Every single-change mutant of the lines inside solution regions."""
    out = []
    for gid, src in solution_cells(assignment).items():
        lines = src.splitlines()
        inside = False
        for i, line in enumerate(lines):
            if "### BEGIN SOLUTION" in line:
                inside = True
                continue
            if "### END SOLUTION" in line:
                inside = False
                continue
            code = line.split("#")[0]
            if not inside or not code.strip():
                continue

            def emit(kind, new, lines=lines, i=i, gid=gid, line=line):
                mutated = lines[:i] + [new] + lines[i + 1 :]
                out.append(
                    dict(
                        cell=gid,
                        line=line.strip(),
                        kind=kind,
                        new=new.strip(),
                        source=notebook.strip_markers("\n".join(mutated)),
                    )
                )

            for kind, pattern, repl in OPERATORS + CHAPTER_OPERATORS.get(assignment, []):
                for m in re.finditer(pattern, code):
                    if kind == "constant":
                        n = int(m.group(1))
                        for v in {n + 1, n - 1} - {-1}:
                            emit(kind, line[: m.start()] + str(v) + line[m.end() :])
                    else:
                        emit(kind, line[: m.start()] + m.expand(repl) + line[m.end() :])
            if not code.rstrip().endswith((":", ",", "(")) and not code.strip().startswith(
                ("return", ")", "]")
            ):
                indent = line[: len(line) - len(line.lstrip())]
                emit("drop line", f"{indent}pass")
    return out


# ----------------------------------------------------------------------------------------------------------
# Grading: the trusted grader (each mutant's code in a worker process of its own, every call under a timeout)


def grade(job: dict, timeout: float) -> dict:
    import contextlib
    import io

    from autograder import grade_direct

    t0 = time.time()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            res = grade_direct.grade(job["assignment"], job.get("overrides"), timeout=timeout)
        points = sum(r.points for r in res.values())
        why = "; ".join(
            r.message for r in res.values() if r.message and not r.message.startswith("NotMeasured")
        )[:300]
    except Exception as exc:  # noqa: BLE001 - a mutant the grader cannot even start loses everything
        points, why = 0.0, f"{type(exc).__name__}: {exc}"[:300]
        return dict(id=job["id"], points=points, why=why, seconds=time.time() - t0, crashed=True)
    return dict(id=job["id"], points=points, why=why, seconds=time.time() - t0)


def run(assignments, sample, seed, timeout, target) -> int:
    equivalent = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else []
    status = 0
    for assignment in assignments:
        baseline = grade(dict(id="solution", assignment=assignment), timeout)
        all_mutants = mutants(assignment)
        chosen = (
            random.Random(seed).sample(all_mutants, min(sample, len(all_mutants))) if sample else all_mutants
        )
        print(
            f"{assignment}: solution scores {baseline['points']:g}; grading {len(chosen)} of {len(all_mutants)} mutants"
        )
        if baseline.get("crashed"):  # the grader itself, not a mutant: no mutant's score would mean anything
            print(f"{assignment}: grading the solution raised {baseline['why']}")
            return 1
        if baseline["why"]:
            print(f"    the solution lost points: {baseline['why']}")
        killed, survivors, eq = 0, [], 0
        for i, m in enumerate(chosen, 1):
            res = grade(dict(id=i, assignment=assignment, overrides={m["cell"]: m["source"]}), timeout)
            if res["points"] < baseline["points"]:
                killed += 1
                continue
            reason = next((e["reason"] for e in equivalent if e["assignment"] == assignment and
                           e["cell"] == m["cell"] and e["line"] == m["line"] and e["new"] == m["new"]), None)  # fmt: skip
            if reason:
                eq += 1
                print(f"  equivalent  {m['cell']}: {m['line']!r} -> {m['new']!r} ({reason})")
            else:
                survivors.append(m)
                print(f"  SURVIVED    {m['cell']} [{m['kind']}]: {m['line']!r} -> {m['new']!r}")
        counted = len(chosen) - eq
        rate = killed / counted if counted else 1.0
        print(
            f"{assignment}: killed {killed} of {counted} non-equivalent mutants ({rate:.0%}); {eq} equivalent"
        )
        if rate < target:
            status = 1
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("assignments", nargs="*")
    parser.add_argument(
        "--sample", type=int, default=0, help="grade a random sample of N mutants per chapter"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per mutant")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--list", action="store_true", help="only list the mutants")
    args = parser.parse_args(argv)
    from autograder import classroom

    selected = args.assignments or classroom.assignments()
    if args.list:
        for a in selected:
            for m in mutants(a):
                print(f"{a} {m['cell']} [{m['kind']}] {m['line']!r} -> {m['new']!r}")
        return 0
    return run(selected, args.sample, args.seed, args.timeout, args.target)


if __name__ == "__main__":
    sys.exit(main())
