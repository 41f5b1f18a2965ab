"""Chapter "layouts", exercise 3: the learner's Gluon decode on `repack`'s words, graded where it can run (a CUDA GPU
of sm_80 or newer and triton with Gluon; elsewhere the cells say what they skip and award nothing).

The learner's wrapper is `fn(x, words, scales, zeros, group_size, N, out=None)`; the words are the course's `repack`
of the chapter's packed weight (exercise 1 is graded apart), so a mistake in the kernel is the kernel's.
check_decode compares every call with the chapter's reference on ragged N, M = 1..16, groups of 64 and 128 and split
K; check_decode_bandwidth times it through qmatmul/checks/harness.py (this module is its timed problem: timing_weights,
timing_inputs, reference) at M = 1 on the 70B-sized shape every chapter times.
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks import common, w4a16
from qmatmul.formats.w4a16 import bytes_moved, pack
from qmatmul.formats.w4a16 import reference as packed_reference
from qmatmul.kernels import mma_decode
from qmatmul.kernels.mma_repack import repack, unpack_like_kernel

__all__ = [
    "BANDWIDTH_SHAPE", "BANDWIDTH_GROUP", "BANDWIDTH_MS", "BANDWIDTH_THRESHOLD", "skipped", "random_problem",
    "check_decode", "check_decode_bandwidth", "timing_weights", "timing_inputs", "reference",
]  # fmt: skip

BANDWIDTH_SHAPE = common.BANDWIDTH_SHAPE
BANDWIDTH_GROUP = 128
BANDWIDTH_MS = (1,)
# Fraction of the copy bandwidth (qmatmul/checks/harness.py: graph-timed where the calls can be captured). The course's
# kernel, which the chapter's solution is, reads 77 % at M = 1 on 28672 x 8192 on the H200 (docs/bench-h200.json,
# "expert w4a16 MMA decode", quoted in course.md): the bar leaves it 1.5 times above, and is far above what any
# readable Triton 4-bit decode reaches (27-31 %).
BANDWIDTH_THRESHOLD = 0.50


def skipped() -> str:
    """Why the kernel cells cannot run here ("" when they can)."""
    return mma_decode._missing()


def random_problem(M, N, K, G, _N, dtype, device, g, strided: bool = False):
    """x [M, K] (a strided view when `strided`), the course's repack of a random weight's codes, its scales and
    zeros: the wrapper's arguments before group_size and N. check_kernel hands every entry of a case over, and this
    chapter's cases end with N once more (the wrapper's last argument, `_N`: the words do not say N)."""
    x, packed, scales, zeros = w4a16.random_problem(M, N, K, G, dtype, device, g, strided)
    return x, repack(packed), scales, zeros


def _reference(x, words, scales, zeros, G, N):
    return packed_reference(x, _packed(words, N), scales, zeros, G)


def _packed(words, N):
    """The chapter's packed codes back from the words (unpack_like_kernel: the kernel's own reading, in torch)."""
    return pack(unpack_like_kernel(words, N).to(torch.uint8))


def _mistakes(x, words, scales, zeros, G, N):
    return w4a16.kernel_mistakes(x, _packed(words, N), scales, zeros, G)


def _require_gpu(what: str) -> bool:
    why = skipped()
    if why:
        checks.not_measured(f"{what} cannot run here: {why}. The repack and the lane model above are graded on every "
                            "machine; this cell on a CUDA GPU of sm_80 or newer.")  # fmt: skip
        return False
    return True


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N, groups of 64 and 128, K split or not."""
    if not _require_gpu("w4a16_mma_decode"):
        return
    seed, g, device = common.cell(seed)
    if not hidden:
        cases = [(1, 200, 512, 128), (16, 96, 256, 64), (5, 4096, 4096, 128)]
    else:
        cases = []
        for M, G in ((1, 128), (int(torch.randint(2, 16, (1,), generator=g)), 64), (16, 128)):
            N = int(torch.randint(33, 3000, (1,), generator=g))
            K = G * int(torch.randint(2, 8192 // G + 1, (1,), generator=g))
            cases.append((M, N, K, G))
    checks.require_own_kernel(fn, what="w4a16_mma_decode")
    common.check_kernel(fn, "w4a16_mma_decode", [(*c, c[1]) for c in cases], g=g, hidden=hidden, seed=seed,
                        names=("x", "words", "scales", "zeros"), problem=random_problem, reference=_reference,
                        mistakes=_mistakes, dtypes=[torch.bfloat16], extras=("group_size", "N"))  # fmt: skip


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth, at M = 1."""
    if not _require_gpu("w4a16_mma_decode's timing"):
        return []
    return common.check_decode_bandwidth(
        fn, what="w4a16_mma_decode", module=__name__, shape=BANDWIDTH_SHAPE, Ms=BANDWIDTH_MS, threshold=threshold,
        seed=seed, nbytes=lambda M: bytes_moved(M, *BANDWIDTH_SHAPE, BANDWIDTH_GROUP), out_dtype=torch.bfloat16,
        hint="Read each lane's words with one 16-byte load, keep the unpack to one shift and one LOP3 for two "
        "values (layouts.pair), subtract the zero in bf16 and scale the group's float32 MMA sum once.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/checks/harness.py): random codes repacked once, as a deployment loads them."""
    packed, s, z = w4a16.random_packed(N, K, BANDWIDTH_GROUP, g.device, g)
    return repack(packed), s, z, BANDWIDTH_GROUP, N


def timing_inputs(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    """bf16 activations (the kernel takes no other), drawn straight in bf16 as common.timing_activations does."""
    return (torch.randn(n, M, K, device=g.device, generator=g, dtype=torch.bfloat16),)


def reference(x, words, scales, zeros, G, N):
    """The timed outputs' reference, float32 (the harness calls it once per weight copy, for all its calls)."""
    from qmatmul.formats.w4a16 import dequantize

    return x.float() @ dequantize(_packed(words, N), scales, zeros, G).to(x.device).T
