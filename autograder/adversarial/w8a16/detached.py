"""Correct code that also forks a detached process (new session) which outlives its grading, holds the
output it inherited and later writes a file beside the gradebook (before: the whole class waited forever).

The class goes on at once. Kernel exercises earn nothing while os.fork is in the notebook; in the sandbox the
process dies with its PID namespace and never writes (tests/test_adversarial.py).
expect test_quantizer: 2 /
expect test_prefill: 0 / uses os.fork
expect test_decode: 0 / uses os.fork
expect test_decode_bandwidth: 0 /
"""

# %% ex1_quantizer
import os
import time

_marker = os.environ.get("DETACHED_MARKER")
if _marker and os.fork() == 0:
    os.setsid()
    _forked = time.time()
    time.sleep(float(os.environ.get("DETACHED_SLEEP", "30")))
    with open(_marker, "a") as f:
        f.write(f"forked {_forked} wrote {time.time()}\n")
    os._exit(0)


def quantize_int8_per_channel(w):
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s
