"""Chapter "layouts", what runs in the learner's process: the given Gluon pieces of the decode kernel (the layouts it
states, the offsets of its loads, the activations in the MMA's order, the inline PTX that unpacks two values at a
time), `prepare` (validation and the output), the launch configuration and the split-K scratch. `__all__` is the
chapter's GIVEN: qmatmul/layouts.py derives it from there.

The pieces are qmatmul/kernels/mma_decode.py's (the course's expert decode, measured at 80 % of the H200's copy
bandwidth), named for the notebook: the learner writes the operand, the group's epilogue and the split-K finish.
"""

from __future__ import annotations

import torch
import triton

from qmatmul.kernels import mma_decode, splitk
from qmatmul.kernels.mma_repack import FP4_BITS, FP4_MASK, FP4_PAIR3_MASK, FP4_PAIR3_MUL, x_order
from qmatmul.scaffold import validation

__all__ = [
    "available", "why_not", "x_order", "prepare", "decode_config", "scratch", "mma_layout", "chunks_layout",
    "x_layout", "steps", "chunk_offsets", "x_offsets", "mma_order", "pair", "barrier", "PAIR0", "PAIR1", "PAIR2",
    "PAIR3", "mma_v2", "NO_GLUON", "grid", "FP4_BITS", "FP4_MASK", "FP4_PAIR3_MASK", "FP4_PAIR3_MUL",
]  # fmt: skip

available = mma_decode.available


class _NoGluon:
    """What the notebook binds to `gluon` and `gl` where triton has no Gluon (older than 3.5): `@gluon.jit` leaves a
    function as it is and every `gl.<name>` is this object again, so the kernel cells still define their functions and
    the graded cells say what they skip (layouts.skipped) instead of the notebook stopping at its imports."""

    def jit(self, fn=None, **_):
        return fn if fn is not None else (lambda f: f)

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __repr__(self):
        return "<no Gluon in this triton>"


NO_GLUON = _NoGluon()


def why_not() -> str:
    """What this machine lacks to run a Gluon MMA decode (a CUDA GPU of sm_80 or newer, triton with Gluon), or ""."""
    return mma_decode._missing()


if mma_decode.gluon is not None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2

    mma_layout = mma_decode._mma_layout
    chunks_layout = mma_decode._chunks_layout
    x_layout = mma_decode._x_layout
    steps = mma_decode._steps
    chunk_offsets = mma_decode._chunk_offsets
    mma_order = mma_decode._mma_order
    pair = mma_decode._pair
    barrier = mma_decode._barrier
    PAIR0, PAIR1, PAIR2, PAIR3 = mma_decode.PAIR0, mma_decode.PAIR1, mma_decode.PAIR2, mma_decode.PAIR3

    @gluon.jit
    def x_offsets(M, stride_xm, KC: gl.constexpr, BM: gl.constexpr, x_l: gl.constexpr):
        """Offsets [KC, 4, 16, BM] into x of a group's KC 64-wide chunks, as `repack` ordered K: lane t's 16 values of
        each chunk side by side (x_l: `x_layout`, or a blocked layout for the shared-memory path). Rows past M read
        row M - 1 (no mask): their columns are never stored."""
        xc = gl.arange(0, KC, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, x_l))))
        xj = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, x_l))))
        xm = gl.arange(0, BM, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, x_l))))
        return (xc[:, None, None, None] * 64 + xt[None, :, None, None] * 16 + xj[None, None, :, None]
                + gl.minimum(xm, M - 1)[None, None, None, :] * stride_xm)  # fmt: skip
else:  # pragma: no cover - triton without Gluon: the kernel cells say so and skip
    mma_layout = chunks_layout = x_layout = steps = chunk_offsets = x_offsets = mma_order = pair = barrier = (
        None
    )
    PAIR0 = PAIR1 = PAIR2 = PAIR3 = mma_v2 = None


def prepare(x, words, scales, zeros, group_size: int, N: int, out=None):
    """Validate a decode's operands with clear messages: bf16 x [M <= 16, K], `repack`'s int32 words
    [ceil(N/16), K/64, 32, 4], float32 scales and uint8 zeros [N, K/G], G a power-of-two multiple of 64 dividing K;
    out [M, N] (made when None). Returns M, K, x (rows contiguous), out."""
    validation.require_tensors(x=x, words=words, scales=scales, zeros=zeros)
    if not mma_decode.supports(group_size, x.shape[-1]):
        raise ValueError(f"the kernel takes groups of 64 times a power of two dividing K, got G = {group_size} "
                         f"and K = {x.shape[-1]}")  # fmt: skip
    M, K, x, out = mma_decode._checked(x, words, N, out)
    groups = K // group_size
    if scales.dtype != torch.float32 or tuple(scales.shape) != (N, groups):
        raise ValueError(f"scales must be float32 [N, K/G] = [{N}, {groups}], got {scales.dtype} "
                         f"{list(scales.shape)}")  # fmt: skip
    if zeros.dtype != torch.uint8 or tuple(zeros.shape) != (N, groups):
        raise ValueError(
            f"zeros must be uint8 [N, K/G] = [{N}, {groups}], got {zeros.dtype} {list(zeros.shape)}"
        )
    validation.require_one_device(x=x, words=words, scales=scales, zeros=zeros, out=out)
    return M, K, x, out


def decode_config(M: int, N: int, K: int) -> dict:
    """Row tiles a warp (R), warps, whether the program reads x once through shared memory (X_SHARED) and how many
    ways K is split (SPLIT_K), as measured on the H200 for the course's kernel (qmatmul/kernels/configs.py)."""
    return dict(mma_decode.config(M, N, K))


def scratch(device, split: int, N: int, n_blocks: int):
    """(workspace, counters) of a split-K launch: float32 [split * 16 * N] and int32 [n_blocks] at 0, made once per
    device and shape. The strip's last program sets its counter back to 0, so no launch zeroes them."""
    return splitk.scratch(device, split, N, n_blocks)


def grid(N: int, K: int, group_size: int, cfg: dict) -> tuple[int, int]:
    """(column strips, parts of K): a strip is 16 x num_warps x R rows of N; K splits into at most one group a part."""
    return triton.cdiv(N, 16 * cfg["num_warps"] * cfg["R"]), min(cfg["SPLIT_K"], K // group_size)
