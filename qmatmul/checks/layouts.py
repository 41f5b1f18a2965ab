"""Chapter Layouts, the trusted grading of its CPU exercises (bit for bit, or to float32's rounding, on any machine):
the PTX ISA's fragment of mma.m16n8k16's A operand (check_fragment_index), the weight repacked into it (check_repack),
the kernel's magic-number unpack of a pair of nibbles (check_unpack_pair) and the kernel's whole program on the
repacked words, modelled in torch (check_lane_decode), with their test inputs and known mistakes. The expert versions
are qmatmul/kernels/mma_repack.py's (tile_index, repack, unpack_like_kernel).

Visible checks draw from a fixed seed, so that every run shows the same inputs, each pitfall among them (ragged N, one
and four chunks of K, words with the sign bit set, groups of 64 and 128, bf16 and fp16 x, one row and several):
a known mistake is named on every run. Hidden checks draw fresh shapes and values (common.cell).
"""

from __future__ import annotations

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, LearnerError, Mistake, common
from qmatmul.checks.w4a16 import random_problem, rounding_probe
from qmatmul.formats.w4a16 import unpack
from qmatmul.kernels.mma_repack import SLOTS, repack, tile_index, x_order

VISIBLE_SEED = 2027  # the visible checks' inputs, the same on every run
MASK32 = 0xFFFFFFFF


def _cell(seed: int | None, hidden: bool) -> tuple[int, torch.Generator]:
    """Hidden: common.cell (a fresh seed unless one is given). Visible: VISIBLE_SEED unless one is given."""
    if hidden:
        seed, g, _ = common.cell(seed)
        return seed, g
    seed = VISIBLE_SEED if seed is None else seed
    return seed, checks.generator(seed)


def _draw(g: torch.Generator, lo: int, hi: int) -> int:
    """An integer in lo..hi - 1 from the cell's generator."""
    return int(torch.randint(lo, hi, (1,), generator=g))


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {_name(t.dtype)} tensor of shape {list(t.shape)}"
    if isinstance(t, (tuple, list)):
        return f"a {type(t).__name__} of {len(t)}"
    return f"a {type(t).__name__}"


def _copied(result):
    """The learner's result, its tensors copied at once to the host: a result that aliases an input, or that the
    learner's code changes afterwards (a buffer reused by the next call), cannot change what is checked."""
    if isinstance(result, torch.Tensor):
        return result.detach().cpu().clone()
    if isinstance(result, (tuple, list)):
        return tuple(_copied(r) for r in result)
    return result


def _unchanged(inputs: dict, before: dict, what: str, ctx: str) -> None:
    for name, t in inputs.items():
        if not torch.equal(checks.comparable_bits(t), before[name]):
            raise CheckFailed(
                f"{what} modified its input {name} in place; leave its arguments untouched.{ctx}"
            )


def _call(fn, inputs: dict, *args, what: str, ctx: str):
    """fn(*inputs.values(), *args) -> (the raw result, a copy of it); fails if it changed one of its tensor inputs."""
    before = checks.snapshot(inputs)
    raw = checks.call_learner(fn, *inputs.values(), *args, what=what)
    result = _copied(raw)
    _unchanged(inputs, before, what, ctx)
    return raw, result


def _pair(result, what: str, names: tuple[str, str], ctx: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise CheckFailed(f"{what} must return a pair ({', '.join(names)}), got {_describe(result)}{ctx}")
    for name, t in zip(names, result, strict=True):
        if not isinstance(t, torch.Tensor):
            raise CheckFailed(f"{what} must return two tensors; {name} is {_describe(t)}{ctx}")
    return result[0], result[1]


# ----------------------------------------------------------------------------------------------------------
# Exercise 1a: the A operand's fragment


def _fragment(g, t, row_bit, col_bit):
    """(row, column) of value v = b0 + 2 b1 + 4 b2 of lane 4 g + t, 8 added to the row for row_bit and to the column
    for col_bit (the PTX ISA: row_bit = b1, col_bit = b2)."""
    b0 = torch.arange(8)[None, :] & 1
    return g + 8 * row_bit, 2 * t + b0 + 8 * col_bit


def fragment_mistakes() -> list[tuple[str, str, tuple[torch.Tensor, torch.Tensor]]]:
    """(name, explanation, (rows, cols)) of the known wrong fragments."""
    lane, v = torch.arange(32)[:, None], torch.arange(8)[None, :]
    b1, b2 = v >> 1 & 1, v >> 2
    g, t = lane // 4, lane % 4
    rows, cols = tile_index()
    swapped_ids = ("groupID and t swapped", "lane = 4 groupID + t: groupID = lane // 4 (0..7) picks the row, "
                   "t = lane % 4 (0..3) the pair of columns.")  # fmt: skip
    return [
        ("rows and columns swapped", "rows holds each value's row in the 16 x 16 tile (groupID, + 8 for a2, a3, a6, "
         "a7), cols its column (2t + i, + 8 for a4..a7): return (rows, cols).", (cols, rows)),
        ("the + 8 on the wrong axis (a2, a3 swapped with a4, a5)", "a2, a3 lie 8 rows below a0, a1 (row groupID + "
         "8, same columns); a4, a5 lie 8 columns to their right (column 2t + 8 + i, same row): for value v = b0 + "
         "2 b1 + 4 b2, b1 adds 8 to the row and b2 adds 8 to the column.", _fragment(g, t, b2, b1)),
        (*swapped_ids, _fragment(lane % 8, lane // 8, b1, b2)),
        (*swapped_ids, _fragment(lane % 4, lane // 4, b1, b2)),
    ]  # fmt: skip


def check_fragment_index(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1a: fn() -> (rows, cols), int64 [32 lanes, 8 values]: where value v of lane l of mma.m16n8k16's
    A operand (bf16) lies in its 16 x 16 tile, as the PTX ISA's fragment figure gives it. Nothing is drawn: the
    hidden check asks the same question."""
    what = "fragment_index"
    _, result = _call(fn, {}, what=what, ctx="")
    rows, cols = _pair(result, what, ("rows", "cols"), "")
    for name, t in (("rows", rows), ("cols", cols)):
        if tuple(t.shape) == (8, 32):
            raise CheckFailed(f"{name} has shape [8, 32]: the layout is [32 lanes, 8 values], lane l's value v at "
                              f"{name}[l, v]. Transpose it (or build it from lane[:, None] and v[None, :]).")  # fmt: skip
        if tuple(t.shape) != (32, 8):
            raise CheckFailed(
                f"{name} must have shape [32, 8] (32 lanes, 8 values a lane), got {list(t.shape)}"
            )
        if t.dtype != torch.int64:
            raise CheckFailed(f"{name} must be int64 (torch.long, the dtype of torch.arange and of index tensors), "
                              f"got {_name(t.dtype)}")  # fmt: skip
    want_r, want_c = tile_index()
    bad = (rows != want_r) | (cols != want_c)
    if bad.any():
        lines = [f"{what}: {int(bad.sum())} of the 256 (lane, value) positions differ from the PTX ISA's fragment of "
                 "mma.m16n8k16's A operand"]  # fmt: skip
        for name, explanation, (mr, mc) in fragment_mistakes():
            if torch.equal(rows, mr) and torch.equal(cols, mc):
                lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                break
        lane, v = (int(i) for i in bad.nonzero()[0])
        lines.append(f"First at lane {lane} (groupID {lane // 4}, t {lane % 4}), value a{v}: expected (row "
                     f"{int(want_r[lane, v])}, column {int(want_c[lane, v])}), got (row {int(rows[lane, v])}, column "
                     f"{int(cols[lane, v])}).")  # fmt: skip
        lines.append("The figure: a0, a1 at (groupID, 2t + i); a2, a3 at (groupID + 8, 2t + i); a4, a5 at (groupID, "
                     "2t + 8 + i); a6, a7 at (groupID + 8, 2t + 8 + i), with groupID = lane // 4, t = lane % 4.")  # fmt: skip
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: all 256 positions are the PTX ISA's ({'hidden' if hidden else 'visible'} check)")


# ----------------------------------------------------------------------------------------------------------
# Exercise 1b: the repacked weight


def _wrap32(w: torch.Tensor) -> torch.Tensor:
    """int64 holding 32 significant bits -> int32 (words with bit 31 set are negative)."""
    w = w & MASK32
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)


def layout(q: torch.Tensor, *, slots=SLOTS, order: torch.Tensor | None = None, where=None) -> torch.Tensor:
    """Codes q [N, K] -> int32 words [ceil(N/16), K/64, 32, 4] as `repack` lays them out, with one part changed (the
    known mistakes): value v in nibble slots[v], K gathered by `order` inside each 64-wide chunk (default x_order;
    the identity: not reordered), `where` = (rows, cols) [32, 8] of the lanes' values in a tile (tile_index)."""
    N, K = q.shape
    order = x_order() if order is None else order
    q = q.long().reshape(N, K // 64, 64)[:, :, order].reshape(N, K)
    TN = -(-N // 16)
    q = torch.nn.functional.pad(q, (0, 0, 0, 16 * TN - N)).reshape(TN, 16, K // 16, 16).permute(0, 2, 1, 3)
    r, c = tile_index() if where is None else where
    vals = q[:, :, r, c]  # [TN, K/16, 32, 8]
    words = (vals << (4 * torch.tensor(slots))).sum(-1)
    return _wrap32(words).reshape(TN, K // 64, 4, 32).permute(0, 1, 3, 2).contiguous()


def repack_mistakes(packed: torch.Tensor) -> list[tuple[str, str, torch.Tensor]]:
    """(name, explanation, words) of the known wrong repackings. Two more are told apart by _named_repack (rows past
    N not zero) and _repack_form (the word axes in the wrong order, the words not int32)."""
    q = unpack(packed)
    lane = torch.arange(32)[:, None]
    v = torch.arange(8)[None, :]
    halves_swapped = [(u >> 1) + 4 * (1 - (u & 1)) for u in range(8)]  # value 2j + 1 in nibble j
    return [
        # The packed bytes read high nibble first give the same words: x_order keeps each pair 2i, 2i + 1 together.
        ("the two halves of a pair swapped", "Pair j is values 2j (the LOW half: nibble j) and 2j + 1 (the high "
         "half: nibble j + 4), so that one shift and one mask 0x000F000F give both: value v goes in nibble "
         "SLOTS[v] = [0, 4, 1, 5, 2, 6, 3, 7][v]. (Reading the packed bytes high nibble first gives the same words: "
         "element 2i is the LOW nibble of byte i.)", layout(q, slots=halves_swapped)),
        ("value v in nibble v", "The kernel unpacks a pair with one shift and one mask: value 2j in nibble j, value "
         "2j + 1 in nibble j + 4 (SLOTS[v]), not value v in nibble v.", layout(q, slots=list(range(8)))),
        ("groupID and t swapped", "lane = 4 groupID + t: groupID = lane // 4 picks the tile's row, t = lane % 4 the "
         "pair of columns (fragment_index).", layout(q, where=_fragment(lane % 8, lane // 8, v >> 1 & 1, v >> 2))),
        ("K not reordered by x_order", "Inside each 64-wide chunk the MMA's K position p holds x's element "
         "x_order[p]: gather the codes q[:, 64 kc + x_order] before tiling, as the kernel gathers x.",
         layout(q, order=torch.arange(64))),
        ("K reordered by x_order's inverse", "K position p of a chunk holds element x_order[p] (a gather: "
         "q[:, x_order]), not the element that x_order sends to p (a scatter: q[:, argsort(x_order)]).",
         layout(q, order=torch.argsort(x_order()))),
    ]  # fmt: skip


AXES = ("the word axes in the order [.., 4, 32]", "A lane's four words of a 64-wide chunk lie side by side, for one "
        "16-byte load: word [tn, kc, lane, c] is at flat index ((tn · K/64 + kc) · 32 + lane) · 4 + c. Reshape to "
        "[.., 4, 32], then permute to [.., 32, 4] and make it contiguous.")  # fmt: skip
PADDING = ("rows past N not zero", "The last tile's rows n >= N hold no weight: pad the codes with zeros (the "
           "kernel multiplies them, and nothing must come out of them).")  # fmt: skip


def _pad_nibbles(N: int, TN: int) -> torch.Tensor:
    """int64 [TN, 1, 32, 1]: the bits of each word that hold a row n >= N (the last tile's padding)."""
    tile_rows = 16 * torch.arange(TN)[:, None, None] + tile_index()[0][None]  # [TN, 32 lanes, 8 values]
    bits = torch.zeros(TN, 32, dtype=torch.int64)
    for v in range(8):
        bits |= (tile_rows[:, :, v] >= N).long() * (0xF << (4 * SLOTS[v]))
    return bits[:, None, :, None]


def _first_word(got: torch.Tensor, want: torch.Tensor, q: torch.Tensor, N: int) -> str:
    tn, kc, lane, c = (int(i) for i in (got != want).nonzero()[0])
    gw, ew = int(got[tn, kc, lane, c]) & MASK32, int(want[tn, kc, lane, c]) & MASK32
    s = next(s for s in range(8) if (gw ^ ew) >> (4 * s) & 0xF)
    v = SLOTS.index(s)
    r, col = (int(t[lane, v]) for t in tile_index())
    n, p = 16 * tn + r, 16 * c + col
    k = 64 * kc + int(x_order()[p])
    holds = f"q[{n}, {k}] = {int(q[n, k])}" if n < N else f"0 (row n = {n} lies past N = {N})"
    return (f"First at word [tn={tn}, kc={kc}, lane={lane}, c={c}]: got 0x{gw:08x}, expected 0x{ew:08x}. Its nibble "
            f"{s} holds value a{v} of lane {lane} (groupID {lane // 4}, t {lane % 4}): tile row {r}, column {col}, so "
            f"weight row n = {n} and K position {p} of chunk {kc}, x_order's element {int(x_order()[p])} (k = {k}). "
            f"Expected {holds}, got {gw >> (4 * s) & 0xF}.")  # fmt: skip


def _as_words(t: torch.Tensor) -> torch.Tensor | None:
    """An integer tensor's values as int32 words (modulo 2^32), or None."""
    if t.dtype == torch.int32:
        return t
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        return None
    try:
        return _wrap32(t.to(torch.int64))
    except (RuntimeError, TypeError):
        return None


def _repack_form(words, want: torch.Tensor, what: str, ctx: str, contiguous: bool) -> torch.Tensor:
    """The learner's words as int32 [TN, K/64, 32, 4], or a CheckFailed saying what is wrong with their shape, dtype or
    memory layout (naming the known mistakes these show)."""
    TN, KC = want.shape[:2]
    shape = (TN, KC, 32, 4)
    if not isinstance(words, torch.Tensor):
        raise CheckFailed(f"{what} must return the words, one int32 tensor, got {_describe(words)}{ctx}")
    if tuple(words.shape) == (TN, KC, 4, 32):
        w = _as_words(words)
        named = w is not None and torch.equal(w.transpose(-1, -2), want)
        raise CheckFailed((f"This matches a known mistake: {AXES[0]}. {AXES[1]}\n" if named else "") +
                          f"{what} returned shape [ceil(N/16), K/64, 4, 32] = {list(words.shape)}: the layout is "
                          f"[ceil(N/16), K/64, 32 lanes, 4 words] = {list(shape)}{ctx}")  # fmt: skip
    if tuple(words.shape) != shape:
        hint = ""
        if words.dim() and words.shape[0] == 16 * TN:
            hint = " One index a tile of 16 rows: tn = n // 16."
        elif tuple(words.shape) == (TN, 4 * KC, 32):
            hint = " A lane's four words of a 64-wide chunk side by side: reshape to [.., K/64, 4, 32], then permute."
        raise CheckFailed(f"{what} must return shape [ceil(N/16), K/64, 32, 4] = {list(shape)}, got "
                          f"{list(words.shape)}.{hint}{ctx}")  # fmt: skip
    if words.dtype != torch.int32:
        w = _as_words(words)
        if w is not None and torch.equal(w, want):
            raise CheckFailed(f"This matches a known mistake: the words as {_name(words.dtype)}, not int32. The "
                              f"kernel loads 32-bit words: wrap each word to int32 (bit 31 set: w - 2**32) and "
                              f"convert, .to(torch.int32).\n{what} returned {_name(words.dtype)}; the words must be "
                              f"int32{ctx}")  # fmt: skip
        raise CheckFailed(f"{what} must return int32 words, got {_name(words.dtype)}{ctx}")
    if not contiguous:
        raise CheckFailed((f"This matches a known mistake: {AXES[0]}. {AXES[1]}\n" if torch.equal(words, want) else "")
                          + f"{what} returned a non-contiguous tensor (a permuted view, strides "
                          f"{list(words.stride())}): the kernel reads the words as one flat buffer. Call "
                          f".contiguous(){ctx}")  # fmt: skip
    return words


def _named_repack(got: torch.Tensor, want: torch.Tensor, packed: torch.Tensor, N: int) -> str | None:
    TN = want.shape[0]
    diff = (got.long() ^ want.long()) & MASK32
    pad = _pad_nibbles(N, TN)
    if N % 16 and not (diff & ~pad).any():
        return f"{PADDING[0]}. {PADDING[1]}"
    if torch.equal(got, want.transpose(-1, -2).contiguous().reshape(want.shape)):
        return f"{AXES[0]}. {AXES[1]}"
    for name, explanation, words in repack_mistakes(packed):
        if torch.equal(got, words):
            return f"{name}. {explanation}"
    return None


def repack_inputs(g: torch.Generator, hidden: bool) -> list[torch.Tensor]:
    """Packed weights (uint8 [N, K/2]): every byte value; ragged N (a row past a tile, fewer rows than a tile, a
    partial tile); K of one to four 64-wide chunks. Random bytes give words with bit 31 set."""
    if not hidden:
        every_byte = (torch.arange(16 * 32) % 256).to(torch.uint8).reshape(16, 32)  # N = 16, K = 64
        shapes = [(40, 256), (7, 128), (33, 192)]
    else:
        every_byte = (torch.randperm(256, generator=g).repeat(2) % 256).to(torch.uint8).reshape(16, 32)
        shapes = [(16 * _draw(g, 0, 6) + _draw(g, 1, 16), 64 * _draw(g, 1, 6)) for _ in range(2)]  # ragged N
        shapes.append((16 * _draw(g, 1, 5), 64 * _draw(g, 1, 4)))  # whole tiles
    return [
        every_byte,
        *(torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g) for N, K in shapes),
    ]


def _refused_inputs(g: torch.Generator, hidden: bool) -> list[torch.Tensor]:
    """Packed weights whose K is no multiple of 64."""
    if not hidden:
        shapes = [(16, 96), (5, 32)]
    else:
        shapes = [(_draw(g, 1, 40), 64 * _draw(g, 0, 4) + 2 * _draw(g, 1, 32))]
    return [torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g) for N, K in shapes]


def _raised(fn, args, what: str) -> str | None:
    """The name of the exception fn(*args) raised (None when it returned); the learner's stub is reported unfilled."""
    try:
        fn(*args)
    except CheckFailed:
        raise
    except LearnerError as exc:  # from the process that runs the learner's code
        if exc.unfilled:
            raise CheckFailed(checks.learner_error_message(exc, what)) from None
        return exc.type_name
    except Exception as exc:  # noqa: BLE001 - whatever it raised is named in the report
        if checks.is_unfilled(exc):
            raise CheckFailed(
                checks.learner_error_message(LearnerError(type(exc).__name__, "", unfilled=True), what)
            ) from exc
        return "ValueError" if isinstance(exc, ValueError) else type(exc).__name__
    return None


def check_repack(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1b: fn(packed) -> int32 [ceil(N/16), K/64, 32, 4], bit for bit `mma_repack.repack`'s words, and a
    ValueError for K no multiple of 64."""
    seed, g = _cell(seed, hidden)
    what = "repack"
    for packed in repack_inputs(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        ctx = f" (packed [{N}, {K // 2}]: N = {N}, K = {K})"
        raw, words = _call(fn, {"packed": packed}, what=what, ctx=ctx)
        want = repack(packed)
        contiguous = not isinstance(raw, torch.Tensor) or raw.is_contiguous()
        words = _repack_form(words, want, what, ctx, contiguous)
        if torch.equal(words, want):
            continue
        named = _named_repack(words, want, packed, N)
        n_bad = int((words != want).sum())
        lines = [f"This matches a known mistake: {named}"] if named else []
        lines.append(f"{what}: {n_bad} of {want.numel()} words differ from the layout{ctx}")
        lines.append(_first_word(words, want, unpack(packed), N))
        raise CheckFailed("\n".join(lines))
    for packed in _refused_inputs(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        ctx = f" (packed [{N}, {K // 2}]: K = {K}, not a multiple of 64)"
        before = checks.snapshot({"packed": packed})
        raised = _raised(fn, (packed,), what)
        _unchanged({"packed": packed}, before, what, ctx)
        if raised is None:
            raise CheckFailed(f"{what} returned for K = {K}, no multiple of 64: the layout tiles K in 64-wide chunks, "
                              f"so raise ValueError (say that K must be a multiple of 64){ctx}")  # fmt: skip
        if raised != "ValueError":
            raise CheckFailed(f"{what} raised {raised} for K = {K}: check K yourself first and raise ValueError, "
                              f"the error for a bad argument (say that K must be a multiple of 64){ctx}")  # fmt: skip
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs, and refuses K no multiple of 64 "
                  f"(seed {seed})")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 2a: a pair of nibbles, unpacked by the magic number


def _bf16(bits: torch.Tensor) -> torch.Tensor:
    """16-bit patterns (in an int32, 0..0x7FFF) -> bf16."""
    return bits.to(torch.int16).view(torch.bfloat16)


def unpack_pair_reference(words: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's pair j: t = ((words >> 4j) & 0x000F000F) | 0x43004300, its halves read as bf16 (128 + nibble j,
    128 + nibble j + 4)."""
    t = ((words >> (4 * j)) & 0x000F000F) | 0x43004300
    return _bf16(t & 0xFFFF), _bf16(t >> 16)


def pair_mistakes(words: torch.Tensor, j: int) -> list[tuple[str, str, tuple[torch.Tensor, torch.Tensor]]]:
    """(name, explanation, (lo, hi)) of the known wrong unpackings of pair j."""

    def nib(i):
        return (words >> (4 * i)) & 0xF

    def magic(n):
        return _bf16(0x4300 | n)

    missing = ("the magic 0x4300 missing", "OR 0x43004300 into the masked word: each half then reads as the bf16 "
               "128 + q (0x4300 is 128.0, and q lands in its last mantissa bits, one unit each); the 128 cancels "
               "later against 128 + z.")  # fmt: skip
    return [
        (*missing, (_bf16(nib(j)), _bf16(nib(j + 4)))),  # the bare bits: subnormal bf16
        (*missing, (nib(j).to(torch.bfloat16), nib(j + 4).to(torch.bfloat16))),  # q converted, not 128 + q
        ("the halves swapped", "Nibble j is the LOW half (lo = t & 0xFFFF), nibble j + 4 the high half "
         "(hi = t >> 16).", (magic(nib(j + 4)), magic(nib(j)))),
        ("adjacent nibbles paired", "Pair j is nibbles j and j + 4, which one shift by 4j and one mask 0x000F000F "
         "take at once, not 2j and 2j + 1.", (magic(nib(2 * j)), magic(nib(2 * j + 1)))),
    ]  # fmt: skip


EDGE_WORDS = [0, -1, -(2**31), 2**31 - 1, 0x0F0F0F0F, 0xF0F0F0F0 - 2**32, 0x12345678, 0x87654321 - 2**32,
              0x8F00000F - 2**32, 0x7FF0000F, 0x000F000F, 0xF000F000 - 2**32]  # fmt: skip


def pair_inputs(g: torch.Generator, hidden: bool) -> list[torch.Tensor]:
    """int32 words: every sign and every nibble 0 and 15 (EDGE_WORDS), repacked weights, random words."""
    edges = torch.tensor(EDGE_WORDS, dtype=torch.int32).reshape(3, 4)
    if not hidden:
        packed = torch.randint(0, 256, (40, 128), dtype=torch.uint8, generator=g)  # N = 40, K = 256
        return [edges, repack(packed), torch.randint(-(2**31), 2**31, (257,), dtype=torch.int32, generator=g)]
    shape = [_draw(g, 1, 6), _draw(g, 1, 6), 32, 4]
    n = _draw(g, 1, 400)
    return [edges[torch.randperm(3, generator=g)], torch.randint(-(2**31), 2**31, shape, dtype=torch.int32, generator=g),
            torch.randint(-(2**31), 2**31, (n,), dtype=torch.int32, generator=g)]  # fmt: skip


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def check_pairs(fn, inputs, *, what: str, seed: int, hidden: bool, dtype, dtype_hint: str, bits, reference, mistakes,
                describe, wrongly: str) -> None:  # fmt: skip
    """A pair-decoding check (ex 2a, the bonus's fp4_pair): fn(words, j) -> (lo, hi) of `dtype`, bit for bit (`bits`) as
    reference(words, j), j = 0..3; a known mistake named, the first wrong word described by describe(j, h, ...)."""
    n = 0
    for words in inputs:
        for j in range(4):
            ctx = f" (words: int32 {list(words.shape)}, j = {j})"
            _, result = _call(fn, {"words": words}, j, what=what, ctx=ctx)
            lo, hi = _pair(result, what, ("lo", "hi"), ctx)
            for name, t in (("lo", lo), ("hi", hi)):
                if tuple(t.shape) != tuple(words.shape):
                    raise CheckFailed(f"{name} must have the shape of words, {list(words.shape)}: one value per word, "
                                      f"got {list(t.shape)}{ctx}")  # fmt: skip
                if t.dtype != dtype:
                    raise CheckFailed(f"{name} must be {_name(dtype)} ({dtype_hint}), got {_name(t.dtype)}{ctx}")  # fmt: skip
            want = reference(words, j)
            bad = (bits(lo) != bits(want[0])) | (bits(hi) != bits(want[1]))
            n += 1
            if not bad.any():
                continue
            lines = [f"{what}: {int(bad.sum())} of {words.numel()} words {wrongly}{ctx}"]
            for name, explanation, (mlo, mhi) in mistakes(words, j):
                if torch.equal(bits(lo), bits(mlo)) and torch.equal(bits(hi), bits(mhi)):
                    lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                    break
            i = tuple(int(k) for k in bad.nonzero()[0])
            w = int(words[i]) & MASK32
            pairs = enumerate((("lo", lo, want[0]), ("hi", hi, want[1])))
            halves = [describe(j, h, nm, a, e, i, w) for h, (nm, a, e) in pairs if int(bits(a)[i]) != int(bits(e)[i])]  # fmt: skip
            lines.append(f"First at words{list(i)} = 0x{w:08x}: {'; '.join(halves)}.")
            raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {n} {'hidden' if hidden else 'visible'} cases, j = 0..3 (seed {seed})")  # fmt: skip


def _describe_half(j, h, name, got, exp, i, w) -> str:
    gb, eb, nibble = int(_bits(got)[i]) & 0xFFFF, int(_bits(exp)[i]) & 0xFFFF, j + 4 * h
    return (f"{name} got 0x{gb:04x} ({float(got[i]):g}), expected 0x{eb:04x} ({float(exp[i]):g}: 128 + nibble "
            f"{nibble}, which is {w >> (4 * nibble) & 0xF})")  # fmt: skip


def check_unpack_pair(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2a: fn(words, j) -> (lo, hi), bf16 shaped like words: 128 + nibble j and 128 + nibble j + 4 of each
    word, bit for bit, for j = 0..3, on words with the sign bit set too."""
    seed, g = _cell(seed, hidden)
    check_pairs(fn, pair_inputs(g, hidden), what="unpack_pair", seed=seed, hidden=hidden, dtype=torch.bfloat16,
                dtype_hint="a half of 0x43004300 | the nibbles, read as a bf16: .to(torch.int16).view(torch.bfloat16)",
                bits=_bits, reference=unpack_pair_reference, mistakes=pair_mistakes, describe=_describe_half,
                wrongly="unpack wrongly")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 2b: the kernel's program on the repacked words


def _in_chunks(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """t [R, K] with each 64-wide chunk of K gathered by `order`."""
    R, K = t.shape
    return t.reshape(R, K // 64, 64)[:, :, order].reshape(R, K)


def exact(x, packed, scales, zeros, G: int) -> torch.Tensor:
    """y = x @ ((q - z) · s)^T in float64: every weight and product exact, the sums far closer than float32's
    rounding, which the learner's float32 sums are held to."""
    q = unpack(packed).double()
    s, z = scales.double().repeat_interleave(G, dim=1), zeros.double().repeat_interleave(G, dim=1)
    return x.double() @ ((q - z) * s).T


def lane_mistakes(x, packed, scales, zeros, G: int) -> list[Mistake]:
    xd = x.double()
    q = unpack(packed).double()
    s, z = scales.double().repeat_interleave(G, dim=1), zeros.double().repeat_interleave(G, dim=1)
    w = (q - z) * s
    w32 = (q - z).float() * s.float()  # a folding learner's weights: (q - z) · s in float32, then rounded
    order = x_order()
    w_mma = _in_chunks(w, order)  # the weights in the MMA's order of K, as the words hold them
    folded = ("the scale folded into 16-bit weights before the sum", "(q - z) · s rounded to bf16 (or fp16) loses "
              "up to half a unit in its last place a weight: keep the exact integer a = (128 + q) - (128 + z) in the "
              "MMA, sum the group in float32, and multiply the sum by the group's scale.")  # fmt: skip
    cancel = ("the 128 of the magic number not cancelled", "Each half holds 128 + q: subtract 128 + z (the zero "
              "point through the same magic number), so that a = q - z exactly.")  # fmt: skip
    out = [
        Mistake("the zero subtracted after the scale", "The zero point is in code units: a = (128 + q) - "
                "(128 + z) = q - z first, then the group's sum times the scale; not q · s - z.",
                xd @ (q * s - z).T),
        Mistake("the zero point ignored", "Subtract 128 + z from 128 + q, not 128 alone: a = q - z.", xd @ (q * s).T),
        Mistake(*cancel, xd @ ((q - z + 128) * s).T),
        Mistake(*cancel, xd @ ((q - z - 128) * s).T),
        Mistake("the scale missing", "Multiply each group's float32 sum by the group's scale s[:, g].", xd @ (q - z).T),
        Mistake(*folded, xd @ w32.to(torch.bfloat16).double().T),
        Mistake(*folded, xd @ w32.to(x.dtype).double().T),
        Mistake("x not reordered", "The words hold K in x_order's order inside each 64-wide chunk: pair them with "
                "x[:, 64 kc + x_order] (the kernel's reshape and permute of its x tile), not x in its own order.",
                xd @ w_mma.T),
        Mistake("x reordered by x_order's inverse", "K position p of a chunk holds x's element x_order[p]: gather "
                "x[:, 64 kc + x_order], not x[:, 64 kc + argsort(x_order)].",
                _in_chunks(xd, torch.argsort(order)) @ w_mma.T),
    ]  # fmt: skip
    return out


# The visible cases (M, N, K, group_size), each with bf16 and fp16 x: one row and several (up to 16); ragged N (past a
# tile, under one, a partial tile); one 64-wide chunk and four; groups of 64 and 128. Then the rounding probe.
VISIBLE_LANE_CASES = [(1, 40, 256, 64), (5, 7, 64, 64), (16, 33, 256, 128), (9, 24, 128, 128)]
PROBE_CASES = [(2, 16, 128, 64), (1, 24, 256, 128)]


def lane_cases(g: torch.Generator, hidden: bool) -> list[tuple]:
    """(M, N, K, group_size, x dtype) of the random problems."""
    dtypes = (torch.bfloat16, torch.float16)
    if not hidden:
        return [(*case, dtype) for case in VISIBLE_LANE_CASES for dtype in dtypes]
    cases = []
    rows = ((1, 64, torch.bfloat16), (_draw(g, 2, 16), 128, torch.float16),
            (16, (64, 128)[_draw(g, 0, 2)], dtypes[_draw(g, 0, 2)]))  # fmt: skip
    for M, G, dtype in rows:
        N = _draw(g, 1, 200)
        K = G * _draw(g, 1, 6)
        cases.append((M, N, K, G, dtype))
    return cases


def check_lane_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2b: fn(x, words, scales, zeros, group_size, N) -> float32 [M, N], the kernel's program modelled in
    torch on `repack`'s words, equal to the exact product to float32's rounding (checks.tolerance_for(float32))."""
    seed, g = _cell(seed, hidden)
    what = "lane_decode"
    runs = [(case, False) for case in lane_cases(g, hidden)]
    runs += [((*case, dtype), True) for case in PROBE_CASES for dtype in (torch.bfloat16, torch.float16)]
    rtol = checks.tolerance_for(torch.float32)
    for (M, N, K, G, dtype), probe in runs:
        if probe:
            x, packed, s, z = rounding_probe(M, N, K, G, dtype, "cpu")
        else:
            x, packed, s, z = random_problem(M, N, K, G, dtype, "cpu", g)
        words = repack(packed)
        ctx = (f" (M={M}, N={N}, K={K}, group_size={G}, {_name(dtype)} x"
               f"{', the rounding probe: x = 1' if probe else ''})")  # fmt: skip
        inputs = {"x": x, "words": words, "scales": s, "zeros": z}
        _, y = _call(fn, inputs, G, N, what=what, ctx=ctx)
        if not isinstance(y, torch.Tensor):
            raise CheckFailed(f"{what} must return a float32 tensor [M, N], got {_describe(y)}{ctx}")
        TN = -(-N // 16)
        if tuple(y.shape) == (M, 16 * TN) != (M, N):
            raise CheckFailed(f"{what} returned [M, 16 · ceil(N/16)] = {list(y.shape)}: the last tile's rows past N "
                              f"are padding; return the first N = {N} columns{ctx}")  # fmt: skip
        if tuple(y.shape) == (N, M) != (M, N):
            raise CheckFailed(
                f"{what} returned [N, M] = {list(y.shape)}: y is [M, N] = [{M}, {N}], x @ w.T{ctx}"
            )
        if tuple(y.shape) != (M, N):
            raise CheckFailed(f"{what} must return shape [M, N] = [{M}, {N}], got {list(y.shape)}{ctx}")
        if y.dtype != torch.float32:
            raise CheckFailed(
                f"{what} must return float32 (the MMA accumulates in float32), got {_name(y.dtype)}{ctx}"
            )
        checks.compare(y, exact(x, packed, s, z, G), what=what, rtol=rtol, context=ctx,
                       mistakes=checks.lazily(lane_mistakes, x, packed, s, z, G))  # fmt: skip
    checks.passed(f"{what}: {len(runs)} {'hidden' if hidden else 'visible'} cases match the exact product to float32's "
                  f"rounding (seed {seed})")  # fmt: skip
