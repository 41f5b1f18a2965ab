"""A Llama-3-8B decode step's Linears on a CUDA GPU, every path, timed as a deployment runs them.

    python -m tools.decode_step [--blocks 4] [--ms 1,16] [--paths LABEL,...] [--layers] [--out DIR]

A decode step here is the seven Linears of `--blocks` Llama-3-8B transformer blocks (q, k, v, o, gate, up, down;
attention and activations left out), each block with weights of its own (together far larger than the L2), the
layers called one after another as a model calls them. Every path runs the same step two ways: captured once as a
CUDA graph and replayed (what a serving engine runs: the kernels' own time and the GPU's launch gaps) and eagerly,
Python wrappers included; both figures are labelled. "fused" runs q/k/v and gate/up as one Linear each over the
concatenated weights (N = 6144 and 28672), as serving engines do. Every path's output is checked against the
format's fp32 reference on every layer shape before it is timed; a path that fails is reported, not timed.

--layers adds each layer shape alone (graph-timed over rotating weight copies, % of the copy bandwidth measured in
the same run). Writes decode_step.json to --out and prints the tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# Llama-3-8B's Linears of one block (N, K) and the same block with q/k/v and gate/up fused.
BLOCK = {"q": (4096, 4096), "k": (1024, 4096), "v": (1024, 4096), "o": (4096, 4096),
         "gate": (14336, 4096), "up": (14336, 4096), "down": (4096, 14336)}  # fmt: skip
FUSED = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
LAYOUTS = {"7 Linears": BLOCK, "fused": FUSED}
# The activation each Linear reads: q, k and v read one (the attention's normed input), gate and up another; a path
# that prepares its input (FP8 quantizing x) does it once per activation, as a model would.
INPUT_OF = {"q": "attn", "k": "attn", "v": "attn", "qkv": "attn", "o": "o", "gate": "mlp", "up": "mlp",
            "gate_up": "mlp", "down": "down"}  # fmt: skip
# The learner's faster decodes, as the capstone's loader takes them (qmatmul/capstone/loader.py): FP8's exercise 6 and
# the layouts chapter's Gluon kernel on the weight repacked once.
FP8_FUSED_LABEL = "solution fp8_decode_fused (x quantized inside the kernel)"
QUANTIZE_ONCE_LABEL = "solution fp8_decode, x quantized once per activation by quantize_fp8"
ROWS_LABEL = "solution fp8_decode, x quantized once per activation by quantize_fp8_rows (exercise 7)"
MMA_SOLUTION_LABEL = "solution w4a16_mma_decode (layouts chapter, repacked at load)"
LLAMA_KIND = "llama3-8b block decode"
LAYER_KIND = "llama3-8b layer decode"
STEP_TIMING = (
    "graph: the whole step captured once as a CUDA graph, median of 20 replays; eager: the step called from "
    "Python, median of 20 calls, each synchronized; both per block"
)


@dataclass
class Path_:
    """One way to run a Linear: label (starting "solution", "expert", "torch" or "bf16"), the format whose bytes it
    reads, make(N, K, g) -> the layer's state (untimed: quantized weights, repacked once), call(x, state) -> y,
    reference(x, state) -> the fp32 reference or None (bf16 paths are their own reference), skip: why it cannot run
    here ("" when it can), prepare(x) -> what call takes as x (run once per activation of the step: INPUT_OF;
    None: x itself)."""

    label: str
    fmt: str
    make: object
    call: object
    reference: object = None
    skip: str = ""
    prepare: object = None

    def prepared(self, x):
        return x if self.prepare is None else self.prepare(x)


def layer_bytes(fmt: str, M: int, N: int, K: int) -> int:
    """The bytes a layer must move in a format at M rows (weights, scales, activations, output): the floor's
    numerator, from the chapters' own counts."""
    from qmatmul import fp8, mxfp4, nvfp4, w4a16, w8a16
    from qmatmul.teaching.roofline_model import bytes_moved_dense

    if fmt == "bf16":
        return bytes_moved_dense(M, N, K)
    return int(
        {"w8a16": w8a16, "fp8": fp8, "w4a16": w4a16, "mxfp4": mxfp4, "nvfp4": nvfp4}[fmt].bytes_moved(M, N, K)
    )


def paths(sol: dict, dtype, device: str = "cuda", with_skipped: bool = False) -> list[Path_]:
    """Every path the step is run with: bf16 cuBLAS, the chapters' solution kernels (sol: chapter -> module, the
    layouts chapter's too), the course's expert kernels and PyTorch's own quantized kernels, those that run on
    `device` (off a GPU: the solution kernels in the interpreter, which tests/test_sweep_candidates.py runs).
    with_skipped: the solution's faster decodes that cannot run here too, each with its `skip` reason."""
    from qmatmul import fp8, mxfp4, nvfp4, w4a16, w8a16
    from qmatmul.kernels import expert, mma_decode

    G = w4a16.BANDWIDTH_GROUP

    def fp8_x(x, sol_fp8):  # the activation quantized per row on every call, by the notebook's quantizer
        return sol_fp8.quantize_fp8(x, (1, x.shape[1]))

    def torch_fp8_x(x):  # the same in PyTorch ops (what a deployment without a fused kernel runs)
        sx = x.float().abs().amax(1, keepdim=True).clamp_min(1e-12) / 448.0
        return (x.float() / sx).to(torch.float8_e4m3fn), sx

    def dense(N, K, g):
        return (torch.randn(N, K, device=g.device, generator=g) * 0.02).to(dtype)

    out = [
        Path_(
            "bf16 cuBLAS (torch.nn.functional.linear)",
            "bf16",
            dense,
            lambda x, w: torch.nn.functional.linear(x, w),
        )
    ]
    if "w8a16" in sol:
        s = sol["w8a16"]
        out.append(Path_("solution w8a16_decode", "w8a16", w8a16.timing_weights, lambda x, w: s.w8a16_decode(x, *w),
                         lambda x, w: w8a16.reference(x, *w)))  # fmt: skip
    out.append(Path_("expert w8a16_decode_split", "w8a16", w8a16.timing_weights,
                     lambda x, w: expert.w8a16_decode_split(x, *w), lambda x, w: w8a16.reference(x, *w)))  # fmt: skip
    out.append(Path_("torch._weight_int8pack_mm", "w8a16",
                     lambda N, K, g: (lambda q, s: (q, s.to(dtype)))(*w8a16.timing_weights(N, K, g)),
                     lambda x, w: torch._weight_int8pack_mm(x, *w),
                     lambda x, w: w8a16.reference(x, w[0], w[1].float())))  # fmt: skip
    gpu = device == "cuda"
    fp8_dot = gpu and fp8.has_fp8_dot(device)
    if "fp8" in sol and (fp8_dot or not gpu):
        s8 = sol["fp8"]
        out.append(Path_("solution fp8_decode, x quantized by quantize_fp8 each call", "fp8", fp8.timing_weights,
                         lambda x, w: s8.fp8_decode(*fp8_x(x, s8), *w),
                         lambda x, w: fp8.reference(*fp8_x(x, s8), *w)))  # fmt: skip
        # x quantized once per activation (q/k/v share it, gate/up too): by quantize_fp8's PyTorch ops, and by
        # exercise 7's one-launch kernel
        for label, quantize in ((QUANTIZE_ONCE_LABEL, lambda x, s8=s8: fp8_x(x, s8)),
                                (ROWS_LABEL, lambda x, s8=s8: s8.quantize_fp8_rows(x))):  # fmt: skip
            out.append(Path_(label, "fp8", fp8.timing_weights, lambda xp, w: s8.fp8_decode(*xp, *w),
                             lambda x, w: fp8.reference(*fp8_x(x, s8), *w), prepare=quantize))  # fmt: skip
    # exercise 6: x quantized inside the decode kernel, one launch; on the fp8_decode row's path (FP8_DOT)
    f8 = sol.get("fp8")
    why = ("the fp8 solution notebook did not load" if f8 is None
           else "needs a GPU of sm_89 or newer (native fp8 tl.dot)" if gpu and not fp8_dot else "")  # fmt: skip
    out.append(Path_(FP8_FUSED_LABEL, "fp8", fp8.timing_weights, lambda x, w: f8.fp8_decode_fused(x, *w),
                     lambda x, w: fp8.reference(*fp8_x(x, f8), *w), skip=why))  # fmt: skip
    if fp8_dot:
        out.append(Path_("torch._scaled_mm rowwise, x quantized in torch ops", "fp8", fp8.timing_weights,
                         lambda x, w: fp8.scaled_mm(*torch_fp8_x(x), *w),
                         lambda x, w: fp8.reference(*torch_fp8_x(x), *w)))  # fmt: skip
    w4 = lambda N, K, g: w4a16.timing_weights(N, K, g)  # noqa: E731 - (packed, scales, zeros, G)
    if "w4a16" in sol:
        s4 = sol["w4a16"]
        out.append(Path_("solution w4a16_decode", "w4a16", w4, lambda x, w: s4.w4a16_decode(x, *w),
                         lambda x, w: w4a16.reference(x, *w)))  # fmt: skip

    def mma_path(label, repack, decode, skip=""):
        """W4A16 through a Gluon MMA decode, the weight repacked at load."""
        return Path_(label, "w4a16", lambda N, K, g: (lambda p, s, z, G: (p, s, z, G, repack(p)))(*w4(N, K, g)),
                     lambda x, w: decode(x, w[4], w[1], w[2], w[3], w[0].shape[0]),
                     lambda x, w: w4a16.reference(x, *w[:4]), skip=skip)  # fmt: skip

    mma_why = mma_decode.why_not(dtype, G, 4096) or ("" if gpu else "needs a CUDA GPU of sm_80 or newer")
    if not mma_why:
        out.append(
            mma_path(
                "expert w4a16 MMA decode (Gluon, repacked at load)", mma_decode.repack, mma_decode.decode
            )
        )
    s6 = sol.get("layouts")  # the learner's repack is host code: on a CPU copy
    out.append(mma_path(MMA_SOLUTION_LABEL, lambda p: s6.repack(p.cpu()).to(p.device),
                        lambda *a: s6.w4a16_mma_decode(*a),
                        "the layouts solution notebook did not load" if s6 is None else mma_why))  # fmt: skip
    if gpu and dtype == torch.bfloat16:
        out.append(Path_("torch._weight_int4pack_mm (tinygemm)", "w4a16",
                         lambda N, K, g: (lambda p, s, z, G: (p, s, z, G, w4a16.tinygemm_operands(p, s, z, G)))(*w4(N, K, g)),
                         lambda x, w: torch._weight_int4pack_mm(x, *w[4]),
                         lambda x, w: w4a16.reference(x, *w[:4])))  # fmt: skip
    for name, ch, block in (("mxfp4", mxfp4, 32), ("nvfp4", nvfp4, 16)):
        if name in sol:
            fn = getattr(sol[name], f"{name}_decode")
            out.append(Path_(f"solution {name}_decode", name, ch.timing_weights,
                             lambda x, w, fn=fn: fn(x, *w), lambda x, w, ch=ch: ch.reference(x, *w)))  # fmt: skip
        if gpu and not mma_decode.why_not_fp4(dtype, 4096):
            nv = name == "nvfp4"

            def make(N, K, g, ch=ch, block=block, nv=nv):
                w = ch.timing_weights(N, K, g)
                return (*w, mma_decode.repack_fp4(w[0], block), w[2] if nv else None)

            out.append(Path_(f"expert {name} MMA decode (Gluon, repacked at load)", name, make,
                             lambda x, w: mma_decode.decode_fp4(x, w[-2], w[1], w[-1], w[0].shape[0]),
                             lambda x, w, ch=ch: ch.reference(x, *w[:-2])))  # fmt: skip
    return out if with_skipped else [p for p in out if not p.skip]


def runnable_paths(sol: dict, dtype, wanted=(), device: str = "cuda") -> list[Path_]:
    """The paths main() times: paths() whose label holds one of `wanted` (all when empty) and that run here; a line
    for each skipped one says why."""
    every = paths(sol, dtype, device, with_skipped=True)
    picked = [p for p in every if not wanted or any(w in p.label for w in wanted)]
    for p in picked:
        if p.skip:
            print(f"skipped: {p.label}: {p.skip}")
    return [p for p in picked if not p.skip]


def check(path: Path_, layout: dict, M: int, dtype, g) -> str | None:
    """None when the path's output matches the reference on every layer shape of the layout (one layer each, fresh
    inputs), else what went wrong."""
    from qmatmul import checks
    from qmatmul.checks import CheckFailed

    if path.reference is None:
        return None
    for name, (N, K) in layout.items():
        state = path.make(N, K, g)
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        try:
            checks.compare(path.call(path.prepared(x), state).float(), path.reference(x, state).float(), what=f"{name} [{N}, {K}]",
                           rtol=4 * checks.tolerance_for(dtype))  # fmt: skip
        except CheckFailed as exc:
            return str(exc).splitlines()[0][:200]
        except Exception as exc:  # noqa: BLE001 - a path that cannot run is reported in its row
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return None


def step_fn(path: Path_, layout: dict, blocks: int, M: int, dtype, g, device: str = "cuda"):
    """The decode step: `blocks` blocks of the layout's layers, weights of their own, inputs fixed per K, each
    activation prepared once per block (INPUT_OF: FP8's quantization, shared by q, k and v)."""
    blocks_ = [
        [(INPUT_OF[name], K, path.make(N, K, g)) for name, (N, K) in layout.items()] for _ in range(blocks)
    ]
    xs = {K: torch.randn(M, K, device=device, generator=g).to(dtype) for K in {k for _, k in layout.values()}}

    def step():
        for layers in blocks_:
            ready = {}
            for key, K, state in layers:
                if key not in ready:
                    ready[key] = path.prepared(xs[K])
                path.call(ready[key], state)

    return step


def layer_rows(path: Path_, M: int, dtype, g, copy_bw: float) -> list[dict]:
    """Each Llama-3-8B layer shape alone, graph-timed over rotating copies (none from the L2): µs and % of copy."""
    from qmatmul import timing

    rows = []
    shapes = dict.fromkeys([*BLOCK.values(), *FUSED.values()])
    for N, K in shapes:
        nbytes = layer_bytes(path.fmt, M, N, K)
        states = [path.make(N, K, g) for _ in range(timing.copies_needed(nbytes))]
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        try:
            ms = timing.graph_ms([lambda s=s, x=x: path.call(path.prepared(x), s) for s in states])
        except Exception as exc:  # noqa: BLE001
            rows.append(
                dict(kind=LAYER_KIND, label=path.label, M=M, N=N, K=K, error=str(exc).splitlines()[0][:160])
            )
            continue
        rows.append(dict(kind=LAYER_KIND, label=path.label, M=M, N=N, K=K, us=ms * 1e3,
                         copy_frac=nbytes / (ms * 1e-3) / copy_bw, recheck=None))  # fmt: skip
        del states
    torch.cuda.empty_cache()
    return rows


def load_solutions() -> dict:
    """The chapters' solution notebooks as modules (chapter -> module; layouts: repack and w4a16_mma_decode); a
    chapter that does not load is left out."""
    from qmatmul import course

    sol = {}
    for ch in ("w8a16", "w4a16", "fp8", "mxfp4", "nvfp4", "layouts"):
        try:
            sol[ch] = course.load_notebook_code(ch, name=f"step_{ch}")
        except Exception as exc:  # noqa: BLE001 - a chapter whose solution does not load is reported
            print(f"{ch}: solution notebook did not load: {exc}")
    return sol


def step_rows(chosen: list[Path_], ms, blocks: int, dtype, copy_bw: float) -> list[dict]:
    """One row a path, layout and M: the step's µs per block graph-timed (`us`) and eager (`us_eager`), the byte
    floor at the copy bandwidth (`floor_us`), the speed-up over the bf16 row of the same layout and M."""
    from qmatmul import checks, timing

    rows = []
    g = checks.generator(0, "cuda")
    for layout_name, layout in LAYOUTS.items():
        for M in ms:
            for path in chosen:
                t0 = time.perf_counter()
                row = dict(
                    kind=LLAMA_KIND, layout=layout_name, label=path.label, fmt=path.fmt, M=M, blocks=blocks
                )
                why = check(path, layout, M, dtype, g)
                if why:
                    row["error"] = why
                else:
                    try:
                        graph_us, eager_us = timing.step_us(step_fn(path, layout, blocks, M, dtype, g))
                        floor = sum(layer_bytes(path.fmt, M, N, K) for N, K in layout.values()) / copy_bw
                        row |= dict(us=graph_us / blocks, us_eager=eager_us / blocks, floor_us=floor * 1e6)
                    except Exception as exc:  # noqa: BLE001 - a path that cannot be captured is reported
                        row["error"] = timing.reason(exc)
                    torch.cuda.empty_cache()
                rows.append(row)
                base = next((r for r in rows if r["layout"] == layout_name and r["M"] == M and r["fmt"] == "bf16"
                             and "us" in r), None)  # fmt: skip
                if "us" in row and base:
                    row["speedup"] = base["us"] / row["us"]
                    row["speedup_eager"] = base["us_eager"] / row["us_eager"]
                print(_line(row), f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return rows


def trace_rows(chosen: list[Path_], ms, blocks: int, dtype) -> list[dict]:
    """One row a path, layout and M: where the captured step's time goes (qmatmul/timing/trace.py), each output
    checked first."""
    from qmatmul import checks, timing
    from qmatmul.timing import trace as step_trace

    rows = []
    g = checks.generator(2, "cuda")
    for layout_name, layout in LAYOUTS.items():
        for M in ms:
            for path in chosen:
                row = dict(
                    kind=step_trace.TRACE_KIND, layout=layout_name, label=path.label, M=M, blocks=blocks
                )
                why = check(path, layout, M, dtype, g)
                try:
                    row |= (
                        {"error": why}
                        if why
                        else step_trace.trace(step_fn(path, layout, blocks, M, dtype, g), blocks)
                    )
                except Exception as exc:  # noqa: BLE001 - a path the profiler cannot trace is reported
                    row["error"] = timing.reason(exc)
                torch.cuda.empty_cache()
                rows.append(row)
                print(f"trace {layout_name:<10} M={M:<3} {path.label[:48]:<48} "
                      + (row["error"] if "error" in row else f"{row['timed_us']:.1f} µs a block, busy "
                         f"{row['busy_us']:.1f}, gaps {row['gap_us']:.1f} over {row['ops']} ops"), flush=True)  # fmt: skip
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--ms", default="1,16")
    parser.add_argument(
        "--paths", default="", help="only paths whose label contains one of these (comma-separated)"
    )
    parser.add_argument("--layers", action="store_true", help="also time each layer shape alone")
    parser.add_argument(
        "--trace", action="store_true", help="also trace each step's replays (qmatmul/timing/trace.py)"
    )
    parser.add_argument("--out", default="build/decode_step")
    parser.add_argument(
        "--merge", metavar="JSON", help="write a run's decode_step.json into JSON (docs/bench-h200.json)"
    )
    args = parser.parse_args(argv)
    if args.merge:
        run = json.loads((Path(args.out) / "decode_step.json").read_text())
        merge(Path(args.merge), run)
        return 0

    from qmatmul import checks, environment, timing

    env = environment.start()
    if not env.has_gpu:
        print("tools.decode_step needs a CUDA GPU: nothing measured.")
        return 1
    dtype = env.act_dtype
    sol = load_solutions()
    copy_bw = timing.copy_bandwidth()
    ms = [int(m) for m in args.ms.split(",")]
    wanted = [w for w in args.paths.split(",") if w]
    chosen = runnable_paths(sol, dtype, wanted)
    meta = dict(gpu=env.gpu_name, capability=env.capability, date=datetime.date.today().isoformat(),
                torch=torch.__version__, versions=env.versions, python=platform.python_version(),
                copy_TBps=copy_bw / 1e12, blocks=args.blocks, timing=STEP_TIMING)  # fmt: skip
    print(
        f"{env.gpu_name}: copy {copy_bw / 1e12:.2f} TB/s; {args.blocks} Llama-3-8B blocks a step, µs per block"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, layers, traces = step_rows(chosen, ms, args.blocks, dtype, copy_bw), [], []

    def save():  # after each part: a run cut by a time limit keeps what it measured
        (out / "decode_step.json").write_text(
            json.dumps(dict(meta=meta, rows=rows, layers=layers, traces=traces), indent=1) + "\n"
        )

    save()
    if args.layers:
        g = checks.generator(1, "cuda")
        for M in ms:
            for path in chosen:
                for r in layer_rows(path, M, dtype, g, copy_bw):
                    layers.append(r)
                    print(f"  layer {r['N']:>6} x {r['K']:<6} M={M:<3} {r['label'][:48]:<48} "
                          + (f"{r['us']:7.1f} µs {100 * r['copy_frac']:5.1f} % of copy" if "us" in r else r["error"]),
                          flush=True)  # fmt: skip
        save()
    if args.trace:
        traces = trace_rows(chosen, ms, args.blocks, dtype)
        save()
    print(f"wrote {out / 'decode_step.json'}")
    return 0


def merge(bench: Path, run: dict) -> None:
    """Put a run's step rows and layer rows into the benchmark's data file (docs/bench-h200.json), as
    tools.bench.merge_run does; the run's meta goes under meta["llama3-8b"]."""
    from qmatmul.timing.trace import TRACE_KIND
    from tools.bench import merge_run

    merge_run(bench, run["rows"] + run["layers"] + run.get("traces", []), run["meta"],
              {LLAMA_KIND, LAYER_KIND, TRACE_KIND}, "llama3-8b")  # fmt: skip


def step_table(rows) -> list[str]:
    """The decode step's rows as a markdown table (bench.md, docs)."""
    steps = [r for r in rows if r.get("kind") == LLAMA_KIND]
    if not steps:
        return []
    # by layout and M, bf16 first, then fastest first (the rows of several runs merged in one file)
    steps.sort(key=lambda r: (r["layout"] != "7 Linears", r["M"], not r["label"].startswith("bf16"),
                              r.get("us", float("inf"))))  # fmt: skip
    lines = [f"{LLAMA_KIND}: µs per block ({STEP_TIMING}); floor: the bytes at the copy bandwidth", "",
             "| layout | M | path | µs graph | µs eager | floor µs | × bf16 graph | × bf16 eager |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in steps:
        if "error" in r:
            lines.append(f"| {r['layout']} | {r['M']} | {r['label']} | {r['error']} |||||")
            continue
        sp = f"{r['speedup']:.2f} | {r['speedup_eager']:.2f}" if "speedup" in r else "— | —"
        lines.append(f"| {r['layout']} | {r['M']} | {r['label']} | {r['us']:.1f} | {r['us_eager']:.1f} | "
                     f"{r['floor_us']:.1f} | {sp} |")  # fmt: skip
    return lines


def layer_table(rows) -> list[str]:
    """Each layer shape alone (rows of LAYER_KIND): µs and % of the copy bandwidth at M = 1 / 16, a column a path."""
    layers = [r for r in rows if r.get("kind") == LAYER_KIND and "us" in r]
    labels = list(dict.fromkeys(r["label"] for r in layers))
    shapes = list(dict.fromkeys((r["N"], r["K"]) for r in layers))
    at = {(r["label"], r["N"], r["K"], r["M"]): r for r in layers}
    lines = ["| N × K | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for N, K in shapes:
        cells = []
        for label in labels:
            one, sixteen = at.get((label, N, K, 1)), at.get((label, N, K, 16))
            cells.append(" / ".join(f"{r['us']:.1f} µs {100 * r['copy_frac']:.0f} %" if r else "—"
                                    for r in (one, sixteen)))  # fmt: skip
        lines.append(f"| {N} × {K} | " + " | ".join(cells) + " |")
    return lines


def _line(r: dict) -> str:
    head = f"{r['layout']:<10} M={r['M']:<3} {r['label'][:58]:<58}"
    if "error" in r:
        return f"{head} {r['error']}"
    sp = f"{r['speedup']:5.2f}x" if "speedup" in r else "     "
    return f"{head} graph {r['us']:7.1f} eager {r['us_eager']:7.1f} floor {r['floor_us']:5.1f} {sp}"


if __name__ == "__main__":
    raise SystemExit(main())
