"""NVFP4: E2M1 weights, an e4m3 scale per 16 along K, and one float32 scale per tensor.

Weights use nn.Linear's layout W[N, K]; K must be a multiple of 16. torchao's two-level rule, step by step in
float32 (the order matters for bit-exactness):
    g        = max |W| / (448 · 6)                       (the global scale; an all-zero tensor gets g = 1)
    s[n, b]  = e4m3(clamp((amax_block / 6) / g, 2^-6, 448))   (the block scale, rounded to e4m3)
    r[n, b]  = (1 / g) / s                                (the reciprocal of the combined scale)
    code     = E2M1(clamp(W · r, -6, 6))                  (round to nearest even; fp4.e2m1_encode)
    packed   = uint8 [N, K/2] (element 2i low nibble), scales = uint8 [N, K/16] (e4m3 bits), g: float32 [1]
    y        = (x @ (E2M1 value · s).T) · g
(g is `global_scale` in the code: everywhere else in the package `g` is a torch.Generator)
The element step follows torchao 0.18 (`nvfp4_quantize`), which multiplies by r "to match the MSLK triton kernel
numerics"; torchao up to 0.17 divided by g · s instead. The two differ only where W / (g · s) lies on an exact
E2M1 midpoint (tests/test_oracles.py compares with the installed torchao, bit for bit).
"""

from __future__ import annotations

import torch

from qmatmul.formats import fp4
from qmatmul.formats.constants import NVFP4_BLOCK as BLOCK


def tensor_scale(w: torch.Tensor) -> torch.Tensor:
    """The global (per-tensor) scale g = max |w| / (448 · 6) as a float32 tensor of shape [1]; 1 for an all-zero tensor."""
    amax = w.float().abs().amax().reshape(1)
    return torch.where(amax > 0, amax / (fp4.E4M3_MAX * fp4.E2M1_MAX), torch.ones_like(amax))


def quantize_codes(
    w: torch.Tensor,
    block: int = BLOCK,
    two_level: bool = True,
    round_scale: bool = True,
    reciprocal: bool = True,
):
    """(codes uint8 [N, K], block scales uint8 [N, K/block] as e4m3 bits, global_scale float32 [1]).

    two_level=False, round_scale=False and reciprocal=False give known wrong variants (no tensor scale; data
    scaled by the unrounded block scale; data divided by global_scale · s, torchao <= 0.17's numerics)."""
    w = w.float()
    N, K = w.shape
    if K % block:
        raise ValueError(f"K must be a multiple of {block}, got K = {K}")
    global_scale = tensor_scale(w) if two_level else torch.ones(1)
    blocks = w.reshape(N, K // block, block)
    amax = blocks.abs().amax(dim=2)
    s = torch.clamp((amax / fp4.E2M1_MAX) / global_scale, fp4.E4M3_TINY, fp4.E4M3_MAX)
    bits = fp4.e4m3_encode(s)
    s_used = fp4.e4m3_decode(bits) if round_scale else s
    if reciprocal:
        v = blocks * ((1.0 / global_scale) / s_used)[:, :, None]
    else:
        v = blocks / (global_scale * s_used)[:, :, None]
    v = torch.clamp(v, -fp4.E2M1_MAX, fp4.E2M1_MAX)
    return fp4.e2m1_encode(v).reshape(N, K), bits, global_scale


def quantize(w: torch.Tensor):
    """The reference quantizer: (packed uint8 [N, K/2], scales uint8 [N, K/16], global_scale float32 [1])."""
    codes, scales, global_scale = quantize_codes(w)
    return fp4.pack_nibbles(codes), scales, global_scale


def dequantize(packed, scales, global_scale) -> torch.Tensor:
    values = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    return values * fp4.e4m3_decode(scales).repeat_interleave(BLOCK, dim=1) * global_scale.float()


def reference(x, packed, scales, global_scale) -> torch.Tensor:
    """y = x @ W.T in float32: (x @ (E2M1 · s).T) · global_scale, the order the kernels use."""
    w = fp4.e2m1_decode(fp4.unpack_nibbles(packed)) * fp4.e4m3_decode(scales).repeat_interleave(BLOCK, dim=1)
    return (x.float() @ w.T) * global_scale.float()


def naive(x, packed, scales, global_scale):
    """Decode the whole weight into memory with torch ops, then a dense matmul."""
    table = fp4.e2m1_table(x.dtype, x.device)
    N = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(N, -1).long()
    s = scales.view(torch.float8_e4m3fn).to(x.dtype).repeat_interleave(BLOCK, dim=1)
    return (x @ (table[codes] * s).T) * global_scale.to(x.dtype)


def naive_scale_folded(x, packed, scales, global_scale):
    """The naive path of a Linear layer (the capstone's reference path): the weight decoded in float32 with the
    tensor scale folded in, then in x's dtype, then a dense matmul. x @ (E2M1 · s).T alone can overflow fp16."""
    table = fp4.e2m1_table(torch.float32, x.device)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
    s = scales.view(torch.float8_e4m3fn).float().repeat_interleave(BLOCK, dim=1)
    return x @ (table[codes] * s * global_scale.float()).to(x.dtype).T


def bytes_per_weight() -> float:
    """Half a byte of E2M1 plus a 16th of a byte of e4m3: 4.5 bits (the tensor scale is negligible)."""
    return 0.5 + 1 / BLOCK


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return N * K // 2 + N * K // BLOCK + 4 + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return bytes_moved(M, N, K, act_bytes) + 2 * act_bytes * N * K
