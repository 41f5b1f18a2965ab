"""What every chapter's kernel checks are built from: the activation dtypes graded on a device, the problems and
the rounding probe, the NaN-poisoned output, the cell's seed, the loop that checks a learner's kernel on a list of
problems, and the decode bandwidth cell (qmatmul/checks/harness.py times it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, harness
from qmatmul.scaffold.validation import device
from qmatmul.teaching.roofline_model import LAYER_SHAPE

# The decode shape every chapter grades bandwidth on (the roofline model's layer, a Llama-3-70B MLP projection:
# N x K = 28672 x 8192) and the rows it is timed at.
BANDWIDTH_SHAPE = LAYER_SHAPE
BANDWIDTH_MS = (1, 16)

__all__ = [
    "act_dtypes", "timing_activations", "problem", "PROBE_SCALE", "rounding_probe_weights",
    "rounding_probe_x", "poisoned_out", "cell", "call_quantizer", "check_kernel", "split_mistakes",
    "forced_split_cases", "check_decode_bandwidth",
]  # fmt: skip


def act_dtypes(device: str) -> list:
    """The activation dtypes the kernels are checked in on `device`; the last one is the one timed."""
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return [torch.float16, torch.bfloat16]
    return [torch.float16]  # the interpreter's bf16 tl.dot is wrong; T4 has no bf16 tensor cores


def timing_activations(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    """n activations [M, K] for the timed calls, stacked, drawn straight in the timed dtype (the timed window
    holds the draw: no float32 temporary)."""
    return (torch.randn(n, M, K, device=g.device, generator=g, dtype=act_dtypes(g.device.type)[-1]),)


def problem(x_shape, weights, dtype, device: str, g: torch.Generator, strided: bool) -> tuple:
    """A kernel check's call: random activations x [M, K] in `dtype` (a view of a wider buffer when `strided`),
    drawn after the weight, then the weight's tensors, all on `device`."""
    M, K = x_shape
    pad = 7 if strided else 0
    x_full = torch.randn(M, K + pad, generator=g).to(dtype).to(device)
    return x_full[:, :K], *(t.to(device) for t in weights)


# The rounding probe: one fixed problem on which a kernel that multiplies a scale into its 16-bit weights before tl.dot
# fails on every run, in fp16 and bf16 and for every group size; the random problems alone caught that in 2 to 77 runs
# of 100 (W8A16, W4A16, NVFP4's tensor scale and FP8's two scales, visible and hidden checks, 100-200 seeds on the CPU,
# 2026-12-04). x is all ones; along K each row of the weights repeats (1, 1, 1, -3) and ends in (1, 1, 1, -2), so it
# sums to 1 and the exact output is one scale. Every scale is PROBE_SCALE (NVFP4: its block scales are 1 and its tensor
# scale is PROBE_SCALE), a float32 for which 3·round16(s) - round16(3s) is 3 units in the last place of s in fp16 and in
# bf16, of one sign: rounding the weights adds 3 units a quad, K / 4 quads of one sign, 24 times the tolerance at K =
# 128, while a kernel that keeps the weights exact in the dot and scales the sums afterwards is exact up to fp32
# rounding (tests/test_checks.py).
PROBE_SCALE = float.fromhex("0x1.5921p-7")  # 0.0105325


def rounding_probe_weights(N: int, K: int) -> torch.Tensor:
    """The probe's weights [N, K] (int8: the codes minus the zero point, or the E2M1 values): each row sums to 1."""
    if K % 4:
        raise ValueError(f"the rounding probe needs K divisible by 4, got {K}")
    d = torch.tensor([1, 1, 1, -3], dtype=torch.int8).repeat(N, K // 4)
    d[:, -1] = -2
    return d


def rounding_probe_x(M: int, K: int, dtype, device: str, strided: bool) -> torch.Tensor:
    """The probe's activations: ones [M, K] in `dtype` (a view of a wider buffer when `strided`)."""
    return torch.ones(M, K + (7 if strided else 0), dtype=dtype, device=device)[:, :K]


# Rows of NaN kept below a checked output: a store without its row mask lands there (a tile is at most 256 rows), on
# a GPU as on a CPU, where the check sees and names it instead of the write reaching other memory (on a GPU, maybe
# a fault that ends the notebook's CUDA context). Under the interpreter the memory audit holds such stores back first.
GUARD_ROWS = 256


def poisoned_out(M: int, N: int, dtype, device: str, strided: bool):
    """A NaN-filled output, a view of a larger buffer (GUARD_ROWS more rows below it; 5 more columns when strided), so
    that stray writes can be seen: (full, out)."""
    pad = 5 if strided else 0
    full = torch.full((M + GUARD_ROWS, N + pad), float("nan"), dtype=dtype, device=device)
    return full, full[:M, :N]


def cell(seed: int | None) -> tuple[int, torch.Generator, str]:
    """A check cell's seed (fresh when None: no learner can predict it), the generator it seeds, the device."""
    seed = checks.fresh_seed() if seed is None else seed
    return seed, checks.generator(seed), device()


def call_quantizer(
    fn, w: torch.Tensor, *args, what: str, returns: Sequence[str], ctx: str, copy: bool = False
) -> tuple:
    """Call a learner's quantizer on w: it must return one tensor per name in `returns` and leave w untouched.

    copy=True hands the learner a copy of w, so that a quantizer which changes its input in place is harmless
    (W8A16 and W4A16, whose tests say so); otherwise w itself, and an in-place change fails the cell."""
    before = w.clone()
    result = checks.call_learner(fn, w.clone() if copy else w, *args, what=what)
    kind = {2: "pair", 3: "triple"}.get(len(returns), f"{len(returns)}-tuple")
    if not (isinstance(result, (tuple, list)) and len(result) == len(returns)):
        raise CheckFailed(f"{what} must return a {kind} ({', '.join(returns)}), got {type(result).__name__}")
    for name, t in zip(returns, result, strict=True):
        if not isinstance(t, torch.Tensor):
            raise CheckFailed(f"{what} must return {len(returns)} tensors; {name} is a {type(t).__name__}")
    if not torch.equal(w, before):
        raise CheckFailed(f"{what} modified its input w in place; leave the weights untouched.{ctx}")
    return tuple(result)


def check_kernel(fn, what: str, cases, *, g: torch.Generator, hidden: bool, seed: int, names: Sequence[str],
                 problem: Callable, reference: Callable, mistakes: Callable, dtypes=None,
                 strided_cases=(False, True), note: str = "", probe: Callable | None = None,
                 probe_case: tuple = (), extras: Sequence[str] = ("group_size",)) -> None:  # fmt: skip
    """A kernel check cell: the learner's matmul kernel on every case, dtype and layout, then one line of success.

    cases: (M, N, K) or (M, N, K, group_size), drawn from the cell's generator g (chapter.cell; seed is named in the
    success line). problem(*case, dtype, device, g, strided=strided), the chapter's random_problem, returns the
    call's tensors in order (named by `names`, x first); the case's entries after K are passed after them (named by
    `extras` in the messages). Each call
    writes into a NaN-poisoned `out` and must pass checks.verify_kernel_result against reference(*args), naming the
    known mistakes(*args) it matches. dtypes: the activation dtypes (default: every one this device checks).
    probe(*probe_case, dtype, device, strided=strided), where given, builds one fixed problem more (the rounding
    probe above), run last in every dtype and layout, visible and hidden checks alike.
    """
    dev = device()
    n = 0
    runs = [(case, lambda *a, strided: problem(*a, g, strided=strided), "") for case in cases]
    if probe is not None:
        runs.append((probe_case, probe, ", the rounding probe: x = 1"))
    for case, make, label in runs:
        M, N, K, *extra = case
        for dtype in act_dtypes(dev) if dtypes is None else dtypes:
            for strided in strided_cases:
                tensors = make(*case, dtype, dev, strided=strided)
                inputs = dict(zip(names, tensors, strict=True))
                full, out = poisoned_out(M, N, dtype, dev, strided)
                before = checks.snapshot(inputs)
                args = (*tensors, *extra)
                group = "".join(f", {name}={v}" for name, v in zip(extras, extra, strict=False))
                ctx = (f" (M={M}, N={N}, K={K}{group}, {str(dtype).replace('torch.', '')}"
                       f"{', strided x and out' if strided else ''}{label})")  # fmt: skip
                y, ops = checks.run_audited(fn, *args, out=out, what=what)
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(*args),
                                            mistakes=checks.lazily(mistakes, *args), ctx=ctx)  # fmt: skip
                n += 1
    checks.passed(
        f"{what}: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed}){note}"
    )


def split_mistakes(partial: Callable, K: int, split: int, block_k: int, chapter: str) -> list:
    """The K split's known mistakes (W8A16's and FP8's decode) on a problem whose product over K's columns [lo, hi)
    is partial(lo, hi) (float32, on the host), launched with `split` slices of whole `block_k` steps, as
    `splitk.k_slice` cuts them: none unsplit."""
    if split == 1:
        return []
    span = math.ceil(math.ceil(K / block_k) / split) * block_k
    parts = tuple(partial(lo, lo + span) for lo in range(0, split * span, span))
    return [
        Mistake(
            "the parts of K not added",
            f"With SPLIT_K = {split}, each program sums one slice of K, and y holds whichever slice stored last: hand "
            f"the scaled acc to {chapter}.finish, which adds the slices' parts (or stores y itself when K is not "
            "split).",
            parts,
        ),
        Mistake(
            "every program sums all of K",
            f"The output is SPLIT_K = {split} times the product: each program must loop over its own slice of K only, "
            f"range(lo, hi, BLOCK_K) with lo, hi = {chapter}.k_slice(K, BLOCK_K, SPLIT_K, pid_k).",
            sum(parts) * split,
        ),
    ]


def forced_split_cases(g: torch.Generator, hidden: bool, block_k: Callable) -> list[tuple[int, tuple]]:
    """The K splits a decode check forces on every device, (split, (M, N, K)): three slices that each hold part of K
    (K spans three BLOCK_K steps of the launch, block_k(M, N), the last one ragged), and one. Hidden: fresh M, N and K
    within those bounds."""
    if not hidden:
        M3, N3, M1, N1, K1 = 5, 40, 1, 64, 128
        return [(3, (M3, N3, 3 * block_k(M3, N3) - 7)), (1, (M1, N1, K1))]
    M3, M1 = (int(m) for m in torch.randint(1, 17, (2,), generator=g))
    N3, N1, K1 = (int(torch.randint(33, 200, (1,), generator=g)) for _ in range(3))
    bk = block_k(M3, N3)
    return [(3, (M3, N3, int(torch.randint(2 * bk + 1, 3 * bk + 1, (1,), generator=g)))), (1, (M1, N1, K1))]


def check_decode_bandwidth(fn, *, what: str, module: str, shape, Ms, nbytes, threshold: float, seed, hint: str,
                           out_dtype=None):  # fmt: skip
    """A decode kernel's performance cell (qmatmul/checks/harness.py times it); without a CUDA GPU it awards nothing."""
    if not torch.cuda.is_available():
        return harness.not_on_cpu(what, threshold)
    N, K = shape
    return harness.check_bandwidth(
        fn, what=what, module=module, N=N, K=K, Ms=Ms, out_dtype=out_dtype or act_dtypes("cuda")[-1],
        nbytes=nbytes, threshold=threshold, hint=hint, seed=seed,
    )  # fmt: skip


def named_16_bit(
    report: str, fn, w: torch.Tensor, *args, what: str, returns: Sequence[str], reference
) -> str:
    """A quantizer's failed report on a 16-bit w, led by the mistake when fn gives the reference on the same values in
    float32 (exact there): its arithmetic followed w's dtype. reference(w) is the reference's outputs, in order."""
    if w.dtype not in (torch.float16, torch.bfloat16) or "known mistake" in report:
        return report
    try:
        result = checks.call_learner(fn, w.float(), *args, what=what)
    except CheckFailed:
        return report
    ref = reference(w)
    if not (isinstance(result, (tuple, list)) and len(result) == len(returns) == len(ref)) or not all(
        isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a.to(b.dtype), b)
        for a, b in zip(result, ref, strict=True)
    ):
        return report
    dtype = str(w.dtype).removeprefix("torch.")
    return (f"This matches a known mistake: computed in {dtype}. The same values in float32 give the reference: "
            f"compute in float32 (w.float() first). In {dtype} every division and rounding lands on 16-bit values.\n"
            f"{report}")  # fmt: skip
