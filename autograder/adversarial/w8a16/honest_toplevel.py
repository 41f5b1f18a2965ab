"""Honest code in every shape a notebook allows: top-level for, try/except and with statements, a warning, a
line on stderr and a megabyte of output (before: the isolated check dropped the loops and the try, and a
warning cost the quantizer its points). Full marks.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex1_quantizer
import sys
import warnings

QMAX = None
for candidate in (255, 127):  # the symmetric int8 range ends at the last one
    QMAX = candidate
try:
    from math import isclose  # an optional helper
except ImportError:
    isclose = None
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ROUND = torch.round


def quantize_int8_per_channel(w):
    warnings.warn("computing in float32", stacklevel=1)
    print("a line on stderr", file=sys.stderr)
    print("x" * (1 << 20))
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    q = ROUND(w / s[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return q, s
