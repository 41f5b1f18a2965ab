"""Chapter FP8's checks of exercise 5, the block-scaled GEMM (DeepSeek-V3: activations in 1 x 128 blocks, weights in
128 x 128): its test inputs, its known mistakes, the rounding probes that show scales folded into the tiles on every
run, and the diagnosis that names a wrong block index (which reads past the end of the scales, so the memory audit
alone would answer "mask every load"). Exercises 3 and 4 are checked in qmatmul/checks/fp8.py."""

from __future__ import annotations

import re

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.checks.fp8 import (
    _run_path,
    check_fixed,
    checked_paths,
    name_overflowing,
    path_name,
    random_matrix,
    skipped_path_note,
)
from qmatmul.formats.fp8 import E4M3, SCALE_BLOCK, block_reference, cdiv, quantize
from qmatmul.scaffold.fp8 import block_config, out_dtype, use_path

# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_block_problem(M, N, K, device, g, strided=False):
    """xq [M, K] (a strided view when asked) with 1 x 128 scales, wq [N, K] with 128 x 128 scales."""
    pad = 9 if strided else 0
    x = random_matrix(M, K + pad, g, outliers=True)
    xq_full, _ = quantize(x, (1, SCALE_BLOCK))
    xq = xq_full[:, :K]
    _, sx = quantize(x[:, :K], (1, SCALE_BLOCK))
    w = random_matrix(N, K, g) * 0.02
    w *= torch.exp(torch.empty(1, K).uniform_(-2.0, 2.0, generator=g))  # K blocks of distinct magnitudes
    wq, sw = quantize(w, (SCALE_BLOCK, SCALE_BLOCK))
    return xq.to(device), sx.to(device), wq.to(device), sw.to(device)


def block_rounding_problems(M: int, N: int, K: int, device: str) -> list[tuple]:
    """The rounding probe (qmatmul/checks/common.py) with block scales, (which, (xq, sx, wq, sw)): one operand's rows
    sum to 1 along K with every block scale PROBE_SCALE, the other is ones with scales 1. Every full K block of the
    probe sums to 0 and the last to 1, so the exact output is PROBE_SCALE; a kernel that multiplies a block scale
    into its 16-bit tile before the dot is off by about 100 units in the last place of it (tests/test_fp8.py)."""
    d, s = common.rounding_probe_weights(max(M, N), K).float(), common.PROBE_SCALE
    kb, nb = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    problems = []
    for ones, xs, ws, sx, sw in (
        ("x", torch.ones(M, K), d[:N], 1.0, s),
        ("w", d[:M], torch.ones(N, K), s, 1.0),
    ):
        args = (xs.to(E4M3), torch.full((M, kb), sx), ws.to(E4M3), torch.full((nb, kb), sw))
        problems.append((ones, tuple(t.to(device) for t in args)))
    return problems


# ----------------------------------------------------------------------------------------------------------
# Known mistakes

BLOCK_FOLDED = ("before the dot rounds every product to 16 bits (the e4m3 values themselves are exact there), and "
                "the output drifts past the tolerance: start each K block's product from zero, part = tl.dot(x, w), "
                "and multiply the fp32 part by sx[m, kb] · sw[n // 128, kb] before adding it to acc.")  # fmt: skip


def _per_block(xq, sx, wq, sw, sx_of, sw_of, fold_x=None, fold_w=None) -> torch.Tensor:
    """Σ_kb (x_kb @ w_kb.T) · sx_of(kb)[:, None] · sw_of(kb)[None, :], in float64; fold_x / fold_w (a 16-bit dtype)
    multiply that operand's scale into its tile instead, rounded to the dtype, as a kernel that folds it does."""
    xf, wf = xq.double().cpu(), wq.double().cpu()
    M, N = xf.shape[0], wf.shape[0]
    y = torch.zeros(M, N, dtype=torch.float64)
    for kb in range(cdiv(xf.shape[1], SCALE_BLOCK)):
        k = slice(kb * SCALE_BLOCK, (kb + 1) * SCALE_BLOCK)
        a, b, sa, sb = xf[:, k], wf[:, k], sx_of(kb), sw_of(kb)
        if fold_x is not None:
            a, sa = (a * sa[:, None]).to(fold_x).double(), torch.ones_like(sa)
        if fold_w is not None:
            b, sb = (b * sb[:, None]).to(fold_w).double(), torch.ones_like(sb)
        y += (a @ b.T) * sa[:, None] * sb[None, :]
    return y.float()


def block_mistakes(xq, sx, wq, sw, dtype: torch.dtype | None = None) -> list[Mistake]:
    """The known wrong outputs; with `dtype` (the output's 16-bit type) also a scale folded into a tile, rounded
    to fp16 (the decoded tiles' type) or to `dtype`."""
    M = xq.shape[0]
    N = wq.shape[0]
    sxd, swd = sx.double().cpu(), sw.double().cpu()
    last = sxd.shape[1] - 1
    sw_rows = swd.repeat_interleave(SCALE_BLOCK, 0)[:N]  # [N, nkb]

    def nxt(t, zero_last):
        return lambda kb: (
            t[:, kb + 1] if kb < last else (torch.zeros_like(t[:, 0]) if zero_last else t[:, last])
        )

    def mistake(name, explanation, sx_of=lambda kb: sxd[:, kb], sw_of=lambda kb: sw_rows[:, kb], **fold):
        return Mistake(name, explanation, _per_block(xq, sx, wq, sw, sx_of, sw_of, **fold))

    raw = (xq.double().cpu() @ wq.double().cpu().T).float()
    off = ("K step k0 uses the scales of K block k0 // BLOCK_K (here the next block's were used): index sx[m, kb] "
           "and sw[n // 128, kb] with kb = k0 // BLOCK_K.")  # fmt: skip
    ones_n, ones_m = torch.ones(N, dtype=torch.float64), torch.ones(M, dtype=torch.float64)
    out = [
        mistake("block-scale index off by a block", off, nxt(sxd, True), nxt(sw_rows, True)),
        mistake("block-scale index off by a block", off, nxt(sxd, False), nxt(sw_rows, False)),
        Mistake("scales of the last K block applied in the epilogue", "Block scales change along K: multiply "
                "each K block's partial product by its own scales inside the loop, then add it to the fp32 "
                "accumulator.", (raw.double() * sxd[:, last, None] * sw_rows[None, :, last]).float()),
        Mistake("scales missing", "Multiply each K block's partial product by sx[m, kb] · sw[n // 128, kb].", raw),
        Mistake("exponent bias not corrected", "e4m3 has bias 7, fp16 bias 15: the decoded tiles are 2^-8 too "
                "small, so the product is 2^-16 too small (exercise 2).", block_reference(xq, sx, wq, sw) * 2.0**-16),
        mistake("weight block scale missing", "Each K block's product needs the weight block's scale "
                "sw[n // 128, kb] too.", sw_of=lambda kb: ones_n),
        mistake("activation block scale missing", "Each K block's product needs the token's scale sx[m, kb] too.",
                sx_of=lambda kb: ones_m),
    ]  # fmt: skip
    if dtype is not None:
        for d in dict.fromkeys((torch.float16, dtype)):
            out += [
                mistake("sw folded into the weights", f"sw[n // 128, kb] multiplied into the decoded weight tile "
                        f"{BLOCK_FOLDED}", fold_w=d),
                mistake("sx folded into the activations", f"sx[m, kb] multiplied into the decoded activation tile "
                        f"{BLOCK_FOLDED}", fold_x=d),
            ]  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------------------------
# Wrong block indices: named by running the kernel once more with its scales at the start of larger buffers

# (name, explanation, sx's flat index, sw's flat index) for m, n, kb (int64 tensors), nkb and a tile's BLOCK_N
INDEX_MISTAKES = [
    ("K-block index off by one (k0 // SCALE + 1)", "K step k0 covers K block kb = k0 // SCALE: with + 1 every step "
     "takes the next block's scales, and the last step reads past the end of sx and sw, which no mask can fix. "
     "Use kb = k0 // SCALE.", lambda m, kb, nkb: m * nkb + kb + 1,
     lambda n, kb, nkb, bn: (n // SCALE_BLOCK) * nkb + kb + 1),
    ("weight-scale row taken from the tile (offs_n // BLOCK_N)", "The scale block of output channel n is n // SCALE "
     "(128 channels a block), whatever the tile's BLOCK_N: sw_ptr + (offs_n // SCALE) * stride_swn + kb * stride_swk. "
     "With BLOCK_N ≠ 128 the tile's index reads other blocks' scales, and past the end of sw.",
     lambda m, kb, nkb: m * nkb + kb, lambda n, kb, nkb, bn: (n // bn) * nkb + kb),
]  # fmt: skip
INDEX_SHAPE = (40, 200, 300)  # M, N over two weight blocks, K over three


def index_problem(device: str) -> tuple:
    """A fixed problem (xq, sx, wq, sw) whose sx and sw are the first elements of zero-filled buffers 8 times larger:
    a wrong block index that reads past their end reads memory of the check's own, on a GPU too (in the
    interpreter such a load is held back: qmatmul/checks/traffic.py)."""
    M, N, K = INDEX_SHAPE
    xq, sx, wq, sw = random_block_problem(M, N, K, "cpu", checks.generator(11))
    views = []
    for t in (sx, sw):
        buf = torch.zeros(8 * max(t.numel(), 512), dtype=t.dtype, device=device)
        buf[: t.numel()] = t.flatten().to(device)
        views.append(buf[: t.numel()].view(t.shape))
    return xq.to(device), views[0], wq.to(device), views[1]


def index_outputs(xq, sx, wq, sw, block_n: set[int]) -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """What each wrong index of INDEX_MISTAKES computes (BLOCK_N: each of block_n), and where that is known: the
    outputs whose every scale read lies inside sx and sw ((name, explanation, output, known))."""
    M, N = xq.shape[0], wq.shape[0]
    nkb = sx.shape[1]
    xb, wb = sx.double().cpu().flatten(), sw.double().cpu().flatten()
    m, n = torch.arange(M), torch.arange(N)
    out = []
    for name, explanation, ix, iw in INDEX_MISTAKES:
        for bn in sorted(block_n) if "BLOCK_N" in name else [SCALE_BLOCK]:
            xi = [ix(m, kb, nkb) for kb in range(nkb)]
            wi = [iw(n, kb, nkb, bn) for kb in range(nkb)]
            known_m = torch.stack([i < xb.numel() for i in xi]).all(0)
            known_n = torch.stack([i < wb.numel() for i in wi]).all(0)

            def read(buf, idx):
                return torch.where(idx < buf.numel(), buf[idx.clamp_max(buf.numel() - 1)], 0.0)

            y = _per_block(
                xq, None, wq, None, lambda kb, xi=xi: read(xb, xi[kb]), lambda kb, wi=wi: read(wb, wi[kb])
            )
            out.append((name, explanation, y, known_m[:, None] & known_n[None, :]))
    return out


def diagnose_index(fn, what: str, fp8_dot: bool, device: str) -> str | None:
    """Run fn once more on index_problem; the wrong block index its output matches, where that is known, or None."""
    xq, sx, wq, sw = index_problem(device)
    M, N, K = INDEX_SHAPE
    dtype = out_dtype(device)
    out = torch.full((M, N), float("nan"), dtype=dtype, device=device)
    try:
        with use_path(fp8_dot):
            bn = int(block_config(M, N, K, device).get("BLOCK_N", SCALE_BLOCK))
            y = checks.call_learner(fn, xq, sx, wq, sw, out=out, what=what)
    except (CheckFailed, RuntimeError, ValueError, TypeError):
        return None
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (M, N):
        return None
    got, rtol = y.detach().float().cpu(), checks.tolerance_for(dtype)
    ref = block_reference(xq, sx, wq, sw)
    for name, explanation, want, known in index_outputs(xq, sx, wq, sw, {bn, 16, 32, 64, 256}):
        if (
            known.any()
            and checks.mismatch(ref[known], want[known], rtol).any()  # tells the index from the right one
            and checks.mismatch(got[known], ref[known], rtol).any()
            and not checks.mismatch(got[known], want[known], rtol).any()
        ):
            return f"This matches a known mistake: {name}. {explanation}"
    return None


OUTSIDE = re.compile(r"accessed memory outside its tensors \((\d+) loads, (\d+) stores\)")


def _named_index(report: str, fn, what: str, fp8_dot: bool, device: str, ctx: str) -> str:
    """A failed block check's report, led by the wrong block index it shows where the diagnosis finds one (an
    access outside the tensors is then that index, not a missing mask)."""
    if "known mistake" in report:
        return report
    outside = OUTSIDE.search(report)
    if outside and int(outside[2]):
        return report  # stores outside: not run again unaudited
    named = diagnose_index(fn, what, fp8_dot, device)
    if named is None:
        return report
    if outside:
        head = (f"{what} read {outside[1]} values past the end of its tensors{ctx}: that is the block index below, "
                "not a missing mask.")  # fmt: skip
        return "\n".join([head, named])
    head, *rest = report.splitlines()
    return "\n".join([head, named, *rest])


# ----------------------------------------------------------------------------------------------------------
# The check


def check_block_matmul(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 5: the block-scaled GEMM on both paths, ragged shapes, strided views, poisoned output, fused, then
    the rounding probes (scales folded into a tile fail them on every run)."""
    seed, g, device = common.cell(seed)
    what = "fp8_block_matmul"
    dtype = out_dtype(device)
    if not hidden:
        shapes = [(40, 160, 300), (50, 200, 260)]  # N over two weight blocks, K over three
    else:
        big = device == "cuda"
        shapes = [(int(torch.randint(17, 300 if big else 70, (1,), generator=g)),
                   int(torch.randint(129, 700 if big else 260, (1,), generator=g)),
                   int(torch.randint(129, 1500 if big else 420, (1,), generator=g))) for _ in range(2)]  # fmt: skip
        shapes.append((1, 130, 77))
    n = 0
    for fp8_dot in checked_paths(device):
        path = path_name(fp8_dot, device)
        for i, (M, N, K) in enumerate(shapes):
            strided = i % 2 == 1
            xq, sx, wq, sw = random_block_problem(M, N, K, device, g, strided=strided)
            full, out = common.poisoned_out(M, N, dtype, device, strided)
            ctx = f" (M={M}, N={N}, K={K}, {path}{', strided xq and out' if strided else ''})"
            inputs = dict(xq=xq, sx=sx, wq=wq, sw=sw)
            before = checks.snapshot(inputs)
            try:
                y, ops = _run_path(fn, (xq, sx, wq, sw, out), fp8_dot, n, what)
                mistakes = checks.lazily(block_mistakes, xq, sx, wq, sw, dtype=dtype)
                try:
                    checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out,
                                                full=full, weight_shape=(N, K), dtype=dtype,
                                                expected=block_reference(xq, sx, wq, sw), mistakes=mistakes,
                                                ctx=ctx)  # fmt: skip
                except CheckFailed as exc:
                    raise CheckFailed(name_overflowing(str(exc), y, mistakes, dtype)) from None
            except CheckFailed as exc:
                raise CheckFailed(_named_index(str(exc), fn, what, fp8_dot, device, ctx)) from None
            n += 1
    M, N, K = 16, 64, 256  # two K blocks
    probes = [(args, f", the rounding probe: {ones} = 1", True, "")
              for ones, args in block_rounding_problems(M, N, K, device)]  # fmt: skip
    n += check_fixed(fn, what, device, M, N, K, probes, reference=block_reference, mistakes_of=block_mistakes)
    checks.passed(f"{what}: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})."
                  + skipped_path_note(device))  # fmt: skip
