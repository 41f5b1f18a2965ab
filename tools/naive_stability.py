"""GPU: the naive dequantize-then-matmul path against the FP8 and NVFP4 bandwidth cells, 20 fresh seeds each."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from qmatmul import environment  # noqa: E402 - after the path

env = environment.start()
from qmatmul import checks, fp8, nvfp4  # noqa: E402 - after environment.start() picks the device


def fp8_naive(xq, sx, wq, sw, out=None):
    y = fp8.naive(xq, sx, wq, sw)
    return y if out is None else out.copy_(y)


def nvfp4_naive(x, packed, scales, g, out=None):
    y = nvfp4.naive(x, packed, scales, g)
    return y if out is None else out.copy_(y)


for name, mod, fn in (("fp8", fp8, fp8_naive), ("nvfp4", nvfp4, nvfp4_naive)):
    fails = 0
    for i in range(20):
        try:
            mod.check_decode_bandwidth(fn)
        except checks.CheckFailed as exc:
            fails += 1
            if i == 0:
                print(name, "first failure:", str(exc).splitlines()[0][:200])
    print(f"{name} naive: failed {fails}/20")
