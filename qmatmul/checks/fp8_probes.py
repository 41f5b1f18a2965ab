"""Chapter FP8, exercise 6's probes: inputs that read a kernel's quantization of x back bit for bit (see
qmatmul/checks/fp8_fused.py, which grades with them). One-hot weight rows (wq[n, k_n] = 1, sw = 1) make
y[m, n] = xq[m, k_n] · sx[m]; the rows of x (PROBE_ROWS) put values on, beside and above the midpoints between e4m3
values in every K tile and keep their largest magnitude in the last K tile (one row at k = 0 instead)."""

from __future__ import annotations

import torch

from qmatmul.formats.fp8 import E4M3, E4M3_MAX

# The probe rows, in the units of their scale (v = x / sx): each row is (amax, values). Rows whose amax is 448 · 2^j
# have sx = 2^j exactly, so x = v · 2^j and x / sx is exact: their values test the rounding itself. Rows whose amax is
# 31 · 2^e have an inexact sx = amax / 448 just below the true quotient, so that x / sx for x = amax · 3/4 · 2^-i
# lands one unit in the last place above an e4m3 midpoint (336 · 2^-i): the correctly rounded division rounds up, and
# x · (448 / amax), x · (1 / sx), x · 448 / amax and x / (amax · (1/448)) each land on the midpoint and round down to
# even. (A search over every amax and x exact in both float16 and bfloat16 found amax = 31 · 2^e to move all four, each
# at all eight x; tests/test_fp8_fused.py checks the rows' quotients.)
_TIES = [1.0625, 1.1875, 1.3125, 1.4375, 1.5625, 1.6875, 1.8125, 1.9375]  # midpoints between e4m3 mantissas
_SPECIAL = [
    *(t * 2.0**e for t, e in zip(_TIES, (-5, -3, -1, 0, 1, 3, 5, 7), strict=True)),  # ties, both ways
    1.09375, 1.40625 * 4, 1.65625 / 8, 1.90625 * 32,  # just above a midpoint: up to nearest, down when truncated
    1.96875, 1.96875 * 4, 1.96875 / 16, 1.96875 * 64,  # the mantissa's carry into the exponent
    2.0**-10, 3 * 2.0**-10, 5 * 2.0**-10, 13 * 2.0**-13, 15.5 * 2.0**-10, 2.0**-12,  # subnormals, ties, to zero
    240.0, 0.3, 7.3, 100.0, 0.011, 3.3,  # ordinary values
]  # fmt: skip


def _power_row(j: int, sign: float) -> tuple[float, list[float]]:
    """A row with sx = 2^j: amax 448 · 2^j (of sign `sign`), the special values times 2^j, of alternating signs."""
    vals = [v * 2.0**j * (1 if i % 3 else -1) for i, v in enumerate(_SPECIAL)]
    return sign * E4M3_MAX * 2.0**j, vals


def _midpoint_row(e: int, sign: float) -> tuple[float, list[float]]:
    """A row with amax 31 · 2^e: x = amax · 3/4 · 2^-i for i = 0..7 (both signs), and a few others."""
    amax = 31.0 * 2.0**e
    vals = [amax * 0.75 * 2.0**-i * (1 if i % 2 else -1) for i in range(8)]
    vals += [amax * f for f in (0.5, 0.3, 0.11, 0.9, 0.013)]
    return sign * amax, vals


PROBE_ROWS = [
    _power_row(0, 1.0),  # sx = 1
    _power_row(-2, -1.0),  # a negative amax: max(x) is not max |x|
    _midpoint_row(2, 1.0),  # amax 124
    [0.0, []],  # an all-zero row: sx = 1
    _midpoint_row(-5, -1.0),  # a quiet row, amax 31/32
    _midpoint_row(6, 1.0),  # a loud row, amax 1984
    _power_row(3, 1.0),
    _midpoint_row(-3, 1.0),
    _power_row(-1, -1.0),
    _midpoint_row(0, -1.0),
    _power_row(5, 1.0),
    _midpoint_row(4, 1.0),
    _power_row(1, -1.0),  # its amax at k = 0 instead (FIRST_AMAX_ROW): the first column counts too
    _midpoint_row(-1, 1.0),
    _power_row(7, 1.0),
    _midpoint_row(8, -1.0),
]
FIRST_AMAX_ROW = 12  # the one row whose largest magnitude is at k = 0 (a first pass from k = 1 misses it)
PROBE_N = 96  # one-hot columns: the values read back
PROBE_MS = (16, 5)  # every row, then the first five (rows >= M masked; the zero row among them)


def probe_k(device: str) -> int:
    """The probe's K: past two K steps of the decode launch here, and never a multiple of a power of two >= 8."""
    return 1100 if device == "cuda" else 332


def probe_columns(K: int) -> list[int]:
    """The columns k_n the one-hot weights read: spread over every K tile, the last one K - 1 (each row's amax)."""
    return [round(n * (K - 1) / (PROBE_N - 1)) for n in range(PROBE_N)]


def probe_problem(M: int, K: int, dtype, device: str, strided: bool = False):
    """(x, wq, sw) of the probe: x [M, K] in `dtype` (PROBE_ROWS' first M rows at probe_columns, 0 elsewhere; a
    strided view when asked), wq the one-hot rows (wq[n, k_n] = 1), sw = 1. Each row's values repeat along K, halved
    at each third of it (a power of two keeps a midpoint a midpoint), so that a later tile's own maximum is below an
    earlier one's and a scale taken tile by tile differs from one taken as the loop goes."""
    cols = probe_columns(K)
    pad = 7 if strided else 0
    x = torch.zeros(M, K + pad, dtype=torch.float64)
    for r, (amax, vals) in enumerate(PROBE_ROWS[:M]):
        if amax == 0:
            continue
        for i, c in enumerate(cols[:-1]):  # the row's values over every tile, halved at each third of K
            x[r, c] = vals[i % len(vals)] * 2.0 ** -(3 * c // K)
        if r == FIRST_AMAX_ROW:
            x[r, K - 1] = float(x[r, 0])
            x[r, 0] = amax
        else:
            x[r, K - 1] = amax
    x = x.to(torch.bfloat16).double()  # 8 significant bits: exact in bfloat16 and in float16 alike
    x16 = x.to(dtype)
    if not torch.equal(x16.double(), x):
        raise AssertionError("a probe value is not exact in the activations' dtype")
    w = torch.zeros(PROBE_N, K)
    w[torch.arange(PROBE_N), torch.tensor(cols)] = 1.0
    return x16[:, :K].to(device), w.to(E4M3).to(device), torch.ones(PROBE_N, device=device)
