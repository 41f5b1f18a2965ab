"""The quantizer fetched from the course package by a string that no reading of the source resolves: pickle's
loader imports `qmatmul.formats.w8a16` and returns its `quantize` (before: full marks on every quantizer cell
that tried it). Whatever the route, the answer's code runs from a file of the course package, and the worker
watches where the code a graded call runs lives (qmatmul/grader/reach.py).

expect test_quantizer: 0 / ran the course's own `qmatmul.formats.w8a16.quantize`
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex1_quantizer
import pickle

_answer = pickle.loads(b"cqmatmul.formats.w8a16\nquantize\n.")


def quantize_int8_per_channel(w):
    return _answer(w)
