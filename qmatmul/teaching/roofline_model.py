"""The roofline model every chapter predicts with: the two ceilings of a GPU (measured here, or the H200's record),
the bytes and FLOPs of a Linear layer in each format, and the floor time a kernel cannot beat.

Chapter 0 teaches (qmatmul/teaching/roofline.py) and checks (qmatmul/checks/roofline.py) this model; the format
chapters print its predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

from qmatmul import environment, formats, timing
from qmatmul.formats.constants import MX_BLOCK, NVFP4_BLOCK, W4A16_GROUP_SIZE
from qmatmul.teaching import recorded

# Measured on the course's lent H200 (docs/bench-h200.json): used as data where no GPU is present.
H200 = recorded.ceilings()


@dataclass
class Ceilings:
    name: str
    copy_bandwidth: float  # bytes/s
    matmul_flops: float  # FLOP/s in the chapter's activation dtype
    measured: bool  # False: recorded figures of another GPU

    def describe(self) -> str:
        how = (
            "measured now"
            if self.measured
            else f"recorded on {H200['date']} with {H200['versions']}; no GPU here"
        )
        return (
            f"{self.name}: copy {self.copy_bandwidth / 1e12:.2f} TB/s, dense matmul "
            f"{self.matmul_flops / 1e12:.0f} TFLOP/s ({how})"
        )


def ceilings(env) -> Ceilings:
    """The two ceilings of this GPU, measured in this process; the H200's recorded figures on a CPU."""
    if env.has_gpu:
        return Ceilings(env.gpu_name, timing.copy_bandwidth(), timing.matmul_flops(dtype=env.act_dtype), True)
    return recorded_ceilings()


def recorded_ceilings() -> Ceilings:
    """The H200's recorded figures (bf16 matmul), the course's data where nothing can be measured."""
    return Ceilings(H200["gpu"], H200["copy_bandwidth"], H200["bf16_flops"], False)


def floor_seconds(nbytes: float, nflops: float, ceil: Ceilings) -> tuple[float, str]:
    t_mem, t_math = nbytes / ceil.copy_bandwidth, nflops / ceil.matmul_flops
    return max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


def print_predictions(ceil: Ceilings, rows) -> None:
    """rows: (label, nbytes, nflops). Prints bytes, intensity and the floor time of each."""
    print(ceil.describe())
    ridge = ceil.matmul_flops / ceil.copy_bandwidth
    print(f"ridge point: {ridge:.0f} FLOP/byte (below it a kernel is memory-bound)")
    print(f"{'':<34}{'MB moved':>10}{'FLOP/byte':>11}{'floor':>12}  bound")
    for label, nbytes, nflops in rows:
        t, bound = floor_seconds(nbytes, nflops, ceil)
        print(f"{label:<34}{nbytes / 1e6:>10.1f}{nflops / nbytes:>11.1f}{t * 1e6:>10.1f} µs  {bound}")


# ----------------------------------------------------------------------------------------------------------
# The bytes and FLOPs of a Linear layer, per format: from each format's byte model (qmatmul/formats/)

FORMATS = ("bf16", *formats.FORMATS)
FORMAT_TEXT = {
    "bf16": "bf16 dense: 2 bytes per weight, no scales",
    "w8a16": "W8A16: int8 weights, one fp32 scale per output channel",
    "w4a16": "W4A16: int4 weights (two per byte), an fp32 scale and a uint8 zero per group",
    "fp8": "FP8 W8A8: e4m3 weights and activations, an fp32 scale per weight row and per token",
    "mxfp4": "MXFP4: E2M1 (two per byte), an E8M0 scale (1 byte) per 32 weights",
    "nvfp4": "NVFP4: E2M1 (two per byte), an e4m3 scale (1 byte) per 16 weights, one fp32 tensor scale",
}
# The decode shape every chapter grades bandwidth on (a Llama-3-70B MLP projection: N x K = 28672 x 8192).
LAYER_SHAPE = (28672, 8192)
# How a prediction row names a format's fused kernel
PREDICTION_LABEL = dict(
    w8a16="W8A16 fused",
    w4a16="W4A16 fused G=128",
    fp8="FP8 W8A8 fused",
    mxfp4="MXFP4 fused",
    nvfp4="NVFP4 fused",
)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def model_bytes(fmt: str, M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE) -> int:
    """The bytes a fused kernel must move, from the format's byte model (16-bit activations)."""
    _check_format(fmt)
    if fmt == "bf16":
        return bytes_moved_dense(M, N, K)
    return formats.get(fmt).bytes_moved(M, N, K, group_size)


def model_bytes_naive(fmt: str, M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE) -> int:
    """The naive dequantize-then-matmul path, from the format's byte model."""
    _check_format(fmt)
    if fmt == "bf16":
        return bytes_moved_dense(M, N, K)  # nothing to dequantize
    return formats.get(fmt).bytes_moved_naive(M, N, K, group_size)


def naive_factor(fmt: str, M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE) -> float:
    """How many times a fused kernel's bytes the naive path moves (the hints quote it; never a typed number)."""
    return model_bytes_naive(fmt, M, N, K, group_size) / model_bytes(fmt, M, N, K, group_size)


def bytes_moved_dense(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """A dense 16-bit Linear layer: the weight, the activations in, the output out."""
    return act_bytes * (N * K + M * K + M * N)


def flops(M: int, N: int, K: int) -> int:
    """A matmul of x [M, K] by W.T [K, N]: one multiply and one add per weight and token."""
    return 2 * M * N * K


model_flops = flops


def byte_parts(fmt: str, M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE) -> dict:
    """The parts of model_bytes: weights, scales, zeros, activations, output (tests check they add up)."""
    _check_format(fmt)
    weights = {"bf16": 2 * N * K, "w8a16": N * K, "fp8": N * K}.get(fmt, N * K // 2)
    scales = {
        "bf16": 0,
        "w8a16": 4 * N,
        "w4a16": 4 * N * (K // group_size),
        "fp8": 4 * N + 4 * M,  # one fp32 scale per weight row and one per token
        "mxfp4": N * K // MX_BLOCK,
        "nvfp4": N * K // NVFP4_BLOCK + 4,  # e4m3 block scales and the fp32 tensor scale
    }[fmt]
    zeros = N * (K // group_size) if fmt == "w4a16" else 0
    acts = (1 if fmt == "fp8" else 2) * M * K
    return dict(weights=weights, scales=scales, zeros=zeros, activations=acts, output=2 * M * N)


def layer_numbers(
    fmt: str, M: int, ceil: Ceilings, N: int | None = None, K: int | None = None, group_size=W4A16_GROUP_SIZE
):
    """What the chapter's widget shows for one format and M: bytes, FLOPs, intensity, floor time, bound."""
    N, K = (N or LAYER_SHAPE[0]), (K or LAYER_SHAPE[1])
    nbytes, nflops = model_bytes(fmt, M, N, K, group_size), model_flops(M, N, K)
    naive = model_bytes_naive(fmt, M, N, K, group_size)
    t, bound = floor_seconds(nbytes, nflops, ceil)
    t_naive, _ = floor_seconds(naive, nflops, ceil)
    return dict(
        bytes=nbytes, flops=nflops, intensity=nflops / nbytes, seconds=t, bound=bound,
        bytes_per_weight=model_bytes(fmt, 0, N, K, group_size) / (N * K), naive_bytes=naive, naive_seconds=t_naive,
        ridge=ceil.matmul_flops / ceil.copy_bandwidth,
    )  # fmt: skip


def predictions(env, fmts, Ms, *, naive: str, shape=LAYER_SHAPE, note: str = "") -> bool:
    """A chapter's prediction cell: the floor time of the dense layer and of each format in `fmts` at every M,
    and of `naive`'s dequantize-then-matmul path at M = 1, on this GPU (the H200's figures on a CPU). Not under the
    autograder: measuring the GPU's ceilings there costs every notebook seconds of the GPU beside other graders.
    Returns whether it printed them."""
    if environment.autograding():
        return False
    N, K = shape
    rows = []
    for M in Ms:
        rows.append((f"dense bf16, M={M}", bytes_moved_dense(M, N, K), flops(M, N, K)))
        rows += [
            (f"{PREDICTION_LABEL[fmt]}, M={M}", model_bytes(fmt, M, N, K), flops(M, N, K)) for fmt in fmts
        ]
    rows.append((f"{naive.upper()} naive path, M=1", model_bytes_naive(naive, 1, N, K), flops(1, N, K)))
    print(f"A Linear layer with N x K = {N} x {K} weights{note}:")
    print_predictions(ceilings(env), rows)
    return True
