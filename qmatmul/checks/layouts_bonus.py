"""Chapter Layouts, the trusted grading of its bonus (bit for bit, on any machine): MXFP4's and NVFP4's e2m1 codes in
exercise 1b's tiles (check_repack_fp4) and the fp4 kernel's decoding of one pair of them (check_fp4_pair), with their
test inputs and known mistakes. The expert versions are qmatmul/kernels/mma_repack.py's (repack_fp4,
decode_like_kernel_fp4); the chapter's exercises' checks are qmatmul/checks/layouts.py, whose helpers these reuse.

Visible checks draw from a fixed seed, each pitfall among their inputs (both scale blocks, ragged N, one and four
chunks of K, every e2m1 code in every place of a word, words with the sign bit set, -0 and the subnormal 0.5): a
known mistake is named on every run. Hidden checks draw fresh shapes and values.
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed
from qmatmul.checks.layouts import (
    AXES,
    EDGE_WORDS,
    MASK32,
    PADDING,
    _call,
    _cell,
    _draw,
    _fragment,
    _pad_nibbles,
    _raised,
    _refused_inputs,
    _repack_form,
    _unchanged,
    _wrap32,
    check_pairs,
    layout,
)
from qmatmul.formats.fp4 import e2m1_decode, pack_nibbles
from qmatmul.formats.w4a16 import unpack
from qmatmul.kernels.mma_repack import (
    FP4_BITS,
    FP4_MASK,
    FP4_PAIR3_MASK,
    FP4_PAIR3_MUL,
    SLOTS,
    repack_fp4,
    tile_index,
    x_order,
)

BLOCKS = {16: "NVFP4", 32: "MXFP4"}  # the scale blocks along K

# ----------------------------------------------------------------------------------------------------------
# Bonus a: the e2m1 codes repacked


def block_order(block: int) -> torch.Tensor:
    """x_order(block=block) inside each scale block, as one permutation of a 64-wide chunk (layout's `order`)."""
    return torch.cat([b * block + x_order(block=block) for b in range(64 // block)])


def _placed(words: torch.Tensor, places, add: bool = False) -> torch.Tensor:
    """Words with value v's code in nibble SLOTS[v] (layout's) -> int32 words with its bit b at places[v >> 1][v & 1][b],
    ORed (added modulo 2^32 when `add`: where a wrong table's places collide, a learner's sum carries)."""
    w = words.long() & MASK32
    out = torch.zeros_like(w)
    for v in range(8):
        for b, p in enumerate(places[v >> 1][v & 1]):
            bit = (w >> (4 * SLOTS[v] + b) & 1) << p
            out = out + bit if add else out | bit
    return _wrap32(out)


def fp4_layout(
    q: torch.Tensor, block: int, *, places=FP4_BITS, order=None, where=None, add=False
) -> torch.Tensor:
    """Codes q [N, K] -> int32 words [ceil(N/16), K/64, 32, 4] as `repack_fp4` lays them out, with one part changed
    (the known mistakes): code bit b of value 2j + h at places[j][h][b], K gathered by `order` inside each 64-wide
    chunk (default: x_order inside each scale block), `where` the lanes' (rows, cols) as in layouts.layout."""
    return _placed(layout(q, order=block_order(block) if order is None else order, where=where), places, add)


def _sign_in_nibble(pairs) -> list:
    """FP4_BITS with the sign of each pair in `pairs` at the place after bit 2's, as in the nibble."""
    return [[[*P[:3], (P[2] + 1) % 32] if j in pairs else P for P in FP4_BITS[j]] for j in range(4)]


PAIR3_ROTATED = [*FP4_BITS[:3], [[(p + 9) % 32 for p in P] for P in FP4_BITS[0]]]
HALVES_SWAPPED = [[P[1], P[0]] for P in FP4_BITS]


def repack_fp4_mistakes(packed: torch.Tensor, block: int) -> list[tuple[str, str, torch.Tensor]]:
    """(name, explanation, words) of the known wrong repackings. Two more are told apart by _named_fp4 (rows past N
    not zero, the word axes in the wrong order) and two by layouts._repack_form (a view, the words not int32)."""
    q = unpack(packed)
    lane, v = torch.arange(32)[:, None], torch.arange(8)[None, :]
    nibbles = ("the W4A16 nibble layout (SLOTS, not FP4_BITS)", "The fp4 kernel reads no nibbles: it wants a code's "
               "bits 0, 1, 2 (exponent and mantissa) at bf16 bits 6, 7, 8 of its half and bit 3 (the sign) at bit "
               "15, so that the half reads as the e2m1 value times 2^-126. Store bit b of value 2j + h's code at "
               "FP4_BITS[j][h][b], not the code in nibble SLOTS[2j + h].")  # fmt: skip
    sign = ("the sign bit left at bit 3 of the nibble", "An e2m1 code's bit 3 is its sign, which the kernel wants at "
            "bf16 bit 15 of its half: FP4_BITS[j][h][3] (15 and 31 for pair 0, rotated by 3j for pairs 1 and 2), not "
            "next to bit 2. Place the four bits one by one, each where FP4_BITS says.")  # fmt: skip
    pair3 = ("pair 3's bits placed like pairs 0-2 (a rotation by 9)", "Four rotations of one pair's places cannot "
             "tile a word (pair 0's rotated by 9 lands on bits pairs 0-2 hold): pair 3 takes the eight bits the "
             "others leave, FP4_BITS[3] = [4, 0, 1, 3] and [20, 16, 17, 19], which the kernel's AND with "
             "FP4_PAIR3_MASK and multiply by 2^2 + 2^7 + 2^12 move into place.")  # fmt: skip
    return [
        ("K reordered in 64-wide chunks, not in each scale block", f"A scale multiplies the sum of its block's "
         f"{block} values, so the reordering must not move a code out of its block: gather K inside each block by "
         f"x_order(block={block}) (q[:, {block} b + x_order(block={block})]), not inside each 64-wide chunk by "
         "x_order() as W4A16's repack does. The kernel gathers x the same way.",
         fp4_layout(q, block, order=x_order())),
        (*nibbles, layout(q, order=block_order(block))),
        (*nibbles, layout(q)),  # exercise 1b's repack as it is
        *((*sign, fp4_layout(q, block, places=_sign_in_nibble(js), add=add)) for js in ((0, 1, 2), range(4))
          for add in (False, True)),
        *((*pair3, fp4_layout(q, block, places=PAIR3_ROTATED, add=add)) for add in (False, True)),
        # The packed bytes read high nibble first give the same words: x_order keeps each pair 2i, 2i + 1 together.
        ("the two halves of a pair swapped", "Pair j is values 2j (the LOW half: FP4_BITS[j][0]) and 2j + 1 (the "
         "high half: FP4_BITS[j][1]). (Reading the packed bytes high nibble first gives the same words: element 2i "
         "is the LOW nibble of byte i.)", fp4_layout(q, block, places=HALVES_SWAPPED)),
        ("K reordered by the other format's scale block", f"Reorder inside each scale block of the size asked for, "
         f"x_order(block=block): here {block} ({BLOCKS[block]}), not {48 - block} ({BLOCKS[48 - block]}).",
         fp4_layout(q, block, order=block_order(48 - block))),
        ("K not reordered by x_order", f"Inside each scale block the MMA's K position p holds x's element "
         f"x_order(block={block})[p]: gather the codes before tiling, as the kernel gathers x.",
         fp4_layout(q, block, order=torch.arange(64))),
        ("K reordered by x_order's inverse", "K position p of a scale block holds element x_order(block=block)[p] "
         "(a gather), not the element that x_order sends to p (a scatter: argsort(x_order(block=block))).",
         fp4_layout(q, block, order=torch.argsort(block_order(block)))),
        ("groupID and t swapped", "lane = 4 groupID + t: groupID = lane // 4 picks the tile's row, t = lane % 4 the "
         "pair of columns (fragment_index).",
         fp4_layout(q, block, where=_fragment(lane % 8, lane // 8, v >> 1 & 1, v >> 2))),
    ]  # fmt: skip


def _named_fp4(got: torch.Tensor, want: torch.Tensor, packed: torch.Tensor, block: int) -> str | None:
    N, TN = packed.shape[0], want.shape[0]
    diff = (got.long() ^ want.long()) & MASK32
    pad = _placed(_pad_nibbles(N, TN), FP4_BITS).long() & MASK32  # the bits that hold a row n >= N
    if N % 16 and not (diff & ~pad).any():
        return f"{PADDING[0]}. {PADDING[1]}"
    if torch.equal(got, want.transpose(-1, -2).contiguous().reshape(want.shape)):
        return f"{AXES[0]}. {AXES[1]}"
    for name, explanation, words in repack_fp4_mistakes(packed, block):
        if torch.equal(got, words):
            return f"{name}. {explanation}"
    return None


def _code_at(w: int, places) -> int:
    return sum((w >> p & 1) << b for b, p in enumerate(places))


def _first_fp4_word(got: torch.Tensor, want: torch.Tensor, q: torch.Tensor, block: int) -> str:
    tn, kc, lane, c = (int(i) for i in (got != want).nonzero()[0])
    gw, ew = int(got[tn, kc, lane, c]) & MASK32, int(want[tn, kc, lane, c]) & MASK32
    v = next(v for v in range(8) if any((gw ^ ew) >> p & 1 for p in FP4_BITS[v >> 1][v & 1]))
    places = FP4_BITS[v >> 1][v & 1]
    r, col = (int(t[lane, v]) for t in tile_index())
    N, n, p = q.shape[0], 16 * tn + r, 16 * c + col
    x = int(x_order(block=block)[p % block])
    k = 64 * kc + block * (p // block) + x
    code = _code_at(ew, places)
    holds = f"q[{n}, {k}] = {code}" if n < N else f"0 (row n = {n} lies past N = {N})"
    return (f"First at word [tn={tn}, kc={kc}, lane={lane}, c={c}]: got 0x{gw:08x}, expected 0x{ew:08x}. Value a{v} "
            f"of lane {lane} (groupID {lane // 4}, t {lane % 4}), pair {v >> 1}'s {('low', 'high')[v & 1]} half, has "
            f"its code's bits 0, 1, 2, 3 at bits {places} of the word: tile row {r}, column {col}, so weight row "
            f"n = {n} and K position {p} of chunk {kc}, position {p % block} of its scale block {p // block}, which holds "
            f"the block's element x_order(block={block})[{p % block}] = {x} (k = {k}). Expected {holds} (bits 0b{code:04b}), "
            f"got 0b{_code_at(gw, places):04b} at those places.")  # fmt: skip


def repack_fp4_inputs(g: torch.Generator, hidden: bool) -> list[tuple[torch.Tensor, int]]:
    """(packed uint8 [N, K/2], block): each block; every code in every place of a word (16 x 64 codes (n + k) mod
    16, relabelled when hidden); ragged N (a row past a tile, fewer rows than a tile, a partial tile); K of one to
    four 64-wide chunks. Random codes give words with bit 31 set (pair 0's high half's sign)."""
    n, k = torch.arange(16)[:, None], torch.arange(64)[None, :]
    if not hidden:
        every = pack_nibbles((n + k) % 16)
        cases = [(40, 256, 16), (7, 64, 32), (33, 192, 16), (40, 256, 32), (5, 128, 16)]
    else:
        every = pack_nibbles(torch.randperm(16, generator=g)[(n + k + _draw(g, 0, 16)) % 16])
        cases = [(16 * _draw(g, 0, 6) + _draw(g, 1, 16), 64 * _draw(g, 1, 6), block) for block in BLOCKS]
        cases.append((16 * _draw(g, 1, 5), 64 * _draw(g, 1, 4), (16, 32)[_draw(g, 0, 2)]))  # whole tiles
    return [(every, 16), (every, 32), *((torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g), block)
                                        for N, K, block in cases)]  # fmt: skip


def _refused_fp4(g: torch.Generator, hidden: bool) -> list[tuple[torch.Tensor, int, str]]:
    """(packed, block, why) that repack_fp4 must refuse: K no multiple of 64, a block neither 16 nor 32."""
    out = [(p, (32, 16)[i % 2], "K") for i, p in enumerate(_refused_inputs(g, hidden))]
    blocks = (64, 8) if not hidden else ((8, 64, 128)[_draw(g, 0, 3)],)
    packed = torch.randint(0, 256, (16, 32 * _draw(g, 1, 3)), dtype=torch.uint8, generator=g)
    return out + [(packed, b, "block") for b in blocks]


def check_repack_fp4(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus a: fn(packed, block) -> int32 [ceil(N/16), K/64, 32, 4], bit for bit `mma_repack.repack_fp4`'s words
    for block 16 (NVFP4) and 32 (MXFP4), and a ValueError for K no multiple of 64 or another block."""
    seed, g = _cell(seed, hidden)
    what = "repack_fp4"
    for packed, block in repack_fp4_inputs(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        ctx = f" (packed [{N}, {K // 2}]: N = {N}, K = {K}; block = {block}, {BLOCKS[block]})"
        raw, words = _call(fn, {"packed": packed}, block, what=what, ctx=ctx)
        want = repack_fp4(packed, block)
        contiguous = not isinstance(raw, torch.Tensor) or raw.is_contiguous()
        words = _repack_form(words, want, what, ctx, contiguous)
        if torch.equal(words, want):
            continue
        named = _named_fp4(words, want, packed, block)
        lines = [f"This matches a known mistake: {named}"] if named else []
        lines.append(
            f"{what}: {int((words != want).sum())} of {want.numel()} words differ from the layout{ctx}"
        )
        lines.append(_first_fp4_word(words, want, unpack(packed), block))
        raise CheckFailed("\n".join(lines))
    for packed, block, why in _refused_fp4(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        rule = ("K must be a multiple of 64: the layout tiles K in 64-wide chunks" if why == "K" else
                "block must be 16 (NVFP4) or 32 (MXFP4), the sizes of the scale blocks")  # fmt: skip
        ctx = f" (packed [{N}, {K // 2}]: K = {K}; block = {block})"
        before = checks.snapshot({"packed": packed})
        raised = _raised(fn, (packed, block), what)
        _unchanged({"packed": packed}, before, what, ctx)
        if raised is None:
            raise CheckFailed(f"{what} returned for {why} = {(K, block)[why == 'block']}: raise ValueError ({rule})"
                              f"{ctx}")  # fmt: skip
        if raised != "ValueError":
            raise CheckFailed(f"{what} raised {raised} for {why} = {(K, block)[why == 'block']}: check the arguments "
                              f"yourself first and raise ValueError, the error for a bad argument ({rule}){ctx}")  # fmt: skip
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs, blocks 16 and 32, and refuses K "
                  f"no multiple of 64 and other blocks (seed {seed})")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Bonus b: one pair of e2m1 codes, decoded as the kernel does


def _rotr(w: torch.Tensor, r: int) -> torch.Tensor:
    """int64 words (32 significant bits) rotated right by r bits."""
    r %= 32
    return ((w >> r) | (w << (32 - r))) & MASK32 if r else w


def _values(t: torch.Tensor, scale: float = 2.0**126) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 words -> (lo, hi): the low and high 16 bits read as bf16, in float32, times `scale`."""
    out = []
    for h in (t & 0xFFFF, t >> 16 & 0xFFFF):
        bf = torch.where(h >= 2**15, h - 2**16, h).to(torch.int16).view(torch.bfloat16)
        out.append(bf.float() * scale)
    return out[0], out[1]


def _in_place(words: torch.Tensor, j: int, mask: bool = True) -> torch.Tensor:
    """The kernel's pair j put in place: AND (j = 0); rotate right by 3j and AND (j = 1, 2); AND FP4_PAIR3_MASK,
    multiply by FP4_PAIR3_MUL modulo 2^32 and AND (j = 3). int64, 32 significant bits."""
    w = words.long() & MASK32
    t = _rotr(w, 3 * j) if j < 3 else (w & FP4_PAIR3_MASK) * FP4_PAIR3_MUL & MASK32
    return t & FP4_MASK if mask else t


def fp4_pair_reference(words: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp4 kernel's pair j (values 2j, 2j + 1 of each word), as `decode_like_kernel_fp4` decodes it: the bits
    put in place, each half read as a bf16 and multiplied by 2^126: the e2m1 values exactly, -0 kept."""
    return _values(_in_place(words, j))


def fp4_pair_mistakes(
    words: torch.Tensor, j: int
) -> list[tuple[str, str, tuple[torch.Tensor, torch.Tensor]]]:
    """(name, explanation, (lo, hi)) of the known wrong decodings of pair j."""
    w = words.long() & MASK32
    lo, hi = fp4_pair_reference(words, j)
    out = []
    if j in (1, 2):
        out.append(("the rotation left instead of right", f"Pair {j} is stored rotated left by {3 * j} bits from "
                    f"where the kernel wants it (FP4_BITS[{j}] = FP4_BITS[0] + {3 * j}): rotate RIGHT by {3 * j}, "
                    f"(w >> {3 * j} | w << {32 - 3 * j}) & 0xFFFFFFFF on the word as unsigned (int64), then AND "
                    "FP4_MASK.", _values(_rotr(w, -3 * j) & FP4_MASK)))  # fmt: skip
    if j == 3:
        out.append(("pair 3 decoded by a rotation", "Pair 3 is no rotation of pair 0's places (no four rotations "
                    "tile a word): AND FP4_PAIR3_MASK, multiply by FP4_PAIR3_MUL = 2^2 + 2^7 + 2^12 (modulo 2^32: "
                    "AND 0xFFFFFFFF after it), then AND FP4_MASK.", _values(_rotr(w, 9) & FP4_MASK)))  # fmt: skip
    out += [
        ("the scale 2^126 missing (values 2^-126 too small)", "Read as a bf16, a half put in place is the e2m1 "
         "value times 2^-126 (its exponent field is e2m1's, read with bf16's bias 127, not e2m1's 1; 0.5 is a "
         "subnormal): "
         "multiply each half, in float32, by 2.0**126.", _values(_in_place(words, j), 1.0)),
        ("-0 lost (+0 added)", "Code 8 is -0 (its sign bit alone, bf16 0x8000) and must stay -0, but -0 + 0.0 is "
         "+0: add nothing after the multiply (the kernel's one FMA adds -0, 0x80008000, which leaves every value "
         "as it is, -0 included).", (lo + 0.0, hi + 0.0)),
        ("the halves swapped", "The low 16 bits are the LOW half, value 2j (lo = t & 0xFFFF), the high 16 bits "
         "value 2j + 1 (hi = t >> 16).", (hi, lo)),
        ("FP4_MASK not applied", "After the rotation (or multiply) the word still holds the other pairs' bits: AND "
         "FP4_MASK = 0x81C081C0 keeps bits 6-8 and 15 of each half.", _values(_in_place(words, j, mask=False))),
    ]  # fmt: skip
    return out


def code_words(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes [..., 8] -> int32 words [...]: value 2j + h's code at FP4_BITS[j][h]."""
    return _placed((codes.long() << 4 * torch.tensor(SLOTS)).sum(-1), FP4_BITS)


def every_code_words() -> torch.Tensor:
    """int32 [4, 8]: one word of each code in all eight places, then code (c + 3v) mod 16 at value v (the halves of
    each pair differ). Codes 8 and above set the sign bit, 31."""
    c, v = torch.arange(16)[:, None], torch.arange(8)[None, :]
    return code_words(torch.cat([c.expand(16, 8), (c + 3 * v) % 16])).reshape(4, 8)


def fp4_pair_inputs(g: torch.Generator, hidden: bool) -> list[torch.Tensor]:
    """int32 words: every code in every place (every_code_words), layouts.EDGE_WORDS, repacked weights, random words."""
    every, edges = every_code_words(), torch.tensor(EDGE_WORDS, dtype=torch.int32).reshape(3, 4)
    if not hidden:
        packed = torch.randint(0, 256, (40, 128), dtype=torch.uint8, generator=g)  # N = 40, K = 256
        return [every, edges, repack_fp4(packed, 16),
                torch.randint(-(2**31), 2**31, (257,), dtype=torch.int32, generator=g)]  # fmt: skip
    packed = torch.randint(0, 256, (_draw(g, 1, 80), 32 * _draw(g, 1, 5)), dtype=torch.uint8, generator=g)
    shape = [_draw(g, 1, 6), _draw(g, 1, 6), 32, 4]
    return [every.flatten()[torch.randperm(32, generator=g)].reshape(8, 4), edges[torch.randperm(3, generator=g)],
            repack_fp4(packed, (16, 32)[_draw(g, 0, 2)]),
            torch.randint(-(2**31), 2**31, shape, dtype=torch.int32, generator=g)]  # fmt: skip


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def _describe_fp4_half(j, h, name, got, exp, i, w) -> str:
    gb, eb = int(_f32(got)[i]) & MASK32, int(_f32(exp)[i]) & MASK32
    code = _code_at(w, FP4_BITS[j][h])
    return (f"{name} got {float(got[i]):g} (0x{gb:08x}), expected {float(exp[i]):g} (0x{eb:08x}): value {2 * j + h}'s "
            f"e2m1 code, at bits {FP4_BITS[j][h]}, is {code} = 0b{code:04b}, "
            f"{float(e2m1_decode(torch.tensor(code))):g}")  # fmt: skip


def check_fp4_pair(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus b: fn(words, j) -> (lo, hi), float32 shaped like words: the e2m1 values 2j and 2j + 1 of each word as
    the fp4 kernel decodes pair j, bit for bit (-0 is not +0), for j = 0..3, on words with the sign bit set too."""
    seed, g = _cell(seed, hidden)
    check_pairs(fn, fp4_pair_inputs(g, hidden), what="fp4_pair", seed=seed, hidden=hidden, dtype=torch.float32,
                dtype_hint="a half read as a bf16, .float(), times 2.0**126", bits=_f32, reference=fp4_pair_reference,
                mistakes=fp4_pair_mistakes, describe=_describe_fp4_half, wrongly="decode wrongly")  # fmt: skip
