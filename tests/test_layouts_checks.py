"""qmatmul/checks/layouts.py without a GPU: each check passes the expert answers (qmatmul/kernels/mma_repack.py's, and
an unpack_pair and a lane_decode written here from the chapter's text), and fails on each known mistake, naming it, on
every visible run and on hidden ones; wrong shapes and dtypes, inputs changed in place and results that alias a
buffer are told apart, with a message that says what is wrong and where."""

import pytest
import torch

from qmatmul.checks import CheckFailed, LearnerError, layouts
from qmatmul.formats.w4a16 import unpack
from qmatmul.kernels import mma_repack
from qmatmul.kernels.mma_repack import SLOTS, tile_index, x_order

SEEDS = (0, 1, 2)


def runs(check, fn, seeds=SEEDS):
    """The visible check once (it draws nothing new), then the hidden check on each seed."""
    check(fn)
    for seed in seeds:
        check(fn, hidden=True, seed=seed)


def named(check, fn, mistake: str, seeds=SEEDS):
    """The check fails on fn, naming `mistake`, visible and hidden alike; returns the visible report."""
    with pytest.raises(CheckFailed, match=f"This matches a known mistake: {mistake}") as exc:
        check(fn)
    for seed in seeds:
        with pytest.raises(CheckFailed, match=f"This matches a known mistake: {mistake}"):
            check(fn, hidden=True, seed=seed)
    return str(exc.value)


# ----------------------------------------------------------------------------------------------------------
# Exercise 1a: fragment_index


def fragment(row_bit="b1", col_bit="b2", lanes="4g+t", swap=False, dtype=torch.int64):
    """A learner's fragment_index, written from the PTX ISA's figure, with one thing changed."""

    def fragment_index():
        lane, v = torch.arange(32)[:, None], torch.arange(8)[None, :]
        g, t = (lane // 4, lane % 4) if lanes == "4g+t" else (lane % 8, lane // 8)
        bits = {"b0": v & 1, "b1": v >> 1 & 1, "b2": v >> 2}
        rows, cols = g + 8 * bits[row_bit], 2 * t + bits["b0"] + 8 * bits[col_bit]
        return ((cols, rows) if swap else (rows, cols))[0].to(dtype), (
            (cols, rows) if swap else (rows, cols)
        )[1].to(dtype)

    return fragment_index


def test_fragment_index_passes_the_expert_and_a_learners_own():
    runs(layouts.check_fragment_index, mma_repack.tile_index)
    runs(layouts.check_fragment_index, fragment())


@pytest.mark.parametrize(
    "learner, mistake",
    [
        (fragment(swap=True), "rows and columns swapped"),
        (fragment(row_bit="b2", col_bit="b1"), r"the \+ 8 on the wrong axis"),
        (fragment(lanes="8t+g"), "groupID and t swapped"),
    ],
)
def test_fragment_index_names_each_known_mistake(learner, mistake):
    report = named(layouts.check_fragment_index, learner, mistake)
    assert "First at lane " in report and "expected (row " in report


def test_fragment_index_refuses_wrong_shapes_and_dtypes():
    rows, cols = tile_index()
    for fn, message in [
        (lambda: (rows.int(), cols.int()), "rows must be int64"),
        (lambda: (rows.T, cols.T), r"rows has shape \[8, 32\]"),
        (lambda: torch.stack([rows, cols]), "must return a pair"),
        (lambda: (rows, cols.flatten()), r"cols must have shape \[32, 8\]"),
        (lambda: (rows, None), "cols is a NoneType"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            layouts.check_fragment_index(fn)


def test_fragment_index_unfilled_is_reported_so():
    def stub():
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not implemented yet"):
        layouts.check_fragment_index(stub)


def test_fragment_index_copies_results_that_alias_a_buffer():
    """The same buffers returned each call (and changed after): what is checked is what the call returned."""
    rows, cols = (t.clone() for t in tile_index())

    def cached():
        return rows, cols

    layouts.check_fragment_index(cached)
    assert layouts._copied((rows, cols))[0].data_ptr() != rows.data_ptr()


# ----------------------------------------------------------------------------------------------------------
# Exercise 1b: repack


def repack(slots=SLOTS, order="x_order", lanes="4g+t", pad="zero", axes="lanes", dtype=torch.int32,
           low_first=True, check_k=True):  # fmt: skip
    """A learner's repack, written from the chapter's text (not mma_repack's code), with one thing changed."""

    def learner(packed):
        N, K = packed.shape[0], 2 * packed.shape[1]
        if check_k and K % 64:
            raise ValueError(f"K = {K} is not a multiple of 64")
        q = torch.stack(
            (packed & 0xF, packed >> 4) if low_first else (packed >> 4, packed & 0xF), -1
        ).reshape(N, K)
        perm = {"x_order": x_order(), "none": torch.arange(64), "inverse": torch.argsort(x_order())}[order]
        q = q.long().reshape(N, K // 64, 64)[:, :, perm].reshape(N, K)
        TN = (N + 15) // 16
        if pad == "zero":
            q = torch.cat([q, torch.zeros(16 * TN - N, K, dtype=q.dtype)])
        elif pad == "repeat":
            q = q[torch.arange(16 * TN).clamp(max=N - 1)]
        elif pad == "garbage":
            q = torch.cat([q, torch.randint(1, 16, (16 * TN - N, K))])
        lane, v = torch.arange(32)[:, None], torch.arange(8)[None, :]
        g, t = (lane // 4, lane % 4) if lanes == "4g+t" else (lane % 8, lane // 8)
        rows, cols = g + 8 * (v >> 1 & 1), 2 * t + (v & 1) + 8 * (v >> 2)
        tiles = q.reshape(TN, 16, K // 16, 16).permute(0, 2, 1, 3)  # [TN, K/16, 16, 16]
        vals = tiles[:, :, rows, cols]  # [TN, K/16, 32, 8]
        words = sum(vals[..., u] << (4 * slots[u]) for u in range(8))  # 0 .. 2^32 - 1
        words = words.reshape(TN, K // 64, 4, 32)
        if axes == "lanes":
            words = words.permute(0, 1, 3, 2).contiguous()
        elif axes == "view":  # the permuted view, not made contiguous
            words = words.permute(0, 1, 3, 2)
        elif axes == "reshape":  # reshaped where it should be permuted
            words = words.reshape(TN, K // 64, 32, 4)
        if dtype == torch.int32:
            return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
        return words.to(dtype)

    return learner


def test_the_checks_own_layout_is_the_experts():
    g = torch.Generator().manual_seed(3)
    for N, K in [(16, 64), (40, 256), (7, 128), (33, 192)]:
        packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
        assert torch.equal(layouts.layout(unpack(packed)), mma_repack.repack(packed))
        assert torch.equal(repack()(packed), mma_repack.repack(packed))


def test_repack_passes_the_expert_and_a_learners_own():
    runs(layouts.check_repack, mma_repack.repack)
    runs(layouts.check_repack, repack())


def test_the_visible_repack_inputs_hold_every_pitfall():
    """Ragged N (past a tile, under one), K of one and four chunks, every byte value, words with bit 31 set; the
    same inputs on every run."""
    inputs = layouts.repack_inputs(torch.Generator().manual_seed(0), hidden=False)
    again = layouts.repack_inputs(layouts.checks.generator(layouts.VISIBLE_SEED), hidden=False)
    assert [p.shape for p in inputs] == [p.shape for p in again]
    Ns, Ks = {p.shape[0] for p in inputs}, {2 * p.shape[1] for p in inputs}
    assert any(N % 16 and N > 16 for N in Ns) and any(N < 16 for N in Ns) and {64, 256} <= Ks
    assert torch.equal(torch.sort(inputs[0].flatten().unique()).values, torch.arange(256).to(torch.uint8))
    assert all(bool((mma_repack.repack(p) < 0).any()) for p in inputs if p.shape[0] >= 16)


@pytest.mark.parametrize(
    "learner, mistake",
    [
        (repack(slots=[(v >> 1) + 4 * (1 - (v & 1)) for v in range(8)]), "the two halves of a pair swapped"),
        (repack(slots=list(range(8))), "value v in nibble v"),
        (repack(lanes="8t+g"), "groupID and t swapped"),
        (repack(order="none"), "K not reordered by x_order"),
        (repack(order="inverse"), "K reordered by x_order's inverse"),
        (repack(low_first=False), "the two halves of a pair swapped"),  # the same words: x_order keeps pairs
        (repack(pad="garbage"), "rows past N not zero"),
        (repack(pad="repeat"), "rows past N not zero"),
        (repack(axes="shape"), r"the word axes in the order \[.., 4, 32\]"),
        (repack(axes="view"), r"the word axes in the order \[.., 4, 32\]"),
        (repack(axes="reshape"), r"the word axes in the order \[.., 4, 32\]"),
        (repack(dtype=torch.int64), "the words as int64, not int32"),
        (repack(dtype=torch.uint32), "the words as uint32, not int32"),
    ],
)
def test_repack_names_each_known_mistake(learner, mistake):
    named(layouts.check_repack, learner, mistake)


def test_repack_says_where_the_first_word_differs():
    with pytest.raises(CheckFailed) as exc:
        layouts.check_repack(repack(order="none"))
    msg = str(exc.value)
    assert "First at word [tn=0, kc=0, lane=" in msg and "groupID" in msg and "x_order's element" in msg, msg
    with pytest.raises(CheckFailed, match=r"row n = \d+ lies past N = 40") as exc:
        layouts.check_repack(repack(pad="garbage"))


def test_repack_refuses_wrong_shapes_and_dtypes():
    expert = mma_repack.repack
    for fn, message in [
        (lambda p: expert(p).float(), "must return int32 words, got float32"),
        (lambda p: expert(p).flatten(), r"must return shape \[ceil\(N/16\), K/64, 32, 4\]"),
        (lambda p: expert(p)[..., :2], r"must return shape"),
        (lambda p: (expert(p),), "must return the words, one int32 tensor, got a tuple"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            layouts.check_repack(fn)


def test_repack_must_refuse_k_no_multiple_of_64_with_a_value_error():
    with pytest.raises(CheckFailed, match="returned for K = 96, no multiple of 64"):
        layouts.check_repack(lambda p: mma_repack.repack(p) if p.shape[1] % 32 == 0 else torch.zeros(1))
    with pytest.raises(CheckFailed, match="raised RuntimeError for K = 96"):
        layouts.check_repack(repack(check_k=False))  # a reshape fails instead
    for hidden in (False, True):
        with pytest.raises(CheckFailed, match="raise ValueError"):
            layouts.check_repack(repack(check_k=False), hidden=hidden, seed=4)

    def remote(type_name):  # the trusted grader's stand-in raises LearnerError for the learner's exception
        def fn(p):
            if p.shape[1] % 32:
                raise LearnerError(type_name, "K is not a multiple of 64")
            return mma_repack.repack(p)

        return fn

    layouts.check_repack(remote("ValueError"))
    with pytest.raises(CheckFailed, match="raised AssertionError for K = 96"):
        layouts.check_repack(remote("AssertionError"))


def test_repack_unfilled_is_reported_so():
    def stub(packed):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="not implemented yet"):
        layouts.check_repack(stub)


def test_repack_must_leave_its_input_alone():
    def shifty(packed):
        words = mma_repack.repack(packed)
        packed ^= 0xFF  # right words, but the weight it was given is gone
        return words

    with pytest.raises(CheckFailed, match="modified its input packed in place"):
        layouts.check_repack(shifty)

    def refuses_after_damage(packed):
        if packed.shape[1] % 32:
            packed.zero_()
            raise ValueError("K must be a multiple of 64")
        return mma_repack.repack(packed)

    with pytest.raises(CheckFailed, match="modified its input packed in place"):
        layouts.check_repack(refuses_after_damage)


def test_repack_copies_a_result_its_code_reuses():
    """A buffer reused from call to call (the next call overwrites the last result) is checked as returned."""
    buf = {}

    def reusing(packed):
        words = mma_repack.repack(packed)
        out = buf.setdefault(tuple(words.shape), torch.empty_like(words))
        return out.copy_(words)

    runs(layouts.check_repack, reusing)


# ----------------------------------------------------------------------------------------------------------
# Exercise 2a: unpack_pair


def unpack_pair(words, j, mistake=None):
    """A learner's unpack_pair, written from the chapter's text: the masked word ORed with the magic number, read as
    two bf16 (little-endian: the low half first)."""
    shift = 4 * (2 * j if mistake == "adjacent" else j)
    mask = 0x000F000F if mistake != "adjacent" else 0x000000FF
    t = (words >> shift) & mask
    if mistake == "adjacent":
        t = (t & 0xF) | ((t >> 4) << 16)
    if mistake != "no magic":
        t = t | 0x43004300
    halves = t.contiguous().view(torch.bfloat16).reshape(*words.shape, 2)
    lo, hi = halves[..., 0], halves[..., 1]
    if mistake == "q":
        lo, hi = lo - 128, hi - 128
    return (hi, lo) if mistake == "swapped" else (lo, hi)


def test_unpack_pair_passes_the_reference_and_a_learners_own():
    runs(layouts.check_unpack_pair, layouts.unpack_pair_reference)
    runs(layouts.check_unpack_pair, unpack_pair)


def test_the_unpacked_pairs_are_128_plus_the_nibbles_and_read_back_the_codes():
    g = torch.Generator().manual_seed(5)
    packed = torch.randint(0, 256, (33, 96), dtype=torch.uint8, generator=g)
    words = mma_repack.repack(packed)
    pairs = [unpack_pair(words, j) for j in range(4)]
    for j, (lo, hi) in enumerate(pairs):
        assert torch.equal(lo.float(), 128 + ((words >> 4 * j) & 0xF).float())
        assert torch.equal(hi.float(), 128 + ((words >> 4 * (j + 4)) & 0xF).float())
    halves = [[(h.float() - 128).int() for h in p] for p in pairs]
    assert torch.equal(mma_repack._from_pairs(halves, 33, 64), unpack(packed).int())


def test_the_visible_words_have_the_sign_bit_set():
    inputs = layouts.pair_inputs(layouts.checks.generator(layouts.VISIBLE_SEED), hidden=False)
    assert all(bool((w < 0).any()) for w in inputs) and -(2**31) in inputs[0].flatten().tolist()


@pytest.mark.parametrize(
    "mistake, name",
    [("no magic", "the magic 0x4300 missing"), ("q", "the magic 0x4300 missing"),
     ("swapped", "the halves swapped"), ("adjacent", "adjacent nibbles paired")],
)  # fmt: skip
def test_unpack_pair_names_each_known_mistake(mistake, name):
    report = named(layouts.check_unpack_pair, lambda w, j: unpack_pair(w, j, mistake), name)
    assert "First at words[" in report and "expected 0x43" in report, report


def test_unpack_pair_refuses_wrong_shapes_and_dtypes():
    for fn, message in [
        (lambda w, j: tuple(h.float() for h in unpack_pair(w, j)), "lo must be bfloat16"),
        (lambda w, j: tuple(h.flatten() for h in unpack_pair(w, j)), "lo must have the shape of words"),
        (lambda w, j: torch.stack(unpack_pair(w, j)), "must return a pair"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            layouts.check_unpack_pair(fn)
    # the report names the words' shape
    with pytest.raises(CheckFailed, match=r"words: int32 \[3, 4\]"):
        layouts.check_unpack_pair(lambda w, j: tuple(h.flatten() for h in unpack_pair(w, j)))


def test_unpack_pair_must_leave_its_words_alone():
    def in_place(words, j):
        words >>= 4 * j  # shifting the words it was given: pair 0 comes out right, the words are lost
        words &= 0x000F000F
        words |= 0x43004300
        halves = words.view(torch.bfloat16).reshape(*words.shape, 2)
        return halves[..., 0], halves[..., 1]  # views of the input

    with pytest.raises(CheckFailed, match="modified its input words in place"):
        layouts.check_unpack_pair(in_place)


def test_unpack_pair_copies_a_result_its_code_reuses():
    buf = {}

    def reusing(words, j):
        lo, hi = unpack_pair(words, j)
        out = buf.setdefault(tuple(words.shape), (torch.empty_like(lo), torch.empty_like(hi)))
        return out[0].copy_(lo), out[1].copy_(hi)

    runs(layouts.check_unpack_pair, reusing)


# ----------------------------------------------------------------------------------------------------------
# Exercise 2b: lane_decode


def operand(words):
    """The words' codes as the MMA's first operand: bf16 128 + q [16 ceil(N/16), K], K in x_order's order, through
    unpack_pair and the fragment (value v = 2j + h of a lane is pair j's half h)."""
    TN, KC = words.shape[:2]
    pairs = [unpack_pair(words, j) for j in range(4)]
    vals = torch.stack([pairs[v >> 1][v & 1] for v in range(8)], -1)  # [TN, KC, 32, 4, 8]
    rows, cols = tile_index()
    A = torch.empty(TN, 16, KC, 4, 16, dtype=torch.bfloat16)
    A[:, rows, :, :, cols] = vals.permute(
        2, 4, 0, 1, 3
    )  # tile row rows[l, v], column cols[l, v] of tile (kc, c)
    return A.reshape(16 * TN, 64 * KC)


def lane_decode(x, words, scales, zeros, group_size, N, mistake=None):
    """A learner's lane_decode: a = (128 + q) - (128 + z) in bf16, each group's float32 sum of a · x (x gathered by
    x_order), times the group's scale, summed over the groups. `mistake` changes one thing."""
    M, K = x.shape
    G, groups = group_size, K // group_size
    A = operand(words)[:N].reshape(N, groups, G)
    z = zeros.to(torch.int32)[:, :, None]
    if mistake == "zero ignored":
        z = z * 0
    if mistake == "128 kept":
        a = A - z.to(torch.bfloat16)
    else:
        a = A - (128 + z).to(torch.bfloat16)  # exact: integers under 256
    assert torch.equal(a.float(), a.float().round())
    order = {None: x_order(), "not reordered": torch.arange(64), "inverse": torch.argsort(x_order())}.get(
        mistake, x_order()
    )
    xm = x.reshape(M, K // 64, 64)[:, :, order].reshape(M, groups, G).float()
    s = scales[None]
    if mistake == "zero after scale":  # q · s - z
        qs = torch.einsum("mgk,ngk->mng", xm, (A - 128).float()) * s
        return (qs - xm.sum(-1)[:, None, :] * zeros.float()[None]).sum(-1)
    if mistake == "folded":  # (q - z) · s rounded to bf16 before the sum
        w = (a.float() * scales[:, :, None]).to(torch.bfloat16).float()
        return torch.einsum("mgk,ngk->mn", xm, w)
    return (torch.einsum("mgk,ngk->mng", xm, a.float()) * s).sum(-1)


def test_lane_decode_passes_a_learners_own():
    runs(layouts.check_lane_decode, lane_decode)


def test_the_visible_lane_decode_cases_hold_every_pitfall():
    cases = layouts.lane_cases(torch.Generator(), hidden=False)
    Ms = {c[0] for c in cases}
    assert 1 in Ms and any(2 <= M <= 16 for M in Ms) and 16 in Ms
    assert any(c[1] % 16 and c[1] > 16 for c in cases) and any(c[1] < 16 for c in cases)
    assert {64, 256} <= {c[2] for c in cases} and {c[3] for c in cases} == {64, 128}
    assert {c[4] for c in cases} == {torch.bfloat16, torch.float16}


@pytest.mark.parametrize(
    "mistake, name",
    [
        ("zero after scale", "the zero subtracted after the scale"),
        ("zero ignored", "the zero point ignored"),
        ("128 kept", "the 128 of the magic number not cancelled"),
        ("folded", "the scale folded into 16-bit weights before the sum"),
        ("not reordered", "x not reordered"),
        ("inverse", "x reordered by x_order's inverse"),
    ],
)
def test_lane_decode_names_each_known_mistake(mistake, name):
    named(layouts.check_lane_decode, lambda *a: lane_decode(*a, mistake=mistake), name)


def test_the_rounding_probe_shows_the_folded_scale_alone():
    """On the probe (x = 1) the folded scale fails and is named, and the exact learner is exact: the float32 sums of
    small integers lose nothing."""
    from qmatmul.checks.w4a16 import rounding_probe

    for M, N, K, G in layouts.PROBE_CASES:
        for dtype in (torch.bfloat16, torch.float16):
            x, packed, s, z = rounding_probe(M, N, K, G, dtype, "cpu")
            words = mma_repack.repack(packed)
            want = layouts.exact(x, packed, s, z, G)
            assert torch.equal(lane_decode(x, words, s, z, G, N).double(), want)
            folded = lane_decode(x, words, s, z, G, N, mistake="folded")
            assert layouts.checks.mismatch(folded, want, layouts.checks.tolerance_for(torch.float32)).all()


def test_lane_decode_is_held_to_float32s_rounding():
    """The tolerance is float32's (2^-18 relative): a result rounded to bf16 at the end fails."""
    with pytest.raises(CheckFailed, match="differ from the reference"):
        layouts.check_lane_decode(lambda *a: lane_decode(*a).bfloat16().float())


def test_lane_decode_refuses_wrong_shapes_and_dtypes():
    def padded(x, words, s, z, G, N):  # every row of the last tile
        A = torch.zeros(16 * words.shape[0], s.shape[1], dtype=s.dtype)
        A[:N], Z = s, torch.zeros_like(A, dtype=torch.uint8)
        Z[:N] = z
        return lane_decode(x, words, A, Z, G, 16 * words.shape[0])

    for fn, message in [
        (lambda *a: lane_decode(*a).bfloat16(), "must return float32"),
        (lambda *a: lane_decode(*a).T.contiguous(), r"returned \[N, M\]"),
        (padded, r"returned \[M, 16 · ceil\(N/16\)\]"),
        (lambda *a: lane_decode(*a)[:, :-1], r"must return shape \[M, N\]"),
        (lambda *a: lane_decode(*a).tolist(), "must return a float32 tensor"),
    ]:
        with pytest.raises(CheckFailed, match=message):
            layouts.check_lane_decode(fn)


def test_lane_decode_must_leave_its_inputs_alone():
    def reorders_x_in_place(x, words, s, z, G, N):
        y = lane_decode(x, words, s, z, G, N)
        M, K = x.shape
        x.copy_(x.reshape(M, K // 64, 64)[:, :, x_order()].reshape(M, K))
        return y

    with pytest.raises(CheckFailed, match="modified its input x in place"):
        layouts.check_lane_decode(reorders_x_in_place)

    def zeros_in_place(x, words, s, z, G, N):
        z += 0  # harmless
        words[0, 0, 0, 0] ^= 1  # not harmless
        return lane_decode(x, words, s, z, G, N)

    with pytest.raises(CheckFailed, match="modified its input words in place"):
        layouts.check_lane_decode(zeros_in_place)


def test_the_visible_checks_say_the_same_on_every_run():
    msgs = set()
    for _ in range(2):
        with pytest.raises(CheckFailed) as exc:
            layouts.check_lane_decode(lambda *a: lane_decode(*a, mistake="not reordered"))
        msgs.add(str(exc.value))
    assert len(msgs) == 1
