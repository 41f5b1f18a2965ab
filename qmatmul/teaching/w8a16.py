"""Chapter W8A16's teaching cells: what the format stores (explain_format), the floor times the roofline predicts,
and the paths compared at decode (compare_paths; the H200's recorded figures where there is no GPU).
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks.w8a16 import BANDWIDTH_SHAPE
from qmatmul.formats.w8a16 import QMAX, bytes_moved, bytes_moved_naive, bytes_per_weight, naive
from qmatmul.teaching import compare, recorded, roofline_model

# ----------------------------------------------------------------------------------------------------------
# What the format stores


def explain_format(K: int = 8192) -> None:
    """Print what the format stores and what that means for a decode step."""
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("W8A16 (int8 + fp32 scale per row)", bytes_per_weight(K)),
    ]
    print(f"Bytes per weight for a row of K = {K} weights:")
    for name, b in rows:
        print(f"  {name:<36} {b:.5f} B")
    print(
        f"At decode the weights dominate the bytes, so W8A16 can be up to {2 / bytes_per_weight(K):.2f}x faster."
    )


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Recorded on the course's H200 (docs/bench-h200.json, eager) at M = 1, N x K = 28672 x 8192, bf16 activations.
H200_RECORDED_US = recorded.decode_us(
    "w8a16 decode",
    {"dense bf16 (cuBLAS)": "dense (cuBLAS)", "naive: dequantize, then matmul": "naive: dequantize, matmul"},
    1, *BANDWIDTH_SHAPE,
)  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["w8a16"], (1, 16, 2048), naive="w8a16", shape=BANDWIDTH_SHAPE)


def compare_paths(env, prefill_fn, decode_fn, M: int = 1):
    """Time the dense matmul, the naive path and the learner's kernels at decode; plot bytes and time."""
    N, K = BANDWIDTH_SHAPE
    rows = compare.decode_rows(
        M, N, K, bytes_moved, bytes_moved_naive, "w8a16_matmul (tiled)", "w8a16_decode"
    )

    def fns():
        g = checks.generator(0, "cuda")
        q = torch.randint(-QMAX, QMAX + 1, (N, K), dtype=torch.int8, device="cuda", generator=g)
        s = torch.rand(N, device="cuda", generator=g) * 1e-3
        w = torch.randn(N, K, device="cuda", generator=g).to(env.act_dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(env.act_dtype)
        return [
            lambda: x @ w.T,
            lambda: naive(x, q, s),
            lambda: prefill_fn(x, q, s),
            lambda: decode_fn(x, q, s),
        ]

    return compare.compare_paths(env, rows, fns, H200_RECORDED_US, M=M, shape=(N, K), where_known=True)
