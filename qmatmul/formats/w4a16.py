"""W4A16: int4 weights in groups along K, each group with a scale and a zero point (AWQ/GPTQ family).

Weights use nn.Linear's layout W[N, K]. Groups of G consecutive k (G = 32, 64 or 128; K a multiple of G) share
one float32 scale and one uint8 zero point. Asymmetric quantization, computed in float32 for each group:
    lo = min(min_k W, 0),  hi = max(max_k W, 0)          (the range always holds 0.0, as in GPTQ)
    scale = (hi - lo) / 15                               (an all-zero group gets scale = 1)
    zero  = clamp(round(-lo / scale), 0, 15)
    q     = clamp(round(W / scale) + zero, 0, 15)        (round half to even; W / scale is a division)
Dequantized: w = (q - zero) * scale. Stored:
    packed uint8 [N, K/2]:  packed[n, i] = q[n, 2i] | (q[n, 2i+1] << 4)   (element 2i in the low nibble)
    scales float32 [N, K/G], zeros uint8 [N, K/G]
y = x @ w.T (x: [M, K] fp16/bf16, y: [M, N] in x's dtype).
"""

from __future__ import annotations

import torch

from qmatmul.formats.constants import GPTQ_PACK, W4A16_GROUP_SIZE
from qmatmul.formats.constants import INT4_QMAX as QMAX
from qmatmul.formats.constants import W4A16_GROUP_SIZES as GROUP_SIZES


def grouped(w: torch.Tensor, group_size: int) -> torch.Tensor:
    N, K = w.shape
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
    if K % group_size:
        raise ValueError(f"K = {K} is not a multiple of the group size {group_size}")
    return w.float().reshape(N, K // group_size, group_size)


def quantize_codes(w: torch.Tensor, group_size: int = W4A16_GROUP_SIZE):
    """The reference quantizer, unpacked: q (uint8 [N, K], codes 0..15), scales float32 [N, K/G], zeros uint8."""
    wg = grouped(w, group_size)
    lo = wg.amin(dim=2).clamp(max=0)
    hi = wg.amax(dim=2).clamp(min=0)
    scale = (hi - lo) / QMAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-lo / scale).clamp(0, QMAX)
    q = (torch.round(wg / scale[..., None]) + zero[..., None]).clamp(0, QMAX)
    return q.reshape(w.shape).to(torch.uint8), scale, zero.to(torch.uint8)


def pack(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes [N, K] -> packed uint8 [N, K/2], element 2i in the low nibble."""
    return q[:, 0::2] | (q[:, 1::2] << 4)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """packed uint8 [N, K/2] -> codes uint8 [N, K]."""
    N, half = packed.shape
    q = torch.empty(N, 2 * half, dtype=torch.uint8, device=packed.device)
    q[:, 0::2] = packed & 0xF
    q[:, 1::2] = packed >> 4
    return q


def quantize(w: torch.Tensor, group_size: int = W4A16_GROUP_SIZE):
    """The reference quantizer: (packed uint8 [N, K/2], scales float32 [N, K/G], zeros uint8 [N, K/G])."""
    q, scale, zero = quantize_codes(w, group_size)
    return pack(q), scale, zero


def dequantize(packed, scales, zeros, group_size: int) -> torch.Tensor:
    q = unpack(packed).float()
    N, K = q.shape
    s = scales.float().repeat_interleave(group_size, dim=1)
    z = zeros.float().repeat_interleave(group_size, dim=1)
    return (q - z) * s


def reference(x, packed, scales, zeros, group_size: int) -> torch.Tensor:
    """y = x @ dequantize(...).T in float32 (the grading reference)."""
    return x.float() @ dequantize(packed, scales, zeros, group_size).to(x.device).T


def naive(x, packed, scales, zeros, group_size: int) -> torch.Tensor:
    """The naive path: unpack and dequantize the whole weight into memory, then a dense matmul."""
    return x @ dequantize(packed, scales, zeros, group_size).to(x.dtype).T


def bytes_per_weight(group_size: int = W4A16_GROUP_SIZE) -> float:
    """Half a byte per weight plus its share of one float32 scale and one uint8 zero per group."""
    return 0.5 + 5 / group_size


def bytes_moved(M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE, act_bytes: int = 2) -> int:
    """The bytes a fused W4A16 matmul must move: packed weights, scales, zeros, activations in, output out."""
    return N * K // 2 + N * (K // group_size) * 5 + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, group_size: int = W4A16_GROUP_SIZE, act_bytes: int = 2) -> int:
    """The naive path: read the packed weight, write the dequantized one, read it back for the matmul."""
    return bytes_moved(M, N, K, group_size, act_bytes) + 2 * act_bytes * N * K


# ----------------------------------------------------------------------------------------------------------
# Other layouts of the same weight: PyTorch's tinygemm, GPTQ checkpoints


def tinygemm_operands(packed, scales, zeros, G):
    """The same weight in PyTorch's tinygemm layout: (weight_int4pack, G, scales_and_zeros [K/G, N, 2] bf16).

    tinygemm computes w = (q - 8) · scale + offset, so offset = (8 - zero) · scale gives our (q - zero) · scale.
    Its packer takes element 2i in the HIGH nibble (torchao's convention), the opposite of ours: swap them.
    """
    wp = torch._convert_weight_to_int4pack(((packed << 4) | (packed >> 4)).contiguous(), 8)
    sz = torch.stack([scales, (8 - zeros.float()) * scales], dim=-1).transpose(0, 1).contiguous()
    return wp, G, sz.to(torch.bfloat16)


# ----------------------------------------------------------------------------------------------------------
# The GPTQ checkpoint layout
#
# The GPTQ layout (AutoGPTQ's QuantLinear.pack, auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py; the same in
# GPTQModel and in vLLM's gptq.py, where qweight has packed_dim 0 and qzeros packed_dim 1), for 4 bits and a
# weight W[N, K] (out_features N, in_features K):
#   qweight int32 [K/8, N]:   qweight[r, n] bits 4j..4j+3 = q[n, 8r + j]           (packed along K)
#   qzeros  int32 [K/G, N/8]: qzeros[g, c] bits 4j..4j+3 = stored zero of (n = 8c + j, group g)  (along N)
#   scales  [K/G, N] in the layer's dtype: float16 in most checkpoints, bfloat16 or float32 in some
# group_size -1 (AutoGPTQ's "no groups") is one group over all of K: G = K, one scale and zero per column.
# Scales are read into float32, the course layout's dtype: exact from float16, bfloat16 and float32 alike (every
# value of the three is a float32 value), so nothing is refused for its scale dtype.
#
# The zero points. The "v1" checkpoint format (checkpoint_format "gptq", most checkpoints on the Hub) stores each
# zero point minus one: AutoGPTQ's pack does `zeros -= 1` (its quantizer's zeros lie in 0..maxq = 0..15), so a
# zero of 0 is written as -1, nibble 15. AutoGPTQ 0.7.1 reads a nibble back two ways:
#   torch path  (qlinear_cuda_old.py forward, and its dequantizers): shift, .to(int8), `zeros + 1`, then
#               `& (2**bits - 1)`: (nibble + 1) & 0xF, so nibble 15 reads as zero 0;
#   Triton path (nn_modules/triton_utils/kernels.py, quant_matmul_248_kernel): `(zeros >> shifter) & maxq`,
#               then `zeros + 1`: nibble + 1, so nibble 15 reads as 16.
# The course reads (nibble + 1) & 0xF, the torch path, on purpose: nibble 15 is what AutoGPTQ's packer writes for
# a zero of 0, and only the wrap gives that 0 back (no quantizer writes a zero of 16: it lies outside 0..15). With
# it v1 holds every zero point 0..15 of the course's quantizer, one nibble each, and to_gptq/from_gptq round-trip
# bit for bit. (AutoGPTQ's packer, writing -1 as a uint32, also sets every higher nibble of that qzeros word; to_gptq
# writes nibble 15 alone.) GPTQModel's v2 format stores the zero itself (its v1 -> v2 conversion adds 0x11111111
# to qzeros, gptqmodel/utils/model.py); vLLM reads v2 only when checkpoint_format == "gptq_v2". The course reads
# v1. Act-order (g_idx / desc_act) is out of scope: groups are consecutive k, as in the course layout.

GPTQ_SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def gptq_zeros(stored: torch.Tensor) -> torch.Tensor:
    """v1's stored nibbles (0..15) -> zero points: (stored + 1) & 0xF, AutoGPTQ's torch path (15 reads as 0)."""
    return (stored + 1) & 0xF


def gptq_group_size(group_size: int, K: int) -> int:
    """A checkpoint's group_size -> G, the k per group: -1 (one group over all of K) is K."""
    if group_size == -1:
        return K
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size <= 0:
        raise ValueError(
            f"group_size must be -1 (one group per column) or a positive group size, got {group_size}"
        )
    if K % group_size:
        raise ValueError(f"K = {K} (8 x qweight's {K // GPTQ_PACK} rows) is not a multiple of {group_size}")
    return group_size


def gptq_prepare(qweight, qzeros, scales, group_size):
    """Validate a GPTQ-layout weight (4 bits, no act-order) with clear messages. Returns K, N.

    group_size -1 means one group over all of K (G = K); scales may be float16, bfloat16 or float32."""
    for name, t in (("qweight", qweight), ("qzeros", qzeros), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if qweight.dtype != torch.int32 or qweight.dim() != 2:
        raise TypeError(
            f"qweight must be a 2-D int32 tensor [K/8, N], got {qweight.dtype} {list(qweight.shape)}"
        )
    if qzeros.dtype != torch.int32 or qzeros.dim() != 2:
        raise TypeError(
            f"qzeros must be a 2-D int32 tensor [K/G, N/8], got {qzeros.dtype} {list(qzeros.shape)}"
        )
    if scales.dtype not in GPTQ_SCALE_DTYPES or scales.dim() != 2:
        raise TypeError(
            f"scales must be a 2-D float16, bfloat16 or float32 tensor [K/G, N] (GPTQ stores the layer's dtype), "
            f"got {scales.dtype} {list(scales.shape)}"
        )
    K, N = GPTQ_PACK * qweight.shape[0], qweight.shape[1]
    if N % GPTQ_PACK:
        raise ValueError(
            f"N = {N} is not a multiple of 8: GPTQ packs 8 zero points per int32 along N (qzeros [K/G, N/8])"
        )
    groups = K // gptq_group_size(group_size, K)
    if tuple(scales.shape) != (groups, N):
        raise ValueError(f"scales must have shape [K/G, N] = [{groups}, {N}], got {list(scales.shape)}")
    if tuple(qzeros.shape) != (groups, N // GPTQ_PACK):
        raise ValueError(
            f"qzeros must have shape [K/G, N/8] = [{groups}, {N // GPTQ_PACK}], got {list(qzeros.shape)}"
        )
    if not (qweight.device == qzeros.device == scales.device):
        raise ValueError("qweight, qzeros and scales must be on one device")
    return K, N


def unpack_int32(words: torch.Tensor, dim: int) -> torch.Tensor:
    """The eight 4-bit fields of each int32, nibble j (bits 4j..4j+3) at index 8i + j along `dim`, as int32.

    Shift, then mask: `>>` on int32 is arithmetic, so without `& 0xF` the top nibble of a negative word would
    come out negative."""
    shifts = 4 * torch.arange(GPTQ_PACK, dtype=torch.int32, device=words.device)
    w = words.unsqueeze(dim + 1)
    shape = [1] * w.dim()
    shape[dim + 1] = GPTQ_PACK
    fields = (w >> shifts.reshape(shape)) & 0xF
    return fields.flatten(dim, dim + 1)


def pack_int32(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """Inverse of unpack_int32: codes 0..15 along `dim` (a multiple of 8) -> int32 words, code 8i + j in
    bits 4j..4j+3 of word i. Built in int64, then wrapped to int32 by hand (words with bit 31 set are negative)."""
    c = codes.to(torch.int64)
    if bool(((c < 0) | (c > 15)).any()):
        raise ValueError("codes must lie in 0..15")
    c = c.unflatten(dim, (-1, GPTQ_PACK))
    word = torch.zeros_like(c.select(dim + 1, 0))
    for j in range(GPTQ_PACK):
        word |= c.select(dim + 1, j) << (4 * j)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def to_gptq(packed, scales, zeros, group_size, scale_dtype=torch.float16):
    """The course layout -> GPTQ v1: (qweight int32 [K/8, N], qzeros int32 [K/G, N/8], scales [K/G, N]).

    Zero points 0..15 are stored as (zero - 1) & 0xF (a zero of 0 as nibble 15, read back by gptq_zeros); scales
    must be exactly representable in scale_dtype (float16, as most checkpoints, bfloat16 or float32). group_size -1
    is G = K."""
    N, half = packed.shape
    K = 2 * half
    G = gptq_group_size(group_size, K)
    if N % GPTQ_PACK:
        raise ValueError(f"N = {N} must be a multiple of 8")
    z = zeros.to(torch.int64)
    if bool(((z < 0) | (z > QMAX)).any()):
        raise ValueError(f"zero points must lie in 0..{QMAX}: v1 stores (zero - 1) & 0xF in a nibble")
    if scale_dtype not in GPTQ_SCALE_DTYPES:
        raise ValueError(f"scale_dtype must be one of {GPTQ_SCALE_DTYPES}, got {scale_dtype}")
    s = scales.to(scale_dtype)
    if not torch.equal(s.float(), scales.float()):
        raise ValueError(f"scales must be exactly representable in {str(scale_dtype).removeprefix('torch.')}")
    if tuple(zeros.shape) != (N, K // G):
        raise ValueError(f"zeros must have shape [N, K/G] = [{N}, {K // G}], got {list(zeros.shape)}")
    qweight = pack_int32(unpack(packed).T, dim=0)  # [K, N] codes -> [K/8, N]
    qzeros = pack_int32(((z - 1) & 0xF).T, dim=1)  # [K/G, N] stored zeros -> [K/G, N/8]
    return qweight.contiguous(), qzeros.contiguous(), s.T.contiguous()


def gptq_dequantize(qweight, qzeros, scales, group_size) -> torch.Tensor:
    """GPTQ v1 dequantized as AutoGPTQ's torch path computes it (shifts and masks, zeros (nibble + 1) & 0xF), in
    float32, returned in nn.Linear's layout [N, K]: w[n, k] = (q[k, n] - gptq_zeros(stored)) * scale. The product
    of a small integer and a float16, bfloat16 or float32 scale is exact in float32."""
    K, N = gptq_prepare(qweight, qzeros, scales, group_size)
    G = gptq_group_size(group_size, K)
    q = unpack_int32(qweight, dim=0)  # [K, N]
    z = gptq_zeros(unpack_int32(qzeros, dim=1))  # [K/G, N]
    s = scales.float().repeat_interleave(G, dim=0)
    return ((q - z.repeat_interleave(G, dim=0)).float() * s).T.contiguous()


def regroup(scales, zeros, group_size: int, new_size: int):
    """The same weight in smaller groups: each group's scale and zero repeated group_size // new_size times (exact).
    A checkpoint with one group per column (G = K) runs through the course's kernels as groups of 128, say."""
    if group_size % new_size:
        raise ValueError(f"the new group size {new_size} must divide {group_size}")
    r = group_size // new_size
    return scales.repeat_interleave(r, dim=1).contiguous(), zeros.repeat_interleave(r, dim=1).contiguous()
