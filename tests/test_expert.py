"""The expert decode kernels under the interpreter: equal to the chapters' references on ragged shapes, and the
fp4 decode equal to the dequantization bit for bit."""

import pytest
import torch

from qmatmul import checks, fp8, mxfp4, nvfp4, w4a16, w8a16
from qmatmul.kernels import expert

# CPU tensors through the interpreter; on a GPU `make bench` times these kernels and rechecks their outputs.
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the expert kernels under the interpreter")


@pytest.mark.parametrize("G", [32, 128])
@pytest.mark.parametrize("M", [1, 5, 16])
def test_w4a16_expert_matches_reference(M, G):
    g = checks.generator(M * 1000 + G)
    x, p, s, z = w4a16.random_problem(M, 200, 256, G, torch.float16, "cpu", g)
    y = expert.w4a16_decode(x, p, s, z, G)
    checks.compare(y, w4a16.reference(x, p, s, z, G), what="expert w4a16", rtol=checks.tolerance_for(x.dtype))


def test_w4a16_gemv_bf16_and_strided_out():
    g = checks.generator(7)
    x, p, s, z = w4a16.random_problem(1, 136, 384, 128, torch.bfloat16, "cpu", g, strided=True)
    full = torch.full((1, 140), float("nan"), dtype=torch.bfloat16)
    y = expert.w4a16_gemv(x, p, s, z, 128, out=full[:, :136])
    assert y.data_ptr() == full.data_ptr()
    checks.compare(
        y, w4a16.reference(x, p, s, z, 128), what="expert gemv", rtol=checks.tolerance_for(x.dtype)
    )


def test_words_of_refuses_unaligned_bytes():
    buf = torch.zeros(4 * 17, dtype=torch.uint8)
    with pytest.raises(ValueError, match="int32 words"):
        expert.words_of(buf[1:65].view(4, 16))


@pytest.mark.parametrize("M, K, split", [(1, 1000, 3), (7, 448, 4), (16, 256, 1), (2, 200, 3)])
def test_w8a16_split_decode_matches_reference(M, K, split):
    """K split across programs, the partials added by each strip's last program: ragged N and K (K = 1000 over three
    programs of six 64-wide steps: the last has four and a masked tail; K = 448 over four: the last has one step;
    K = 200 over three: the third has none of its own), a strided x and output, twice in a row on different x (the
    counters are left at 0 for the next call), and each row's scale on another row caught."""
    x, q, s = w8a16.random_problem(
        M, 70, K, torch.float16, "cpu", checks.generator(M * 10 + split), strided=True
    )
    cfg = dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=split, num_warps=4, num_stages=1)
    for xi in (x, -2 * x):  # the second call's partials differ from the first's: none may be left over
        full = torch.full((M, 80), float("nan"), dtype=torch.float16)
        y = expert.w8a16_decode_split(xi, q, s, out=full[:, :70], **cfg)
        checks.compare(
            y, w8a16.reference(xi, q, s), what="expert w8a16 split", rtol=checks.tolerance_for(x.dtype)
        )
    want = w8a16.reference(x, q, s)
    assert checks.mismatch(
        expert.w8a16_decode_split(x, q, s.flip(0), **cfg), want, checks.tolerance_for(x.dtype)
    ).any()
    with pytest.raises(ValueError, match="at most 16 rows"):
        expert.w8a16_decode_split(torch.zeros(17, K, dtype=torch.float16), q, s)


FP4 = {"mxfp4": (mxfp4, expert.mxfp4_decode), "nvfp4": (nvfp4, expert.nvfp4_decode)}


@pytest.mark.parametrize("fmt", sorted(FP4))
@pytest.mark.parametrize("M, K, split", [(1, 512, 1), (5, 512, 2), (16, 192, 4), (3, 160, 1)])
def test_fp4_expert_matches_reference(fmt, M, K, split):
    """Ragged N against 32 columns; K = 192 halves BLOCK_K to 64, K = 160 is padded to 192; split-K 2 and 4 (three K
    steps of 64: the fourth split has none of its own) take the atomic path."""
    ch, decode = FP4[fmt]
    x, *w = ch.random_problem(M, 200, K, torch.float16, "cpu", checks.generator(M * 100 + K), strided=True)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=1, SPLIT_K=split)
    y = decode(x, *w, **cfg)
    checks.compare(y, ch.reference(x, *w), what=f"expert {fmt}", rtol=checks.tolerance_for(x.dtype))


@pytest.mark.parametrize("fmt", sorted(FP4))
def test_fp4_expert_decodes_every_code_to_the_bit(fmt):
    """One-hot rows of x pick single columns of the weight: y equals the libraries-checked dequantization exactly,
    for all sixteen codes in both nibbles, every scale a block may carry in fp16's range, and a zero scale."""
    ch, decode = FP4[fmt]
    g = checks.generator(11)
    N, K = 64, 256
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
    if fmt == "mxfp4":  # e8m0: 2^-10 .. 2^10
        scales = torch.randint(117, 138, (N, K // ch.BLOCK), dtype=torch.uint8, generator=g)
        args = (packed, scales)
    else:  # e4m3 bits, positive and finite, zero included
        scales = torch.randint(0, 0x7F, (N, K // ch.BLOCK), dtype=torch.uint8, generator=g)
        args = (packed, scales, torch.ones(1))
    w = ch.dequantize(*args)
    for ks in (torch.arange(0, 16), torch.arange(K - 16, K), torch.randperm(K, generator=g)[:16]):
        x = torch.zeros(16, K, dtype=torch.float16)
        x[torch.arange(16), ks] = 1.0
        y = decode(x, *args, BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=1, SPLIT_K=1)
        assert torch.equal(y.float(), w[:, ks].T.half().float()), f"{fmt}: columns {ks.tolist()}"


@pytest.mark.parametrize("fmt", sorted(FP4))
def test_fp4_expert_refuses_more_than_16_rows(fmt):
    ch, decode = FP4[fmt]
    x, *w = ch.random_problem(17, 32, 64, torch.float16, "cpu", checks.generator(3))
    with pytest.raises(ValueError, match="at most 16 rows"):
        decode(x, *w)


def test_fp8_tma_computes_the_product():
    """The persistent TMA kernel (descriptors zero-fill past the edges, so ragged M and N need no masks in its loop)
    equals the reference on a ragged problem and on the accumulation case in the interpreter (whose dots are exact:
    promotion is checked on the GPU by the sweep and the bench); a K its
    descriptors cannot take is refused by name."""
    cfg = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1)
    g = checks.generator(3)
    xq = (torch.randn(50, 192, generator=g) * 50).clamp(-448, 448).to(fp8.E4M3)
    wq = (torch.randn(70, 192, generator=g) * 50).clamp(-448, 448).to(fp8.E4M3)
    sx, sw = torch.rand(50, generator=g) * 1e-2, torch.rand(70, generator=g) * 1e-2
    for p in [(xq, sx, wq, sw), fp8.accumulation_problem(32, 64, 1024, "cpu")]:
        y = expert.fp8_matmul_tma(*p, **cfg)
        checks.compare(y, fp8.reference(*p), what="fp8 tma", rtol=checks.tolerance_for(y.dtype))
    with pytest.raises(ValueError, match="K % 16"):
        expert.fp8_matmul_tma(xq[:, :90], sx, wq[:, :90].contiguous(), sw, **cfg)
