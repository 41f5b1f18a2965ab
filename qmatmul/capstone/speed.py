"""Speed: the small model (launch-bound) and a Llama-sized layer stack (bandwidth-bound), timed on a GPU; on a
machine without one, what the course's H200 measured (docs/capstone-h200.json)."""

from __future__ import annotations

import contextlib
import json

import torch

from qmatmul import checks
from qmatmul.capstone import stack
from qmatmul.capstone.formats import FORMATS, LABELS
from qmatmul.capstone.layers import dense16
from qmatmul.capstone.model import LINEAR_WEIGHTS, load_model
from qmatmul.capstone.registry import kernel_word, kernels, reference_kernels, using
from qmatmul.capstone.runtime import act_dtype, autograding
from qmatmul.capstone.stack import STACK_MS
from qmatmul.capstone.text import SENTENCES, features


def _recorded() -> dict:
    """The course's H200 run (docs/capstone-h200.json, written by tools/capstone_h200.py), if this checkout has it."""
    from qmatmul import course

    root = course.repo_root()
    path = root / "docs" / "capstone-h200.json" if root else None
    return json.loads(path.read_text()) if path and path.is_file() else {}


def _time_us(fn) -> tuple[float | None, float]:
    """(graph µs, eager µs) of one forward: captured once as a CUDA graph and replayed, and called from Python
    (timing.step_us); a forward that cannot be captured (a host synchronization inside the model's code) gets
    None for the graph and do_bench's eager median."""
    from qmatmul import timing

    try:
        return timing.step_us(fn)
    except Exception as exc:  # noqa: BLE001 - reported in the table, not fatal
        torch.cuda.synchronize()
        print(f"  (not capturable: {timing.reason(exc)})")
        return None, timing.median_ms(fn) * 1e3  # do_bench warms up itself


def time_model(quantize_model_fn, formats=FORMATS, batches=(1, 24)) -> dict:
    """µs of one forward of all-MiniLM-L6-v2 per format, graph-captured and eager (GPU only; recorded H200 figures
    elsewhere). Returns {(format, batch): (graph µs or None, eager µs)}."""
    if autograding():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("model")
        return {}
    pool = SENTENCES
    out = {}
    variants = [("16-bit", None)] + [(f, f) for f in formats]
    for name, fmt in variants:
        with torch.no_grad():
            m = dense16(load_model()) if fmt is None else quantize_model_fn(load_model(), fmt)
            for b in batches:
                feats = features(pool[:b], "cuda")
                out[(name, b)] = _time_us(lambda m=m, feats=feats: m(feats))
    print("all-MiniLM-L6-v2, one forward, µs: graph (captured once, replayed) / eager (called from Python):")
    print(f"{'format':<22}" + "".join(f"{f'batch {b}':>16}" for b in batches))
    for name, _ in variants:
        print(f"{LABELS[name]:<22}" + "".join(f"{_cell(out[(name, b)]):>16}" for b in batches))
    from qmatmul import timing

    nbytes, copy_bw = 2 * LINEAR_WEIGHTS, timing.copy_bandwidth()
    print(f"The Linear weights are {nbytes / 1e6:.0f} MB in 16 bits: {nbytes / copy_bw * 1e6:.0f} µs of memory time "
          f"at this GPU's copy bandwidth ({copy_bw / 1e12:.2f} TB/s, measured now). The forward takes far longer, even "
          "captured: it is made of ~140 small kernels, and their "
          "count, not the bytes, sets its time. Quantization cannot speed up such a model; it pays where the "
          "weights are large (the Llama block above).")  # fmt: skip
    return out


def time_llama_stack(cls, formats=FORMATS, ms=STACK_MS, blocks: int = 2) -> dict:
    """A decode step through `blocks` Llama-3-8B blocks' seven Linears (218 M weights a block, each block its own)
    as a deployment runs it: captured once as a CUDA graph and replayed, and called from Python (eager), for 16-bit
    nn.Linear, every format through `cls` (your QuantLinear, with the kernels registered: yours where
    load_kernels found them) and its naive path. µs per block, the speed-up over 16-bit (graph) and the byte floor
    at the copy bandwidth (GPU only; recorded H200 figures elsewhere). Returns {(path, M): (graph µs, eager µs)}."""
    if autograding():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("stack")
        return {}
    from qmatmul import timing

    g = checks.generator(0, "cuda")
    dtype = act_dtype("cuda")
    copy_bw = timing.copy_bandwidth()
    out, floors = {}, {}
    Ks = sorted({k for _, k in stack.LLAMA_BLOCK})

    def run(layers, M, sets=None):
        xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in Ks}

        def step():
            with torch.no_grad(), using(sets) if sets else contextlib.nullcontext():
                for m in layers:
                    m(xs[m.in_features])

        graph_us, eager_us = timing.step_us(step)
        return graph_us / blocks, eager_us / blocks

    dense = [m for _ in range(blocks) for m in stack.dense_block("cuda", dtype)]
    for M in ms:
        out[("16-bit", M)] = run(dense, M)
    floors["16-bit"] = 2 * stack.BLOCK_WEIGHTS
    del dense
    for fmt in formats:
        layers = [m for _ in range(blocks) for m in stack.llama_stack(cls, fmt, "cuda", g)]
        floors[fmt] = sum(t.numel() * t.element_size() for m in layers for t in m.buffers()) // blocks
        for M in ms:
            out[(fmt, M)] = run(layers, M)
            out[(fmt + " naive", M)] = run(layers, M, {f: reference_kernels(f) for f in FORMATS})
        del layers
        torch.cuda.empty_cache()
    print(f"A decode step through {blocks} Llama-3-8B blocks' seven Linears (218 M weights a block), µs per block: "
          "graph = the step captured once as a CUDA graph and replayed (what a serving engine runs), eager = called "
          "from Python; x 16-bit = the 16-bit graph's time over this path's; floor = the weight bytes at the copy "
          f"bandwidth ({copy_bw / 1e12:.2f} TB/s, measured now).")  # fmt: skip
    print(
        f"{'path':<34}{'floor':>7}" + "".join(f"{f'M={M} graph':>13}{'eager':>8}{'x 16-bit':>10}" for M in ms)
    )
    for key in ["16-bit"] + [k for f in formats for k in (f, f + " naive")]:
        fmt = key.split()[0]
        if key == "16-bit":
            label = LABELS["16-bit"]
        elif key.endswith("naive"):
            label = LABELS.get(fmt, fmt) + " naive path"
        else:
            label = f"{LABELS[fmt]} ({kernel_word(kernels(fmt))})"
        cells = "".join(f"{out[(key, M)][0]:>13.0f}{out[(key, M)][1]:>8.0f}"
                        f"{out[('16-bit', M)][0] / out[(key, M)][0]:>9.2f}x" for M in ms)  # fmt: skip
        print(f"{label[:34]:<34}{floors[fmt] / copy_bw * 1e6:>7.0f}{cells}")
    return out


# The course's traced step (tools/decode_step --trace), what trace_llama_block shows without a GPU: a file of docs/
# and, in it, the rows of 7 Linears at M = 1 it quotes (16-bit, then W8A16 through the chapter's solution).
TRACE_RECORD = "decode-step-h100-trace.json"
TRACE_ROWS = ("bf16 cuBLAS (torch.nn.functional.linear)", "solution w8a16_decode")


def trace_llama_block(cls, fmt: str = "w8a16", M: int = 1, blocks: int = 2) -> dict:
    """Where a captured decode step's time goes: `blocks` Llama-3-8B blocks' seven Linears in 16-bit nn.Linear and
    in `fmt` through `cls` (your QuantLinear and its registered kernels), each captured once as a CUDA graph and
    replayed under torch.profiler (qmatmul/timing/trace.py). For each, one block's kernels in order: µs each and the
    gap before it, the GPU idle between two kernels. GPU only; elsewhere the course's recorded trace.
    Returns {"16-bit": row, fmt: row}."""
    if autograding():
        return {}
    if not torch.cuda.is_available():
        _show_recorded_trace()
        return {}
    from qmatmul.timing import trace

    g = checks.generator(0, "cuda")
    dtype = act_dtype("cuda")
    xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in {k for _, k in stack.LLAMA_BLOCK}}
    out = {}
    for name in ("16-bit", fmt):
        if name == "16-bit":
            layers = [m for _ in range(blocks) for m in stack.dense_block("cuda", dtype)]
            title = LABELS["16-bit"]
        else:
            layers = [m for _ in range(blocks) for m in stack.llama_stack(cls, fmt, "cuda", g)]
            title = f"{LABELS[fmt]} ({kernel_word(kernels(fmt))})"

        def step(layers=layers):
            with torch.no_grad():
                for m in layers:
                    m(xs[m.in_features])

        out[name] = trace.trace(step, blocks)
        _print_trace(title, out[name], M)
        del layers
        torch.cuda.empty_cache()
    return out


def _print_trace(title: str, row: dict, M: int) -> None:
    from qmatmul.timing import trace

    print(f"{title}, one block at M = {M}: {row['timed_us']:.1f} µs captured; the GPU busy {row['busy_us']:.1f} µs in "
          f"{row['ops']} kernels, idle {row['gap_us']:.1f} µs between them ({row['gap_us'] / row['ops']:.1f} µs a "
          "kernel; under the profiler the step spans "
          f"{row['span_us']:.1f} µs)")  # fmt: skip
    for line in trace.kernel_lines(row):
        print(f"  {line}")


def _show_recorded_trace() -> None:
    """On a machine without a GPU: the course's traced step (docs/TRACE_RECORD), 16-bit and W8A16, 7 Linears, M = 1."""
    from qmatmul import course

    root = course.repo_root()
    path = root / "docs" / TRACE_RECORD if root else None
    if not (path and path.is_file()):
        print(f"No CUDA GPU here: nothing is traced (the course's trace is docs/{TRACE_RECORD}).")
        return
    rec = json.loads(path.read_text())
    meta = rec["meta"]
    print(f"No CUDA GPU here; traced on the course's {meta['gpu']} ({meta['date']}, torch {meta['torch']}):")
    rows = {
        r["label"]: r
        for r in rec["traces"]
        if r["layout"] == "7 Linears" and r["M"] == 1 and "error" not in r
    }
    for label in TRACE_ROWS:
        if label in rows:
            _print_trace(label, rows[label], 1)


def _show_recorded(what: str) -> None:
    """On a machine without a GPU: what the course's H200 measured (docs/capstone-h200.md), as a table. The stack's
    rows are (graph µs, eager µs) per block where the record has them (`step_us`), else eager µs (`stack_us`)."""
    rec = _recorded()
    key = {"stack": "step_us" if "step_us" in rec else "stack_us", "model": "model_us"}[what]
    data = rec.get(key)
    if not data:
        print("No CUDA GPU here: nothing is timed (the course's H200 figures are in docs/capstone-h200.md).")
        return
    where = "; ".join(rec.get("env", "").splitlines()[:2]) or "the course's H200"
    cols = ("M=1", "M=16") if what == "stack" else ("batch 1", "batch 24")
    two_ways = isinstance(next(iter(data.values())), (list, tuple))
    how = f"µs{' per block' if what == 'stack' else ''}, " + ("graph / eager" if two_ways else "eager median")
    print(f"No CUDA GPU here; recorded on the course's H200 ({where}), {how}:")
    rows = dict.fromkeys(k.rsplit(" ", 2 if what == "model" else 1)[0] for k in data)
    print(f"  {'path':<24}" + "".join(f"{c:>14}" for c in cols))
    for row in rows:
        cells = [data.get(f"{row} {c}") for c in cols]
        label = LABELS.get(row, LABELS.get(row.split()[0], row) + (" naive" if row.endswith("naive") else ""))
        print(f"  {label:<24}" + "".join(f"{_cell(v):>14}" for v in cells))


def _cell(v) -> str:
    """A recorded figure: eager µs, or (graph µs, eager µs) as "graph / eager" ("-" for a graph not captured)."""
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return f"{'-' if v[0] is None else f'{v[0]:.0f}'} / {v[1]:.0f}"
    return f"{v:.0f}"


def every_path(layout: str = "7 Linears", ms=STACK_MS) -> list[dict]:
    """The same decode step through every path the course measured, beside yours: bf16 cuBLAS, the chapters'
    solution kernels (what you wrote), the course's expert kernels and PyTorch's own quantized kernels (tinygemm,
    _weight_int8pack_mm, _scaled_mm), four Llama-3-8B blocks a step, every output checked before it was timed.
    Recorded on the course's H200 by `make bench` (tools/decode_step.py; docs/bench-h200.json, kind `llama3-8b
    block decode`). Per path and M: µs a block captured as a CUDA graph and eager, × bf16 (graph) and the share of
    the byte floor (the weight bytes at the copy bandwidth over the time). `layout`: "7 Linears" or "fused" (q/k/v
    and gate/up one Linear each). Prints the table, returns its rows."""
    if autograding():
        return []
    from qmatmul.teaching import recorded

    try:
        rows = [r for r in recorded.data()["rows"]
                if r["kind"] == "llama3-8b block decode" and r["layout"] == layout and "us" in r]  # fmt: skip
        runs = recorded.meta().get("llama3-8b") or [{}]
    except recorded.MissingFigure as exc:
        print(exc)
        return []
    run = runs[0] if isinstance(runs, list) else runs
    print(f"Recorded on the course's {run.get('gpu', 'GPU')} ({run.get('date', '')}, torch {run.get('torch', '')}), "
          f"{layout}: µs per block; x bf16 = bf16's graph time over the path's; floor = the share of the time the "
          f"weight bytes need at the copy bandwidth.")  # fmt: skip
    for M in ms:
        print(f"\nM = {M}\n  {'path':<66}{'graph':>8}{'eager':>8}{'x bf16':>9}{'floor':>7}")
        for r in sorted((r for r in rows if r["M"] == M), key=lambda r: r["us"]):
            print(f"  {r['label'][:66]:<66}{r['us']:>8.1f}{r['us_eager']:>8.0f}{r['speedup']:>8.2f}x"
                  f"{100 * r['floor_us'] / r['us']:>6.0f}%")  # fmt: skip
    return rows
