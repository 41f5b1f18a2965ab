"""qmatmul.gemm under the interpreter: the tutorial GEMM and the TMA-fed one equal the products they stand for, on
ragged shapes (TMA descriptors zero-fill past the edges), and the TMA GEMM refuses what its descriptors cannot take."""

import pytest
import torch

from qmatmul import checks, expert, fp8, gemm, w8a16


def _operands(M, N, K, dtype, seed):
    g = checks.generator(seed)
    return torch.randn(M, K, generator=g).to(dtype), torch.randn(N, K, generator=g).to(dtype)


@pytest.mark.parametrize("tensor_scale", [False, True])
def test_both_gemms_compute_x_wt(tensor_scale):
    x, w = _operands(50, 70, 200, torch.float16, 1)
    g = torch.tensor([0.375]) if tensor_scale else None
    want = (x.double() @ w.double().T) * (0.375 if tensor_scale else 1.0)
    out = torch.full((50, 70), float("nan"), dtype=torch.float16)
    y = gemm.tma_matmul(x, w, out, g=g)
    checks.compare(y, want.float(), what="tma_matmul", rtol=checks.tolerance_for(x.dtype))
    out2 = torch.full((50, 70), float("nan"), dtype=torch.float16)
    cfg = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1)
    gemm.matmul_kernel[(2 * 3,)](x, w, w if g is None else g, out2, 50, 70, 200, x.stride(0), x.stride(1),
                                 w.stride(0), w.stride(1), out2.stride(0), out2.stride(1), GROUP_M=8,
                                 HAS_G=tensor_scale, **cfg)  # fmt: skip
    checks.compare(out2, want.float(), what="matmul_kernel", rtol=checks.tolerance_for(x.dtype))


def test_matmul_takes_the_tutorial_kernel_off_hopper():
    x, w = _operands(3, 5, 64, torch.float16, 2)
    assert not gemm.uses_tma(x, w)  # the CPU: the chapters decode first only on a GPU
    x_odd, w_odd = _operands(3, 5, 60, torch.float16, 2)
    assert not gemm.uses_tma(x_odd.cuda() if torch.cuda.is_available() else x_odd, w_odd)


def test_tma_refuses_rows_it_cannot_describe():
    x, w = _operands(4, 8, 60, torch.float16, 3)  # 120-byte rows
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        gemm.tma_matmul(x, w, torch.empty(4, 8, dtype=torch.float16))
    wide, w64 = _operands(4, 8, 73, torch.float16, 3)
    for bad in (wide[:, :64], wide[:, 1:65]):  # a 146-byte row stride; a start 2 bytes off
        assert not gemm.describable(bad)
        with pytest.raises(ValueError, match="16-byte boundaries"):
            gemm.tma_matmul(bad, w64[:, :64].contiguous(), torch.empty(4, 8, dtype=torch.float16))
    assert gemm.describable(wide[:, :64].contiguous())


@pytest.mark.parametrize("block_n", [32, 256])  # one weight scale a tile and step, or a vector of them
def test_fp8_block_tma_matches_the_block_reference(block_n):
    """Ragged M, N and K (K = 320: the last scale block is partly past the edge, where the descriptor reads zeros;
    N = 300: the last tile spans two blocks of w)."""
    p = fp8.random_block_problem(70, 300, 320, "cpu", checks.generator(4))
    y = expert.fp8_block_matmul_tma(*p, BLOCK_M=32, BLOCK_N=block_n, BLOCK_K=128, num_warps=4, num_stages=1)
    checks.compare(y, fp8.block_reference(*p), what="fp8 block tma", rtol=checks.tolerance_for(y.dtype))
    for bad in (dict(BLOCK_K=64), dict(BLOCK_N=96)):
        with pytest.raises(ValueError, match="BLOCK_K must be 128"):
            expert.fp8_block_matmul_tma(*p, **(dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=128, num_warps=4) | bad))


def test_w8a16_prefill_tma_matches_the_reference():
    x, q, s = w8a16.random_problem(40, 72, 256, torch.float16, "cpu", checks.generator(5))
    y = expert.w8a16_prefill_tma(x, q, s)
    checks.compare(y, w8a16.reference(x, q, s), what="w8a16 prefill tma", rtol=checks.tolerance_for(x.dtype))
