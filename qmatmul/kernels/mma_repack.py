"""The weight repacked once, at load, into the operand layout of the Gluon MMA decodes
(`qmatmul/kernels/mma_decode.py`), and the CPU models of how those kernels read it back.

`repack` stores each 16 x 16 tile of a W4A16 weight as 32 int32 words, one a lane, whose eight nibbles are exactly the
eight values that lane holds of `mma.sync.m16n8k16`'s first operand, ordered so that one shift and one LOP3 make two
of them at once (nibble j in the low half of a register, nibble j + 4 in the high half, as bf16 128 + q). It also
reorders K inside each 64-wide chunk (`x_order`, the same for weights and activations, so the sum is unchanged) so
that each lane's part of the MMA's second operand is 16 consecutive values of x. `repack_fp4` lays out MXFP4's and
NVFP4's e2m1 codes in the same tiles, K reordered inside each scale block and each code's bits where the kernel wants
them in a bf16 (FP4_BITS).

Gluon has no interpreter: the CPU tests hold `unpack_like_kernel` and `decode_like_kernel_fp4` (the kernels' tensor
programs in torch, op for op) equal to the chapters' unpacking (tests/test_mma_decode.py).
"""

from __future__ import annotations

import torch
import triton

from qmatmul.formats.w4a16 import unpack

# Nibble slot of value v = b0 + 2 b1 + 4 b2 of a lane's A fragment (rows g + 8 b1, columns 2 t + b0 + 8 b2 of a
# 16 x 16 tile, lane 4 g + t): pair j = b1 + 2 b2 is nibbles j and j + 4, b0 chooses the half.
SLOTS = [(v >> 1 & 1) + 2 * (v >> 2) + 4 * (v & 1) for v in range(8)]


def tile_index(device=None):
    """(row, column) in a 16 x 16 tile of value v of lane l's A fragment, each [32 lanes, 8 values]."""
    lane = torch.arange(32, device=device)[:, None]
    v = torch.arange(8, device=device)[None, :]
    g, t = lane // 4, lane % 4
    b0, b1, b2 = v & 1, v >> 1 & 1, v >> 2
    return g + 8 * b1, 2 * t + b0 + 8 * b2


def x_order(device=None, block: int = 64) -> torch.Tensor:
    """Which of a `block`-wide piece's elements of x the kernel's K position k (in the MMA's order) holds: the kernel's
    reshape and permute of its x tile, op for op. Lane t's B fragment (K positions 2t, 2t + 1, 2t + 8, 2t + 9 of
    each 16-wide tile c) is x[block / 4 * t + 4 c ..][:4], so a lane's values of a piece lie side by side: two
    16-byte loads a 64-wide chunk (W4A16), one a 32-wide block (MXFP4), 8 bytes a 16-wide block (NVFP4). A
    permutation inside each block of one scale leaves every block's sum, and so the output, unchanged."""
    return torch.arange(block, device=device).reshape(4, block // 16, 2, 2).permute(1, 2, 0, 3).reshape(block)


def _packed_codes(packed: torch.Tensor, what: str) -> torch.Tensor:
    """The codes [N, K] of a packed uint8 [N, K/2] weight, refused with a message when it is not uint8 (an int8 would
    shift its sign into the high nibble) or K is not a multiple of 64."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(
            f"{what} takes packed codes as uint8 [N, K/2], got {packed.dtype} {list(packed.shape)}"
        )
    if (2 * packed.shape[1]) % 64:
        raise ValueError(f"{what} needs K to be a multiple of 64, got K = {2 * packed.shape[1]}")
    return unpack(packed)


def _fragments(q: torch.Tensor, block: int) -> torch.Tensor:
    """Codes [N, K] (K a multiple of 64) -> [ceil(N/16), K/16, 32 lanes, 8 values]: each lane's eight values of each
    16 x 16 tile of the MMA's first operand, K reordered inside each `block` by `x_order`. Rows past N are zero."""
    N, K = q.shape
    q = q.to(torch.int32).reshape(N, K // block, block)[:, :, x_order(q.device, block)].reshape(N, K)
    TN = triton.cdiv(N, 16)
    q = torch.nn.functional.pad(q, (0, 0, 0, 16 * TN - N)).reshape(TN, 16, K // 16, 16).permute(0, 2, 1, 3)
    r, c = tile_index(q.device)
    return q[:, :, r, c]


def _words(bits: torch.Tensor, K: int) -> torch.Tensor:
    """int64 words [TN, K/16, 32] (32 significant bits) -> int32 [TN, K/64, 32 lanes, 4], a lane's four words of a
    64-wide chunk side by side (one 16-byte load)."""
    words = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
    return words.reshape(bits.shape[0], K // 64, 4, 32).permute(0, 1, 3, 2).contiguous()


def repack(packed: torch.Tensor) -> torch.Tensor:
    """The chapter's packed uint8 [N, K/2] (element 2i in the low nibble) -> int32 [ceil(N/16), K/64, 32, 4]:
    word [tn, kc, lane, c] holds the lane's eight values of the 16 x 16 tile (rows 16 tn.., K positions 64 kc + 16 c..
    of `x_order`). Rows past N are zero. Bit-exact and done once, when the weights are loaded."""
    vals = _fragments(_packed_codes(packed, "repack"), 64)  # [TN, K/16, 32, 8]
    slots = torch.tensor(SLOTS, device=packed.device, dtype=torch.int32)
    nibbles = (vals << (4 * slots)).sum(-1, dtype=torch.int64)  # eight disjoint nibbles a word
    return _words(nibbles, 2 * packed.shape[1])


FP4_MASK = 0x81C081C0  # bf16 bits 6-8 and 15 of both halves
FP4_PAIR3_MASK, FP4_PAIR3_MUL = 0x001B001B, (1 << 2) + (1 << 7) + (1 << 12)
# pair 3: bf16 bit <- the stored bit that the multiply by 2^2 + 2^7 + 2^12 moves there
FP4_PAIR3_SOURCE = {6: 4, 7: 0, 8: 1, 15: 3, 22: 20, 23: 16, 24: 17, 31: 19}


def _fp4_positions() -> list[list[list[int]]]:
    """FP4_BITS[j][h]: where a word stores the e2m1 code of pair j's half h (value 2j + h of the lane's fragment), as
    the positions of its bits 0, 1, 2 (exponent and mantissa) and 3 (sign). The kernel wants them at bf16 bits 6, 7,
    8 and 15 of half h (+ 16 h): pair 0 is stored there (one AND), pairs 1 and 2 stored rotated left by 3 and 6
    bits (the kernel rotates them right: a funnel shift, then an AND), pair 3 in the four bits a half the others
    leave, which a multiply by 2^2 + 2^7 + 2^12 moves into place without a carry (an AND, a multiply, an AND). Four
    rotations of one pair's bits cannot tile a word: tests/test_mma_decode.py searches for them."""
    out = []
    for j in range(4):
        pairs = []
        for h in range(2):
            want = [6 + 16 * h, 7 + 16 * h, 8 + 16 * h, 15 + 16 * h]
            if j < 3:
                pairs.append([(p + 3 * j) % 32 for p in want])
            else:
                pairs.append([FP4_PAIR3_SOURCE[p] for p in want])
        out.append(pairs)
    return out


FP4_BITS = _fp4_positions()


def repack_fp4(packed: torch.Tensor, block: int) -> torch.Tensor:
    """An MXFP4 (block 32) or NVFP4 (block 16) weight's packed e2m1 codes (uint8 [N, K/2], element 2i in the low
    nibble) -> int32 [ceil(N/16), K/64, 32, 4] as `repack` lays out W4A16's, K reordered inside each scale block
    (`x_order(block=block)`) and each code's bits where FP4_BITS says. Bit-exact, once at load time."""
    if block not in (16, 32):
        raise ValueError(f"the fp4 scale blocks are 16 (NVFP4) or 32 (MXFP4) values, got {block}")
    vals = _fragments(_packed_codes(packed, "repack_fp4"), block).long()  # [TN, K/16, 32, 8]
    bits = torch.zeros(vals.shape[:-1], dtype=torch.int64, device=packed.device)
    for v in range(8):
        for b, pos in enumerate(FP4_BITS[v >> 1][v & 1]):
            bits |= ((vals[..., v] >> b) & 1) << pos
    return _words(bits, 2 * packed.shape[1])


def _from_pairs(pairs: list, N: int, block: int) -> torch.Tensor:
    """The kernel's join, reshape and permute, in torch: each pair j's (low half, high half) of `repack`'s words
    [TN, K/64, 32, 4] -> [N, K], with K put back from `x_order(block=block)`."""
    TN, KCH = pairs[0][0].shape[:2]
    p = [torch.stack(halves, dim=-1) for halves in pairs]  # join(low half, high half)
    v = torch.stack((torch.stack((p[0], p[1]), -1), torch.stack((p[2], p[3]), -1)), -1)
    v = (
        v.reshape(TN, KCH, 8, 4, 4, 2, 2, 2)
        .permute(0, 6, 2, 1, 4, 7, 3, 5)
        .reshape(16 * TN, KCH * 64 // block, block)
    )
    q = torch.empty_like(v)
    q[:, :, x_order(v.device, block)] = v  # the code position k multiplies is x's element x_order[k]
    return q.reshape(16 * TN, 64 * KCH)[:N]


def unpack_like_kernel(words: torch.Tensor, N: int) -> torch.Tensor:
    """The kernel's tensor program in torch, op for op (shifts, masks, join, reshape, permute), with K put back from
    `x_order`: int32 words of `repack` -> the codes q [N, K] as int32. The CPU tests hold it equal to the chapter's
    unpacking."""
    pairs = []
    for j in range(4):
        t = (words >> (4 * j)) & 0x000F000F
        pairs.append((t & 0xFFFF, t >> 16))
    return _from_pairs(pairs, N, 64)


def decode_like_kernel_fp4(words: torch.Tensor, N: int, block: int) -> torch.Tensor:
    """The fp4 kernel's decoding in torch, op for op: `repack_fp4`'s words -> the e2m1 values [N, K] (float32), each
    pair's bits put in place (AND; rotate and AND; AND, multiply and AND), read as two bf16 and multiplied by 2^126
    (exact: the low bits are e2m1's value times 2^-126, subnormal for 0.5 as in the kernel)."""
    w = words.long() & 0xFFFFFFFF
    pairs = []
    for j in range(4):
        if j < 3:
            r = 3 * j
            t = ((w >> r) | (w << (32 - r))) & 0xFFFFFFFF if r else w
        else:
            t = ((w & FP4_PAIR3_MASK) * FP4_PAIR3_MUL) & 0xFFFFFFFF
        t = t & FP4_MASK
        halves = []
        for h in (t & 0xFFFF, t >> 16):
            bf = torch.where(h >= 2**15, h - 2**16, h).to(torch.int16).view(torch.bfloat16)
            halves.append(bf.float() * 2.0**126)
        pairs.append(halves)
    return _from_pairs(pairs, N, block)
