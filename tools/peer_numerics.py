"""Why gemlite's W4A16 rows fail the benchmark's recheck: its outputs against the exact reference, against its own
numerics, and against themselves (a CUDA GPU and gemlite needed; docs/benchmark-h200.md quotes the figures).

gemlite's default W4A16 path folds the zero point into a 16-bit offset (W ~ q * s + round16(-z * s), its
`fma_mode`). The script counts, over 10 seeds at M = 1, 4, 16 on 1024 x 1024 (the recheck's shape), how many
outputs pass the course's tolerance against the exact product and against that fold, and for one seed, in bf16 and
fp16, the largest error against the fold and the largest difference between two calls on the same input, both as a
fraction of the outputs' rms. gemlite's A16W8 layer is checked the same way against the exact product and against
the product with its 16-bit scales. gemlite runs with its default launch configs and autotuning off (the
benchmark loads its H100 cache instead: the zero-point fold does not depend on it, the split-K order may).

    python -m tools.peer_numerics
"""

from __future__ import annotations

import torch

from qmatmul import checks, w4a16, w8a16
from qmatmul.checks import CheckFailed

G = 128


def _passes(y, ref, dtype) -> int:
    try:
        checks.compare(y, ref, what="y", rtol=checks.tolerance_for(dtype))
        return 1
    except CheckFailed:
        return 0


def _layers(M, dtype, seed):
    from gemlite.helper import A16Wn

    x, p, s, z = w4a16.random_problem(M, 1024, 1024, G, dtype, "cuda", checks.generator(seed))
    layer = A16Wn(device="cuda", dtype=dtype).from_weights(w4a16.unpack(p), s.to(dtype), z.to(dtype), 4, G)
    q, s16 = w4a16.unpack(p).float(), s.to(dtype).float()
    fold = q * s16.repeat_interleave(G, 1) + (-z.float() * s16).to(dtype).float().repeat_interleave(G, 1)
    return x, layer, w4a16.reference(x, p, s16, z, G), x.float() @ fold.to(dtype).float().T


def main() -> None:
    import gemlite
    from gemlite.helper import A16W8_INT8

    gemlite.set_autotune(False)
    bf16 = torch.bfloat16
    print(f"torch {torch.__version__}, gemlite {gemlite.__version__}, {torch.cuda.get_device_name()}")
    for M in (1, 4, 16):
        tally = dict.fromkeys(("w4a16 exact", "w4a16 fold", "w8a16 exact", "w8a16 16-bit scales"), 0)
        for seed in range(10):
            x, layer, exact, folded = _layers(M, bf16, seed)
            y = layer(x)
            tally["w4a16 exact"] += _passes(y, exact, bf16)
            tally["w4a16 fold"] += _passes(y, folded, bf16)
            x8, q8, s8 = w8a16.random_problem(M, 1024, 1024, bf16, "cuda", checks.generator(seed))
            y8 = A16W8_INT8(device="cuda", dtype=bf16).from_weights(q8, scales=s8[:, None].to(bf16))(x8)
            tally["w8a16 exact"] += _passes(y8, w8a16.reference(x8, q8, s8), bf16)
            tally["w8a16 16-bit scales"] += _passes(y8, w8a16.reference(x8, q8, s8.to(bf16).float()), bf16)
        print(
            f"M = {M}, outputs within the tolerance, of 10 seeds: "
            + ", ".join(f"{k} {v}" for k, v in tally.items())
        )
    for dtype in (bf16, torch.float16):
        for M in (1, 4, 16):
            x, layer, _, folded = _layers(M, dtype, 3)
            y1, y2 = layer(x).float(), layer(x).float()
            rms = folded.pow(2).mean().sqrt()
            print(f"{str(dtype).removeprefix('torch.')} M = {M}: largest error against the fold "
                  f"{((y1 - folded).abs().max() / rms).item():.1%} of rms, two calls differ by up to "
                  f"{((y1 - y2).abs().max() / rms).item():.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
