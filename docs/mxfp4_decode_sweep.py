# ruff: noqa  -- the one-off measurement script behind docs/mxfp4-h200.md, kept as it ran (run it from the repository root on a GPU)
"""Decode sweep for the MXFP4 chapter on a GPU: variants x configs at 28672 x 8192, M = 1 and 16."""

import json, os, sys, time

sys.path.insert(0, os.getcwd())
import torch, triton, triton.language as tl
from qmatmul import checks, mxfp4, environment, course
from qmatmul import timing

env = environment.start()
sol = course.load_notebook_code("mxfp4")
dtype = env.act_dtype


@triton.jit
def e2m1_to_float(c):
    bits = ((c & 0x7) << 9) | ((c & 0x8) << 12)
    return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 16384.0


@triton.jit
def dec_bcast(
    x_ptr,
    p_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    sxm,
    sxk,
    spn,
    spk,
    ssn,
    ssk,
    sym,
    syn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_K // 2)
    offs_s = tl.arange(0, BLOCK_K // 32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    x_row = x_ptr + offs_m[:, None] * sxm
    for k0 in range(0, K, BLOCK_K):
        kb = k0 // 2 + offs_b
        ks = k0 // 32 + offs_s
        mask_x = (offs_m[:, None] < M) & (kb[None, :] < K // 2)
        x_even = tl.load(x_row + (2 * kb[None, :]) * sxk, mask=mask_x, other=0.0)
        x_odd = tl.load(x_row + (2 * kb[None, :] + 1) * sxk, mask=mask_x, other=0.0)
        p = tl.load(
            p_ptr + offs_n[None, :] * spn + kb[:, None] * spk,
            mask=(offs_n[None, :] < N) & (kb[:, None] < K // 2),
            other=0,
        ).to(tl.int32)
        e = tl.load(
            s_ptr + offs_n[None, :] * ssn + ks[:, None] * ssk,
            mask=(offs_n[None, :] < N) & (ks[:, None] < K // 32),
            other=0,
        ).to(tl.int32)
        sc = (e << 23).to(tl.float32, bitcast=True) * 16384.0
        sc = tl.reshape(
            tl.broadcast_to(sc[:, None, :], (BLOCK_K // 32, 16, BLOCK_N)), (BLOCK_K // 2, BLOCK_N)
        )
        lo = ((p & 0x7) << 9) | ((p & 0x8) << 12)
        hi = ((p & 0x70) << 5) | ((p & 0x80) << 8)
        w_lo = (lo.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * sc).to(x_even.dtype)
        w_hi = (hi.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * sc).to(x_even.dtype)
        acc = tl.dot(x_even, w_lo, acc)
        acc = tl.dot(x_odd, w_hi, acc)
    tl.store(
        y_ptr + offs_m[:, None] * sym + offs_n[None, :] * syn,
        acc.to(y_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def run_bcast(x, p, s, cfg):
    M, N, K, out = mxfp4.prepare(x, p, s, None)
    dec_bcast[(triton.cdiv(N, cfg["BLOCK_N"]),)](
        x,
        p,
        s,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        p.stride(0),
        p.stride(1),
        s.stride(0),
        s.stride(1),
        out.stride(0),
        out.stride(1),
        **cfg,
    )
    return out


def run_sol(x, p, s, cfg):
    M, N, K, out = mxfp4.prepare(x, p, s, None)
    sol.mxfp4_decode_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
        x,
        p,
        s,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        p.stride(0),
        p.stride(1),
        s.stride(0),
        s.stride(1),
        out.stride(0),
        out.stride(1),
        **cfg,
    )
    return out


def run_ds(x, p, s, cfg):
    M, N, K, out = mxfp4.prepare(x, p, s, None)
    sol.mxfp4_dot_scaled_kernel[(1, triton.cdiv(N, cfg["BLOCK_N"]))](
        x,
        p,
        s,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        p.stride(0),
        p.stride(1),
        s.stride(0),
        s.stride(1),
        out.stride(0),
        out.stride(1),
        X_FORMAT="bf16" if x.dtype == torch.bfloat16 else "fp16",
        **cfg,
    )
    return out


copy = timing.copy_bandwidth()
print(
    f"copy {copy / 1e12:.2f} TB/s, {env.gpu_name}, torch {torch.__version__}, triton {triton.__version__}",
    flush=True,
)
g = checks.generator(0, "cuda")
N, K = mxfp4.BANDWIDTH_SHAPE
packed, scales = mxfp4._bandwidth_problem(N, K, g)
xs = {M: torch.randn(M, K, device="cuda", generator=g).to(dtype) for M in (1, 16)}
refs = {M: mxfp4.reference(xs[M], packed, scales) for M in (1, 16)}
configs = [
    (64, 256, 4, 3),
    (64, 512, 4, 3),
    (128, 256, 4, 3),
    (32, 256, 4, 3),
    (32, 512, 4, 4),
    (64, 256, 8, 3),
    (128, 512, 8, 3),
    (64, 256, 4, 4),
]
res = []
out_dir = os.environ.get("OUT", "/tmp")
t_start = time.time()
for variant, fn, cfgs in (
    ("solution", run_sol, configs),
    ("bcast", run_bcast, configs),
    ("dot_scaled", run_ds, configs[:5]),
):
    for bn, bk, w, st in cfgs:
        if time.time() - t_start > 110:
            print("sweep: time is up", flush=True)
            break
        cfg = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st)
        row = dict(variant=variant, **cfg)
        try:
            for M in (1, 16):
                y = fn(xs[M], packed, scales, cfg)
                torch.cuda.synchronize()
                err = float((y.float() - refs[M]).norm() / refs[M].norm())
                ms = timing.median_ms(lambda: fn(xs[M], packed, scales, cfg))
                bw = mxfp4.bytes_moved(M, N, K) / (ms * 1e-3)
                row[f"M{M}_us"] = round(ms * 1e3, 1)
                row[f"M{M}_frac"] = round(bw / copy, 3)
                row[f"M{M}_relerr"] = err
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        print(row, flush=True)
        res.append(row)
        json.dump(
            dict(copy_TBps=copy / 1e12, rows=res),
            open(os.path.join(out_dir, "sweep_mxfp4.json"), "w"),
            indent=1,
        )
# naive and dense for reference
w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
for M in (1, 16):
    for label, f in (("dense", lambda: xs[M] @ w.T), ("naive", lambda: mxfp4.naive(xs[M], packed, scales))):
        ms = timing.median_ms(f)
        nb = mxfp4.bytes_moved_dense(M, N, K) if label == "dense" else mxfp4.bytes_moved(M, N, K)
        print(label, M, f"{ms * 1e3:.1f} us", f"{nb / (ms * 1e-3) / copy:.3f} of copy", flush=True)
