"""What `make bench` times per chapter (tools/bench.py calls these on a CUDA GPU): the solution's kernels beside
the dense matmul, the naive path and PyTorch's or gemlite's kernels for the format, every path rotating over
copies of its weights (timing.copies_needed) so that none is served from the L2.

Each function is `<chapter>(sol, record, env, quick=False)`: sol holds the solution notebook's functions;
record(kind, label, M, N, K, fns, nbytes, check=None) times fns and, after timing, runs check(), which says
whether the path still matches the reference on fresh inputs.
"""

from __future__ import annotations

import os

import torch

from qmatmul import checks, fp8, mxfp4, nvfp4, timing, w4a16, w8a16
from qmatmul.checks import CheckFailed
from qmatmul.kernels import expert, gemm, mma_decode
from qmatmul.teaching.roofline_model import bytes_moved_dense

DECODE_SHAPES = [(8192, 8192), (28672, 8192), (8192, 28672)]  # N, K
PREFILL_SHAPE = (8192, 8192)
# The 4-bit prefill rows are rechecked with this many rows: at least the notebooks' DEQUANTIZE_FIRST_M (512), so the
# path checked is the path timed (decode the weight, then qmatmul.kernels.gemm.decoded_gemm).
PREFILL_RECHECK_M = 520


def passes(check) -> bool:
    """Run a check after timing: True when it passes, else its report is printed."""
    try:
        check()
    except CheckFailed as exc:
        print(exc)
        return False
    return True


def recheck(fn, problem, reference, dtype, what: str = "recheck"):
    """A row's check: fn on a fresh problem() against reference (both called with the problem's arguments)."""

    def run():
        args = problem()
        return passes(
            lambda: checks.compare(fn(*args), reference(*args), what=what, rtol=checks.tolerance_for(dtype))
        )

    return run


def dense_copies(N: int, K: int, dtype, g, copies: int | None = None) -> list:
    """Dense 16-bit weights for the cuBLAS rows, enough copies to exceed the L2 unless `copies` is given."""
    n = timing.copies_needed(2 * N * K) if copies is None else copies
    return [torch.randn(N, K, device="cuda", generator=g).to(dtype) for _ in range(n)]


def baselines(record, kind, M, N, K, x, dense, ws, naive, fused, dense_label="dense (cuBLAS)") -> None:
    """The rows every format chapter times first: cuBLAS on the dense weight, then the naive path."""
    record(kind, dense_label, M, N, K, [lambda x=x, w=w: x @ w.T for w in dense], bytes_moved_dense(M, N, K))
    record(kind, "naive: dequantize, matmul", M, N, K, [lambda x=x, w=w: naive(x, *w) for w in ws], fused)


# ----------------------------------------------------------------------------------------------------------


def w8a16_rows(sol, record, env, quick: bool = False) -> None:
    """The solution beside the expert split-K decode, the dense matmul, the naive path, PyTorch's int8 kernel and
    gemlite's."""
    ch = w8a16
    dtype = env.act_dtype
    g = checks.generator(0, "cuda")

    def problem(M, N, K):
        return lambda: ch.random_problem(M, N, K, dtype, "cuda", checks.generator(1))

    def gemlite_layers(ws):
        try:
            from gemlite.helper import A16W8_INT8
        except Exception:  # noqa: BLE001 - an optional peer
            return None
        try:
            return [A16W8_INT8(device="cuda", dtype=dtype).from_weights(q, scales=s[:, None].to(dtype))
                    for q, s in ws]  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            print(f"gemlite W8A16: {type(exc).__name__}: {exc}")
            return None

    def gemlite_fn(x, q, s):
        return gemlite_layers([(q, s)])[0](x)

    for N, K in [ch.BANDWIDTH_SHAPE] if quick else DECODE_SHAPES:
        ws = [ch.timing_weights(N, K, g) for _ in range(timing.copies_needed(N * K))]
        dense = dense_copies(N, K, dtype, g)
        peers = gemlite_layers(ws)
        ws_act = [(q, s.to(dtype)) for q, s in ws]  # _weight_int8pack_mm takes its scales in x's dtype
        for M in (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = ch.bytes_moved(M, N, K)
            baselines(record, "decode", M, N, K, x, dense, ws, ch.naive, fused)
            record("decode", "torch._weight_int8pack_mm", M, N, K,
                   [lambda x=x, q=q, s=s: torch._weight_int8pack_mm(x, q, s) for q, s in ws_act], fused)  # fmt: skip
            record("decode", "gemlite A16W8 (pure Triton)", M, N, K,
                   None if peers is None else [lambda x=x, layer=layer: layer(x) for layer in peers], fused,
                   None if peers is None else recheck(gemlite_fn, problem(M, 1024, 1024), ch.reference, dtype,
                                                      "gemlite recheck"))  # fmt: skip
            record("decode", "solution w8a16_decode", M, N, K, [lambda x=x, w=w: sol.w8a16_decode(x, *w) for w in ws],
                   fused, recheck(sol.w8a16_decode, problem(M, N, K), ch.reference, dtype))  # fmt: skip
            record("decode", "expert w8a16_decode_split (qmatmul/kernels/expert.py)", M, N, K,
                   [lambda x=x, w=w: expert.w8a16_decode_split(x, *w) for w in ws], fused,
                   recheck(expert.w8a16_decode_split, problem(M, N, K), ch.reference, dtype))  # fmt: skip
            record("decode", "solution w8a16_matmul (tiled)", M, N, K,
                   [lambda x=x, w=w: sol.w8a16_matmul(x, *w) for w in ws], fused)  # fmt: skip
    # The prefill rows' solution takes the wrapper's path at M >= 512: the codes converted first where TMA runs, the
    # fused kernel elsewhere; its recheck has 520 rows and a K the converted weight's descriptor takes, so it is the
    # path timed.
    N, K = PREFILL_SHAPE
    ws = [ch.timing_weights(N, K, g) for _ in range(2)]
    dense = dense_copies(N, K, dtype, g, 2)
    for M in (2048,) if quick else (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = ch.bytes_moved(M, N, K)
        baselines(record, "prefill", M, N, K, x, dense, ws, ch.naive, fused)
        record("prefill", "solution w8a16_matmul", M, N, K, [lambda x=x, w=w: sol.w8a16_matmul(x, *w) for w in ws],
               fused, recheck(sol.w8a16_matmul, problem(520, 1000, 784), ch.reference, dtype))  # fmt: skip


def gemlite_peer(packed, scales, zeros, G, dtype):
    """gemlite's pure-Triton W4A16 layer for the same weight (its own packing, done once here), or the reason it
    is unavailable. gemlite 0.6 ships tuned launch configs for the H100, not the H200: those are loaded, and
    autotuning is left off (it would take minutes)."""
    try:
        import gemlite
        from gemlite.helper import A16Wn
    except Exception as exc:  # noqa: BLE001 - an optional peer
        return None, f"gemlite not installed here ({type(exc).__name__})"

    if not getattr(gemlite_peer, "configured", False):
        root = os.path.join(os.path.dirname(gemlite.__file__), "configs")
        tag = "h100" if "H1" in torch.cuda.get_device_name() or "H2" in torch.cuda.get_device_name() else None
        if tag and os.path.exists(os.path.join(root, f"{tag}.json")):
            gemlite.load_config(os.path.join(root, f"{tag}.json"))
        gemlite.set_autotune(False)
        gemlite_peer.configured = True
    try:
        layer = A16Wn(device=str(packed.device), dtype=dtype).from_weights(
            w4a16.unpack(packed), scales.to(dtype), zeros.to(dtype), 4, G
        )
    except Exception as exc:  # noqa: BLE001
        return None, f"gemlite {gemlite.__version__}: {type(exc).__name__}: {str(exc)[:80]}"
    return layer, f"gemlite {gemlite.__version__}"


def w4a16_problem(dtype):
    """problem(M, N, K) -> a function drawing a fresh W4A16 problem's arguments (x, packed, scales, zeros, G) on the
    GPU: what the rows' rechecks run after timing."""
    G = w4a16.BANDWIDTH_GROUP
    return lambda M, N, K: lambda: (*w4a16.random_problem(M, N, K, G, dtype, "cuda", checks.generator(1)), G)


MMA_ROW = "expert w4a16 MMA decode, weight repacked at load (qmatmul/kernels/mma_decode.py, Gluon)"


def w4a16_rows(sol, record, env, quick: bool = False) -> None:
    """The solution beside the dense matmul, the naive path, PyTorch's int4 kernel (tinygemm), gemlite (where it
    imports) and the expert kernels."""
    ch = w4a16
    dtype = env.act_dtype
    g = checks.generator(0, "cuda")
    G = ch.BANDWIDTH_GROUP

    problem = w4a16_problem(dtype)

    def gemlite_fn(x, p, s, z, G):
        return gemlite_peer(p, s, z, G, dtype)[0](x)

    def gemlite_reference(
        x, p, s, z, G
    ):  # gemlite holds its scales in x's dtype: the reference gets the same
        return ch.reference(x, p, s.to(dtype).float(), z, G)

    for N, K in [ch.BANDWIDTH_SHAPE] if quick else DECODE_SHAPES:
        ws = [
            (*ch.random_packed(N, K, G, "cuda", g), G)
            for _ in range(timing.copies_needed(ch.bytes_moved(1, N, K, G)))
        ]
        dense = dense_copies(N, K, dtype, g)
        tiny = [ch.tinygemm_operands(*w) for w in ws] if dtype == torch.bfloat16 else None
        peers = [gemlite_peer(*w, dtype) for w in ws]
        why = mma_decode.why_not(dtype, G, K)
        mma = not why
        # Repacked once per copy, as a deployment repacks at load time (untimed, like tinygemm's operands).
        words = [(mma_decode.repack(p), s, z) for p, s, z, _ in ws] if mma else None
        for M in (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = ch.bytes_moved(M, N, K, G)
            baselines(record, "decode", M, N, K, x, dense, ws, ch.naive, fused)
            if tiny is not None:
                record("decode", "torch._weight_int4pack_mm", M, N, K,
                       [lambda x=x, t=t: torch._weight_int4pack_mm(x, *t) for t in tiny], fused)  # fmt: skip
            if peers[0][0] is not None:
                record("decode", f"{peers[0][1]} (pure Triton)", M, N, K,
                       [lambda x=x, layer=layer: layer(x) for layer, _ in peers], fused,
                       recheck(gemlite_fn, problem(M, 1024, 1024), gemlite_reference, dtype, "gemlite recheck"))  # fmt: skip
            else:
                record("decode", f"gemlite: {peers[0][1]}", M, N, K, None, fused)
            record("decode", "solution w4a16_decode", M, N, K,
                   [lambda x=x, w=w: sol.w4a16_decode(x, *w) for w in ws], fused,
                   recheck(sol.w4a16_decode, problem(M, 1000, 1024), ch.reference, dtype))  # fmt: skip
            record("decode", "solution w4a16_matmul (tiled)", M, N, K,
                   [lambda x=x, w=w: sol.w4a16_matmul(x, *w) for w in ws], fused)  # fmt: skip
            record("decode", "expert w4a16_decode (qmatmul/kernels/expert.py)", M, N, K,
                   [lambda x=x, w=w: expert.w4a16_decode(x, *w) for w in ws], fused,
                   recheck(expert.w4a16_decode, problem(M, 1000, 1024), ch.reference, dtype))  # fmt: skip
            record("decode", MMA_ROW if mma else f"{MMA_ROW}: {why}", M, N, K,
                   [lambda x=x, w=w, N=N: mma_decode.decode(x, *w, G, N) for w in words] if mma else None, fused,
                   recheck(mma_decode.w4a16_decode, problem(M, 1000, 1024), ch.reference, dtype) if mma else None)  # fmt: skip
    N, K = PREFILL_SHAPE
    ws = [(*ch.random_packed(N, K, G, "cuda", g), G) for _ in range(2)]
    dense = dense_copies(N, K, dtype, g, 2)
    for M in (2048,) if quick else (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = ch.bytes_moved(M, N, K, G)
        baselines(record, "prefill", M, N, K, x, dense, ws, ch.naive, fused)
        record("prefill", "solution w4a16_matmul", M, N, K,
               [lambda x=x, w=w: sol.w4a16_matmul(x, *w) for w in ws], fused,
               recheck(sol.w4a16_matmul, problem(PREFILL_RECHECK_M, 1000, 768), ch.reference, dtype))  # fmt: skip


def fp8_rows(sol, record, env, quick: bool = False) -> None:
    """The solution beside cuBLAS bf16, torch._scaled_mm and the naive path."""
    ch = fp8
    if not ch.has_fp8_dot("cuda"):
        print("fp8: this GPU has no fp8 tensor cores; timing the decode-to-fp16 path only")
    dtype = env.act_dtype
    g = checks.generator(0, "cuda")

    def rechecked(fn, M, N, K):
        return lambda: passes(lambda: ch.recheck(fn, "recheck", M, N, K, checks.generator(1, "cuda")))

    for N, K in [ch.BANDWIDTH_SHAPE] if quick else DECODE_SHAPES:
        ws = [ch.timing_problem(1, N, K, g)[2:] for _ in range(timing.copies_needed(N * K))]
        dense = dense_copies(N, K, dtype, g)
        for M in (1, 16):
            xq, sx, _, _ = ch.timing_problem(M, 1, K, g)
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = ch.bytes_moved(M, N, K)
            record("decode", "dense bf16 (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
                   bytes_moved_dense(M, N, K))  # fmt: skip
            record("decode", "torch._scaled_mm rowwise", M, N, K,
                   [lambda xq=xq, sx=sx, w=w: ch.scaled_mm(xq, sx, *w) for w in ws], fused)  # fmt: skip
            record("decode", "solution fp8_decode", M, N, K,
                   [lambda xq=xq, sx=sx, w=w: sol.fp8_decode(xq, sx, *w) for w in ws], fused,
                   rechecked(sol.fp8_decode, M, 4096, 4096))  # fmt: skip
            with ch.use_path(False):
                sol.fp8_decode(xq, sx, *ws[0])
                record("decode", "solution fp8_decode, fp16 path", M, N, K,
                       [lambda xq=xq, sx=sx, w=w: sol.fp8_decode(xq, sx, *w) for w in ws], fused)  # fmt: skip
    N, K = PREFILL_SHAPE
    ws = [ch.timing_problem(1, N, K, g)[2:] for _ in range(2)]
    dense = dense_copies(N, K, dtype, g, 2)
    tma, why = gemm.tma_status("cuda")

    def block_recheck(fn):
        def run():
            small = ch.random_block_problem(300, 1000, 768, "cuda", checks.generator(1))  # drawn on the CPU
            checks.compare(fn(*small).cpu(), ch.block_reference(*small), what="recheck",
                           rtol=checks.tolerance_for(torch.bfloat16))  # fmt: skip

        return lambda: passes(run)

    for M in (4096,) if quick else (2048, 4096, 8192):
        xq, sx, _, _ = ch.timing_problem(M, 1, K, g)
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = ch.bytes_moved(M, N, K)
        record("prefill", "dense bf16 (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
               bytes_moved_dense(M, N, K))  # fmt: skip
        record("prefill", "torch._scaled_mm rowwise", M, N, K,
               [lambda xq=xq, sx=sx, w=w: ch.scaled_mm(xq, sx, *w) for w in ws], fused)  # fmt: skip
        record("prefill", "naive: dequantize, matmul", M, N, K,
               [lambda xq=xq, sx=sx, w=w: ch.naive(xq, sx, *w, dtype) for w in ws], fused)  # fmt: skip
        xb, sxb, wb, swb = ch.timing_block_problem(M, N, K, g)
        record("prefill", "solution fp8_block_matmul (128x128)", M, N, K,
               lambda xb=xb, sxb=sxb, wb=wb, swb=swb: sol.fp8_block_matmul(xb, sxb, wb, swb), fused)  # fmt: skip
        record("prefill", "expert fp8_block_matmul_tma (128x128, qmatmul/kernels/expert.py)" if tma
               else f"expert fp8_block_matmul_tma: {why}", M, N, K,
               (lambda xb=xb, sxb=sxb, wb=wb, swb=swb: expert.fp8_block_matmul_tma(xb, sxb, wb, swb)) if tma else None,
               fused, block_recheck(expert.fp8_block_matmul_tma) if tma else None)  # fmt: skip
        record("prefill", "solution fp8_matmul", M, N, K,
               [lambda xq=xq, sx=sx, w=w: sol.fp8_matmul(xq, sx, *w) for w in ws], fused,
               rechecked(sol.fp8_matmul, 300, 1000, 777))  # fmt: skip
        record("prefill", "expert fp8_matmul_tma (qmatmul/kernels/expert.py)" if tma else f"expert fp8_matmul_tma: {why}",
               M, N, K, [lambda xq=xq, sx=sx, w=w: expert.fp8_matmul_tma(xq, sx, *w) for w in ws] if tma else None,
               fused, rechecked(expert.fp8_matmul_tma, 300, 1000, 768) if tma else None)  # fmt: skip
        with ch.use_path(False):
            sol.fp8_matmul(xq, sx, *ws[0])
            record("prefill", "solution fp8_matmul, fp16 path", M, N, K,
                   [lambda xq=xq, sx=sx, w=w: sol.fp8_matmul(xq, sx, *w) for w in ws], fused)  # fmt: skip


def _fp4_rows(ch, kernels, sol, record, env, quick: bool) -> None:
    """MXFP4 and NVFP4: the solution's kernels beside the dense matmul and the naive path. kernels: the decode
    rows (label, function, rechecked after timing) and the prefill rows (label, function; none: no prefill)."""
    dtype = env.act_dtype
    g = checks.generator(0, "cuda")

    def problem(M, N, K):
        return lambda: ch.random_problem(M, N, K, dtype, "cuda", checks.generator(1))

    decode, prefill = kernels
    name = ch.__name__.split(".")[-1]
    block, mma_check = (16, mma_decode.nvfp4_decode) if ch is nvfp4 else (32, mma_decode.mxfp4_decode)
    row = f"expert {name} MMA decode, weight repacked at load (qmatmul/kernels/mma_decode.py, Gluon)"
    for N, K in [ch.BANDWIDTH_SHAPE] if quick else DECODE_SHAPES:
        ws = [ch.timing_weights(N, K, g) for _ in range(timing.copies_needed(ch.bytes_moved(1, N, K)))]
        dense = dense_copies(N, K, dtype, g)
        why = mma_decode.why_not_fp4(dtype, K)
        # Repacked once a copy, as a deployment repacks at load time (untimed): words, scales, global scale or None.
        words = (
            [(mma_decode.repack_fp4(w[0], block), w[1], w[2] if ch is nvfp4 else None) for w in ws]
            if not why
            else None
        )
        for M in (1, 16) if quick else (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = ch.bytes_moved(M, N, K)
            baselines(record, "decode", M, N, K, x, dense, ws, ch.naive, fused)
            for label, fn, checked in decode:
                record("decode", label, M, N, K, [lambda x=x, w=w, fn=fn: fn(x, *w) for w in ws], fused,
                       recheck(fn, problem(M, N, K), ch.reference, dtype) if checked else None)  # fmt: skip
            record("decode", f"{row}: {why}" if why else row, M, N, K,
                   None if why else [lambda x=x, w=w, N=N: mma_decode.decode_fp4(x, *w, N) for w in words], fused,
                   None if why else recheck(mma_check, problem(M, 1000, 1024), ch.reference, dtype))  # fmt: skip
    if not prefill:
        return
    N, K = PREFILL_SHAPE
    ws = [ch.timing_weights(N, K, g) for _ in range(2)]
    dense = dense_copies(N, K, dtype, g, 2)
    for M in (2048,) if quick else (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = ch.bytes_moved(M, N, K)
        baselines(record, "prefill", M, N, K, x, dense, ws, ch.naive, fused)
        for label, fn in prefill:
            record("prefill", label, M, N, K, [lambda x=x, w=w, fn=fn: fn(x, *w) for w in ws], fused,
                   recheck(fn, problem(PREFILL_RECHECK_M, 1000, 768), ch.reference, dtype))  # fmt: skip


def mxfp4_rows(sol, record, env, quick: bool = False) -> None:
    decode = [("solution mxfp4_decode", sol.mxfp4_decode, True),
              ("solution mxfp4_matmul (tiled)", sol.mxfp4_matmul, False),
              ("expert mxfp4_decode (qmatmul/kernels/expert.py)", expert.mxfp4_decode, True)]  # fmt: skip
    prefill = [("solution mxfp4_matmul", sol.mxfp4_matmul)]
    if hasattr(sol, "mxfp4_matmul_dot_scaled") and mxfp4.dot_scaled_status()[0]:
        decode.append(("solution tl.dot_scaled", sol.mxfp4_matmul_dot_scaled, True))
        prefill.append(("solution tl.dot_scaled", sol.mxfp4_matmul_dot_scaled))
    _fp4_rows(mxfp4, (decode, prefill), sol, record, env, quick)


def nvfp4_rows(sol, record, env, quick: bool = False) -> None:
    decode = [("solution nvfp4_decode", sol.nvfp4_decode, True),
              ("expert nvfp4_decode (qmatmul/kernels/expert.py)", expert.nvfp4_decode, True)]  # fmt: skip
    _fp4_rows(nvfp4, (decode, [("solution nvfp4_matmul", sol.nvfp4_matmul)]), sol, record, env, quick)


# Llama-3-8B's layer shapes (N, K): q and o, k and v, gate and up, down, and q/k/v and gate/up fused.
LLAMA_LAYER_SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (28672, 4096)]
LAYOUTS_ROW = "solution w4a16_mma_decode (layouts chapter, repacked at load)"


def layouts_rows(sol, record, env, quick: bool = False) -> None:
    """Chapter 6's solution (the learner's Gluon decode) beside cuBLAS and the course's expert MMA decode, at the
    bench's shapes and a Llama-3-8B block's, M = 1, 4, 16: issue 42's targets (80 / 70 / 60 % of copy). The words
    come from the course's repack, bit for bit the chapter's (tests/test_layouts_checks.py), on the GPU."""
    ch = w4a16
    dtype = env.act_dtype
    g = checks.generator(0, "cuda")
    G = ch.BANDWIDTH_GROUP

    problem = w4a16_problem(dtype)

    def learners(x, p, s, z, G):
        return sol.w4a16_mma_decode(x, mma_decode.repack(p), s, z, G, p.shape[0])

    for N, K in [ch.BANDWIDTH_SHAPE] if quick else [*DECODE_SHAPES, *LLAMA_LAYER_SHAPES]:
        why = mma_decode.why_not(dtype, G, K)
        ws = [(*ch.random_packed(N, K, G, "cuda", g), G)
              for _ in range(timing.copies_needed(ch.bytes_moved(1, N, K, G)))]  # fmt: skip
        dense = dense_copies(N, K, dtype, g)
        words = [(mma_decode.repack(p), s, z) for p, s, z, _ in ws] if not why else None
        for M in (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = ch.bytes_moved(M, N, K, G)
            record("decode", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
                   bytes_moved_dense(M, N, K))  # fmt: skip
            if why:
                record("decode", f"{LAYOUTS_ROW}: {why}", M, N, K, None, fused)
                continue
            record("decode", LAYOUTS_ROW, M, N, K,
                   [lambda x=x, w=w, N=N: sol.w4a16_mma_decode(x, *w, G, N) for w in words], fused,
                   recheck(learners, problem(M, 1000, 1024), ch.reference, dtype))  # fmt: skip
            record("decode", MMA_ROW, M, N, K,
                   [lambda x=x, w=w, N=N: mma_decode.decode(x, *w, G, N) for w in words], fused)  # fmt: skip


BENCHMARKS = dict(w8a16=w8a16_rows, w4a16=w4a16_rows, fp8=fp8_rows, mxfp4=mxfp4_rows, nvfp4=nvfp4_rows,
                  layouts=layouts_rows)  # fmt: skip
