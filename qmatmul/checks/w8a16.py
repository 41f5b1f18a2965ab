"""Chapter W8A16, the trusted grading: the decode grading's shape and threshold, the test inputs, the known
mistakes and the checks of each exercise, and the timed problem (timing_weights, timing_inputs, reference) that
qmatmul/checks/harness.py draws by this module's name.
"""

from __future__ import annotations

import functools

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common, traffic
from qmatmul.formats.w8a16 import QMAX, bytes_moved, quantize, reference
from qmatmul.scaffold.w8a16 import decode_config, use_split
from qmatmul.teaching import roofline_model

# Decode grading: a weight of 28672 x 8192 int8 (235 MB) is about 4x the H200's L2 and 60x a T4's.
BANDWIDTH_SHAPE = common.BANDWIDTH_SHAPE
BANDWIDTH_MS = common.BANDWIDTH_MS
BANDWIDTH_THRESHOLD = 0.5  # fraction of the copy bandwidth measured in the same process


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Weights whose rows have distinct magnitudes (so every channel gets a distinct scale)."""
    row_scale = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=g)) * 0.02
    return (torch.randn(N, K, generator=g) * row_scale).to(dtype)


def random_problem(M: int, N: int, K: int, dtype, device: str, g: torch.Generator, strided: bool = False):
    """x [M, K] (a strided view when `strided`), q, s from the reference quantizer."""
    return common.problem((M, K), quantize(random_weight(N, K, g)), dtype, device, g, strided)


def rounding_probe(M: int, N: int, K: int, dtype, device: str, strided: bool = False):
    """The checks' rounding probe (qmatmul/checks/common.py): x of ones and rows of q summing to 1, one PROBE_SCALE each;
    a scale folded into 16-bit weights before the dot misses it on every run."""
    q, s = common.rounding_probe_weights(N, K), torch.full((N,), common.PROBE_SCALE)
    return common.rounding_probe_x(M, K, dtype, device, strided), q.to(device), s.to(device)


# ----------------------------------------------------------------------------------------------------------
# Checks for exercise 1: the quantizer


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        w = random_weight(16, 256, g)
        w[0] = 0  # an all-zero row: the text asks for s = 1 there
        w[2] = -w[2].abs()  # negative-dominated: max != max |w|
        # and a fixed bf16 weight, on which a scale computed in w's own dtype differs (tests/test_text_claims.py)
        return [random_weight(8, 32, g), w, random_weight(16, 256, checks.generator(1), torch.bfloat16)]
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
    seed, g, _ = common.cell(seed)
    what = "quantize_int8_per_channel"
    try:
        for w in _quantizer_inputs(g, hidden):
            N, K = w.shape
            ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}])"
            q, s = common.call_quantizer(fn, w, what=what, returns=("q", "s"), ctx=ctx, copy=True)
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
                where = checks.where_2d(diff != 0, ("rows", "columns"))
                lines = [f"q differs from the reference in {n_bad} of {q.numel()} elements{ctx}"]
                if named:
                    lines.insert(0, named)
                elif int(diff.abs().max()) == 1:
                    lines.append(
                        "Every difference is ±1: check the rounding (round half to even, torch.round)."
                    )
                lines.append(f"Differences lie {where}.")
                raise CheckFailed("\n".join(lines))
    except CheckFailed as exc:
        raise CheckFailed(common.named_16_bit(str(exc), fn, w, what=what, returns=("q", "s"), reference=quantize)) from None  # fmt: skip
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
            "Apply s once, to the accumulator in the epilogue.",
            raw * sf[None, :] ** 2,
        ),
        Mistake(
            "weights rounded to 16 bits",
            "q · s rounded to fp16/bf16 before the dot loses up to half a unit in the last place per weight, and "
            "the output drifts past the tolerance: put q itself in the dot (every int8 is exact in fp16 and bf16) "
            "and multiply the accumulator by s in the epilogue.",
            xf @ (qf * sf[:, None]).to(x.dtype).float().T,
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


def split_mistakes(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> list[Mistake]:
    """Exercise 3's known mistakes: the kernels' (kernel_mistakes) and the K split's (common.split_mistakes), at the
    split and tiles decode_config gives for this problem (what the check forced, or the device's own)."""
    M, K = x.shape
    cfg = decode_config(M, q.shape[0], K, x.device.type)
    xf, w = x.float().cpu(), q.float().cpu() * s.float().cpu()[:, None]
    partial = lambda lo, hi: xf[:, lo:hi] @ w[:, lo:hi].T
    return kernel_mistakes(x, q, s) + common.split_mistakes(
        partial, K, cfg["SPLIT_K"], cfg["BLOCK_K"], "w8a16"
    )


# common.check_kernel(fn, what, cases, **kw) on this chapter's problems, reference and known mistakes
_check_kernel = functools.partial(
    common.check_kernel, names=("x", "q", "s"), problem=random_problem,
    reference=reference, mistakes=kernel_mistakes, probe=rounding_probe, probe_case=(2, 64, 128),
)  # fmt: skip


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: the tiled kernel on ragged shapes, poisoned output, strided views, fused (no torch matmul)."""
    seed, g, device = common.cell(seed)
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
    _check_kernel(fn, "w8a16_matmul", shapes, g=g, hidden=hidden, seed=seed)


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N and K, with the device's own launch (its K split, if any), then
    with K forced into three slices, each holding part of K (on every device: the parts must be added), and unsplit."""
    seed, g, device = common.cell(seed)
    if not hidden:
        shapes = [(1, 64, 1000), (16, 96, 200)]
    else:
        big = device == "cuda"
        shapes = [
            (M, int(torch.randint(33, 2000 if big else 200, (1,), generator=g)),
             int(torch.randint(40, 3000 if big else 300, (1,), generator=g)))
            for M in (1, int(torch.randint(2, 16, (1,), generator=g)), 16)
        ]  # fmt: skip
    check = functools.partial(
        _check_kernel, fn, "w8a16_decode", g=g, hidden=hidden, seed=seed, mistakes=split_mistakes
    )
    check(shapes)
    block_k = lambda M, N: decode_config(M, N, 4096, device)["BLOCK_K"]
    for split, case in common.forced_split_cases(g, hidden, block_k):
        with use_split(split):
            check(
                [case],
                probe=None,
                strided_cases=(False,),
                note=f", K split {split} way{'s' * (split > 1)} (forced)",
            )


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> None:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth.

    Awards nothing without a CUDA GPU. After timing, correctness is checked again on fresh inputs.
    """
    if not torch.cuda.is_available() and not checks.is_remote(fn):  # feedback in the learner's own notebook
        traffic_feedback(fn)
    return common.check_decode_bandwidth(
        fn, what="w8a16_decode", module=__name__, shape=BANDWIDTH_SHAPE, Ms=BANDWIDTH_MS, threshold=threshold,
        seed=seed, nbytes=lambda M: bytes_moved(M, *BANDWIDTH_SHAPE),
        hint=f"The naive dequantize-then-matmul path moves {roofline_model.naive_factor('w8a16', 1, *BANDWIDTH_SHAPE):.1f} "
        "times the bytes a fused kernel must (at M = 1 on the timed shape): load each int8 tile once and keep it "
        "in registers.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/checks/harness.py): random int8 codes and scales, built alike on both sides."""
    q = torch.randint(-QMAX, QMAX + 1, (N, K), dtype=torch.int8, device=g.device, generator=g)
    s = torch.rand(N, device=g.device, generator=g) * 1e-3 + 1e-4
    return q, s


timing_inputs = common.timing_activations  # the timed activations (qmatmul/checks/harness.py)


def traffic_feedback(fn, M: int = 16, N: int = 256, K: int = 512) -> None:
    """In the interpreter: how often the decode kernel reads each tensor (feedback only, no points)."""
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
