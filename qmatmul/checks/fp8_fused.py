"""Chapter FP8's checks of exercise 6, the decode kernel that quantizes its activations itself: y must equal
fp8_decode(*quantize_fp8(x, (1, K)), wq, sw) in one launch. Its test inputs, its known mistakes (each a model of what
a wrong kernel computes), the probes that read the quantization back bit for bit, and the audit of what a call ran
(PyTorch arithmetic on x, or more than one kernel launch, earns nothing). Exercises 3 and 4 are checked in
qmatmul/checks/fp8.py, exercise 5 in qmatmul/checks/fp8_block.py.

The probes (qmatmul/checks/fp8_probes.py): one-hot weight rows (wq[n, k_n] = 1, sw = 1) make y[m, n] = xq[m, k_n]
· sx[m], one quantized activation times its row's scale, rounded once to the output dtype, so the codes are compared
exactly. Their rows (PROBE_ROWS) keep their largest magnitude at k = K - 1, in the last, partial K tile for every BLOCK_K from 16 to 1024
(one row at k = 0 instead), and put values on, beside and above the midpoints between e4m3 values in every tile."""

from __future__ import annotations

import contextlib

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.checks.fp8 import _run_path, checked_paths, path_name, random_matrix, skipped_path_note
from qmatmul.checks.fp8_probes import (
    PROBE_MS,
    PROBE_N,
    probe_columns,
    probe_k,
    probe_problem,
)
from qmatmul.formats.fp8 import E4M3, E4M3_MAX, quantize, reference, saturate
from qmatmul.scaffold.fp8 import fused_config

WHAT = "fp8_decode_fused"
RECIPROCAL = "a reciprocal multiplied where x / sx divides (x · (448 / amax), x · (1 / sx) or the like)"
ZERO_ROW = (
    "an all-zero row's scale left at 0",
    "max |x| / 448 is 0 for a row of zeros, and 0 / 0 (or 0 · (448 / 0)) is NaN: give such a row sx = 1, "
    "tl.where(amax > 0, tl.div_rn(amax, 448.0), 1.0).",
)
# The K steps a learner's kernel may take (fused_config gives 128 in the interpreter, 32 to 1024 on GPUs): each known
# mistake that depends on the tiles is modelled for every one of them shorter than K.
BLOCK_KS = (16, 32, 64, 128, 256, 512, 1024)

# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_problem(M, N, K, dtype, device, g, strided=False, zero_row=None, last_tile_row=None):
    """x [M, K] in `dtype` (a view of a wider buffer when strided) with rows of distinct magnitudes, wq [N, K] and sw
    [N] from the reference quantizer. zero_row: a row of zeros (its scale is 1); last_tile_row: a row whose largest
    magnitude is its last element (k = K - 1, in the last K tile whatever BLOCK_K)."""
    pad = 9 if strided else 0
    x = random_matrix(M, K + pad, g)
    if zero_row is not None:
        x[zero_row] = 0
    if last_tile_row is not None:
        r = last_tile_row
        x[r, K - 1] = -3.0 * float(x[r, :K].abs().max())
    x = x.clamp(-6e4, 6e4).to(dtype)
    wq, sw = quantize(random_matrix(N, K, g) * 0.02, (1, K))
    return x[:, :K].to(device), wq.to(device), sw.reshape(-1).to(device)


def fused_reference(x, wq, sw) -> torch.Tensor:
    """What exercise 6 must compute: fp8_decode(*quantize_fp8(x, (1, K)), wq, sw) in float32 (the reference
    quantizer, then the reference product), on the CPU."""
    xq, sx = quantize(x.cpu(), (1, x.shape[1]))
    return reference(xq, sx, wq.cpu(), sw.cpu())


# ----------------------------------------------------------------------------------------------------------
# Known mistakes: what each wrong kernel computes


def _rows_amax(xf: torch.Tensor) -> torch.Tensor:
    return xf.abs().amax(dim=1) if xf.shape[1] else torch.zeros(xf.shape[0])


def _scale(amax: torch.Tensor) -> torch.Tensor:
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def _tiles(K: int, bk: int):
    return [slice(k0, min(K, k0 + bk)) for k0 in range(0, K, bk)]


def _truncated(v: torch.Tensor) -> torch.Tensor:
    """v rounded toward zero to e4m3 (saturated at ±448), as e4m3 values in float32."""
    v = v.clamp(-E4M3_MAX, E4M3_MAX)
    q = v.to(E4M3)
    codes = q.view(torch.uint8).to(torch.int32)
    over = q.float().abs() > v.abs()
    codes = torch.where(over, codes - 1, codes)  # one code toward zero (codes grow with the magnitude)
    return codes.to(torch.uint8).view(E4M3).float()


def _ties_away(v: torch.Tensor) -> torch.Tensor:
    """v rounded to nearest e4m3, ties away from zero (saturated)."""
    v = v.clamp(-E4M3_MAX, E4M3_MAX)
    lo = _truncated(v)
    codes = lo.to(E4M3).view(torch.uint8).to(torch.int32)
    up = torch.where((codes & 0x7F) < 0x7E, codes + 1, codes).to(torch.uint8).view(E4M3).float()
    tie = (v.abs() - lo.abs()) == (up.abs() - v.abs())
    return torch.where(tie & (up.abs() > lo.abs()), up, saturate(v).float())


def _interpreter_cast(v: torch.Tensor) -> torch.Tensor | None:
    """v converted as Triton's interpreter converts float32 to float8e4nv (`.to(tl.float8e4nv)`): it rounds a half up
    and loses the carry out of the mantissa (31.6 becomes 16). None where that conversion cannot be run here."""
    try:
        import numpy as np
        import triton.language as tl
        from triton._C.libtriton import ir
        from triton.runtime.interpreter import _convert_float
    except ImportError:  # pragma: no cover - another triton
        return None
    try:
        data = v.contiguous().numpy().astype(np.float32)
        bits = _convert_float(data, tl.float32, tl.float8e4nv, ir.ROUNDING_MODE.RTNE)
    except Exception:  # noqa: BLE001 - a triton whose interpreter converts otherwise: no model
        return None
    return torch.from_numpy(np.ascontiguousarray(bits).astype(np.uint8)).view(E4M3).float()


def quantization_models(x: torch.Tensor, block_k: int, device: str):
    """(name, explanation, q, e): the wrong quantizations of x a kernel stepping K by block_k may compute, as e4m3
    values q [M, K] (float64) and the scale e [M, K] (float64) each one's product is multiplied by."""
    xf = x.float().cpu()
    M, K = xf.shape
    s = _scale(_rows_amax(xf))
    rows = s[:, None].expand(M, K)
    out = []

    def add(name, explanation, q, e=rows):
        out.append((name, explanation, q.double(), e.double().expand(M, K)))

    tiles = _tiles(K, block_k)
    if len(tiles) > 1:
        first = _scale(_rows_amax(xf[:, tiles[0]]))
        add(
            f"amax of the first K tile only (BLOCK_K = {block_k})",
            "Each row's scale needs the whole row: walk "
            "all of K once, reading x alone, and keep each row's running maximum; quantize in a second loop, once "
            "sx is known.",
            saturate(xf / first[:, None]).float(),
            first[:, None],
        )
        own = torch.cat([_scale(_rows_amax(xf[:, t]))[:, None].expand(M, t.stop - t.start) for t in tiles], 1)
        add(
            f"amax of each K tile on its own (BLOCK_K = {block_k})",
            "That is a scale per 1 x BLOCK_K block, not "
            "per row: the reference has one sx per row, max |x| over all of K / 448. Find it in a first pass over "
            "K, then quantize.",
            saturate(xf / own).float(),
            own,
        )
        add(
            f"amax of each K tile on its own, the last tile's in the epilogue (BLOCK_K = {block_k})",
            "Each row's "
            "scale needs the whole row: find max |x| over all of K in a first pass, then quantize every tile with "
            "that one sx.",
            saturate(xf / own).float(),
            own[:, -1:],
        )
        running = torch.cat([_scale(_rows_amax(xf[:, : t.stop]))[:, None].expand(M, t.stop - t.start)
                             for t in tiles], 1)  # fmt: skip
        add(
            f"amax taken as the loop goes (BLOCK_K = {block_k})",
            "A tile quantized before the row's largest "
            "value is read uses a scale that is too small (its values saturate at 448): find each row's amax in "
            "a first pass over the whole of K, then quantize in a second.",
            saturate(xf / running).float(),
        )
    f32 = torch.float32
    amax = _rows_amax(xf)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))[:, None]
    # Four ways of multiplying by a reciprocal: the probes' midpoints move each of them the same way, so they share
    # one name.
    s_mul = _scale(amax * torch.tensor(1 / E4M3_MAX, dtype=f32))  # sx = amax * (1 / 448), in the epilogue too
    recip = [
        (xf * (torch.tensor(E4M3_MAX, dtype=f32) / safe), rows),  # x * (448 / amax)
        (xf * (1.0 / s)[:, None], rows),  # x * (1 / sx)
        ((xf * E4M3_MAX) / safe, rows),  # x * 448 / amax
        (xf / s_mul[:, None], s_mul[:, None]),  # x / sx with sx = amax * (1 / 448)
    ]
    for v, e in recip:
        v = torch.where(amax[:, None] > 0, v, xf)
        add(
            RECIPROCAL,
            "Divide, as the reference does: x / sx with sx = amax / 448, both in float32 and correctly rounded "
            "(tl.div_rn). A product with a reciprocal rounds twice, and next to a midpoint between two e4m3 values "
            "that moves the code.",
            saturate(v).float(),
            e,
        )
    v = xf / s[:, None]
    add(
        "rounded toward zero (truncated)",
        "e4m3 rounds to nearest, ties to even: fp8.e4m3_bits does it.",
        _truncated(v),
    )
    add(
        "ties rounded away from zero",
        "A value halfway between two e4m3 values goes to the one with the even "
        "mantissa (fp8.e4m3_bits does it).",
        _ties_away(v),
    )
    if device != "cuda":
        cast = _interpreter_cast(v)
        if cast is not None:
            add(
                "cast with .to(tl.float8e4nv) in the interpreter",
                "Use fp8.e4m3_bits: the interpreter's cast rounds "
                "wrongly (a half rounds up, and the carry out of the mantissa is lost: 31.6 becomes 16), and GPUs "
                "before sm_89 have no such cast at all.",
                cast,
            )
    positive = xf.amax(dim=1).clamp_min(0)
    sp = _scale(positive)
    add(
        "max(x) instead of max |x|",
        "The scale is the largest magnitude: tl.max(tl.abs(x), axis=1). A row whose "
        "largest value is negative otherwise gets a scale too small, and its values saturate.",
        saturate(xf / sp[:, None]).float(),
        sp[:, None],
    )
    whole = _scale(amax.max()[None]).expand(M)
    add(
        "one scale for all the rows",
        "sx is per row (per token): the maximum over axis 1 of each row, "
        "tl.max(tl.abs(x), axis=1), not over the whole tile. A quiet row quantized with a loud row's scale loses "
        "its precision.",
        saturate(xf / whole[:, None]).float(),
        whole[:, None],
    )
    q = saturate(v).float()
    add(
        "activation scale missing in the epilogue",
        "Dequantizing multiplies by both scales: acc * sx[:, None] * sw[None, :].",
        q,
        torch.ones(M, 1),
    )
    return out


def block_ks(M: int, N: int, K: int, device: str) -> tuple[int, ...]:
    """BLOCK_KS, the decode launch's own BLOCK_K here first: where two BLOCK_K give one output (the probe's first
    tiles may share their maximum), a mistake is named with the one the learner's wrapper most likely launched."""
    own = int(fused_config(M, N, K, device)["BLOCK_K"])
    return (own, *(bk for bk in BLOCK_KS if bk != own))


def fused_mistakes(x, wq, sw, device: str, block_ks=BLOCK_KS) -> list[Mistake]:
    """The known wrong outputs of x [M, K], wq, sw (float32 [M, N], each product scaled and rounded to float32 as a
    kernel's epilogue does): every quantization model, for each BLOCK_K of block_ks shorter than K, and the
    epilogue's mistakes."""
    M, K = x.shape
    wf = wq.double().cpu()
    swf = sw.float().cpu().reshape(-1)
    out = []
    for i, bk in enumerate(block_ks):
        for name, explanation, q, e in quantization_models(x, bk, device):
            if i and "BLOCK_K" not in name:
                continue  # the same for every BLOCK_K: once
            y = ((q * e) @ wf.T).float() * swf[None, :]
            out.append(Mistake(name, explanation, y))
    xq, sx = quantize(x.cpu(), (1, K))
    ref = reference(xq, sx, wq.cpu(), sw.cpu())
    zero = x.float().cpu().abs().amax(dim=1) == 0
    if zero.any():
        nan_rows = ref.clone()
        nan_rows[zero] = float("nan")
        out.append(Mistake(*ZERO_ROW, nan_rows))
    sx16 = torch.ones(16)
    sx16[:M] = sx.reshape(-1)
    cols = torch.arange(wq.shape[0]) % 16
    out += [
        Mistake("sx applied along the columns", "sx belongs to the rows m of y: acc * sx[:, None], not "
                "sx[None, :].", reference(xq, torch.ones(M), wq.cpu(), sw.cpu()) * sx16[cols][None, :]),
        Mistake("exponent bias not corrected", "e4m3 has bias 7, fp16 bias 15: the decoded tiles are 2^-8 too small, "
                "so the product is 2^-16 too small (exercise 2's e4m3_to_fp16).", ref * 2.0**-16),
    ]  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------------------------
# One launch, no PyTorch arithmetic


ONE_LAUNCH = (
    "The exercise is one launch per Linear layer: read x in your kernel, find each row's amax in a first pass over "
    "K, then divide each x tile by its row's scale and encode it with fp8.e4m3_bits before the dot."
)


def _launches_of(fn, launched: list) -> list:
    return list(fn.worker.last_launches) if checks.is_remote(fn) else list(launched)


def launch_count(launches: list) -> int:
    """How many launches a call's record holds (each record's `count`, bounded below by 1 against a forged one)."""
    return sum(c if isinstance(c := launch.get("count", 1), int) and c > 1 else 1 for launch in launches)


def require_one_launch(ops, launches: list, first: int | None = None, *, what: str, advice: str) -> None:
    """Fail when the call computed with PyTorch (calling quantize_fp8 on x: abs, amax, division, clamp, ...) or
    launched more than one kernel (each launch counted, the same kernel twice too). first: the launches of the call
    before it on the same shape, where this is that second call. what, advice: the exercise's function and how to
    do it in one launch (exercise 6's WHAT and ONE_LAUNCH; exercise 7's in qmatmul/checks/fp8_rows.py)."""
    computed = sorted(
        {op.name for op in ops if op.name not in checks.MEMORY_OPS and op.name not in checks.MATMUL_OPS}
    )
    if computed:
        raise CheckFailed(
            f"{what} computed with PyTorch outside its kernel ({', '.join('torch.' + c for c in computed[:8])}"
            f"{', ...' if len(computed) > 8 else ''}): x quantized so, as quantize_fp8 does, is the string of small "
            f"launches this exercise removes, so this cell earns nothing. {advice}"
        )
    names = [str(launch.get("name", "?")) for launch in launches]
    times = launch_count(launches)
    if times > 1:
        how = (
            f"{times} kernels"
            if first is None
            else f"{first} kernels on its first call of this shape and {times} on a second"
        )
        raise CheckFailed(
            f"{what} launched {how} ({', '.join(f'`{n}`' for n in names[:4])}): the quantized x "
            f"and its scales went through memory between them, so this cell earns nothing. {advice}"
        )


def _observed(fn, run):
    """run() -> (result, ops), its launches recorded: (result, ops, the launches it made)."""
    if checks.is_remote(fn):
        observe = contextlib.nullcontext([])
    else:
        from qmatmul.grader import kernels

        observe = kernels.observe_launches()
    with observe as launched:
        y, ops = run()
    return y, ops, _launches_of(fn, launched)


def another_x(x: torch.Tensor) -> torch.Tensor:
    """x's shape, dtype and device with other values (rows of other magnitudes), drawn from the shape alone."""
    M, K = x.shape
    g = checks.generator(M * 65537 + K)
    x2 = random_matrix(M, K, g).mul_(torch.rand(M, 1, generator=g) * 8 + 0.1).clamp(-6e4, 6e4).to(x.dtype)
    return x2.to(x.device)


def audited_call(fn, args: tuple, kwargs: dict, *, what: str, advice: str, second, run=None):
    """One audited call fn(*args, **kwargs) (x first): its result, after require_one_launch. A call that launched
    more than one kernel is followed by a second call on the same shape with another x (another_x), whose launches
    then count: what runs only the first time a shape is seen (an autotuner timing its configurations) is no second
    pass, while a kernel launched twice a call launches twice again, and scales or codes kept from the first call
    answer the second x wrongly. second(x2, first) -> (that call's kwargs, verify(result, ops)): its outputs and its
    check (first: how many kernels the first call launched).
    run(args, kwargs) -> (result, ops): how a call is made (default checks.run_audited)."""
    run = run or (lambda a, kw: checks.run_audited(fn, *a, what=what, **kw))
    y, ops, launches = _observed(fn, lambda: run(args, kwargs))
    require_one_launch(ops, [], what=what, advice=advice)
    first = launch_count(launches)
    if first > 1:
        x2 = another_x(args[0])
        kwargs2, verify2 = second(x2, first)
        y2, ops2, launches2 = _observed(fn, lambda: run((x2, *args[1:]), kwargs2))
        require_one_launch(ops2, launches2, first=first, what=what, advice=advice)
        verify2(y2, ops2)
    return y, ops


def run_fused(fn, x, wq, sw, out, fp8_dot: bool, n_passed: int):
    """One audited call of exercise 6's function on a path: (y, ops) (audited_call; its second call's output must
    equal the reference for its x)."""
    M, K = x.shape
    N = wq.shape[0]

    def second(x2, first):
        full, out2 = common.poisoned_out(M, N, x.dtype, x.device.type, strided=False)
        inputs = dict(x=x2, wq=wq, sw=sw)
        before = checks.snapshot(inputs)
        ctx = (f" (M={M}, N={N}, K={K}: a second call on this shape, with another x, after a first call that "
               f"launched {first} kernels)")  # fmt: skip

        def verify(y2, ops2):
            checks.verify_kernel_result(y2, ops2, what=WHAT, inputs=inputs, before=before, out=out2, full=full,
                                        weight_shape=(N, K), dtype=x.dtype, expected=fused_reference(x2, wq, sw),
                                        mistakes=[], ctx=ctx)  # fmt: skip

        return dict(out=out2), verify

    def run(a, kw):
        return _run_path(fn, (*a, kw["out"]), fp8_dot, n_passed, WHAT)

    return audited_call(fn, (x, wq, sw), dict(out=out), what=WHAT, advice=ONE_LAUNCH, second=second, run=run)


# ----------------------------------------------------------------------------------------------------------
# Naming what a wrong output matches


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view(torch.int16)


def same_bits(y: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Elementwise: y and want (rounded to y's dtype) hold the same bits, are both NaN, or are both zero (a zero's
    sign says nothing of the codes: it follows the order a tensor core adds the products of zero in)."""
    w = want.to(y.dtype).cpu()
    g = y.detach().cpu()
    special = (torch.isnan(g.float()) & torch.isnan(w.float())) | ((g == 0) & (w == 0))
    return (_bits(g) == _bits(w)) | special


def _match(got: torch.Tensor, mistakes, dtype, rows: torch.Tensor) -> Mistake | None:
    """The first mistake whose output `got` matches on `rows`: bit for bit, else within the tolerance (the rule of
    checks.compare)."""
    fits = [m for m in checks.known_mistakes(mistakes) if tuple(m.output.shape) == tuple(got.shape)]
    for m in fits:
        if bool(same_bits(got[rows], m.output[rows]).all()):
            return m
    rtol = checks.tolerance_for(dtype)
    for m in fits:
        g, w = got[rows].double(), m.output[rows].double()
        special = (g == w) | (torch.isnan(g) & torch.isnan(w))
        if not (checks.mismatch(g, w, rtol) & ~special).any():
            return m
    return None


def named(report: str, y: torch.Tensor, mistakes, dtype, x: torch.Tensor | None = None, expected=None) -> str:
    """A failed report led by the known mistake y matches (bit for bit first, else within the tolerance) where the
    report names none. Rows of x that are all zeros are matched apart: where the other rows match a mistake, or
    are right, and a zero row is wrong, the zero row's scale is named too (its NaN codes decode differently by path
    and machine, so no model of them is exact)."""
    if not isinstance(y, torch.Tensor) or y.dtype != dtype or "known mistake" in report:
        return report
    got = y.detach().cpu()
    M = got.shape[0]
    everywhere = torch.ones(M, dtype=torch.bool)
    found = [] if (m := _match(got, mistakes, dtype, everywhere)) is None else [(m.name, m.explanation)]
    if not found and x is not None and expected is not None and tuple(expected.shape) == tuple(got.shape):
        zero = x.detach().cpu().float().abs().amax(dim=1) == 0
        zero_wrong = zero.any() and not bool(same_bits(got[zero], expected[zero]).all())
        if zero_wrong:
            others = ~zero
            right = bool(same_bits(got[others], expected[others]).all())
            m = None if right or not others.any() else _match(got, mistakes, dtype, others)
            if right or m is not None:
                found = ([] if m is None else [(m.name, m.explanation)]) + [ZERO_ROW]
    if not found:
        return report
    head, *rest = report.splitlines()
    return "\n".join([head, *(f"This matches a known mistake: {n}. {e}" for n, e in found), *rest])


# ----------------------------------------------------------------------------------------------------------
# The check


def _check_random(fn, shapes, dtypes, device, g) -> int:
    n = 0
    for fp8_dot in checked_paths(device):
        path = path_name(fp8_dot, device)
        for i, (M, N, K, extra) in enumerate(shapes):
            dtype, strided = dtypes[i % len(dtypes)], i % 2 == 1
            x, wq, sw = random_problem(M, N, K, dtype, device, g, strided=strided, **extra)
            full, out = common.poisoned_out(M, N, dtype, device, strided)
            inputs = dict(x=x, wq=wq, sw=sw)
            before = checks.snapshot(inputs)
            notes = [str(dtype).replace("torch.", ""), path]
            if strided:
                notes.append("strided x and out")
            if extra.get("zero_row") is not None:
                notes.append(f"row {extra['zero_row']} all zeros")
            if extra.get("last_tile_row") is not None:
                notes.append(f"row {extra['last_tile_row']}'s amax at k = K - 1")
            ctx = f" (M={M}, N={N}, K={K}, {', '.join(notes)})"
            y, ops = run_fused(fn, x, wq, sw, out, fp8_dot, n)
            expected = fused_reference(x, wq, sw)
            mistakes = checks.lazily(fused_mistakes, x, wq, sw, device, block_ks(M, N, K, device))
            try:
                checks.verify_kernel_result(y, ops, what=WHAT, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=expected, mistakes=mistakes,
                                            ctx=ctx)  # fmt: skip
            except CheckFailed as exc:
                raise CheckFailed(named(str(exc), y, mistakes, dtype, x, expected)) from None
            n += 1
    return n


def _probe_report(y, x, expected, bad, device, ctx) -> str:
    M, N = bad.shape
    cols = probe_columns(x.shape[1])
    m, n = (int(i) for i in bad.nonzero()[0])
    xf = x.float().cpu()
    xq, sx = quantize(x.cpu(), (1, x.shape[1]))
    k = cols[n]
    v = float(xf[m, k] / sx.reshape(-1)[m])
    head = (f"{WHAT}: {int(bad.sum())} of {M * N} probe outputs differ from the reference bit for bit{ctx}: with "
            "one-hot weights (wq[n, k_n] = 1, sw = 1) each output is one quantized activation times its row's "
            "scale, y[m, n] = xq[m, k_n] · sx[m].")  # fmt: skip
    lines = [
        head,
        f"First at [m, n] = [{m}, {n}]: x[{m}, {k}] = {float(xf[m, k]):.9g} in a row whose max |x| is "
        f"{float(xf[m].abs().max()):.9g}, so sx = {float(sx.reshape(-1)[m]):.9g} and x / sx = {v:.9g}, which "
        f"rounds to the e4m3 value {float(xq[m, k].float()):g}: y = {float(expected[m, n]):.9g}; got "
        f"{float(y[m, n].float()):.9g}.",
        f"Wrong outputs lie {checks.where_2d(bad)}.",
    ]
    if device == "cuda":
        lines.append("On a GPU Triton's `/` on float32 is not correctly rounded: divide with tl.div_rn(a, b), as the "
                     "reference's IEEE division does, for the scale and for x / sx.")  # fmt: skip
    return "\n".join(lines)


def _check_probes(fn, dtypes, device) -> int:
    n = 0
    K = probe_k(device)
    for fp8_dot in checked_paths(device):
        path = path_name(fp8_dot, device)
        for dtype in dtypes:
            for j, M in enumerate(PROBE_MS):
                strided = j % 2 == 1
                x, wq, sw = probe_problem(M, K, dtype, device, strided=strided)
                N = PROBE_N
                full, out = common.poisoned_out(M, N, dtype, device, strided)
                inputs = dict(x=x, wq=wq, sw=sw)
                before = checks.snapshot(inputs)
                ctx = (f" (M={M}, N={N}, K={K}, {str(dtype).replace('torch.', '')}, {path}"
                       f"{', strided x and out' if strided else ''}, the quantization probe)")  # fmt: skip
                y, ops = run_fused(fn, x, wq, sw, out, fp8_dot, n)
                expected = fused_reference(x, wq, sw)
                mistakes = checks.lazily(fused_mistakes, x, wq, sw, device, block_ks(M, N, K, device))
                try:
                    checks.verify_kernel_result(y, ops, what=WHAT, inputs=inputs, before=before, out=out, full=full,
                                                weight_shape=(N, K), dtype=dtype, expected=expected, ctx=ctx)  # fmt: skip
                except CheckFailed as exc:
                    raise CheckFailed(named(str(exc), y, mistakes, dtype, x, expected)) from None
                bad = ~same_bits(y, expected)
                if bad.any():
                    report = _probe_report(y, x, expected, bad, device, ctx)
                    raise CheckFailed(named(report, y, mistakes, dtype, x, expected))
                n += 1
    return n


def check_decode_fused(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 6: fp8_decode_fused(x, wq, sw, out) equals fp8_decode(*quantize_fp8(x, (1, K)), wq, sw) on the
    probes (bit for bit) and on random problems (within the tolerance), on both paths where they run, in every
    activation dtype the device checks, in one launch."""
    seed, g, device = common.cell(seed)
    dtypes = common.act_dtypes(device)
    if not hidden:
        shapes = [(16, 40, 300, {"zero_row": 3, "last_tile_row": 7}), (5, 72, 200, {})]
    else:
        big = device == "cuda"
        bk = fused_config(16, 128, 4096, device)["BLOCK_K"]

        def ragged_k():
            k = int(torch.randint(40, 3000 if big else 300, (1,), generator=g))
            return k + 1 if k % 16 == 0 or k % bk == 0 else k

        def some_n():
            return int(torch.randint(33, 2000 if big else 200, (1,), generator=g))

        mid = int(torch.randint(2, 16, (1,), generator=g))
        shapes = [
            (1, some_n(), ragged_k(), {"last_tile_row": 0}),
            (mid, some_n(), ragged_k(), {"zero_row": int(torch.randint(0, mid, (1,), generator=g)),
                                         "last_tile_row": mid - 1}),
            (16, some_n(), ragged_k(), {"zero_row": 0, "last_tile_row": 15}),
        ]  # fmt: skip
    n = _check_probes(
        fn, dtypes, device
    )  # first: each quantization mistake is named here, the same on every run
    n += _check_random(fn, shapes, dtypes, device, g)
    checks.passed(f"{WHAT}: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed}), the "
                  "probes bit for bit, in one launch." + skipped_path_note(device))  # fmt: skip
