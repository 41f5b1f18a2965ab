"""The H200 figures quoted in the docs and notebooks, checked against (or rewritten from) docs/bench-h200.json.

    python -m tools.figures            check every quoted figure and generated table (exit 1 on a mismatch)
    python -m tools.figures --write    rewrite them from the data (after `make bench` replaced the JSON)

A figure quoted in prose carries a reference right after it, an HTML comment that Markdown and Jupyter do not
show:

    93 % / 92 %<!-- h200: w8a16 decode | solution w8a16_decode | 1,16x28672x8192 | copy -->

kind | path (as in the JSON's rows; `A ÷ B` for A's figure over B's, in %) | shapes (MxNxK, M and N or K may
be lists, several shapes separated by spaces) | field (qmatmul/teaching/recorded.py FIELDS: us, us_eager, copy,
copy_eager, cublas, TFLOPs, ... or `meta:<key>`). The figures just before the reference are compared at the
precision they are written in: one figure must match every value; `a / b` (or `a and b`) one value each, in
order; `a–b` the lowest and the highest. A figure from somewhere else says so instead:
`<!-- h200: from docs/grading-h200.md -->`. Tables are generated between `<!-- begin h200 table: NAME -->` and
`<!-- end h200 table -->`.

tests/test_figures.py runs the check, and also fails on a figure of the H200 (a %, µs, TB/s or TFLOP/s in a
paragraph that names the H200) quoted without a reference, unless it is a bar (in bold, or after ≥) or the page
says at its top that its figures are its own runs (`<!-- h200 figures: ... -->`).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from qmatmul.grader import notebook
from qmatmul.teaching import recorded

ROOT = Path(__file__).resolve().parent.parent

REF = re.compile(r"<!-- h200: (.*?) -->")
NUM = r"\d+(?:\.\d+)?"
UNIT = r"(?:\s?(?:%|µs|TB/s|TFLOP/s|GB/s))?"
# The figures just before a reference: one, a list (`a / b`, `a and b`) or a range (`a–b`), units optional.
QUOTED = re.compile(rf"({NUM}){UNIT}((?:\s*(?:/|and|–|-)\s*{NUM}{UNIT})*)\s*$")
FIGURE = re.compile(rf"(?<![\w.]){NUM}(?:\s*(?:–|-)\s*{NUM})?\s?(?:%|µs|TB/s|TFLOP/s|GB/s)")
OWN_RUNS = "<!-- h200 figures:"
TABLE = re.compile(r"(<!-- begin h200 table: (\S+) -->\n)(.*?)(<!-- end h200 table -->)", re.S)


def pages() -> list[Path]:
    """Where the course quotes recorded figures."""
    return [
        ROOT / "README.md",
        ROOT / "course.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "solutions").glob("*/*.ipynb")),
    ]


# ----------------------------------------------------------------------------------------------------------
# References


@dataclass
class Ref:
    kind: str
    labels: tuple[str, ...]  # one path, or (A, B) for A over B
    shapes: list[tuple[int, int, int]]
    field: str

    def values(self) -> list[float]:
        if self.kind == "meta":
            return [float(recorded.meta()[self.field])]
        if len(self.labels) == 2:
            a, b = self.labels
            return [
                100
                * recorded.figure(self.kind, a, *s, self.field)
                / recorded.figure(self.kind, b, *s, self.field)
                for s in self.shapes
            ]
        return [recorded.figure(self.kind, self.labels[0], *s, self.field) for s in self.shapes]


def parse_ref(text: str) -> Ref | None:
    """None for a figure marked as from elsewhere."""
    if text.startswith("from "):
        return None
    parts = [p.strip() for p in text.split("|")]
    if parts[0] == "meta" and len(parts) == 2:
        return Ref("meta", (), [], parts[1])
    if len(parts) != 4:
        raise ValueError(f"a reference is 'kind | path | shapes | field': {text!r}")
    kind, label, shapes, field = parts
    if field not in recorded.FIELDS:
        raise ValueError(f"unknown field {field!r} in {text!r}: one of {sorted(recorded.FIELDS)}")
    out = []
    for shape in shapes.split():
        dims = [[int(v) for v in d.split(",")] for d in shape.split("x")]
        if len(dims) != 3:
            raise ValueError(f"a shape is MxNxK: {shape!r} in {text!r}")
        out += list(itertools.product(*dims))
    return Ref(kind, tuple(p.strip() for p in label.split("÷")), out, field)


def _fmt(value: float, like: str) -> str:
    decimals = len(like.split(".")[1]) if "." in like else 0
    return f"{value:.{decimals}f}"


def check_quote(before: str, ref: Ref) -> tuple[str | None, str]:
    """(error or None, the figures as the data gives them) for the figures that end `before`."""
    m = QUOTED.search(before)
    if not m:
        return "no figure just before the reference", ""
    quoted = m.group(0)
    nums = re.findall(NUM, quoted)
    values = ref.values()
    if re.search(r"\d\s*(?:–|-)\s*\d", quoted) and len(nums) == 2:
        lo, hi = _fmt(min(values), nums[0]), _fmt(max(values), nums[1])
        start, end = quoted.index(nums[0]), quoted.rindex(nums[1]) + len(nums[1])
        if lo == hi:  # one figure, not a range from a number to itself
            return f"{quoted!r}: the data gives {lo} (one figure)", quoted[:start] + lo + quoted[end:]
        want = quoted[:start] + lo + quoted[start + len(nums[0]) : end - len(nums[1])] + hi + quoted[end:]
        return (None if (lo, hi) == (nums[0], nums[1]) else f"{quoted!r}: the data gives {lo}–{hi}"), want
    if len(nums) == 1:
        shown = sorted({_fmt(v, nums[0]) for v in values})
        want = quoted.replace(nums[0], shown[0], 1) if len(shown) == 1 else quoted
        return (None if shown == [nums[0]] else f"{quoted!r}: the data gives {' / '.join(shown)}"), want
    if len(nums) != len(values):
        return f"{quoted!r}: {len(nums)} figures for {len(values)} values", quoted
    shown = [_fmt(v, n) for v, n in zip(values, nums, strict=True)]
    want, pos = "", 0
    for n, s in zip(nums, shown, strict=True):
        i = quoted.index(n, pos)
        want += quoted[pos:i] + s
        pos = i + len(n)
    want += quoted[pos:]
    return (None if shown == nums else f"{quoted!r}: the data gives {' / '.join(shown)}"), want


# ----------------------------------------------------------------------------------------------------------
# Generated tables


def _pct(r, key) -> str:
    return "—" if key not in r else f"{100 * r[key]:.0f}"


DECODE_SHAPES = [(28672, 8192), (8192, 28672), (8192, 8192)]
# The rows of the two summary tables of docs/benchmark-h200.md, in order: (kind, path).
DECODE_ROWS = [
    ("w8a16 decode", "solution w8a16_decode"),
    ("w8a16 decode", "expert w8a16_decode_split (qmatmul/kernels/expert.py)"),
    ("w8a16 decode", "dense (cuBLAS)"),
    ("w8a16 decode", "torch._weight_int8pack_mm"),
    ("w8a16 decode", "gemlite A16W8 (pure Triton)"),
    ("w4a16 decode", "solution w4a16_decode"),
    ("w4a16 decode", "expert w4a16_decode (qmatmul/kernels/expert.py)"),
    (
        "w4a16 decode",
        "expert w4a16 MMA decode, weight repacked at load (qmatmul/kernels/mma_decode.py, Gluon)",
    ),
    ("w4a16 decode", "torch._weight_int4pack_mm"),
    ("w4a16 decode", "gemlite 0.6.0.post2 (pure Triton)"),
    ("w4a16 decode", "naive: dequantize, matmul"),
    ("fp8 decode", "solution fp8_decode"),
    ("fp8 decode", "torch._scaled_mm rowwise"),
    ("mxfp4 decode", "solution mxfp4_decode"),
    ("mxfp4 decode", "expert mxfp4_decode (qmatmul/kernels/expert.py)"),
    (
        "mxfp4 decode",
        "expert mxfp4 MMA decode, weight repacked at load (qmatmul/kernels/mma_decode.py, Gluon)",
    ),
    ("mxfp4 decode", "solution tl.dot_scaled"),
    ("mxfp4 decode", "naive: dequantize, matmul"),
    ("nvfp4 decode", "solution nvfp4_decode"),
    ("nvfp4 decode", "expert nvfp4_decode (qmatmul/kernels/expert.py)"),
    (
        "nvfp4 decode",
        "expert nvfp4 MMA decode, weight repacked at load (qmatmul/kernels/mma_decode.py, Gluon)",
    ),
    ("nvfp4 decode", "naive: dequantize, matmul"),
]
PREFILL_ROWS = [
    ("w8a16 prefill", "solution w8a16_matmul"),
    ("w8a16 prefill", "naive: dequantize, matmul"),
    ("w4a16 prefill", "solution w4a16_matmul"),
    ("w4a16 prefill", "naive: dequantize, matmul"),
    ("mxfp4 prefill", "solution mxfp4_matmul"),
    ("mxfp4 prefill", "solution tl.dot_scaled"),
    ("mxfp4 prefill", "naive: dequantize, matmul"),
    ("nvfp4 prefill", "solution nvfp4_matmul"),
    ("nvfp4 prefill", "naive: dequantize, matmul"),
    ("fp8 prefill", "solution fp8_matmul"),
    ("fp8 prefill", "expert fp8_matmul_tma (qmatmul/kernels/expert.py)"),
    ("fp8 prefill", "solution fp8_block_matmul (128x128)"),
    ("fp8 prefill", "expert fp8_block_matmul_tma (128x128, qmatmul/kernels/expert.py)"),
    ("fp8 prefill", "torch._scaled_mm rowwise"),
]


def decode_table() -> list[str]:
    lines = ["| path | " + " | ".join(f"{n} × {k}" for n, k in DECODE_SHAPES) + " |", "|---" * 4 + "|"]
    for kind, label in DECODE_ROWS:
        cells = []
        for n, k in DECODE_SHAPES:
            a, b = recorded.row(kind, label, 1, n, k), recorded.row(kind, label, 16, n, k)
            cells.append(f"{_pct(a, 'copy_frac')} / {_pct(b, 'copy_frac')} "
                         f"({_pct(a, 'copy_frac_eager')} / {_pct(b, 'copy_frac_eager')})")  # fmt: skip
        lines.append(f"| {kind.split()[0]}: {label} | " + " | ".join(cells) + " |")
    return lines


def prefill_table() -> list[str]:
    lines = ["| prefill, N = K = 8192 | M = 2048 | M = 4096 |", "|---|---|---|"]
    for kind, label in PREFILL_ROWS:
        rs = [recorded.row(kind, label, M, 8192, 8192) for M in (2048, 4096)]
        cells = [f"{_pct(r, 'cublas_frac')} ({_pct(r, 'cublas_frac_eager')})" for r in rs]
        lines.append(f"| {kind.split()[0]}: {label} | " + " | ".join(cells) + " |")
    return lines


def full_table() -> list[str]:
    from tools import bench

    return bench.table(recorded.data()["rows"])


def llama_step_table() -> list[str]:
    from tools import decode_step

    return decode_step.step_table(recorded.data()["rows"])


def llama_layer_table() -> list[str]:
    from tools import decode_step

    return decode_step.layer_table(recorded.data()["rows"])


def llama_trace_table() -> list[str]:
    from qmatmul.timing.trace import trace_table

    return trace_table(recorded.data()["rows"])


TABLES = {"decode": decode_table, "prefill": prefill_table, "full": full_table, "llama-step": llama_step_table,
          "llama-layers": llama_layer_table, "llama-trace": llama_trace_table}  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Pages


def _texts(path: Path) -> list[str]:
    """The text of a page, or of each markdown cell of a notebook."""
    if path.suffix == ".ipynb":
        return [c.source for c in notebook.read(path) if c.kind == "markdown"]
    return [path.read_text()]


def _rewrite(path: Path, fix) -> None:
    old = path.read_text()
    if path.suffix == ".ipynb":
        import nbformat

        nb = notebook.parse_node(old)
        for c in nb.cells:
            if c.cell_type == "markdown":
                c.source = fix(c.source)
        new = nbformat.writes(nb) + "\n"
    else:
        new = fix(old)
    if new != old:
        path.write_text(new)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def problems(path: Path) -> list[str]:
    """Every quoted figure that disagrees with the data, every stale table, every malformed reference."""
    out = []
    for text in _texts(path):
        for m in REF.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            try:
                ref = parse_ref(m.group(1))
                if ref is None:
                    continue
                err, _ = check_quote(text[: m.start()].rsplit("\n", 1)[-1], ref)
            except (ValueError, recorded.MissingFigure) as exc:
                err = str(exc)
            if err:
                out.append(f"{_name(path)}:{line}: {err}")
        for m in TABLE.finditer(text):
            if m.group(2) not in TABLES:
                out.append(f"{_name(path)}: unknown table {m.group(2)!r}: one of {sorted(TABLES)}")
            elif m.group(3) != "\n".join(TABLES[m.group(2)]()) + "\n":
                out.append(f"{_name(path)}: table {m.group(2)!r} differs from the data: --write")
    return out


def write(path: Path) -> None:
    def fix(text: str) -> str:
        text = TABLE.sub(lambda m: m.group(1) + "\n".join(TABLES[m.group(2)]()) + "\n" + m.group(4), text)
        out, pos = "", 0
        for m in REF.finditer(text):
            ref = parse_ref(m.group(1))
            before = text[pos : m.start()]
            if ref is not None:
                q = QUOTED.search(before)
                if q:
                    _, want = check_quote(before, ref)
                    before = before[: q.start()] + want
            out += before + m.group(0)
            pos = m.end()
        return out + text[pos:]

    _rewrite(path, fix)


def unreferenced(path: Path) -> list[str]:
    """Figures of the H200 quoted without a reference (bars and pages of their own runs aside)."""
    out = []
    for text in _texts(path):
        if OWN_RUNS in text[:2000]:
            continue
        text = TABLE.sub("", text)
        # paragraphs, list items and table rows
        for block in re.split(r"\n\s*\n|\n(?=\s*(?:[*-]|\d+\.|\|) )", text):
            if "H200" not in block:
                continue
            flat = re.sub(r"\s*\n\s*", " ", block)
            for m in FIGURE.finditer(flat):
                before = flat[max(0, m.start() - 12) : m.start()]
                if flat.startswith("<!-- h200:", m.end()) or re.search(
                    r"(≥|\*\*|within|bar is|Why)\s*$", before
                ):
                    continue
                if flat[m.end() : m.end() + 2] == "**":
                    continue
                covered = re.match(rf"(?:\s*(?:/|and|–|-)\s*{NUM}{UNIT})+\s*<!-- h200:", flat[m.end() :])
                if covered:
                    continue
                out.append(
                    f"{_name(path)}: {m.group(0)!r} in “…{flat[max(0, m.start() - 60) : m.end() + 20]}…”"
                )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite the quoted figures and tables from the data"
    )
    args = parser.parse_args(argv)
    if args.write:
        for p in pages():
            write(p)
    found = [e for p in pages() for e in problems(p) + unreferenced(p)]
    for e in found:
        print(e)
    print(
        f"{len(found)} figures disagree with docs/bench-h200.json or carry no reference"
        if found
        else "all quoted figures agree with docs/bench-h200.json"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
