"""qmatmul/checks/layouts_bonus.py without a GPU: each check passes the expert answers (mma_repack.repack_fp4, and a
repack_fp4 and an fp4_pair written here from the chapter's text, the latter held to decode_like_kernel_fp4 and to
the E2M1 codec), and fails on each known mistake, naming it, on every visible run and on hidden ones; wrong shapes,
dtypes and arguments, and inputs changed in place, are told apart, with a message that says what is wrong and
where."""

import pytest
import torch
from test_layouts_checks import named, runs

from qmatmul.checks import CheckFailed, LearnerError, layouts
from qmatmul.checks import layouts_bonus as bonus
from qmatmul.formats import fp4
from qmatmul.kernels import mma_repack
from qmatmul.kernels.mma_repack import FP4_BITS, FP4_MASK, FP4_PAIR3_MASK, FP4_PAIR3_MUL, SLOTS, x_order

MASK32 = 0xFFFFFFFF


def codes_of(words):
    """int32 words [...] -> the e2m1 codes [..., 8] at FP4_BITS (value 2j + h at FP4_BITS[j][h])."""
    w = words.long() & MASK32
    return torch.stack(
        [sum((w >> p & 1) << b for b, p in enumerate(FP4_BITS[v >> 1][v & 1])) for v in range(8)], -1
    )


# ----------------------------------------------------------------------------------------------------------
# Bonus a: repack_fp4

NIBBLES = [
    [[4 * SLOTS[2 * j + h] + b for b in range(4)] for h in range(2)] for j in range(4)
]  # W4A16's places
SIGN_IN_NIBBLE = [[[*P[:3], P[2] + 1] for P in FP4_BITS[j]] for j in range(3)] + [FP4_BITS[3]]
SIGN_IN_EVERY_NIBBLE = [[[*P[:3], P[2] + 1] for P in FP4_BITS[j]] for j in range(4)]  # pair 3's too: 2 and 18
PAIR3_ROTATED = [*FP4_BITS[:3], [[(p + 9) % 32 for p in P] for P in FP4_BITS[0]]]


def repack_fp4(places=FP4_BITS, chunk="block", lanes="4g+t", pad="zero", axes="lanes", dtype=torch.int32,
               low_first=True, add=False, check=True):  # fmt: skip
    """A learner's repack_fp4, written from the chapter's text (not mma_repack's code), with one thing changed:
    `chunk` is the width K is reordered in ("block", 64, "other": the other format's block)."""

    def learner(packed, block):
        N, K = packed.shape[0], 2 * packed.shape[1]
        if check and (K % 64 or block not in (16, 32)):
            raise ValueError(f"K = {K} must be a multiple of 64 and block = {block} 16 or 32")
        q = torch.stack(
            (packed & 0xF, packed >> 4) if low_first else (packed >> 4, packed & 0xF), -1
        ).reshape(N, K)
        q = q.long()
        if chunk != "none":
            b = {"block": block, "other": 48 - block}.get(chunk, chunk)
            q = q.reshape(N, K // b, b)[:, :, x_order(block=b)].reshape(N, K)
        TN = (N + 15) // 16
        if pad == "zero":
            q = torch.cat([q, torch.zeros(16 * TN - N, K, dtype=q.dtype)])
        elif pad == "garbage":
            q = torch.cat([q, torch.randint(1, 16, (16 * TN - N, K))])
        lane, v = torch.arange(32)[:, None], torch.arange(8)[None, :]
        g, t = (lane // 4, lane % 4) if lanes == "4g+t" else (lane % 8, lane // 8)
        rows, cols = g + 8 * (v >> 1 & 1), 2 * t + (v & 1) + 8 * (v >> 2)
        vals = q.reshape(TN, 16, K // 16, 16).permute(0, 2, 1, 3)[:, :, rows, cols]  # [TN, K/16, 32, 8]
        words = torch.zeros(vals.shape[:-1], dtype=torch.int64)
        for u in range(8):
            for bit, p in enumerate(places[u >> 1][u & 1]):
                part = (vals[..., u] >> bit & 1) << p
                words = words + part if add else words | part
        words = (words & MASK32).reshape(TN, K // 64, 4, 32)
        if axes == "lanes":
            words = words.permute(0, 1, 3, 2).contiguous()
        elif axes == "view":
            words = words.permute(0, 1, 3, 2)
        if dtype == torch.int32:
            return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
        return words.to(dtype)

    return learner


def test_the_checks_own_layout_is_the_experts():
    g = torch.Generator().manual_seed(3)
    for N, K in [(16, 64), (40, 256), (7, 128), (33, 192)]:
        packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
        for block in (16, 32):
            want = mma_repack.repack_fp4(packed, block)
            assert torch.equal(bonus.fp4_layout(fp4.unpack_nibbles(packed), block), want)
            assert torch.equal(repack_fp4()(packed, block), want)
            assert torch.equal(repack_fp4(add=True)(packed, block), want)  # the places never collide


def test_repack_fp4_passes_the_expert_and_a_learners_own():
    runs(bonus.check_repack_fp4, mma_repack.repack_fp4)
    runs(bonus.check_repack_fp4, repack_fp4())


def test_the_visible_repack_fp4_inputs_hold_every_pitfall():
    """Both blocks, ragged N (past a tile, under one), K of one and four chunks, every code in every place of a word
    for each block, words with bit 31 set; the same inputs on every run."""
    for hidden in (False, True):
        inputs = bonus.repack_fp4_inputs(bonus.checks.generator(layouts.VISIBLE_SEED), hidden)
        if not hidden:
            again = bonus.repack_fp4_inputs(torch.Generator().manual_seed(0), hidden=False)
            assert [(p.shape, b) for p, b in inputs] == [(p.shape, b) for p, b in again]
            Ns, Ks = {p.shape[0] for p, _ in inputs}, {2 * p.shape[1] for p, _ in inputs}
            assert any(N % 16 and N > 16 for N in Ns) and any(N < 16 for N in Ns) and {64, 256} <= Ks
        assert {b for _, b in inputs} == {16, 32}
        for packed, block in inputs[:2]:
            c = codes_of(mma_repack.repack_fp4(packed, block)).reshape(-1, 8)
            assert all(len(c[:, v].unique()) == 16 for v in range(8))
            assert (c[:, 0::2] != c[:, 1::2]).all()  # the halves of a pair differ
        assert all(bool((mma_repack.repack_fp4(p, b) < 0).any()) for p, b in inputs)


@pytest.mark.parametrize(
    "learner, mistake",
    [
        (repack_fp4(chunk=64), "K reordered in 64-wide chunks, not in each scale block"),
        (repack_fp4(places=NIBBLES), r"the W4A16 nibble layout \(SLOTS, not FP4_BITS\)"),
        (repack_fp4(places=NIBBLES, chunk=64), r"the W4A16 nibble layout \(SLOTS, not FP4_BITS\)"),
        (repack_fp4(places=SIGN_IN_NIBBLE), "the sign bit left at bit 3 of the nibble"),
        (repack_fp4(places=SIGN_IN_NIBBLE, add=True), "the sign bit left at bit 3 of the nibble"),
        (repack_fp4(places=SIGN_IN_EVERY_NIBBLE), "the sign bit left at bit 3 of the nibble"),
        (repack_fp4(places=SIGN_IN_EVERY_NIBBLE, add=True), "the sign bit left at bit 3 of the nibble"),
        (repack_fp4(places=PAIR3_ROTATED), r"pair 3's bits placed like pairs 0-2 \(a rotation by 9\)"),
        (
            repack_fp4(places=PAIR3_ROTATED, add=True),
            r"pair 3's bits placed like pairs 0-2 \(a rotation by 9\)",
        ),
        (repack_fp4(places=[[P[1], P[0]] for P in FP4_BITS]), "the two halves of a pair swapped"),
        (
            repack_fp4(low_first=False),
            "the two halves of a pair swapped",
        ),  # the same words: x_order keeps pairs
        (repack_fp4(chunk="other"), "K reordered by the other format's scale block"),
        (repack_fp4(chunk="none"), "K not reordered by x_order"),
        (repack_fp4(lanes="8t+g"), "groupID and t swapped"),
        (repack_fp4(pad="garbage"), "rows past N not zero"),
        (repack_fp4(axes="shape"), r"the word axes in the order \[.., 4, 32\]"),
        (repack_fp4(axes="view"), r"the word axes in the order \[.., 4, 32\]"),
        (repack_fp4(dtype=torch.int64), "the words as int64, not int32"),
    ],
)
def test_repack_fp4_names_each_known_mistake(learner, mistake):
    named(bonus.check_repack_fp4, learner, mistake)


def test_repack_fp4_names_the_inverse_order():
    def inverse(packed, block):
        q = fp4.unpack_nibbles(packed)
        N, K = q.shape
        q = q.reshape(N, K // block, block)[:, :, torch.argsort(x_order(block=block))].reshape(N, K)
        return bonus.fp4_layout(q, block, order=torch.arange(64))

    named(bonus.check_repack_fp4, inverse, "K reordered by x_order's inverse")


def test_repack_fp4_says_where_the_first_word_differs():
    with pytest.raises(CheckFailed) as exc:
        bonus.check_repack_fp4(repack_fp4(chunk=64))
    msg = str(exc.value)
    assert "First at word [tn=0, kc=0, lane=" in msg and "groupID" in msg, msg
    assert (
        "x_order(block=16)[" in msg and "scale block" in msg and "bits [" in msg and "Expected q[" in msg
    ), msg
    with pytest.raises(CheckFailed, match=r"row n = \d+ lies past N = 40"):
        bonus.check_repack_fp4(repack_fp4(pad="garbage"))
    with pytest.raises(CheckFailed, match=r"Expected q\[\d+, \d+\] = 8 \(bits 0b1000\), got 0b0000 at those"):
        bonus.check_repack_fp4(repack_fp4(places=SIGN_IN_NIBBLE))


def test_repack_fp4_refuses_wrong_shapes_and_dtypes():
    expert = mma_repack.repack_fp4
    for fn, message in [
        (lambda p, b: expert(p, b).float(), "must return int32 words, got float32"),
        (lambda p, b: expert(p, b).flatten(), r"must return shape \[ceil\(N/16\), K/64, 32, 4\]"),
        (lambda p, b: expert(p, b)[..., :2], r"must return shape"),
        (lambda p, b: (expert(p, b),), "must return the words, one int32 tensor, got a tuple"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            bonus.check_repack_fp4(fn)


def test_repack_fp4_must_refuse_bad_arguments_with_a_value_error():
    def no_block_check(packed, block):
        if packed.shape[1] % 32:
            raise ValueError("K must be a multiple of 64")
        return mma_repack.repack_fp4(packed, block if block in (16, 32) else 16)

    with pytest.raises(CheckFailed, match="returned for K = 96: raise ValueError"):
        bonus.check_repack_fp4(lambda p, b: mma_repack.repack_fp4(p, b) if p.shape[1] % 32 == 0 else 0)
    with pytest.raises(CheckFailed, match="raised RuntimeError for K = 96"):
        bonus.check_repack_fp4(repack_fp4(check=False))  # a reshape fails instead
    with pytest.raises(CheckFailed, match=r"returned for block = 64: raise ValueError \(block must be 16"):
        bonus.check_repack_fp4(no_block_check)
    for hidden in (False, True):
        with pytest.raises(CheckFailed, match="raise ValueError"):
            bonus.check_repack_fp4(repack_fp4(check=False), hidden=hidden, seed=4)

    def remote(type_name):  # the trusted grader's stand-in raises LearnerError for the learner's exception
        def fn(p, b):
            if p.shape[1] % 32 or b not in (16, 32):
                raise LearnerError(type_name, "bad argument")
            return mma_repack.repack_fp4(p, b)

        return fn

    runs(bonus.check_repack_fp4, remote("ValueError"))
    with pytest.raises(CheckFailed, match="raised AssertionError for K = 96"):
        bonus.check_repack_fp4(remote("AssertionError"))


def test_repack_fp4_unfilled_is_reported_so():
    def stub(packed, block):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not implemented yet"):
        bonus.check_repack_fp4(stub)


def test_repack_fp4_must_leave_its_input_alone():
    def shifty(packed, block):
        words = mma_repack.repack_fp4(packed, block)
        packed ^= 0x88  # right words, but every sign of the weight it was given flipped
        return words

    with pytest.raises(CheckFailed, match="modified its input packed in place"):
        bonus.check_repack_fp4(shifty)

    def refuses_after_damage(packed, block):
        if block not in (16, 32):
            packed.zero_()
            raise ValueError("block must be 16 or 32")
        return repack_fp4()(packed, block)

    with pytest.raises(CheckFailed, match="modified its input packed in place"):
        bonus.check_repack_fp4(refuses_after_damage)


# ----------------------------------------------------------------------------------------------------------
# Bonus b: fp4_pair


def fp4_pair(words, j, mistake=None):
    """A learner's fp4_pair, written from the chapter's text: the word as unsigned (int64), its pair j put in place,
    read as two bf16 (little-endian: the low half first) and multiplied by 2^126."""
    w = words.long() & MASK32
    if j == 3 and mistake != "pair 3 rotated":
        t = (w & FP4_PAIR3_MASK) * FP4_PAIR3_MUL & MASK32
    else:
        r = 3 * j if j < 3 else 9
        if mistake == "left":
            r = (32 - r) % 32
        t = (w >> r | w << (32 - r)) & MASK32 if r else w
    if mistake != "unmasked":
        t = t & FP4_MASK
    t = torch.where(t >= 2**31, t - 2**32, t).to(torch.int32)
    halves = t.contiguous().view(torch.bfloat16).reshape(*words.shape, 2).float()
    lo, hi = halves[..., 0], halves[..., 1]
    if mistake != "unscaled":
        lo, hi = lo * 2.0**126, hi * 2.0**126
    if mistake == "+0":
        lo, hi = lo + 0.0, hi + 0.0
    return (hi, lo) if mistake == "swapped" else (lo, hi)


def test_fp4_pair_passes_the_reference_and_a_learners_own():
    runs(bonus.check_fp4_pair, bonus.fp4_pair_reference)
    runs(bonus.check_fp4_pair, fp4_pair)


def test_fp4_pair_is_the_kernels_decoding_and_the_e2m1_values():
    """The learner's pairs, joined as the kernel joins them, are decode_like_kernel_fp4's values; each half is the
    E2M1 value of the code at FP4_BITS, -0 and the subnormal 0.5 included."""
    g = torch.Generator().manual_seed(7)
    for block, (N, K) in [(16, (33, 192)), (32, (40, 256)), (16, (16, 64))]:
        packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
        words = mma_repack.repack_fp4(packed, block)
        got = mma_repack._from_pairs([fp4_pair(words, j) for j in range(4)], N, block)
        want = mma_repack.decode_like_kernel_fp4(words, N, block)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
        assert torch.equal(
            got.view(torch.int32), fp4.e2m1_decode(fp4.unpack_nibbles(packed)).view(torch.int32)
        )
    words = torch.cat(
        [bonus.every_code_words().flatten(), torch.randint(-(2**31), 2**31, (500,), generator=g)]
    )
    codes = codes_of(words.int())
    for j in range(4):
        for h, (mine, ref) in enumerate(
            zip(fp4_pair(words.int(), j), bonus.fp4_pair_reference(words.int(), j), strict=True)
        ):
            e2m1 = fp4.e2m1_decode(codes[:, 2 * j + h])
            assert torch.equal(mine.view(torch.int32), e2m1.view(torch.int32))
            assert torch.equal(ref.view(torch.int32), e2m1.view(torch.int32))


def test_the_visible_words_hold_every_code_in_every_place():
    """Every code at every value of a word (so -0, the subnormal 0.5 and ±6 in each half of each pair), the two
    halves of a pair unequal, words with the sign bit set; the hidden inputs too."""
    for hidden in (False, True):
        inputs = bonus.fp4_pair_inputs(bonus.checks.generator(5), hidden)
        assert all(bool((w < 0).any()) for w in inputs)
        codes = codes_of(inputs[0]).reshape(-1, 8)
        assert (
            all(len(codes[:, v].unique()) == 16 for v in range(8))
            and (codes[:, 0::2] != codes[:, 1::2]).any()
        )
        for j in range(4):
            for half in bonus.fp4_pair_reference(inputs[0], j):
                bits = set(half.view(torch.int32).flatten().tolist())
                assert bits == set(fp4.e2m1_table().view(torch.int32).tolist()), (j, bits)
    assert -(2**31) in inputs[1].flatten().tolist()


@pytest.mark.parametrize(
    "mistake, name",
    [
        ("left", "the rotation left instead of right"),
        ("unscaled", r"the scale 2\^126 missing \(values 2\^-126 too small\)"),
        ("+0", r"-0 lost \(\+0 added\)"),
        ("pair 3 rotated", "pair 3 decoded by a rotation"),
        ("swapped", "the halves swapped"),
        ("unmasked", "FP4_MASK not applied"),
    ],
)
def test_fp4_pair_names_each_known_mistake(mistake, name):
    report = named(bonus.check_fp4_pair, lambda w, j: fp4_pair(w, j, mistake), name)
    assert "First at words[" in report and "e2m1 code, at bits [" in report, report


def test_fp4_pair_reports_the_code_and_both_bit_patterns():
    with pytest.raises(CheckFailed) as exc:
        bonus.check_fp4_pair(lambda w, j: fp4_pair(w, j, "+0"))
    msg = str(exc.value)
    assert "lo got 0 (0x00000000), expected -0 (0x80000000)" in msg and "is 8 = 0b1000, -0" in msg, msg
    with pytest.raises(CheckFailed, match=r"expected 0.5 \(0x3f000000\).* is 1 = 0b0001, 0.5"):
        bonus.check_fp4_pair(lambda w, j: fp4_pair(w, j, "unscaled"))


def test_fp4_pair_refuses_wrong_shapes_and_dtypes():
    for fn, message in [
        (lambda w, j: tuple(h.bfloat16() for h in fp4_pair(w, j)), "lo must be float32"),
        (lambda w, j: tuple(h.double() for h in fp4_pair(w, j)), "lo must be float32"),
        (lambda w, j: tuple(h.flatten() for h in fp4_pair(w, j)), "lo must have the shape of words"),
        (lambda w, j: torch.stack(fp4_pair(w, j)), "must return a pair"),
        (lambda w, j: (fp4_pair(w, j)[0], None), "hi is a NoneType"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            bonus.check_fp4_pair(fn)
    with pytest.raises(CheckFailed, match=r"words: int32 \[4, 8\], j = 0"):
        bonus.check_fp4_pair(lambda w, j: tuple(h.flatten() for h in fp4_pair(w, j)))


def test_fp4_pair_must_leave_its_words_alone():
    def in_place(words, j):
        lo, hi = fp4_pair(words, j)
        words &= FP4_MASK - 2**32  # the masked word kept in the words it was given
        return lo, hi

    with pytest.raises(CheckFailed, match="modified its input words in place"):
        bonus.check_fp4_pair(in_place)


def test_fp4_pair_copies_a_result_its_code_reuses():
    buf = {}

    def reusing(words, j):
        lo, hi = fp4_pair(words, j)
        out = buf.setdefault(tuple(words.shape), (torch.empty_like(lo), torch.empty_like(hi)))
        return out[0].copy_(lo), out[1].copy_(hi)

    runs(bonus.check_fp4_pair, reusing)


def test_the_visible_checks_say_the_same_on_every_run():
    for check, fn in [(bonus.check_fp4_pair, lambda w, j: fp4_pair(w, j, "left")),
                      (bonus.check_repack_fp4, repack_fp4(places=PAIR3_ROTATED))]:  # fmt: skip
        msgs = set()
        for _ in range(2):
            with pytest.raises(CheckFailed) as exc:
                check(fn)
            msgs.add(str(exc.value))
        assert len(msgs) == 1
