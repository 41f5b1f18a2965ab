"""Chapter W8A16: int8 weights with one scale per output channel, fp16/bf16 activations.

Weights use nn.Linear's layout W[N, K] (out_features x in_features). Symmetric per-channel quantization:
    s[n] = max_k |W[n, k]| / 127            (float32; a row of zeros gets s = 1)
    q[n, k] = clamp(round(W[n, k] / s[n]), -127, 127)   (int8, round half to even, computed in float32)
    y = x @ (q * s[:, None]).T              (x: [M, K] fp16/bf16, y: [M, N] in x's dtype)
"""

from __future__ import annotations

import torch

from qmatmul import checks, harness
from qmatmul.checks import CheckFailed, Mistake

QMAX = 127
ACT_DTYPES = (torch.float16, torch.bfloat16)
# Decode grading: a weight of 28672 x 8192 int8 (235 MB) is about 4x the H200's L2 and 60x a T4's.
BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_MS = (1, 16)
BANDWIDTH_THRESHOLD = 0.5  # fraction of the copy bandwidth measured in the same process


# ----------------------------------------------------------------------------------------------------------
# The reference


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference quantizer: returns q (int8 [N, K]) and s (float32 [N])."""
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return q, s


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return q.float() * s.float()[:, None]


def reference(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """y = x @ (q·s).T in float32 (the grading reference)."""
    return x.float() @ dequantize(q, s).T


def naive(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The naive path: dequantize the whole weight into memory, then a dense matmul."""
    return x @ (q.to(x.dtype) * s.to(x.dtype)[:, None]).T


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use: validation, allocation, launch configurations


def prepare(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, out: torch.Tensor | None = None):
    """Validate the inputs of a W8A16 matmul with clear messages; allocate out if needed.

    Returns M, N, K, out.
    """
    for name, t in (("x", x), ("q", q), ("s", s)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    if q.dim() != 2 or q.dtype != torch.int8:
        raise TypeError(f"q must be a 2-D int8 tensor [N, K], got {q.dtype} of shape {list(q.shape)}")
    M, K = x.shape
    N, Kq = q.shape
    if Kq != K:
        raise ValueError(f"x is [M, K] = {list(x.shape)} but q is [N, K] = {list(q.shape)}: the K's differ")
    if s.dtype != torch.float32 or tuple(s.shape) != (N,):
        raise ValueError(f"s must be float32 of shape [N] = [{N}], got {s.dtype} of shape {list(s.shape)}")
    if not (x.device == q.device == s.device):
        raise ValueError(f"x, q and s must be on one device, got {x.device}, {q.device}, {s.device}")
    if not q.is_contiguous() or not s.is_contiguous():
        raise ValueError("q and s must be contiguous (x and out may be strided)")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (M, N) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must be {x.dtype} of shape [{M}, {N}] on {x.device}, got {out.dtype} {list(out.shape)} "
            f"on {out.device}"
        )
    return M, N, K, out


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel. The interpreter prefers few, large programs."""
    if device != "cuda":
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)
    old = torch.cuda.get_device_capability() < (8, 0)
    big = M > 64
    if big and torch.cuda.get_device_capability() == (9, 0):
        # H200, graph-timed at M = 2048 / 4096, N = K = 8192 (docs/perf-notes.md): with the weight tile as tl.dot's
        # first operand, 82 / 79 % of cuBLAS's 8192^3 rate in the sweep (128 x 128 x 64, 4 warps: 57 / 52 %), the
        # notebook kernel 76 / 71 %. 3 stages need 120 KB of shared memory, which Hopper's 227 KB holds.
        return dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
    return dict(
        BLOCK_M=128 if big else 64,
        BLOCK_N=128,
        BLOCK_K=64 if big else 128,
        num_warps=4,
        num_stages=2 if old else (3 if big else 4),
    )


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N."""
    if device != "cuda":
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1)
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), fraction of copy at M = 1 / 16: 28672 x 8192 with
    # 128 columns x 256 of K 94 / 93 (64 x 256: 81 / 83); otherwise 64 x 512: 88 / 87 at 8192 x 28672, 74 / 73 at
    # 8192 x 8192 (64 x 256: 59 / 60; only 128 strips of 64 columns there).
    if N >= 16384:
        return dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, num_warps=4, num_stages=3)
    return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, num_warps=4, num_stages=4 if K >= 16384 else 3)


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def bytes_per_weight(K: int) -> float:
    """int8 weight plus its share of one float32 scale per row of K weights."""
    return 1 + 4 / K


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The bytes a fused W8A16 matmul must move: int8 weights, scales, activations in, output out."""
    return N * K + 4 * N + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The naive path: read int8, write the dequantized weight, read it back for the matmul."""
    return N * K + 4 * N + 2 * act_bytes * N * K + act_bytes * (M * K + M * N)


def bytes_moved_dense(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return act_bytes * (N * K + M * K + M * N)


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def explain_format(K: int = 8192) -> None:
    """Print what the format stores and what that means for a decode step."""
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("W8A16 (int8 + fp32 scale per row)", bytes_per_weight(K)),
    ]
    print(f"Bytes per weight for a row of K = {K} weights:")
    for name, b in rows:
        print(f"  {name:<36} {b:.5f} B")
    print(
        f"At decode the weights dominate the bytes, so W8A16 can be up to {2 / bytes_per_weight(K):.2f}x faster."
    )


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Weights whose rows have distinct magnitudes (so every channel gets a distinct scale)."""
    row_scale = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=g)) * 0.02
    return (torch.randn(N, K, generator=g) * row_scale).to(dtype)


def random_problem(M: int, N: int, K: int, dtype, device: str, g: torch.Generator, strided: bool = False):
    """x [M, K] (a strided view when `strided`), q, s from the reference quantizer."""
    q, s = quantize(random_weight(N, K, g))
    pad = 7 if strided else 0
    x_full = torch.randn(M, K + pad, generator=g).to(dtype).to(device)
    return x_full[:, :K], q.to(device), s.to(device)


def _poisoned_out(M: int, N: int, dtype, device: str, strided: bool):
    """A NaN-filled output (a view of a wider buffer when strided, so stray writes can be seen)."""
    pad = 5 if strided else 0
    full = torch.full((M, N + pad), float("nan"), dtype=dtype, device=device)
    return full, full[:, :N]


def _act_dtypes(device: str) -> list:
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return [torch.float16, torch.bfloat16]
    return [torch.float16]  # the interpreter's bf16 tl.dot is wrong; T4 has no bf16 tensor cores


# ----------------------------------------------------------------------------------------------------------
# Checks for exercise 1: the quantizer


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        w = random_weight(16, 256, g)
        w[0] = 0  # an all-zero row: the text asks for s = 1 there
        w[2] = -w[2].abs()  # negative-dominated: max != max |w|
        return [random_weight(8, 32, g), w]
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        N = int(torch.randint(5, 40, (1,), generator=g))
        K = int(torch.randint(17, 300, (1,), generator=g))
        w = random_weight(N, K, g)
        w[0] = 0  # an all-zero row
        w[1, int(torch.randint(0, K, (1,), generator=g))] = 3.0  # one outlier
        w[2] = -w[2].abs()  # negative-dominated: max != max |w|
        cases.append(w.to(dtype))
    return cases


def _quantizer_mistakes(w: torch.Tensor) -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """(name, explanation, q, s) of the known wrong quantizers."""
    wf = w.float()
    amax = wf.abs().amax(dim=1)

    def guarded(a):
        return torch.where(a > 0, a, torch.ones_like(a))

    def with_scale(s):
        return torch.round(wf / s[:, None]).clamp(-QMAX, QMAX).to(torch.int8), s

    s_ref = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    return [
        ("127 replaced by 128", "The symmetric int8 range is -127..127: s = max|w| / 127.",
         *with_scale(torch.where(amax > 0, amax / 128, torch.ones_like(amax)))),
        ("truncation instead of rounding", "Converting with .to(torch.int8) truncates toward zero; round first "
         "(torch.round).", torch.trunc(wf / s_ref[:, None]).clamp(-QMAX, QMAX).to(torch.int8), s_ref),
        ("max instead of max |w|", "The scale must cover the largest magnitude, negative values included: "
         "use w.abs().amax(dim=1).", *with_scale(torch.where(wf.amax(dim=1) > 0, wf.amax(dim=1) / QMAX, 1.0))),
        ("one scale for the whole tensor", "Each output channel (row n of W) gets its own scale: reduce over K "
         "only (dim=1).", *with_scale(torch.full_like(amax, float(guarded(amax).max()) / QMAX))),
    ]  # fmt: skip


def _named_quantizer_mistake(w, q, s, zero_rows) -> str | None:
    for name, explanation, mq, ms in _quantizer_mistakes(w):
        same_s = torch.equal(torch.where(zero_rows, ms, s), ms)
        if torch.equal(q, mq) or same_s:
            return f"This matches a known mistake: {name}. {explanation}"
    return None


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: q and s must equal the reference bit for bit (zero rows: any positive finite scale)."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    what = "quantize_int8_per_channel"
    for w in _quantizer_inputs(g, hidden):
        N, K = w.shape
        ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}])"
        w_before = w.clone()
        result = checks.call_learner(fn, w.clone(), what=what)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise CheckFailed(f"{what} must return a pair (q, s), got {type(result).__name__}")
        q, s = result
        if not isinstance(q, torch.Tensor) or not isinstance(s, torch.Tensor):
            raise CheckFailed(f"{what} must return two tensors (q, s)")
        if q.dtype != torch.int8 or tuple(q.shape) != (N, K):
            raise CheckFailed(f"q must be int8 of shape [{N}, {K}], got {q.dtype} {list(q.shape)}{ctx}")
        if tuple(s.shape) == (K,) and K != N:
            raise CheckFailed(
                f"s has shape [K] = [{K}]: you reduced over the output channels (dim=0). "
                f"One scale per output channel (row of W): reduce over K, dim=1, for shape [{N}].{ctx}"
            )
        if tuple(s.shape) in ((N, 1), (1, N)):
            raise CheckFailed(
                f"s has shape {list(s.shape)}: return a 1-D tensor of {N} scales (squeeze it).{ctx}"
            )
        if tuple(s.shape) != (N,):
            raise CheckFailed(
                f"s must have shape [{N}] (one scale per output channel), got {list(s.shape)}{ctx}"
            )
        if s.dtype != torch.float32:
            raise CheckFailed(f"s must be float32, got {s.dtype}: compute in float32 (w.float()).{ctx}")
        checks.check_finite(s, what=f"s{ctx}")
        q_ref, s_ref = quantize(w)
        zero_rows = w.float().abs().amax(dim=1) == 0
        if bool((s[zero_rows] <= 0).any()):
            raise CheckFailed(
                f"an all-zero row got scale {s[zero_rows].min().item()}: it must be positive{ctx}"
            )
        s_cmp = torch.where(zero_rows, s_ref, s)
        named = None
        if not (torch.equal(s_cmp, s_ref) and torch.equal(q, q_ref)):
            named = _named_quantizer_mistake(w, q, s, zero_rows)
        if not torch.equal(s_cmp, s_ref):
            bad = (s_cmp != s_ref).nonzero().flatten().tolist()
            i = bad[0]
            ratio = float(s_cmp[i] / s_ref[i])
            hint = ""
            if abs(ratio - 1) < 1e-2:
                hint = " They differ in the last bits: compute max|w| / 127 in float32, from w.float()."
            text = (
                f"s differs from the reference in {len(bad)} of {N} channels, first at n = {i}: "
                f"got {float(s_cmp[i]):.8g}, expected {float(s_ref[i]):.8g}.{hint}{ctx}"
            )
            raise CheckFailed(f"{named}\n{text}" if named else text)
        if not torch.equal(q, q_ref):
            diff = q.int() - q_ref.int()
            n_bad = int((diff != 0).sum())
            where = checks._where_2d(diff != 0, ("rows", "columns"))
            lines = [f"q differs from the reference in {n_bad} of {q.numel()} elements{ctx}"]
            if named:
                lines.insert(0, named)
            elif int(diff.abs().max()) == 1:
                lines.append("Every difference is ±1: check the rounding (round half to even, torch.round).")
            lines.append(f"Differences lie {where}.")
            raise CheckFailed("\n".join(lines))
        if not torch.equal(w, w_before):
            raise CheckFailed(f"{what} modified its input w in place; leave the weights untouched.{ctx}")
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Checks for exercises 2 and 3: the kernels


def kernel_mistakes(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> list[Mistake]:
    xf, qf, sf = x.float().cpu(), q.float().cpu(), s.float().cpu()
    M, K = xf.shape
    N = qf.shape[0]
    raw = xf @ qf.T
    out = [
        Mistake(
            "scale missing", "The per-channel scale s[n] was never applied: multiply in the epilogue.", raw
        ),
        Mistake(
            "scale applied twice",
            "Apply s once: either to the weight tile or to the accumulator, not both.",
            raw * sf[None, :] ** 2,
        ),
        Mistake(
            "weights read as unsigned",
            "q holds signed int8 (-127..127); a uint8 view or pointer turns -1 into 255.",
            xf @ (q.cpu().view(torch.uint8).float() * sf[:, None]).T,
        ),
    ]
    if M <= N:
        out.append(
            Mistake(
                "scale on the wrong axis",
                "s has one entry per output channel n (a column of y): broadcast it as s[None, :] along the "
                "N offsets, not along the rows (M) of the output.",
                raw * sf[:M, None],
            )
        )
    w = qf * sf[:, None]
    for bk in (16, 32, 64, 128, 256, 512):
        kt = (K // bk) * bk
        if 0 < kt < K:
            out.append(
                Mistake(
                    f"last partial K block dropped (BLOCK_K = {bk})",
                    "The loop or the K mask skips the final, partial block of K: loop over "
                    "range(0, K, BLOCK_K) and mask k < K.",
                    xf[:, :kt] @ w[:, :kt].T,
                )
            )
    return out


def _check_kernel(fn, what: str, shapes, device: str, dtypes, g, strided_cases=(False, True)) -> int:
    n = 0
    for M, N, K in shapes:
        for dtype in dtypes:
            for strided in strided_cases:
                x, q, s = random_problem(M, N, K, dtype, device, g, strided=strided)
                full, out = _poisoned_out(M, N, dtype, device, strided)
                inputs = dict(x=x, q=q, s=s)
                before = checks.snapshot(inputs)
                ctx = f" (M={M}, N={N}, K={K}, {str(dtype).replace('torch.', '')}{', strided x and out' if strided else ''})"
                y, ops = checks.run_audited(fn, x, q, s, out=out, what=what)
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(x, q, s),
                                            mistakes=kernel_mistakes(x, q, s), ctx=ctx)  # fmt: skip
                n += 1
    return n


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: the tiled kernel on ragged shapes, poisoned output, strided views, fused (no torch matmul)."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(32, 64, 64), (50, 70, 90)]
    else:
        big = device == "cuda"
        shapes = []
        for _ in range(2):  # N > M, so a scale broadcast along M still reads inside s and can be named
            M = int(torch.randint(17, 300 if big else 130, (1,), generator=g))
            N = int(torch.randint(M + 1, 700 if big else 200, (1,), generator=g))
            K = int(torch.randint(40, 1000 if big else 260, (1,), generator=g))
            shapes.append((M, N, K if K != M else K + 1))  # M differs from N and K: no shape looks like W
        shapes.append((1, 129, 77))
    n = _check_kernel(fn, "w8a16_matmul", shapes, device, _act_dtypes(device), g)
    checks.passed(
        f"w8a16_matmul: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N and K."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(1, 64, 128), (16, 96, 200)]
    else:
        big = device == "cuda"
        shapes = [
            (M, int(torch.randint(33, 2000 if big else 200, (1,), generator=g)),
             int(torch.randint(40, 3000 if big else 300, (1,), generator=g)))
            for M in (1, int(torch.randint(2, 16, (1,), generator=g)), 16)
        ]  # fmt: skip
    n = _check_kernel(fn, "w8a16_decode", shapes, device, _act_dtypes(device), g)
    checks.passed(
        f"w8a16_decode: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> None:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth.

    Awards nothing without a CUDA GPU. After timing, correctness is checked again on fresh inputs.
    """
    if not torch.cuda.is_available():
        if not checks.is_remote(fn):  # feedback in the learner's notebook: it patches the local interpreter
            traffic_feedback(fn)
        return harness.not_on_cpu("w8a16_decode", threshold)
    N, K = BANDWIDTH_SHAPE
    dtype = _act_dtypes("cuda")[-1]
    return harness.check_bandwidth(
        fn, what="w8a16_decode", module=__name__, N=N, K=K, Ms=BANDWIDTH_MS, out_dtype=dtype,
        nbytes=lambda M: bytes_moved(M, N, K, dtype.itemsize), threshold=threshold, seed=seed,
        hint="The naive dequantize-then-matmul path moves each weight about five times: load each int8 tile "
        "once and keep it in registers.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/harness.py): random int8 codes and scales, built alike on both sides."""
    q = torch.randint(-QMAX, QMAX + 1, (N, K), dtype=torch.int8, device=g.device, generator=g)
    s = torch.rand(N, device=g.device, generator=g) * 1e-3 + 1e-4
    return q, s


def timing_inputs(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    """n activations [M, K] for the timed calls, stacked."""
    return (torch.randn(n, M, K, device=g.device, generator=g).to(_act_dtypes(g.device.type)[-1]),)


def traffic_feedback(fn, M: int = 16, N: int = 256, K: int = 512) -> None:
    """In the interpreter: how often the decode kernel reads each tensor (feedback only, no points)."""
    from qmatmul import traffic

    if not traffic.available():
        return
    x, q, s = random_problem(M, N, K, torch.float16, "cpu", checks.generator(0))
    out = torch.empty(M, N, dtype=torch.float16)
    try:
        t = traffic.audit(fn, dict(x=x, q=q, s=s), out)
    except Exception as exc:  # noqa: BLE001 - feedback only: a failing kernel is graded by the other cells
        print(f"Memory-traffic audit skipped: {type(exc).__name__}")
        return
    reads = t.times_read("q")
    verdict = "each weight byte once: what a fused decode kernel should do" if reads <= 1.01 else (
        f"each weight byte {reads:.1f} times: every extra pass over the weights costs a full pass of memory "
        "time at decode (does each program reload the same weight tiles?)"
    )  # fmt: skip
    print(f"Memory-traffic audit in the interpreter (M={M}, N={N}, K={K}; feedback, no points): your kernel "
          f"read {verdict}.\n  {t.describe()}")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Measured on the course's H200 (docs/benchmark-h200.md) at M = 1, N x K = 28672 x 8192, bf16 activations.
H200_RECORDED_US = {"dense bf16 (cuBLAS)": 122.0, "naive: dequantize, then matmul": 1292.0}


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    from qmatmul import roofline

    ceil = roofline.ceilings(env)
    N, K = BANDWIDTH_SHAPE
    rows = []
    for M in (1, 16, 2048):
        rows.append((f"dense bf16, M={M}", bytes_moved_dense(M, N, K), flops(M, N, K)))
        rows.append((f"W8A16 fused, M={M}", bytes_moved(M, N, K), flops(M, N, K)))
    rows.append(("W8A16 naive path, M=1", bytes_moved_naive(1, N, K), flops(1, N, K)))
    print(f"A Linear layer with N x K = {N} x {K} weights:")
    roofline.print_predictions(ceil, rows)


def compare_paths(env, prefill_fn, decode_fn, M: int = 1):
    """Time the dense matmul, the naive path and the learner's kernels at decode; plot bytes and time."""
    from qmatmul import plots

    N, K = BANDWIDTH_SHAPE
    rows = [
        ("dense bf16 (cuBLAS)", bytes_moved_dense(M, N, K)),
        ("naive: dequantize, then matmul", bytes_moved_naive(M, N, K)),
        ("w8a16_matmul (tiled)", bytes_moved(M, N, K)),
        ("w8a16_decode", bytes_moved(M, N, K)),
    ]
    if not env.has_gpu:
        times = [H200_RECORDED_US.get(label) for label, _ in rows]
        rows = [(plots.recorded_label(label), nbytes) for label, nbytes in rows]
        note = plots.recorded_note(where_known=True)
    else:
        from qmatmul import bench

        g = checks.generator(0, "cuda")
        dtype = env.act_dtype
        q = torch.randint(-QMAX, QMAX + 1, (N, K), dtype=torch.int8, device="cuda", generator=g)
        s = torch.rand(N, device="cuda", generator=g) * 1e-3
        w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fns = [
            lambda: x @ w.T,
            lambda: naive(x, q, s),
            lambda: prefill_fn(x, q, s),
            lambda: decode_fn(x, q, s),
        ]
        times = bench.time_paths(fns)
        rows = [(plots.measured_label(label), nbytes) for label, nbytes in rows]
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    return plots.paths_report(rows, times, f"M={M}, N x K = {N} x {K}: {note}")


# ----------------------------------------------------------------------------------------------------------
# The benchmark (tools/bench.py calls this on a CUDA GPU)


def benchmark(sol, record, env, quick: bool = False) -> None:
    """Time the solution beside the dense matmul, the naive path and PyTorch's int8 kernel.

    record(kind, label, M, N, K, fn, nbytes, check=None) times fn and, after timing, runs check().
    """
    from qmatmul import bench

    dtype = env.act_dtype
    g = checks.generator(0, "cuda")

    def recheck(fn, M, N, K):
        def run():
            x, q, s = random_problem(M, N, K, dtype, "cuda", checks.generator(1))
            try:
                checks.compare(
                    fn(x, q, s), reference(x, q, s), what="recheck", rtol=checks.tolerance_for(dtype)
                )
                return True
            except CheckFailed as exc:
                print(exc)
                return False

        return run

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

    def gemlite_recheck(M):
        def run():
            x, q, s = random_problem(M, 1024, 1024, dtype, "cuda", checks.generator(1))
            layer = gemlite_layers([(q, s)])[0]
            try:
                checks.compare(
                    layer(x), reference(x, q, s), what="gemlite recheck", rtol=checks.tolerance_for(dtype)
                )
                return True
            except CheckFailed as exc:
                print(exc)
                return False

        return run

    def weight(N, K):
        q = torch.randint(-QMAX, QMAX + 1, (N, K), dtype=torch.int8, device="cuda", generator=g)
        return q, torch.rand(N, device="cuda", generator=g) * 1e-3 + 1e-4

    shapes = [BANDWIDTH_SHAPE] if quick else [(8192, 8192), (28672, 8192), (8192, 28672)]
    for N, K in shapes:
        ws = [weight(N, K) for _ in range(bench.copies_needed(N * K))]
        dense = [
            torch.randn(N, K, device="cuda", generator=g).to(dtype)
            for _ in range(bench.copies_needed(2 * N * K))
        ]
        peers = gemlite_layers(ws)
        ws_act = [(q, s.to(dtype)) for q, s in ws]  # _weight_int8pack_mm takes its scales in x's dtype
        for M in (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = bytes_moved(M, N, K)
            record("decode", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
                   bytes_moved_dense(M, N, K))  # fmt: skip
            record("decode", "naive: dequantize, matmul", M, N, K,
                   [lambda x=x, w=w: naive(x, *w) for w in ws], fused)  # fmt: skip
            record("decode", "torch._weight_int8pack_mm", M, N, K,
                   [lambda x=x, q=q, s=s: torch._weight_int8pack_mm(x, q, s) for q, s in ws_act], fused)  # fmt: skip
            record("decode", "gemlite A16W8 (pure Triton)", M, N, K,
                   None if peers is None else [lambda x=x, layer=layer: layer(x) for layer in peers], fused,
                   None if peers is None else gemlite_recheck(M))  # fmt: skip
            record("decode", "solution w8a16_decode", M, N, K, [lambda x=x, w=w: sol.w8a16_decode(x, *w) for w in ws],
                   fused, recheck(sol.w8a16_decode, M, N, K))  # fmt: skip
            record("decode", "solution w8a16_matmul (tiled)", M, N, K,
                   [lambda x=x, w=w: sol.w8a16_matmul(x, *w) for w in ws], fused)  # fmt: skip
    N = K = 8192
    ws = [weight(N, K) for _ in range(2)]
    dense = [torch.randn(N, K, device="cuda", generator=g).to(dtype) for _ in range(2)]
    for M in (2048,) if quick else (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = bytes_moved(M, N, K)
        record("prefill", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
               bytes_moved_dense(M, N, K))  # fmt: skip
        record(
            "prefill",
            "naive: dequantize, matmul",
            M,
            N,
            K,
            [lambda x=x, w=w: naive(x, *w) for w in ws],
            fused,
        )
        record("prefill", "solution w8a16_matmul", M, N, K, [lambda x=x, w=w: sol.w8a16_matmul(x, *w) for w in ws],
               fused, recheck(sol.w8a16_matmul, 300, 1000, 777))  # fmt: skip
