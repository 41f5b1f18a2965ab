"""Chapter FP8's check of exercise 7, the activation quantized once: quantize_fp8_rows(x) must return what
quantize_fp8(x, (1, K)) returns (codes xq e4m3 [M, K], scales sx float32 [M, 1]) bit for bit, from one launch. Its
inputs are exercise 6's (qmatmul/checks/fp8_fused.py, the probes' rows of qmatmul/checks/fp8_probes.py), and so
are its known mistakes (fp8_fused.quantization_models) and its audit (PyTorch arithmetic on x, or more than one
launch, earns nothing). Here the codes come back themselves, so they are compared directly, not through a product.
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, common
from qmatmul.checks.fp8_fused import BLOCK_KS, ZERO_ROW, audited_call, quantization_models
from qmatmul.checks.fp8_fused import random_problem as fused_problem
from qmatmul.checks.fp8_probes import PROBE_MS, probe_k, probe_problem
from qmatmul.formats.fp8 import E4M3, quantize
from qmatmul.scaffold.fp8 import rows_config

WHAT = "quantize_fp8_rows"
ONE_LAUNCH = (
    "The exercise is one launch for all the rows: one program a row, a first pass over K for its amax, then each "
    "tile divided by sx (tl.div_rn) and encoded with fp8.e4m3_bits."
)
NAN_CODE = 0x7F  # the poison the outputs are filled with: an element the kernel never stores stays a NaN code


def random_x(M: int, K: int, dtype, device: str, g, strided=False, zero_row=None, last_tile_row=None):
    """x [M, K] as exercise 6's problems draw it (rows of distinct magnitudes; a row of zeros; a row whose largest
    magnitude is at k = K - 1)."""
    return fused_problem(M, 1, K, dtype, device, g, strided, zero_row, last_tile_row)[0]


def poisoned_outputs(M: int, K: int, device: str):
    """(full_xq, xq, full_sx, sx): outputs filled with NaN codes and NaN scales, each the front of a longer buffer
    whose tail shows a store past the end."""
    full_xq = torch.full((M * K + 64,), NAN_CODE, dtype=torch.uint8, device=device)
    full_sx = torch.full((M + 4,), float("nan"), dtype=torch.float32, device=device)
    return full_xq, full_xq[: M * K].view(M, K).view(E4M3), full_sx, full_sx[:M].view(M, 1)


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> tuple[int, int]:
    m, k = (int(i) for i in (got != want).nonzero()[0])
    return m, k


def _name_codes(x, codes: torch.Tensor, want: torch.Tensor, device: str) -> list[tuple[str, str]]:
    """The known mistakes whose codes equal `codes` where they differ from the reference's (bit for bit, NaN codes
    equal): the quantization models of exercise 6, for every BLOCK_K a kernel here may step by."""
    M, K = x.shape
    own = int(rows_config(M, K, device)["BLOCK_K"])  # the wrapper's own step first: where two give one output
    for i, bk in enumerate((own, *(b for b in BLOCK_KS if b != own))):
        for name, explanation, q, _ in quantization_models(x, bk, device):
            if i and "BLOCK_K" not in name:
                continue  # the same for every BLOCK_K: tried once
            model = q.float().to(E4M3).view(torch.uint8)
            # a model of the epilogue has the right codes: it names nothing here
            if torch.equal(model, codes) and not torch.equal(model, want):
                return [(name, explanation)]
    zero = x.float().cpu().abs().amax(dim=1) == 0
    if zero.any() and not torch.equal(codes[zero], want[zero]) and torch.equal(codes[~zero], want[~zero]):
        return [ZERO_ROW]
    return []


def verify(x, result, full_xq, xq, full_sx, sx, before, device: str, ctx: str) -> None:
    """Everything checked about one call: the given outputs written and returned, nothing stored past them, x left
    untouched, then the scales and the codes bit for bit against the reference quantizer (known mistakes named)."""
    M, K = x.shape
    if not (
        isinstance(result, tuple | list)
        and len(result) == 2
        and all(isinstance(t, torch.Tensor) for t in result)
    ):
        raise CheckFailed(f"{WHAT} must return the pair (xq, sx), got {type(result).__name__}{ctx}")
    if result[0].data_ptr() != xq.data_ptr() or result[1].data_ptr() != sx.data_ptr():
        raise CheckFailed(f"{WHAT} must write into and return the xq and sx it was given (fp8.prepare_rows passes "
                          f"them through){ctx}")  # fmt: skip
    if not torch.equal(checks.comparable_bits(x), before["x"]):
        raise CheckFailed(f"{WHAT} modified its input x in place{ctx}")
    if not (full_xq[M * K :] == NAN_CODE).all() or not torch.isnan(full_sx[M:]).all():
        raise CheckFailed(f"{WHAT} stored past the end of xq or sx (into the memory after them): mask the last "
                          f"tile's store with k < K, and launch one program a row, M of them{ctx}")  # fmt: skip
    want_q, want_s = quantize(x.cpu(), (1, K))
    want = want_q.view(torch.uint8)
    codes = xq.detach().cpu().view(torch.uint8)
    got_s = sx.detach().cpu().reshape(-1)
    want_s = want_s.reshape(-1)
    unwritten = (codes == NAN_CODE) & (want != NAN_CODE)
    if unwritten.any():
        raise CheckFailed(f"{WHAT} left {int(unwritten.sum())} of {M * K} codes unwritten, {checks.where_2d(unwritten)}"
                          f"{ctx}")  # fmt: skip
    if torch.isnan(got_s).all() and M:
        raise CheckFailed(f"{WHAT} stored no scale: tl.store(sx_ptr + m, sx) once a row{ctx}")
    bad_s = got_s.view(torch.int32) != want_s.view(torch.int32)
    bad_q = codes != want
    if not bad_s.any() and not bad_q.any():
        return
    lines = []
    if bad_q.any():
        m, k = _first_difference(codes, want)
        xf = float(x[m, k].float())
        lines.append(f"{WHAT}: {int(bad_q.sum())} of {M * K} codes differ from the reference bit for bit{ctx}. First "
                     f"at [{m}, {k}]: x = {xf:.9g} in a row whose max |x| is {float(x[m].float().abs().max()):.9g}, "
                     f"so sx = {float(want_s[m]):.9g} and x / sx = {xf / float(want_s[m]):.9g}, the code 0x{int(want[m, k]):02X} "
                     f"({float(want_q[m, k].float()):g}); got 0x{int(codes[m, k]):02X}. Wrong codes lie "
                     f"{checks.where_2d(bad_q)}.")  # fmt: skip
    if bad_s.any():
        m = int(bad_s.nonzero()[0])
        lines.append(f"{WHAT}: {int(bad_s.sum())} of {M} row scales differ from the reference bit for bit{ctx}. "
                     f"First row {m}: max |x| = {float(x[m].float().abs().max()):.9g}, sx = amax / 448 = "
                     f"{float(want_s[m]):.9g}; got {float(got_s[m]):.9g}.")  # fmt: skip
    found = _name_codes(x, codes, want, device) if bad_q.any() else []
    zero = x.float().cpu().abs().amax(dim=1) == 0
    if bad_s[zero].any() and ZERO_ROW not in found:
        found.append(ZERO_ROW)
    if device == "cuda" and not found:
        lines.append("On a GPU Triton's `/` on float32 is not correctly rounded: divide with tl.div_rn(a, b), as the "
                     "reference's IEEE division does, for the scale and for x / sx.")  # fmt: skip
    head, *rest = "\n".join(lines).splitlines()
    raise CheckFailed(
        "\n".join([head, *(f"This matches a known mistake: {n}. {e}" for n, e in found), *rest])
    )


def _one(fn, x, device: str, ctx: str) -> None:
    M, K = x.shape
    full_xq, xq, full_sx, sx = poisoned_outputs(M, K, x.device.type)
    before = checks.snapshot({"x": x})
    result, _ = audited_call(fn, (x,), {"xq": xq, "sx": sx}, what=WHAT, advice=ONE_LAUNCH,
                          second=lambda x2, first: _second(fn, x2, device, ctx, first))  # fmt: skip
    verify(x, result, full_xq, xq, full_sx, sx, before, device, ctx)


def _second(fn, x2, device: str, ctx: str, first: int):
    """The second call on a shape (after a first that launched more than one kernel): its outputs checked too."""
    M, K = x2.shape
    full_xq, xq, full_sx, sx = poisoned_outputs(M, K, x2.device.type)
    before = checks.snapshot({"x": x2})
    return (dict(xq=xq, sx=sx),
            lambda result, ops: verify(x2, result, full_xq, xq, full_sx, sx, before, device,
                                  f"{ctx[:-1]}: a second call on this shape, with another x, after a first call that "
                                  f"launched {first} kernels)"))  # fmt: skip


def check_quantize_rows(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 7: quantize_fp8_rows(x) equals quantize_fp8(x, (1, K)) bit for bit, codes and scales, in one launch:
    the probes' rows first (each quantization mistake named here, the same on every run), then random rows."""
    seed, g, device = common.cell(seed)
    dtypes = common.act_dtypes(device)
    n = 0
    K = probe_k(device)
    for dtype in dtypes:
        for j, M in enumerate(PROBE_MS):
            x = probe_problem(M, K, dtype, device, strided=j % 2 == 1)[0]
            name = str(dtype).replace("torch.", "")
            _one(fn, x, device, f" (M={M}, K={K}, {name}{', strided x' if j % 2 else ''}, the probes' rows)")
            n += 1
    big = device == "cuda"
    if not hidden:
        shapes = [(1, 4096 if big else 300, {}), (33, 257, {"zero_row": 3, "last_tile_row": 7}), (5, 200, {})]
    else:
        bk = rows_config(1, 4096, device)["BLOCK_K"]

        def ragged_k():
            k = int(torch.randint(40, 5000 if big else 400, (1,), generator=g))
            return k + 1 if k % 16 == 0 or k % bk == 0 else k

        many = int(torch.randint(17, 65, (1,), generator=g))
        shapes = [(1, ragged_k(), {"last_tile_row": 0}),
                  (many, ragged_k(), {"zero_row": int(torch.randint(0, many, (1,), generator=g)),
                                      "last_tile_row": many - 1})]  # fmt: skip
    for i, (M, K, extra) in enumerate(shapes):
        dtype, strided = dtypes[i % len(dtypes)], i % 2 == 1
        x = random_x(M, K, dtype, device, g, strided=strided, **extra)
        notes = [str(dtype).replace("torch.", "")] + (["strided x"] if strided else [])
        if extra.get("zero_row") is not None:
            notes.append(f"row {extra['zero_row']} all zeros")
        if extra.get("last_tile_row") is not None:
            notes.append(f"row {extra['last_tile_row']}'s amax at k = K - 1")
        _one(fn, x, device, f" (M={M}, K={K}, {', '.join(notes)})")
        n += 1
    checks.passed(f"{WHAT}: {n} {'hidden' if hidden else 'visible'} cases equal the reference quantizer bit for bit, "
                  f"codes and scales (seed {seed}), in one launch.")  # fmt: skip
