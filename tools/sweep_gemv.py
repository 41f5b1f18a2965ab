"""Which W8A16 and FP8 decode kernel designs read a Llama-3-8B block's layers near the copy bandwidth? (CUDA GPU)

    python -m tools.sweep_gemv [--formats w8a16,fp8] [--ms 1,16] [--designs swap,fma,xfirst] [--out DIR] [--budget-s 500]

The chapter's decode (`x @ q` with x as tl.dot's first operand: [16, BLOCK_K] x [BLOCK_K, BLOCK_N]) reads 11-54 % of
copy on the 8B model's 1024- and 4096-column layers whatever its launch (docs/decode-step-h200.md). Two other
designs are tried here at every layer shape of tools/decode_step.py, graph-timed over rotating weight copies (none
served from the L2), every output checked against `w8a16.reference` first:

- **swap**: the weight tile first, `acc[BLOCK_N, BLOCK_M] = q [BLOCK_N, BLOCK_K] @ x^T [BLOCK_K, BLOCK_M]` (the tensor
  cores' wide side on the weight's columns, the 16 padded rows of x on the narrow side), K split over SPLIT_K programs
  a strip (`splitk.finish` adds the parts in the same launch);
- **fma**: M = 1 on the CUDA cores: `acc[BLOCK_N, BLOCK_K] += q * x`, summed once after the loop, K split alike;
- **xfirst**: the chapter's kernel as it is (x first) with K split 1-8 (the expert split decode's kernel, whose own
  launch is tuned on the 70B layers only);
- FP8 (`--formats fp8`): the chapter's decode against **swap** on e4m3 codes (the native fp8 tensor-core product with
  the weight first; x quantized per row in PyTorch ops before timing).

Compiled for sm_90 here (triton 3.9, tools.sass's reading), the main loops issue per weight a thread handles: swap
6.3-7.0 instructions (PRMT shuffles of the converted int8 tile into wgmma's register layout; 128-column tiles spill),
fma 3.3-3.4, the chapter's decode 3.8-4.9 (mma.sync with x first); FP8 swap 0.5-0.7 (QGMMA, no conversion), FP8's
chapter decode 1.9-3.0 (F2FP to fp16 for mma.sync). An int8 weight's budget at the copy bandwidth is about 8: none is
bound by its instructions, so the sweep measures what the layers' size leaves: latency and programs.

Also timed: the chapter's solution, the expert split decode, bf16 cuBLAS, and an empty kernel (the launch floor under
graph replay). Writes gemv.json to --out after every shape (a cut run keeps what it measured).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from qmatmul.kernels import splitk


@triton.jit
def _swap_kernel(
    x_ptr, sx_ptr, w_ptr, s_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN: tl.constexpr, FP8: tl.constexpr,
):  # fmt: skip
    """The weight tile first: acc[BLOCK_N, BLOCK_M] = w @ x^T over program pid_k's slice of K. W8A16: w int8, x 16-bit,
    scales s [N] (sx unused); FP8: w and x e4m3 codes as uint8 (the native fp8 product), scales s [N] and sx [M]."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    lo, hi = splitk.k_slice(K, BLOCK_K, SPLIT_K, pid_k)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        k = k0 + offs_k
        if EVEN:
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :] * stride_wk)
            x = tl.load(x_ptr + offs_m[None, :] * stride_xm + k[:, None] * stride_xk,
                        mask=offs_m[None, :] < M, other=0)  # fmt: skip
        else:
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :] * stride_wk,
                        mask=(offs_n[:, None] < N) & (k[None, :] < hi), other=0)  # fmt: skip
            x = tl.load(x_ptr + offs_m[None, :] * stride_xm + k[:, None] * stride_xk,
                        mask=(offs_m[None, :] < M) & (k[:, None] < hi), other=0)  # fmt: skip
        if FP8:
            acc = tl.dot(w.to(tl.float8e4nv, bitcast=True), x.to(tl.float8e4nv, bitcast=True), acc)
        else:
            acc = tl.dot(w.to(x.dtype), x, acc)
    n_ok = offs_n < N
    acc = acc * tl.load(s_ptr + offs_n, mask=n_ok, other=0.0)[:, None]
    if FP8:
        acc = acc * tl.load(sx_ptr + offs_m, mask=offs_m < M, other=0.0)[None, :]
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m < M)[:, None] & n_ok[None, :]
    splitk.finish(tl.trans(acc), y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)


@triton.jit
def _fma_kernel(
    x_ptr, sx_ptr, w_ptr, s_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN: tl.constexpr, FP8: tl.constexpr,
):  # fmt: skip
    """W8A16 at M = 1 (BLOCK_M = 1) on the CUDA cores: acc[BLOCK_N, BLOCK_K] += w * x, one sum after the loop."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    lo, hi = splitk.k_slice(K, BLOCK_K, SPLIT_K, pid_k)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        k = k0 + offs_k
        if EVEN:
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :] * stride_wk)
            x = tl.load(x_ptr + k * stride_xk)
        else:
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :] * stride_wk,
                        mask=(offs_n[:, None] < N) & (k[None, :] < hi), other=0)  # fmt: skip
            x = tl.load(x_ptr + k * stride_xk, mask=k < hi, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    n_ok = offs_n < N
    row = tl.sum(acc, axis=1) * tl.load(s_ptr + offs_n, mask=n_ok, other=0.0)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m < M)[:, None] & n_ok[None, :]
    splitk.finish(row[None, :], y, y_mask, part_ptr, offs_m, offs_n, N, count_ptr, pid_n, pid_k, SPLIT_K)


@triton.jit
def _noop(y_ptr):
    tl.store(y_ptr, 0.0)


KERNELS = {"swap": _swap_kernel, "fma": _fma_kernel, "fp8": _swap_kernel}


def launch(design: str, x, w, s, out, cand: dict, sx=None):
    """One design's decode of x [M, K] by the weight w [N, K] with per-column scales s [N] into out [M, N]: "swap" and
    "fma" W8A16 (w int8), "fp8" FP8 (x and w e4m3, x's row scales sx [M])."""
    M, K = x.shape
    N = w.shape[0]
    c = dict(cand)
    split = c.pop("SPLIT_K")
    rows = 1 if design == "fma" else 16
    n_blocks = triton.cdiv(N, c["BLOCK_N"])
    even = N % c["BLOCK_N"] == 0 and K % (c["BLOCK_K"] * split) == 0
    part, count = splitk.scratch(out.device, split, N, n_blocks, rows=rows)
    fp8 = design == "fp8"
    if fp8:
        x, w, sx = x.view(torch.uint8), w.view(torch.uint8), sx.reshape(-1)
    KERNELS[design][(n_blocks, split)](
        x, sx if fp8 else s, w, s.reshape(-1), out, part, count, M, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=rows, SPLIT_K=split, EVEN=even, FP8=fp8, **c,
    )  # fmt: skip
    return out


def fp8_xfirst(sol, cand: dict, xq, sx, state, out):
    """FP8's exercise 4 solution (x first, K split) launched with `cand` (its fp8 tl.dot path)."""
    from tools.sweep_layers import launched_with

    cfg = {k: v for k, v in cand.items() if k != "SPLIT_K"}
    with launched_with("fp8", dict(BLOCK_M=16, FP8_DOT=True, **cfg, split=cand["SPLIT_K"])):
        return sol.fp8_decode(xq, sx, *state, out=out)


def candidates(design: str) -> list[dict]:
    """The launches tried: `swap` (W8A16), `fp8` (FP8's swap: a byte an element, so longer K steps), `fma`, `xfirst`
    (the chapter's kernel, x first, with K split: the expert split decode's kernel on other launches)."""
    if design == "xfirst":
        return [dict(BLOCK_N=n, BLOCK_K=k, SPLIT_K=sp, num_warps=4, num_stages=4)
                for n, k, sp in itertools.product((32, 64), (256, 512), (1, 2, 4, 8))]  # fmt: skip
    if design in ("swap", "fp8"):
        ks = (128, 256, 512) if design == "swap" else (256, 512, 1024)
        return [dict(BLOCK_N=n, BLOCK_K=k, SPLIT_K=sp, num_warps=4, num_stages=3)
                for n, k, sp in itertools.product((64, 128), ks, (1, 2, 4, 8)) if n * k <= 65536]  # fmt: skip
    return [dict(BLOCK_N=n, BLOCK_K=k, SPLIT_K=sp, num_warps=8 if n * k >= 16384 else 4, num_stages=3)
            for n, k, sp in itertools.product((8, 16, 32), (512, 1024), (1, 2, 4, 8)) if n * k <= 16384]  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ms", default="1,16")
    parser.add_argument("--designs", default="swap,fma,xfirst")
    parser.add_argument("--formats", default="w8a16,fp8")
    parser.add_argument("--shapes", default="")
    parser.add_argument("--out", default="build/sweep_gemv")
    parser.add_argument("--budget-s", type=float, default=1e9)
    args = parser.parse_args(argv)

    from qmatmul import checks, course, environment, fp8, timing, w8a16
    from qmatmul.kernels import expert
    from tools.decode_step import BLOCK, FUSED, layer_bytes

    t0 = time.time()
    env = environment.start()
    dev = "cuda" if env.has_gpu else "cpu"
    dtype = env.act_dtype if env.has_gpu else torch.float16
    # the shortest of work first (a cut run keeps those)
    shapes = sorted(dict.fromkeys([*BLOCK.values(), *FUSED.values()]), key=lambda s: s[0] * s[1])
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    sol = {f: course.load_notebook_code(f, name=f"sweep_gemv_{f}") for f in args.formats.split(",")}
    copy_bw = timing.copy_bandwidth() if env.has_gpu else 1.0
    result = dict(meta=dict(gpu=env.gpu_name, torch=torch.__version__, triton=triton.__version__,
                            copy_TBps=copy_bw / 1e12), results=[])  # fmt: skip
    if env.has_gpu:
        y0 = torch.zeros(1, device=dev)
        result["meta"]["noop_us"] = 1e3 * timing.graph_ms([lambda: _noop[(1,)](y0)], target_ms=0.5)
        print(f"empty kernel under graph replay: {result['meta']['noop_us']:.2f} µs", flush=True)
    g = checks.generator(0, dev)

    def fp8_x(x):
        sx = x.float().abs().amax(1).clamp_min(1e-12) / 448.0
        return (x.float() / sx[:, None]).to(fp8.E4M3), sx

    for fmt in args.formats.split(","):
        make = w8a16.timing_weights if fmt == "w8a16" else fp8.timing_weights
        for N, K in shapes:
            copies = timing.copies_needed(layer_bytes(fmt, 1, N, K)) if env.has_gpu else 1
            states = [make(N, K, g) for _ in range(copies)]
            dense = [(torch.randn(N, K, device=dev, generator=g) * 0.02).to(dtype)
                     for _ in range(2 if env.has_gpu else 1)]  # fmt: skip
            for M in (int(m) for m in args.ms.split(",")):
                x = torch.randn(M, K, device=dev, generator=g).to(dtype)
                outs = [torch.empty(M, N, device=dev, dtype=dtype) for _ in states]
                if fmt == "w8a16":
                    want = w8a16.reference(x, *states[0]).float()
                    tries = [("solution", {}, lambda st, o, x=x: sol["w8a16"].w8a16_decode(x, *st, out=o)),
                             ("expert split", {}, lambda st, o, x=x: expert.w8a16_decode_split(x, *st, out=o))]  # fmt: skip
                    for design in args.designs.split(","):
                        if design == "fma" and M > 1:
                            continue
                        if design == "xfirst":
                            tries += [(design, c, lambda st, o, c=c, x=x: expert.w8a16_decode_split(x, *st, out=o, **c))
                                      for c in candidates(design)]  # fmt: skip
                            continue
                        tries += [(design, c, lambda st, o, d=design, c=c, x=x: launch(d, x, *st, o, c))
                                  for c in candidates(design)]  # fmt: skip
                else:
                    xq, sx = fp8_x(x)
                    want = fp8.reference(xq, sx, *states[0]).float()
                    tries = [
                        (
                            "solution",
                            {},
                            lambda st, o, xq=xq, sx=sx: sol["fp8"].fp8_decode(xq, sx, *st, out=o),
                        )
                    ]
                    tries += [
                        ("swap", c, lambda st, o, c=c, xq=xq, sx=sx: launch("fp8", xq, *st, o, c, sx=sx))
                        for c in candidates("swap")
                    ]
                    # exercise 4's kernel (x first, K split) on each launch
                    if "xfirst" in args.designs.split(","):
                        tries += [("xfirst", c, lambda st, o, c=c, xq=xq, sx=sx: fp8_xfirst(sol["fp8"], c, xq, sx, st, o))
                                  for c in candidates("xfirst")]  # fmt: skip
                rows = []
                for name, cand, fn in tries:
                    if time.time() - t0 > args.budget_s:
                        break
                    try:
                        checks.compare(fn(states[0], outs[0]).float(), want, what="out",
                                       rtol=4 * checks.tolerance_for(dtype))  # fmt: skip
                        if not env.has_gpu:
                            rows.append(dict(design=name, cand=cand, ok=True))
                            continue
                        t = timing.graph_ms(
                            [lambda s=s, o=o, fn=fn: fn(s, o) for s, o in zip(states, outs, strict=True)],
                            target_ms=0.5,
                        )
                    except Exception as exc:  # noqa: BLE001 - a candidate that fails is listed, not timed
                        rows.append(
                            dict(
                                design=name,
                                cand=cand,
                                error=(str(exc).splitlines() or [type(exc).__name__])[0][:160],
                            )
                        )
                        continue
                    nb = layer_bytes(fmt, M, N, K)
                    rows.append(dict(design=name, cand=cand, us=t * 1e3, copy_frac=nb / (t * 1e-3) / copy_bw))
                if env.has_gpu:
                    t = timing.graph_ms(
                        [lambda w=w, x=x: torch.nn.functional.linear(x, w) for w in dense], target_ms=0.5
                    )
                    rows.append(dict(design="bf16 cuBLAS", cand={}, us=t * 1e3,
                                     copy_frac=layer_bytes("bf16", M, N, K) / (t * 1e-3) / copy_bw))  # fmt: skip
                rows.sort(key=lambda r: r.get("us", 1e9))
                result["results"].append(dict(format=fmt, N=N, K=K, M=M, rows=rows))
                fastest = best_rows(result["results"][-1:])
                for design in ("solution", "expert split", "bf16 cuBLAS", *args.designs.split(",")):
                    best = fastest.get((fmt, M, N, K, design))
                    if best:
                        print(f"{fmt} {N}x{K} M={M} {design}: {best['us']:.1f} µs {100 * best['copy_frac']:.0f} % "
                              f"{best['cand']}", flush=True)  # fmt: skip
                bad = [r for r in rows if "error" in r]
                if bad:
                    print(f"{fmt} {N}x{K} M={M}: {len(bad)} failed, e.g. {bad[0]}", flush=True)
                (out_dir / "gemv.json").write_text(json.dumps(result) + "\n")
            del states, dense
            if env.has_gpu:
                torch.cuda.empty_cache()
    for line in [*table(result["results"]), *step_estimates(result["results"])]:
        print(line, flush=True)
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return 0


def best_rows(results: list[dict]) -> dict:
    """(format, M, N, K, design) -> that design's fastest timed row at that shape, in the order the designs first
    appear (the one rule the run's lines, the table and the step estimates read)."""
    best = {}
    for r in results:
        for row in r["rows"]:
            key = (r["format"], r["M"], r["N"], r["K"], row["design"])
            if "us" in row and (key not in best or row["us"] < best[key]["us"]):
                best[key] = row
    return best


def table(results: list[dict]) -> list[str]:
    """Markdown: each layer shape and M, each design's best launch (µs, % of copy, the launch)."""
    lines = ["| format | N × K | M | design | µs | % of copy | launch |", "|---|---|---|---|---|---|---|"]
    for (fmt, M, N, K, design), row in best_rows(results).items():
        launch = " ".join(f"{k}={v}" for k, v in row["cand"].items())
        lines.append(f"| {fmt} | {N} × {K} | {M} | {design} | {row['us']:.1f} | {100 * row['copy_frac']:.0f} | "
                     f"{launch} |")  # fmt: skip
    return lines


def step_estimates(results: list[dict]) -> list[str]:
    """A block's step from its layers alone (the graph-timed step is their sum within a few %: docs/decode-step-h200.md):
    per format, M, layout and design, the best launch of each layer summed, and × bf16 (cuBLAS, same layers)."""
    from tools.decode_step import LAYOUTS

    best = {key: row["us"] for key, row in best_rows(results).items()}
    lines = []
    for fmt, M in sorted({(f, m) for f, m, *_ in best}):
        for name, layout in LAYOUTS.items():
            designs = {d for f, m, *_, d in best if (f, m) == (fmt, M)}
            sums = {
                d: sum(best.get((fmt, M, N, K, d), float("nan")) for N, K in layout.values()) for d in designs
            }
            bf16 = sums.get("bf16 cuBLAS", float("nan"))
            lines.append(f"step {fmt} M={M} {name}: " + ", ".join(
                f"{d} {us:.0f} µs ({bf16 / us:.2f}x)" for d, us in sorted(sums.items(), key=lambda kv: kv[1])))  # fmt: skip
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
