"""The validation behind each chapter's `prepare` (the notebook's wrappers call it before launching): the device
and activation dtypes, tensors on one device, codes of the right dtype, the output placed or made, and K padded
for a decode kernel without K masks. It runs in the learner's process."""

from __future__ import annotations

import torch

from qmatmul.kernels.configs import MIN_DECODE_BLOCK_K

__all__ = [
    "ACT_DTYPES", "device", "divisible_k", "require_tensors", "require_activations", "require_codes",
    "require_same_k", "require_one_device", "require_contiguous", "require_block_scaled", "placed", "output",
]  # fmt: skip

ACT_DTYPES = (torch.float16, torch.bfloat16)


def device() -> str:
    """Where the checks run the learner's kernels: the GPU, or Triton's interpreter on the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def divisible_k(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, block_k: int, block: int):
    """The operands and BLOCK_K of a decode kernel without K masks: `block_k` halved until it divides K, never below
    MIN_DECODE_BLOCK_K. A K with no such divisor (no real model has one) is padded with zero weights, zero scales and
    zero activations, which add nothing to the product. Returns (x, packed, scales, block_k)."""
    K = x.shape[1]
    block_k = max(block_k, MIN_DECODE_BLOCK_K)
    while K % block_k and block_k > MIN_DECODE_BLOCK_K:
        block_k //= 2
    if K % block_k:
        kp = -(-K // block_k) * block_k

        def padded(t: torch.Tensor, cols: int) -> torch.Tensor:
            out = t.new_zeros((t.shape[0], cols))  # zeros, then a copy: no arithmetic on the host
            out[:, : t.shape[1]].copy_(t)
            return out

        x, packed, scales = padded(x, kp), padded(packed, kp // 2), padded(scales, kp // block)
    return x, packed, scales, block_k


# ----------------------------------------------------------------------------------------------------------
# The validation behind each chapter's `prepare` (the notebook's wrappers call it before launching)


def _listed(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def require_tensors(**tensors) -> None:
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def require_activations(x: torch.Tensor) -> tuple[int, int]:
    """x must be a 2-D fp16/bf16 tensor [M, K]; returns M, K."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    return x.shape


def require_codes(name: str, t: torch.Tensor, dtype: torch.dtype, layout: str = "") -> None:
    """Quantized codes: a 2-D tensor of `dtype`, laid out as `layout` (e.g. "[N, K/2]")."""
    if t.dim() != 2 or t.dtype != dtype:
        kind = str(dtype).replace("torch.", "") + " tensor" + (f" {layout}" if layout else "")
        raise TypeError(f"{name} must be a 2-D {kind}, got {t.dtype} of shape {list(t.shape)}")


def require_same_k(x_name: str, x: torch.Tensor, w_name: str, w: torch.Tensor, layout: str, w_k: int) -> None:
    if w_k != x.shape[1]:
        raise ValueError(
            f"{x_name} is [M, K] = {list(x.shape)} but {w_name} is {layout} = {list(w.shape)}: the K's differ"
        )


def require_one_device(**tensors) -> None:
    devices = [t.device for t in tensors.values()]
    if len(set(devices)) > 1:
        raise ValueError(
            f"{_listed(tensors)} must be on one device, got {', '.join(str(d) for d in devices)}"
        )


def require_contiguous(activation: str = "x", **tensors) -> None:
    """The weight-side tensors must be contiguous; the activations and the output may be strided views."""
    if not all(t.is_contiguous() for t in tensors.values()):
        raise ValueError(f"{_listed(tensors)} must be contiguous ({activation} and out may be strided)")


def require_block_scaled(x, packed, scales, *, block: int, block_name: str, codes: str, **per_tensor):
    """The inputs of a block-scaled 4-bit matmul (MXFP4, NVFP4): x [M, K] with K a multiple of `block`, packed
    uint8 [N, K/2], scales uint8 `codes` [N, K/block]; `per_tensor` (NVFP4's g) need only be tensors here.
    Returns M, N, K."""
    require_tensors(x=x, packed=packed, scales=scales, **per_tensor)
    M, K = require_activations(x)
    require_codes("packed", packed, torch.uint8, "[N, K/2]")
    N = packed.shape[0]
    if K % block:
        raise ValueError(f"K must be a multiple of {block} (one {block_name} block), got K = {K}")
    require_same_k("x", x, "packed", packed, "[N, K/2]", 2 * packed.shape[1])
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // block):
        raise ValueError(
            f"scales must be uint8 {codes} of shape [N, K/{block}] = [{N}, {K // block}], got {scales.dtype} "
            f"of shape {list(scales.shape)}"
        )
    return M, N, K


def placed(x: torch.Tensor, out, M: int, N: int, weight: dict, **per_tensor) -> torch.Tensor:
    """The end of a chapter's `prepare`: x, the weight's tensors and its per-tensor scales (NVFP4's g) on one
    device, the weight's tensors contiguous; then the output (output)."""
    require_one_device(x=x, **weight, **per_tensor)
    require_contiguous(**weight)
    return output(out, M, N, x.dtype, x.device)


def output(out, M: int, N: int, dtype: torch.dtype, device, name: str = "out") -> torch.Tensor:
    """The [M, N] output (`name` in messages): allocated when out is None, else checked."""
    if out is None:
        return torch.empty((M, N), dtype=dtype, device=device)
    if (
        not isinstance(out, torch.Tensor)
        or tuple(out.shape) != (M, N)
        or out.dtype != dtype
        or out.device != device
    ):
        raise ValueError(
            f"{name} must be {dtype} of shape [{M}, {N}] on {device}, got {getattr(out, 'dtype', type(out).__name__)} "
            f"{list(getattr(out, 'shape', []))} on {getattr(out, 'device', '-')}"
        )
    return out
