"""Chapter FP8's scaffolding, run in the learner's process: `prepare`, `prepare_block`, `prepare_fused` and
`prepare_rows` (validation and the output), the launch configurations of the three kernels (`prefill_config`, `decode_config`,
`block_config`; the decode's K split `decode_split` and `split_scratch`, forced by the checks with `use_split`), the path they choose (the native fp8 tl.dot or e4m3 decoded to fp16; the checks force one with
`use_path`), the scale block the chapter gives (`SCALE_BLOCK`), exercise 6's exact e4m3 encoder in registers
(`e4m3_bits`, a @triton.jit helper), exercise 4's `k_slice` and `finish` (W8A16's) and exercise 7's `prepare_rows` and `rows_config` (the activation quantized once). `__all__` is the chapter's GIVEN (qmatmul/fp8.py derives it)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from qmatmul import checks
from qmatmul.formats.fp8 import E4M3, SCALE_BLOCK, cdiv
from qmatmul.kernels import configs
from qmatmul.kernels.splitk import finish, k_slice
from qmatmul.kernels.splitk import scratch as split_scratch  # the workspace and counters `finish` takes
from qmatmul.scaffold import validation

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
__all__ = [
    "prepare", "prepare_block", "prepare_fused", "prepare_rows", "prefill_config", "decode_config", "decode_split",
    "fused_config", "split_scratch", "block_config", "rows_config", "SCALE_BLOCK", "e4m3_bits", "k_slice", "finish",
]  # fmt: skip


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


def use_path(fp8_dot: bool):
    """Context manager: the configs choose the native fp8 tl.dot (True) or the decode-to-fp16 path (False)."""
    return checks.forcing(FORCED_PATH, f"{__name__}:FORCED_PATH", fp8_dot)


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


def _decode_launch(M: int, N: int, K: int, device: str, split: bool = True) -> dict:
    fp8_dot = _fp8_dot(device)
    dev = configs.chapter_device(device)
    return configs.choose("fp8.decode", dev, M=M, N=N, K=K, fp8_dot=fp8_dot, split=split)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Exercise 4's tiles and path: all M rows (padded to 16) in one program, a strip of BLOCK_N columns."""
    return {k: v for k, v in _decode_launch(M, N, K, device).items() if k != "SPLIT_K"}


def fused_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Exercise 6's tiles and path: exercise 4's launch where K is not split (each program quantizes all of x)."""
    return {k: v for k, v in _decode_launch(M, N, K, device, split=False).items() if k != "SPLIT_K"}


def decode_split(M: int, N: int, K: int, device: str = "cuda") -> int:
    """Exercise 4's slices of K (the grid's second axis, the kernel's SPLIT_K): more than 1 where the strips of
    decode_config's tiles are too few to fill the GPU."""
    return FORCED_SPLIT[-1] if FORCED_SPLIT else _decode_launch(M, N, K, device)["SPLIT_K"]


# The checks force a K split (see use_split), as FP8's path: the worker sets it from checks.WORKER_STATE.
FORCED_SPLIT: list = []


def use_split(split: int):
    """Context manager: decode_split returns `split`."""
    return checks.forcing(FORCED_SPLIT, f"{__name__}:FORCED_SPLIT", split)


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


# ----------------------------------------------------------------------------------------------------------
# Exercise 6: the decode kernel that quantizes its activations itself


def prepare_fused(x, wq, sw, out=None):
    """Validate a decode whose kernel quantizes x itself: x float16/bfloat16 [M <= 16, K] (a strided view is
    fine), wq e4m3 [N, K] and sw float32 [N] contiguous. The output is in x's dtype. Returns M, N, K, sw (1-D), out."""
    validation.require_tensors(x=x, wq=wq)
    M, K = validation.require_activations(x)
    validation.require_codes("wq", wq, E4M3)
    validation.require_same_k("x", x, "wq", wq, "[N, K]", wq.shape[1])
    if M > 16:
        raise ValueError(
            f"the fused decode takes at most 16 rows, got M = {M}: use quantize_fp8 and fp8_matmul"
        )
    N = wq.shape[0]
    sw = _vector(sw, N, "sw")
    return M, N, K, sw, validation.placed(x, out, M, N, {"wq": wq, "sw": sw})


# ----------------------------------------------------------------------------------------------------------
# Exercise 7: the activation quantized once, in one kernel (one program a row)


def prepare_rows(x, xq=None, sx=None):
    """Validate the input of the row quantizer: x float16/bfloat16 [M, K] (a strided view is fine). The outputs:
    xq e4m3 [M, K] contiguous and sx float32 [M, 1] contiguous, allocated where not given, else checked. Returns
    M, K, xq, sx."""
    validation.require_tensors(x=x)
    M, K = validation.require_activations(x)
    xq = validation.output(xq, M, K, E4M3, x.device, name="xq")
    sx = validation.output(sx, M, 1, torch.float32, x.device, name="sx")
    for name, t in (("xq", xq), ("sx", sx)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return M, K, xq, sx


def rows_config(M: int, K: int, device: str = "cuda") -> dict:
    """One program a row, stepping K by BLOCK_K. On a GPU the whole row in one step where it fits (up to 16384
    values, the warps growing with it): at decode M is 1, one program does all the work, and each step of its loop
    is a round trip to memory that nothing overlaps. In the interpreter 128 values a step (its cost grows with the
    tile)."""
    if device != "cuda":
        return {"BLOCK_K": max(16, min(128, triton.next_power_of_2(max(K, 1)))), "num_warps": 4}
    block = max(16, min(16384, triton.next_power_of_2(max(K, 1))))
    return {"BLOCK_K": block, "num_warps": 4 if block <= 2048 else 8 if block <= 8192 else 16}


@triton.jit
def e4m3_bits(v):
    """float32 values (already divided by their scale) -> the uint8 codes of their e4m3fn values: saturated to
    ±448 (±inf too), rounded to nearest with ties to even, the sign kept (-0.0 and the negative values that round
    to zero give 0x80). NaN gives a NaN code (0x7F, or 0xFF with its sign bit).

    Integer and exact float operations only, so the codes are the same in Triton's interpreter and on every GPU
    (the interpreter's own fp32 -> float8e4nv cast rounds wrongly: 31.6 becomes 16; GPUs before sm_89 have no such
    cast). Exact against torch's float8_e4m3fn and ml_dtypes on every e4m3 value, every midpoint and its fp32
    neighbours, and 2^20 random bit patterns (tests/test_fp8_fused.py)."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    # |v| as bits, saturated at 448 (0x43E00000): inf too (NaN's bits are larger still, but NaN is handled below)
    a = tl.minimum(bits & 0x7FFFFFFF, 0x43E00000)
    # Normal codes (|v| >= 2^-6): round fp32's 23-bit mantissa to 3 bits, ties to even, on the bit pattern (a carry
    # runs on into the exponent, as it should), then rebias the exponent from 127 to 7: (127 - 7) << 3.
    normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
    # Subnormal codes (|v| < 2^-6): the code is |v| / 2^-9 rounded to an integer (8 is 2^-6, the first normal code).
    # |v| * 512 is exact; adding 2^23 rounds it to an integer with ties to even, which lands in the low mantissa bits.
    sub = (a.to(tl.float32, bitcast=True) * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
    code = tl.where(a < 0x3C800000, sub, normal)  # 0x3C800000: 2^-6
    code = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7F, code)  # NaN
    return (code | sign).to(tl.uint8)
