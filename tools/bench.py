"""The course's benchmark on a CUDA GPU: solution kernels beside PyTorch's paths, in one process.

    python -m tools.bench [--quick] [--sweep] [--out DIR] [CHAPTER ...]
    python -m tools.bench --merge docs/bench-h200.json [--out DIR]    a run of some chapters into the data file

Decode (M = 1, 4, 16) and prefill (M = 2048, 4096) on Llama-sized weights. Every row is timed two ways: under
CUDA-graph replay of back-to-back calls that alternate between copies of the weights, together more than three
L2s (qmatmul.timing.graph_ms: the kernel's own time), and eagerly with do_bench around the Python call (what one
call costs without graphs). Bandwidth counts the bytes that must move; the copy bandwidth and the cuBLAS rate are
measured in the same run. Every timed solution kernel is checked again on fresh inputs after timing. gemlite
(pure Triton) is timed as a peer where it imports; the table says when it is missing. Writes bench.json and
bench.md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one decode shape, one prefill M")
    parser.add_argument(
        "--sweep", action="store_true", help="also sweep the W8A16 decode kernel's tile sizes"
    )
    parser.add_argument(
        "--sweep-prefill", action="store_true", help="also sweep the W8A16 tiled kernel's tiles"
    )
    parser.add_argument(
        "--llama",
        action="store_true",
        help="also time a Llama-3-8B decode step through every path (tools/decode_step.py; on by default in a full run)",
    )
    parser.add_argument("--out", default="build/bench")
    parser.add_argument(
        "--merge",
        metavar="JSON",
        help="write the rows of --out's bench.json into JSON (docs/bench-h200.json)",
    )
    parser.add_argument("chapters", nargs="*", help="default: every chapter in tools/benchmarks.py")
    args = parser.parse_args(argv)
    if args.merge:
        run = json.loads((Path(args.out) / "bench.json").read_text())
        merge_run(Path(args.merge), run["rows"], run["meta"], {r["kind"] for r in run["rows"]})
        return 0

    import torch

    from qmatmul import checks, course, environment, timing, w8a16

    env = environment.start()
    if not env.has_gpu:
        print("make bench needs a CUDA GPU: nothing measured.")
        return 1
    from tools import benchmarks  # imports the kernels, so after environment.start()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = env.act_dtype
    copy_bw = timing.copy_bandwidth()
    cublas = timing.matmul_flops(dtype=dtype)
    meta = {
        "gpu": env.gpu_name,
        "capability": env.capability,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "versions": env.versions,
        "python": platform.python_version(),
        "copy_TBps": copy_bw / 1e12,
        "cublas_TFLOPs_8192": cublas / 1e12,
        "timing": "graph: CUDA-graph replay over rotating weight copies (together > 3 L2s); eager: do_bench "
        "around the Python call, L2 flushed",
        "gemlite": gemlite_status(),
    }
    print(f"copy {copy_bw / 1e12:.2f} TB/s · cuBLAS {str(dtype)[6:]} 8192^3 {cublas / 1e12:.0f} TFLOP/s")
    rows = []
    g = checks.generator(0, "cuda")

    def record(kind, label, M, N, K, fn, nbytes, check=None):
        """Time fn two ways (fn: one function, or a list of them, one per copy of the weights): under CUDA-graph
        replay over the copies (the kernel's time: `us`, `copy_frac`, ...) and eagerly with do_bench around the
        Python call (`us_eager`, `copy_frac_eager`: what a call costs without graphs). check() runs after both."""
        if fn is None:  # a peer that is missing here: the row says why
            rows.append(dict(kind=kind, label=label, M=M, N=N, K=K, error="not available here"))
            print(f"{kind:14}{label:<40}{M:>6}{N:>7}{K:>7}  not available here")
            return
        try:
            t = timing.time_two_ways(fn)
        except Exception as exc:  # noqa: BLE001 - a path PyTorch lacks on this GPU is reported, not fatal
            rows.append(
                dict(kind=kind, label=label, M=M, N=N, K=K, error=f"{type(exc).__name__}: {exc}"[:160])
            )
            print(f"{kind:14}{label:<40}{M:>6}{N:>7}{K:>7}  unavailable: {type(exc).__name__}")
            return
        ok = None
        if check is not None:
            ok = check()
        copies = len(fn) if isinstance(fn, (list, tuple)) else 1
        row = dict(kind=kind, label=label, M=M, N=N, K=K, weight_copies=copies)
        for suffix, ms in (("", t.graph_ms), ("_eager", t.eager_ms)):
            if ms is None:
                continue
            tb = nbytes / (ms * 1e-3) / 1e12
            tf = 2 * M * N * K / (ms * 1e-3) / 1e12
            row.update({f"us{suffix}": ms * 1e3, f"TBps{suffix}": tb, f"copy_frac{suffix}": tb * 1e12 / copy_bw,
                        f"TFLOPs{suffix}": tf, f"cublas_frac{suffix}": tf * 1e12 / cublas})  # fmt: skip
        if t.graph_error:
            row["graph_error"] = t.graph_error
        if t.eager_error:
            row["eager_error"] = t.eager_error
        row["recheck"] = ok
        rows.append(row)
        flag = "" if ok in (None, True) else "  WRONG AFTER TIMING"

        def cell(suffix):
            if f"us{suffix}" not in row:
                return f"{'—':>10} µs {'':>4}  "
            return f"{row[f'us{suffix}']:>10.1f} µs {100 * row[f'copy_frac{suffix}']:>4.0f} %"

        print(f"{kind:14}{label:<40}{M:>6}{N:>7}{K:>7}{cell('')}{cell('_eager')}"
              f"{row.get('TFLOPs', row.get('TFLOPs_eager', 0)):>8.1f} TFLOP/s{flag}")  # fmt: skip

    chapters = args.chapters or [a for a in course_assignments() if a in benchmarks.BENCHMARKS]
    for chapter in chapters:
        sol = course.load_notebook_code(chapter, name=f"bench_{chapter}")
        print(f"\n{chapter}\n{'':14}{'':<40}{'M':>6}{'N':>7}{'K':>7}{'graph':>18}{'eager':>18}")

        def chapter_record(kind, label, M, N, K, fn, nbytes, check=None, chapter=chapter):
            record(f"{chapter} {kind}", label, M, N, K, fn, nbytes, check)

        try:
            benchmarks.BENCHMARKS[chapter](sol, chapter_record, env, quick=args.quick)
        except Exception as exc:  # noqa: BLE001 - one chapter's failure must not lose the others' rows
            import traceback

            traceback.print_exc()
            rows.append(dict(kind=f"{chapter}", label="benchmark() failed", M=0, N=0, K=0,
                             error=f"{type(exc).__name__}: {exc}"[:160]))  # fmt: skip
        save(out_dir, meta, rows)  # after every chapter: a run cut short keeps what it measured

    sweep = []
    if args.sweep:
        sweep = decode_sweep(
            course.load_notebook_code("w8a16", name="sweep_w8a16"), w8a16, timing, dtype, copy_bw, g
        )
    if args.sweep_prefill:
        sweep += prefill_sweep(
            course.load_notebook_code("w8a16", name="sweep_w8a16p"), w8a16, timing, dtype, cublas, g
        )
    if args.llama or not (args.chapters or args.quick):
        from tools import decode_step

        print(f"\n{decode_step.LLAMA_KIND} ({decode_step.STEP_TIMING})")
        chosen = decode_step.runnable_paths(decode_step.load_solutions(), dtype)
        rows += decode_step.step_rows(chosen, (1, 16), 4, dtype, copy_bw)
        rows += decode_step.trace_rows(chosen, (1,), 4, dtype)  # where each step's time goes (M = 1)
    save(out_dir, meta, rows, sweep)
    print(f"\nwrote {out_dir}/bench.json and bench.md")
    return 0


def gemlite_status() -> str:
    """Which gemlite the peer rows use, or that it is missing (the W4A16 and W8A16 tables then say so)."""
    try:
        import gemlite
    except Exception as exc:  # noqa: BLE001 - optional
        return (
            f"gemlite (optional peer) not installed here: {type(exc).__name__}; its rows are marked missing."
        )
    return (f"gemlite {gemlite.__version__} (optional peer, pure Triton): its H100 launch configs, autotuning off, "
            "its own packing made once before timing.")  # fmt: skip


def save(out_dir, meta, rows, sweep=()) -> None:
    (out_dir / "bench.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "sweep": list(sweep)}, indent=1, default=str)
    )
    (out_dir / "bench.md").write_text(markdown(meta, rows))


def course_assignments() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


def decode_sweep(sol, w8a16, timing, dtype, copy_bw, g):
    """Time the readable decode kernel over tile sizes, to choose w8a16.decode_config."""
    import itertools

    import torch

    results = []
    original = w8a16.decode_config
    for N, K in [(28672, 8192), (8192, 28672), (8192, 8192)]:
        q = torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=g)
        s = torch.rand(N, device="cuda", generator=g) * 1e-3
        for M in (1, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            for bn, bk, nw, ns in itertools.product((32, 64, 128), (128, 256, 512), (4, 8), (3, 4, 5)):
                cfg = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
                w8a16.decode_config = lambda *a, cfg=cfg, **k: cfg
                try:
                    ms = timing.median_ms(lambda x=x, q=q, s=s: sol.w8a16_decode(x, q, s), rep_ms=40)
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(N=N, K=K, M=M, cfg=cfg, error=str(exc)[:80]))
                    continue
                frac = w8a16.bytes_moved(M, N, K) / (ms * 1e-3) / copy_bw
                results.append(dict(N=N, K=K, M=M, cfg=cfg, us=ms * 1e3, copy_frac=frac))
            best = max((r for r in results if r.get("N") == N and r.get("M") == M and "us" in r),
                       key=lambda r: r["copy_frac"])  # fmt: skip
            print(f"sweep N={N} K={K} M={M}: best {best['cfg']} -> {100 * best['copy_frac']:.0f} % of copy")
    w8a16.decode_config = original
    return results


def prefill_sweep(sol, w8a16, timing, dtype, cublas, g):
    """Time the readable tiled kernel over tile sizes at prefill, to choose w8a16.prefill_config."""
    import itertools

    import torch

    results = []
    original = w8a16.prefill_config
    N = K = 8192
    q = torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=g)
    s = torch.rand(N, device="cuda", generator=g) * 1e-3
    for M in (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        for bm, bn, bk, nw, ns in itertools.product((128,), (128, 256), (64, 128), (4, 8), (3, 4, 5)):
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
            w8a16.prefill_config = lambda *a, cfg=cfg, **k: cfg
            try:
                ms = timing.median_ms(lambda x=x: sol.w8a16_matmul(x, q, s), rep_ms=50)
            except Exception as exc:  # noqa: BLE001 - too much shared memory, say
                results.append(dict(kind="prefill", M=M, N=N, K=K, cfg=cfg, error=str(exc)[:80]))
                continue
            frac = 2 * M * N * K / (ms * 1e-3) / cublas
            results.append(dict(kind="prefill", M=M, N=N, K=K, cfg=cfg, us=ms * 1e3, cublas_frac=frac))
        best = max((r for r in results if r["M"] == M and "us" in r), key=lambda r: r["cublas_frac"])
        print(f"prefill sweep M={M}: best {best['cfg']} -> {100 * best['cublas_frac']:.0f} % of cuBLAS")
    w8a16.prefill_config = original
    return results


def markdown(meta, rows) -> str:
    lines = [
        f"# Benchmark: {meta['gpu']}",
        "",
        f"{meta['date']} · torch {meta['torch']} · triton {meta['versions']['triton']} · "
        f"copy {meta['copy_TBps']:.2f} TB/s · cuBLAS 8192³ {meta['cublas_TFLOPs_8192']:.0f} TFLOP/s (same run)",
        "",
        "Each row is timed two ways. **graph**: CUDA-graph replay of back-to-back calls alternating between "
        "copies of the weights (together more than three L2s, so nothing is served from the L2): the kernel's "
        "own time. **eager**: `triton.testing.do_bench` around the Python call (L2 flushed): what one call costs "
        "without graphs, the wrapper's host time included when the kernel is short. % copy: the bytes that must "
        "move over the time, against the copy bandwidth; % cuBLAS: FLOPs against cuBLAS's 8192³ rate. "
        "rechecked: the solution, run on fresh inputs after its timing, still matches the fp32 reference.",
        "",
        f"{meta.get('gemlite', '')}",
        "",
    ]
    from qmatmul.timing.trace import trace_table
    from tools.decode_step import step_table

    return "\n".join(lines + table(rows) + [""] + step_table(rows) + [""] + trace_table(rows)) + "\n"


def table(rows) -> list[str]:
    """The full table of rows, one line each (bench.md, and docs/benchmark-h200.md through tools/figures.py)."""
    lines = [
        "| kind | path | M | N | K | µs graph | % copy graph | µs eager | % copy eager | TFLOP/s graph "
        "| % cuBLAS graph | rechecked |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(r, key, scale=1.0, fmt=".1f"):
        return "—" if key not in r else format(r[key] * scale, fmt)

    for r in rows:
        if "N" not in r:  # the decode step's rows: their own table (tools/decode_step.step_table)
            continue
        if "error" in r:
            lines.append(
                f"| {r['kind']} | {r['label']} | {r['M']} | {r['N']} | {r['K']} | {r['error']} ||||||"
            )
            continue
        ok = {None: "", True: "yes", False: "**WRONG**"}[r["recheck"]]
        note = f" ({r['graph_error']})" if "graph_error" in r else ""
        lines.append(
            f"| {r['kind']} | {r['label']}{note} | {r['M']} | {r['N']} | {r['K']} | {f(r, 'us')} | "
            f"{f(r, 'copy_frac', 100, '.0f')} | {f(r, 'us_eager')} | {f(r, 'copy_frac_eager', 100, '.0f')} | "
            f"{f(r, 'TFLOPs')} | {f(r, 'cublas_frac', 100, '.0f')} | {ok} |"
        )
    return lines


def merge_run(
    bench: Path, rows: list[dict], meta: dict, kinds: set[str], meta_key: str = "bench runs"
) -> None:
    """Put a run's rows of `kinds` into the benchmark's data file (docs/bench-h200.json): each replaces the row of
    the same kind, label, layout, M, N and K it held (a run of some paths keeps the others' rows), dated; the run's
    meta goes under meta[meta_key] (a list, one entry a run that the file's rows still come from). The same GPU's
    runs only: the caller checks meta["gpu"]."""
    data = json.loads(bench.read_text())
    if meta.get("gpu") != data["meta"].get("gpu"):
        raise SystemExit(f"{bench} holds {data['meta'].get('gpu')} rows; this run is of {meta.get('gpu')}")

    def key(r):
        return (r["kind"], r["label"], r["M"], r.get("layout"), r.get("N"), r.get("K"))

    new = [dict(r, date=meta["date"]) for r in rows if r.get("kind") in kinds]
    replaced = {key(r) for r in new}
    data["rows"] = [r for r in data["rows"] if r.get("kind") not in kinds or key(r) not in replaced] + new
    runs = [
        m for m in data["meta"].get(meta_key, []) if any(r.get("date") == m["date"] for r in data["rows"])
    ]
    data["meta"][meta_key] = [*runs, meta]
    bench.write_text(json.dumps(data, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
