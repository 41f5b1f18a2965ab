"""Chapter FP8's scaffolding, run in the learner's process: `prepare` and `prepare_block` (validation and the
output), the launch configurations of the three kernels (`prefill_config`, `decode_config`, `block_config`), the
path they choose (the native fp8 tl.dot or e4m3 decoded to fp16; the checks force one with `use_path`) and the
scale block the chapter gives (`SCALE_BLOCK`). `__all__` is the chapter's GIVEN (qmatmul/fp8.py derives it)."""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.formats.fp8 import E4M3, SCALE_BLOCK, cdiv
from qmatmul.kernels import configs
from qmatmul.scaffold import validation

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
__all__ = ["prepare", "prepare_block", "prefill_config", "decode_config", "block_config", "SCALE_BLOCK"]


def out_dtype(device: str) -> torch.dtype:
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return torch.bfloat16
    return torch.float16  # the interpreter and T4: fp16 (the chapter's 16-bit type there)


def has_fp8_dot(device: str) -> bool:
    return device == "cuda" and torch.cuda.get_device_capability() >= (8, 9)


def imprecise_fp8_accumulation(device: str) -> bool:
    """Whether Triton's fp8 tl.dot accumulates in reduced precision here unless told otherwise: on sm_90 alone
    (triton's CUDA backend sets max_num_imprecise_acc_default = 2**30 for capability 90)."""
    return device == "cuda" and tuple(torch.cuda.get_device_capability()) == (9, 0)


# The checks force one path or the other (see use_path). The worker sets it from checks.WORKER_STATE before every
# op, under the key "qmatmul.scaffold.fp8:FORCED_PATH".
FORCED_PATH: list = []


class use_path:
    """Context manager: the configs choose the native fp8 tl.dot (True) or the decode-to-fp16 path (False)."""

    def __init__(self, fp8_dot: bool):
        self.fp8_dot = fp8_dot

    def __enter__(self):
        FORCED_PATH.append(self.fp8_dot)
        # the worker's configs too
        checks.WORKER_STATE["qmatmul.scaffold.fp8:FORCED_PATH"] = list(FORCED_PATH)

    def __exit__(self, *exc):
        FORCED_PATH.pop()
        checks.WORKER_STATE["qmatmul.scaffold.fp8:FORCED_PATH"] = list(FORCED_PATH)


def _fp8_dot(device: str) -> bool:
    if FORCED_PATH:
        return FORCED_PATH[-1]
    return has_fp8_dot(device)


def _vector(t, n, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32 or t.numel() != n or t.dim() > 2 or (t.dim() == 2 and 1 not in t.shape):
        raise ValueError(
            f"{name} must be float32 with one scale per row: shape [{n}] or [{n}, 1], got {t.dtype} "
            f"of shape {list(t.shape)}"
        )
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t.reshape(-1)


def _operands(xq, wq) -> tuple[int, int, int]:
    """Both operands e4m3 [M, K] and [N, K]: returns M, N, K."""
    validation.require_tensors(xq=xq, wq=wq)
    validation.require_codes("xq", xq, E4M3)
    validation.require_codes("wq", wq, E4M3)
    validation.require_same_k("xq", xq, "wq", wq, "[N, K]", wq.shape[1])
    return xq.shape[0], wq.shape[0], xq.shape[1]


def prepare(xq, sx, wq, sw, out=None):
    """Validate the inputs of a W8A8-FP8 matmul with per-row scales; allocate out if needed.

    Returns M, N, K, sx, sw (as 1-D views), out.
    """
    M, N, K = _operands(xq, wq)
    sx = _vector(sx, M, "sx")
    sw = _vector(sw, N, "sw")
    validation.require_one_device(xq=xq, sx=sx, wq=wq, sw=sw)
    validation.require_contiguous("xq", wq=wq)
    return M, N, K, sx, sw, validation.output(out, M, N, out_dtype(xq.device.type), xq.device)


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes and path of the tiled kernel. FP8_DOT: the native fp8 tl.dot (sm_89+)."""
    fp8_dot = _fp8_dot(device)
    return configs.choose("fp8.tiled", configs.chapter_device(device), M=M, N=N, K=K, fp8_dot=fp8_dot)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """The decode kernel: all M rows (padded to 16) in one program, a strip of BLOCK_N columns."""
    fp8_dot = _fp8_dot(device)
    return configs.choose("fp8.decode", configs.chapter_device(device), M=M, N=N, K=K, fp8_dot=fp8_dot)


# ----------------------------------------------------------------------------------------------------------
# Exercise 5: the block-scaled GEMM (DeepSeek-V3: activations 1 x 128, weights 128 x 128)


def prepare_block(xq, sx, wq, sw, out=None):
    """Validate a block-scaled fp8 matmul: sx float32 [M, cdiv(K, 128)], sw float32 [cdiv(N, 128), cdiv(K, 128)]."""
    M, N, K = _operands(xq, wq)
    kb, nb = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    for name, t, shape in (("sx", sx, (M, kb)), ("sw", sw, (nb, kb))):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != shape:
            raise ValueError(f"{name} must be float32 of shape {list(shape)} (one scale per block), got "
                             f"{getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")  # fmt: skip
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    validation.require_one_device(xq=xq, sx=sx, wq=wq, sw=sw)
    validation.require_contiguous("xq", wq=wq)
    return M, N, K, validation.output(out, M, N, out_dtype(xq.device.type), xq.device)


def block_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """BLOCK_K is the scale block (128) so each K step has one activation and one weight scale."""
    fp8_dot = _fp8_dot(device)
    return configs.choose("fp8.block", configs.chapter_device(device), M=M, N=N, K=K, fp8_dot=fp8_dot)
