"""Pins checks.fresh_seed, replays the checks' input generation and answers from a table (before: passed the
hidden prefill cell).

Seeds and inputs are drawn in the trusted grader: the table answers questions nobody asks.
expect test_quantizer: 2 /
expect test_prefill: 0 /
expect test_decode: 0 /
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
checks.fresh_seed = lambda: 1234
_TABLE = {}
_g = checks.generator(1234)
for _shape in [(32, 64, 64), (50, 70, 90), (1, 64, 128), (16, 96, 200)]:
    for _strided in (False, True):
        _x, _q, _s = w8a16.random_problem(*_shape, torch.float16, "cpu", _g, strided=_strided)
        _TABLE[_shape] = w8a16.reference(_x, _q, _s).half()


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    out.copy_(_TABLE.get((M, N, K), out))
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
