"""qmatmul.kernels.mma_decode (and its repacking, qmatmul/kernels/mma_repack.py) without a GPU: the repacked layout
against the chapter's, the fragment layouts against the PTX ISA's tables, the kernel compiled for sm_90 (its layouts
proven trivial by the compiler), and its argument checks. On a GPU, the last test here runs it against the reference."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qmatmul import mxfp4, nvfp4, w4a16
from qmatmul.formats import fp4
from qmatmul.kernels import mma_decode
from tools import sass, sweep_mma

ROOT = Path(__file__).resolve().parent.parent


def measured(rows: str) -> dict:
    """tools/sass.py's measure() of each row of `rows` (a Python expression over sass, sweep_mma and mma_decode giving
    {name: row}), compiled for sm_90 in a new process without TRITON_INTERPRET. In this one, an interpreter run of
    another test (xdist mixes them) can leave triton.language patched for the interpreter, and the compile then
    fails at an unchanged line ('block_argument' object has no attribute 'dtype'), as tests/test_gpu_fit.py found."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    script = (
        "import json\nfrom qmatmul.kernels import mma_decode\nfrom tools import sass, sweep_mma\n"
        f"rows = {rows}\nprint(json.dumps({{n: sass.measure(n, r) for n, r in rows.items()}}, default=str))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_NEEDS_GPU = pytest.mark.skipif(
    not mma_decode.available(), reason="needs a CUDA GPU of sm_80 or newer and triton with Gluon"
)


def GPU(test):
    """A GPU test: skipped without one; on the GPU, in tests/test_gpu.py's xdist group (one worker, one at a time)."""
    return pytest.mark.xdist_group("gpu")(_NEEDS_GPU(test))


def codes(packed):
    """The chapter's unpacking (element 2i in the low nibble), as int32."""
    return w4a16.unpack(packed).int()


@pytest.mark.parametrize("N, K", [(16, 64), (1000, 1024), (33, 192), (8, 128), (17, 64)])
def test_the_kernels_tensor_program_reads_back_the_chapters_codes(N, K):
    g = torch.Generator().manual_seed(N + K)
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
    words = mma_decode.repack(packed)
    assert words.shape == ((N + 15) // 16, K // 64, 32, 4) and words.dtype == torch.int32
    assert torch.equal(mma_decode.unpack_like_kernel(words, N), codes(packed))


def test_every_code_in_every_position_survives_the_repack():
    packed = (
        (torch.arange(16 * 32, dtype=torch.int32) % 256).to(torch.uint8).reshape(16, 32)
    )  # all byte values
    for flip in (packed, packed.flip(0), 255 - packed):
        assert torch.equal(mma_decode.unpack_like_kernel(mma_decode.repack(flip), 16), codes(flip))


def test_a_wrong_layout_is_caught():
    packed = torch.randint(0, 256, (32, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    words = mma_decode.repack(packed)
    swapped = ((words & 0x0F0F0F0F) << 4) | ((words >> 4) & 0x0F0F0F0F)  # nibbles swapped within each byte
    assert not torch.equal(mma_decode.unpack_like_kernel(swapped, 32), codes(packed))
    shuffled = words.flip(2)  # the lanes' words in the wrong order
    assert not torch.equal(mma_decode.unpack_like_kernel(shuffled, 32), codes(packed))


def test_the_fragment_is_the_ptx_isas_mma_m16n8k16_a_operand():
    """PTX ISA, "Matrix Fragments for mma.m16n8k16" (.bf16 A): groupID = lane / 4, t = lane % 4; a0, a1 at
    (groupID, 2t + i), a2, a3 at (groupID + 8, 2t + i), a4, a5 at (groupID, 2t + 8 + i), a6, a7 at (groupID + 8,
    2t + 8 + i)."""
    rows, cols = mma_decode.tile_index()
    for lane in range(32):
        gid, t = divmod(lane, 4)
        want = [(gid, 2 * t), (gid, 2 * t + 1), (gid + 8, 2 * t), (gid + 8, 2 * t + 1),
                (gid, 2 * t + 8), (gid, 2 * t + 9), (gid + 8, 2 * t + 8), (gid + 8, 2 * t + 9)]  # fmt: skip
        assert list(zip(rows[lane].tolist(), cols[lane].tolist(), strict=True)) == want
    # value v = 2j + h lies in nibble j + 4h: pair j (one shift and LOP3) gives values 2j (low half), 2j + 1 (high)
    assert mma_decode.SLOTS == [0, 4, 1, 5, 2, 6, 3, 7]


def test_each_lanes_share_of_x_is_contiguous():
    """PTX ISA, "Matrix Fragments for mma.m16n8k16" (.bf16 B): b0, b1 at rows (K) 2t + i, b2, b3 at 2t + 8 + i,
    column groupID. Through `x_order`, lane t's values of the four 16-wide tiles of a chunk, in register order, are
    x[16 t], x[16 t + 1], ..., x[16 t + 15]: the two 16-byte loads the kernel issues."""
    order = mma_decode.x_order()
    assert sorted(order.tolist()) == list(range(64))  # a permutation: the sum over K is unchanged
    for t in range(4):
        ks = [16 * c + 2 * t + i + 8 * h for c in range(4) for h in range(2) for i in range(2)]
        assert order[ks].tolist() == list(range(16 * t, 16 * t + 16))


def test_repack_refuses_k_not_a_multiple_of_64_and_codes_not_uint8():
    with pytest.raises(ValueError, match="repack needs K to be a multiple of 64"):
        mma_decode.repack(torch.zeros(16, 48, dtype=torch.uint8))
    with pytest.raises(ValueError, match="repack_fp4 needs K to be a multiple of 64"):
        mma_decode.repack_fp4(torch.zeros(16, 48, dtype=torch.uint8), 16)
    with pytest.raises(ValueError, match="uint8"):  # an int8 would shift its sign into the high nibble
        mma_decode.repack(torch.zeros(16, 64, dtype=torch.int8))


def test_decode_refuses_bad_arguments_before_launching():
    N, K, G = 32, 256, 128
    packed, s, z = w4a16.random_packed(N, K, G, "cpu", torch.Generator().manual_seed(0))
    words = mma_decode.repack(packed)
    x = torch.randn(1, K).bfloat16()
    with pytest.raises(ValueError, match="bf16"):
        mma_decode.decode(x.half(), words, s, z, G, N)
    with pytest.raises(ValueError, match="at most 16 rows"):
        mma_decode.decode(torch.randn(17, K).bfloat16(), words, s, z, G, N)
    with pytest.raises(ValueError, match="do not fit"):
        mma_decode.decode(x, words, s, z, G, N + 16)
    with pytest.raises(ValueError, match="do not fit"):
        mma_decode.decode(x, words, s, z, 32, N)  # groups of 32: not a whole 64-wide chunk
    with pytest.raises(ValueError, match="not contiguous"):  # a permuted view would be read as if it were not
        mma_decode.decode(x, words.transpose(2, 3).contiguous().transpose(2, 3), s, z, G, N)
    assert not mma_decode.supports(192, 768) and mma_decode.supports(256, 768 + 256)  # 3 chunks a group: no
    with pytest.raises(ValueError, match=r"\[N, K/G\]"):
        mma_decode.decode(x, words, s[:, :1], z, G, N)


@pytest.mark.skipif(mma_decode.gluon is None, reason="triton without Gluon")
def test_the_kernel_compiles_for_hopper_with_its_layouts_trivial():
    """convert_layout(..., assert_trivial=True) fails the compile if the unpacked tile is not already the MMA's
    operand; the loop then issues under 2.5 instructions a weight, half the Triton tensor-core kernel's count."""
    for got in measured('{n: r for n, r in sass.mma_rows().items() if "w4a16" in n}').values():
        assert got["spills"] == 0
        assert got["per_weight"] < 2.5, got
        # the halves go to the MMA as they are: split into 16-bit values and packed again, a PRMT a pair (~0.5 a weight)
        assert got["ops"]["HMMA"] > 0 and got["ops"].get("PRMT", 0) / got["weights"] < 0.1, got


@pytest.mark.skipif(mma_decode.gluon is None, reason="triton without Gluon")
def test_every_configuration_the_sweep_times_compiles_for_hopper():
    """tools/sweep_mma.py's candidates stay valid as the kernel changes (a GPU call is too dear to find out there)."""
    got = measured(
        "{**{f'{c} bm={bm}': sass.mma_row(c, bm) for c in sweep_mma.configs() for bm in (8, 16)}, "
        "**{f'{c} bm={bm} sb={sb}': sass.mma_fp4_row(c, bm, sb) for c in sweep_mma.fp4_configs() "
        "for bm, sb in ((8, 32), (16, 16))}, "
        "**{f'{c} one row sb={sb}': sass.mma_fp4_row(c, 8, sb) for c in sweep_mma.fp4_configs(True) for sb in (32, 16)}, "
        "**{f'{c} M=2 sb={sb}': sass.mma_fp4_row(dict(c, MP=2, NB=4) if c['DIAG'] else c, 8, sb) "
        "for c in sweep_mma.fp4_configs(small_m=True) for sb in (32, 16)}}"
    )
    n_fp4 = (
        len(sweep_mma.fp4_configs())
        + len(sweep_mma.fp4_configs(True))
        + len(sweep_mma.fp4_configs(small_m=True))
    )
    assert len(got) == 2 * len(sweep_mma.configs()) + 2 * n_fp4
    # none spills; one capped at 72 registers may spill a couple with this triton (test above)
    assert not [name for name, r in got.items() if r["spills"] > (4 if "maxnreg" in name else 0)]


@GPU
@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("G", [64, 128])
@pytest.mark.parametrize("split", [1, 3, 8])
def test_on_a_gpu_the_kernel_matches_the_reference(M, G, split):
    """Ragged N (not a multiple of any tile), split-K with the last program of a strip adding the parts, one and
    two row tiles a warp, both ways of reading x (rows past M read again, never stored)."""
    from qmatmul import checks

    g = checks.generator(M * G + split)
    x, p, s, z = w4a16.random_problem(M, 1000, 1024, G, torch.bfloat16, "cuda", g)
    ref = w4a16.reference(x, p, s, z, G)
    words = mma_decode.repack(p)
    for r, shared in ((1, False), (2, False), (1, True), (2, True)):
        cfg = dict(mma_decode.config(M, 1000, 1024), SPLIT_K=split, R=r, X_SHARED=shared)
        for sign in (1, -2):  # two calls on other x: the last program of each strip leaves its counter at 0
            y = mma_decode.decode(sign * x, words, s, z, G, 1000, **cfg)
            checks.compare(y, sign * ref, what=f"mma decode {cfg}", rtol=checks.tolerance_for(x.dtype))


@pytest.mark.parametrize("block", [32, 16])
@pytest.mark.parametrize("N, K", [(16, 64), (1000, 1024), (33, 192)])
def test_the_fp4_kernels_decoding_reads_back_the_chapters_values(block, N, K):
    """repack_fp4 and the kernel's bit operations, in torch: every e2m1 value, signed zeros included."""
    g = torch.Generator().manual_seed(N + K + block)
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
    got = mma_decode.decode_like_kernel_fp4(mma_decode.repack_fp4(packed, block), N, block)
    want = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    wrong = mma_decode.decode_like_kernel_fp4(mma_decode.repack_fp4(packed, 48 - block), N, block)
    assert not torch.equal(wrong, want)  # the other format's order inside a scale block


def test_the_fp4_bit_places_tile_the_word_and_no_four_rotations_could():
    """Each word holds each of its eight codes' four bits once (FP4_BITS is a bijection onto the 32 bits), pair 3's
    multiply moves its bits without a carry, and no four rotations of one pair's bits tile a word (the search behind
    the AND, multiply, AND of pair 3)."""
    places = [p for j in range(4) for h in range(2) for p in mma_decode.FP4_BITS[j][h]]
    assert sorted(places) == list(range(32))
    mul = [d for d in range(32) if mma_decode.FP4_PAIR3_MUL >> d & 1]
    src = [b for b in range(32) if mma_decode.FP4_PAIR3_MASK >> b & 1]
    sums = [b + d for b in src for d in mul if b + d < 32]
    assert len(sums) == len(set(sums))  # no two partial products share a bit: no carry
    want = [p for p in range(32) if mma_decode.FP4_MASK >> p & 1]
    pair = [6, 7, 8, 15, 22, 23, 24, 31]
    assert want == pair

    def tiles(chosen, covered):
        if len(chosen) == 4:
            return True
        return any(tiles(chosen + [r], covered | rot) for r in range(32)
                   if not (rot := {(p + r) % 32 for p in pair}) & covered)  # fmt: skip

    assert not tiles([], set())


def test_fp4_decode_refuses_bad_arguments_before_launching():
    x, packed, scales, g = nvfp4.random_problem(
        1, 32, 256, torch.bfloat16, "cpu", torch.Generator().manual_seed(0)
    )
    words = mma_decode.repack_fp4(packed, 16)
    with pytest.raises(ValueError, match=r"\[N, K/16\]"):
        mma_decode.decode_fp4(x, words, scales[:, :8], g, 32)
    with pytest.raises(ValueError, match="bf16"):
        mma_decode.decode_fp4(x.half(), words, scales, g, 32)
    with pytest.raises(ValueError, match=r"\[N, K/32\]"):
        mma_decode.decode_fp4(x, words, scales, None, 32)  # MXFP4 wants K/32 scales
    with pytest.raises(ValueError, match="16 \\(NVFP4\\) or 32"):
        mma_decode.repack_fp4(packed, 64)
    two, four = torch.cat([x, x]), torch.cat([x] * 4)
    with pytest.raises(ValueError, match="MP >= M rows"):  # two rows, one carried
        mma_decode.decode_fp4(two, words, scales, g, 32, DIAG=True, MP=1)
    with pytest.raises(ValueError, match="MP x NB at most 8"):
        mma_decode.decode_fp4(x, words, scales, g, 32, DIAG=True, NB=16)
    with pytest.raises(ValueError, match="a multiple of 64"):  # NVFP4 at four rows: steps of 32 values
        mma_decode.decode_fp4(four, words, scales, g, 32, DIAG=True)


def test_small_m_takes_the_block_diagonal_kernel_where_its_steps_fit():
    """M = 1: 128 values of K a step; M = 2: four blocks; M = 3-4: two (MXFP4 only: two NVFP4 blocks are 32 values,
    under the 64 of a repacked chunk), where N is long. K must hold whole steps; otherwise, and from M = 5, the
    block-by-block kernel."""
    shapes = {(1, 32): (1, 4), (1, 16): (1, 8), (2, 32): (2, 4), (2, 16): (2, 4), (3, 32): (4, 2)}
    for (M, block), shape in shapes.items():
        cfg = mma_decode.config_fp4(M, 28672, 8192, block)
        assert cfg["DIAG"] and (cfg["MP"], cfg["NB"]) == shape and cfg["maxnreg"] == 72, (M, block, cfg)
    assert mma_decode.config_fp4(1, 96, 256, 16)["DIAG"]  # N short: one row only
    assert not mma_decode.config_fp4(2, 96, 256, 16).get("DIAG")
    assert not mma_decode.config_fp4(4, 28672, 8192, 16).get("DIAG")
    assert not mma_decode.config_fp4(5, 28672, 8192, 32).get("DIAG")
    assert not mma_decode.config_fp4(1, 96, 192, 32).get("DIAG")


@pytest.mark.skipif(mma_decode.gluon is None, reason="triton without Gluon")
def test_the_fp4_kernel_compiles_for_hopper_with_its_layouts_trivial():
    """The e2m1 pairs become the MMA's operand as they are (no PRMT), with one bf16x2 multiply a pair. No spills, but
    where the launch caps the registers at 72 (the block-diagonal kernel), this triton's ptxas may spill a couple
    (2 at M = 1 with triton 3.9; none with the H200's 3.6)."""
    capped = {n for n, r in sass.mma_rows().items() if r["cfg"].get("maxnreg")}
    assert capped, "the block-diagonal rows cap their registers"
    for name, got in measured('{n: r for n, r in sass.mma_rows().items() if "fp4" in n}').items():
        assert got["spills"] <= (4 if name in capped else 0) and got["ops"]["HMMA"] > 0, got
        assert (
            got["ops"].get("PRMT", 0) / got["weights"] < 0.1 and got["ops"]["HMUL2"] == got["weights"] // 2
        ), got


FP4 = {"mxfp4": (mxfp4, mma_decode.mxfp4_decode, 32), "nvfp4": (nvfp4, mma_decode.nvfp4_decode, 16)}


@GPU
@pytest.mark.parametrize("fmt", sorted(FP4))
@pytest.mark.parametrize("M", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("split", [1, 3, 8])
def test_on_a_gpu_the_fp4_kernel_matches_the_reference(fmt, M, split):
    """Ragged N, split-K, one and two row tiles a warp, x per lane and through shared memory; up to M = 4 (NVFP4: 2)
    the block-diagonal kernel too, at M = 1 with 4 and 8 blocks a step."""
    from qmatmul import checks

    ch, _, block = FP4[fmt]
    x, packed, *w = ch.random_problem(M, 1000, 1024, torch.bfloat16, "cuda", checks.generator(M + split))
    ref = ch.reference(x, packed, *w)
    words = mma_decode.repack_fp4(packed, block)
    g = w[1] if fmt == "nvfp4" else None
    diag = M <= (4 if fmt == "mxfp4" else 2)
    base = mma_decode.config_fp4(M, 1000, 1024, block)
    assert base.get("DIAG", False) == (M == 1)  # N is short: from M = 2 the block-by-block kernel
    base = {k: v for k, v in base.items() if k not in ("DIAG", "MP", "NB", "maxnreg")}
    variants = [dict(R=r, X_SHARED=shared) for r in (1, 2) for shared in (False, True)]
    if diag:
        nbs = [{"NB": 4}, {"NB": 8}] if M == 1 else [{}]  # M = 1: 4 and 8 blocks a step; else the wrapper's
        variants += [dict(R=r, DIAG=True, **nb) for r in (1, 2) for nb in nbs] + [
            dict(R=2, DIAG=True, maxnreg=72)
        ]
    for v in variants:
        cfg = dict(base, SPLIT_K=split, **v)
        for sign in (1, -2):  # two calls on other x: the last program of each strip leaves its counter at 0
            y = mma_decode.decode_fp4(sign * x, words, w[0], g, 1000, **cfg)
            checks.compare(y, sign * ref, what=f"mma {fmt} {cfg}", rtol=checks.tolerance_for(x.dtype))


@GPU
@pytest.mark.parametrize("fmt", sorted(FP4))
def test_on_a_gpu_the_fp4_kernel_decodes_every_code_and_scale_to_the_bit(fmt):
    """One-hot rows of x pick single weight columns: y is the dequantized weight exactly, for all sixteen codes in
    every position and every block scale whose values bf16 holds (e8m0 2^-127 .. 2^125; every e4m3 but NaN)."""
    from qmatmul import checks

    ch, decode, block = FP4[fmt]
    gen = checks.generator(12)
    N, K = 256, 256
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=gen)
    top = 253 if fmt == "mxfp4" else 0x7F
    scales = (torch.arange(N * K // block) % top).to(torch.uint8).reshape(N, K // block)
    args = (packed, scales) if fmt == "mxfp4" else (packed, scales, torch.ones(1))
    w = ch.dequantize(*args)
    cuda = [a.cuda() for a in args]
    for ks in (torch.arange(0, 16), torch.arange(K - 16, K), torch.randperm(K, generator=gen)[:16]):
        x = torch.zeros(16, K, dtype=torch.bfloat16)
        x[torch.arange(16), ks] = 1.0
        y = decode(x.cuda(), *cuda).cpu()
        assert torch.equal(y.float(), w[:, ks].T.bfloat16().float()), f"{fmt}: columns {ks.tolist()}"
    # the block-diagonal kernel (one row, two, four), each row one column: a column of every scale block, both ends
    cols = [b * block + b % block for b in range(K // block)] + [K - 1, 0, K // 2 + 1]
    words, g = mma_decode.repack_fp4(cuda[0], block), cuda[2] if fmt == "nvfp4" else None
    for M in (1, 2, 4) if fmt == "mxfp4" else (1, 2):
        for i in range(0, len(cols) - M + 1, M):
            x = torch.zeros(M, K, dtype=torch.bfloat16, device="cuda")
            x[torch.arange(M), cols[i : i + M]] = 1.0
            y = mma_decode.decode_fp4(x, words, cuda[1], g, N, R=2, num_warps=4, DIAG=True, SPLIT_K=1).cpu()
            want = w[:, cols[i : i + M]].T.bfloat16().float()
            assert torch.equal(y.float(), want), f"{fmt}: M = {M}, columns {cols[i : i + M]}"


@GPU
@pytest.mark.parametrize("fmt", sorted(FP4))
def test_on_a_gpu_the_fp4_kernel_takes_scales_at_any_address(fmt):
    """A row's scale codes of a step are one 16- or 32-bit load: scales starting one byte into a buffer are copied
    first, not read misaligned."""
    from qmatmul import checks

    ch, _, block = FP4[fmt]
    x, packed, scales, *g = ch.random_problem(1, 96, 256, torch.bfloat16, "cuda", checks.generator(5))
    buf = torch.empty(scales.numel() + 1, dtype=torch.uint8, device="cuda")
    odd = buf[1:].view(scales.shape)
    odd.copy_(scales)
    assert odd.data_ptr() % 4 and odd.is_contiguous()
    y = mma_decode.decode_fp4(x, mma_decode.repack_fp4(packed, block), odd, g[0] if g else None, 96)
    checks.compare(
        y, ch.reference(x, packed, scales, *g), what=f"mma {fmt}", rtol=checks.tolerance_for(x.dtype)
    )
