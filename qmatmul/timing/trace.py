"""Where a decode step's time goes: the step captured once as a CUDA graph and replayed under torch.profiler, each
GPU op of the replays read from the trace (its duration and the gap before it, when the GPU had nothing to run).

    python -m tools.decode_step --trace [--paths LABEL,...] [--ms 1]

A step of `blocks` blocks is a chain of GPU ops on one stream (kernels, memsets, copies); a block's ops repeat in
the same order. For each replay: the span (first op's start to last op's end), the GPU busy time (the ops'
durations added) and the gaps between one op's end and the next one's start (launch latency the graph does not
hide). Medians over the replays, per block; per op of a block, its median duration and gap before it. The step's
time without the profiler is measured on the same graph, so the instrument's own cost shows beside it.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

TRACE_KIND = "llama3-8b block trace"
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
MARKER = "spin_kernel"  # torch.cuda._sleep's kernel: ends the capture's ops, the replays' come after it


def gpu_ops(trace: dict) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of each GPU op of a chrome trace (torch.profiler's export), in start order."""
    ops = [
        (e["name"], float(e["ts"]), float(e.get("dur", 0.0)))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS
    ]
    return sorted(ops, key=lambda op: op[1])


def after_marker(ops: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The ops after the last marker kernel (the replays'), or an error naming what the trace lacks."""
    marks = [i for i, (name, _, _) in enumerate(ops) if MARKER in name]
    if not marks:
        raise ValueError(f"no {MARKER} in the trace ({len(ops)} GPU ops): the profiler saw no marker")
    return ops[marks[-1] + 1 :]


def summarize(ops: list[tuple[str, float, float]], replays: int, blocks: int) -> dict:
    """Per block, medians over the replays: span_us, busy_us, gap_us (gaps between consecutive ops of a replay;
    the first op's is not seen), ops (a block's op count), and per op of a block its name, median µs and gap
    before it. ops: the replays' ops in start order, `replays` equal chains of `blocks` equal blocks."""
    if not ops or len(ops) % (replays * blocks):
        raise ValueError(f"{len(ops)} GPU ops do not split into {replays} replays of {blocks} blocks")
    per_replay = len(ops) // replays
    per_block = per_replay // blocks
    spans, busys, gaps = [], [], []
    durs = [[] for _ in range(per_block)]
    gaps_before = [[] for _ in range(per_block)]
    for r in range(replays):
        chain = ops[r * per_replay : (r + 1) * per_replay]
        names = [name for name, _, _ in chain]
        if names[:per_block] * blocks != names:
            raise ValueError(f"replay {r}: the blocks do not run the same ops in the same order")
        spans.append(chain[-1][1] + chain[-1][2] - chain[0][1])
        busys.append(sum(d for _, _, d in chain))
        total_gap = 0.0
        for i, (_, start, dur) in enumerate(chain):
            durs[i % per_block].append(dur)
            if i:
                _, prev_start, prev_dur = chain[i - 1]
                gap = start - (prev_start + prev_dur)
                gaps_before[i % per_block].append(gap)
                total_gap += gap
        gaps.append(total_gap)
    med = statistics.median
    return dict(
        ops=per_block,
        span_us=med(spans) / blocks,
        busy_us=med(busys) / blocks,
        gap_us=med(gaps) / blocks,
        kernels=[
            dict(name=short(chain_name), us=med(d), gap_us=med(g) if g else None)
            for chain_name, d, g in zip(
                [name for name, _, _ in ops[:per_block]], durs, gaps_before, strict=True
            )
        ],
    )


def short(name: str, width: int = 48) -> str:
    """A kernel's name for a table: C++ templates and arguments dropped, at most `width` characters."""
    name = name.split("(")[0].split("<")[0].strip()
    name = name.rsplit("::", 1)[-1] if "::" in name else name
    return name if len(name) <= width else name[: width - 1] + "…"


def trace(step, blocks: int, *, replays: int = 5) -> dict:
    """summarize() of `step` captured as one CUDA graph and replayed `replays` times under torch.profiler, with
    timed_us: the same graph's replay without the profiler (median of 20, per block). The graph is captured before
    the profiler starts; where the profiler then sees none of its kernels, it is captured again inside it."""
    import torch

    from qmatmul import timing

    step()
    torch.cuda.synchronize()
    graph, _ = timing.capture(step)
    graph.replay()
    torch.cuda.synchronize()
    ops = _replays_traced(graph, replays)
    if not ops:
        del graph
        ops = _replays_traced(None, replays, step)
        graph, _ = timing.capture(step)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    del graph
    return summarize(ops, replays, blocks) | dict(timed_us=statistics.median(times) / blocks)


def _replays_traced(graph, replays: int, step=None) -> list[tuple[str, float, float]]:
    """The GPU ops of `replays` replays of `graph` under torch.profiler (step given: the graph captured inside the
    profiler first), those after a marker kernel."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from qmatmul import timing

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if step is not None:
            graph, _ = timing.capture(step)
            graph.replay()
        torch.cuda.synchronize()
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        return after_marker(gpu_ops(json.loads(path.read_text())))


def trace_table(rows) -> list[str]:
    """The trace rows as a markdown table: the step without and with the profiler, GPU busy, gaps, ops a block."""
    rows = [r for r in rows if r.get("kind") == TRACE_KIND]
    if not rows:
        return []
    lines = [
        "| layout | M | path | µs a block (graph) | profiled span | GPU busy | gaps | ops | gap an op |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['layout']} | {r['M']} | {r['label']} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} ||||||")
            continue
        lines.append(f"{head} {r['timed_us']:.1f} | {r['span_us']:.1f} | {r['busy_us']:.1f} | "
                     f"{r['gap_us']:.1f} | {r['ops']} | {r['gap_us'] / r['ops']:.2f} |")  # fmt: skip
    return lines


def kernel_lines(row: dict) -> list[str]:
    """One block's ops of a trace row, in order: name, µs and the gap before it."""
    return [f"{k['name']}: {k['us']:.1f} µs" + (f" (gap {k['gap_us']:.1f})" if k["gap_us"] is not None else "")
            for k in row.get("kernels", [])]  # fmt: skip
