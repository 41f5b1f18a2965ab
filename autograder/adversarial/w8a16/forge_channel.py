"""Nothing implemented; writes the old isolation worker's result line and forged replies on every fd, then
silences fd 1 (before: a kernel cell that computes nothing passed).

The grader's channel carries a nonce this process never sees; the writes are flagged for the instructor.
expect test_quantizer: 0 / did not ask for
expect test_prefill: 0 /
expect test_decode: 0 /
expect test_decode_bandwidth: 0 /
"""

# %% ex1_quantizer
import json
import os


def _forge():
    line = '@@qmatmul-check-result@@["ok", ""]\n' + json.dumps({"status": "ok", "ops": []}) + "\n"
    print(line, flush=True)
    for fd in range(3, 20):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass


def quantize_int8_per_channel(w):
    _forge()
    raise NotImplementedError()


# %% ex2_prefill
def w8a16_matmul(x, q, s, out=None):
    _forge()
    raise NotImplementedError()


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    _forge()
    raise NotImplementedError()
