"""The expert decode kernels under the interpreter: equal to the chapters' references on ragged shapes."""

import pytest
import torch

from qmatmul import checks, expert, w4a16


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
