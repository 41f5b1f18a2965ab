"""The reference quantizers against the independent libraries themselves, bit for bit, on adversarial inputs.

Oracles: torchao 0.18 (`to_mx`, `nvfp4_quantize`, `per_tensor_amax_to_scale`, its float8 affine quantizer and its
E2M1 cast), ml_dtypes (float4_e2m1fn, float8_e4m3fn, float8_e8m0fnu) and torch's own fp8 dtypes. Inputs: exact
ties, values one ulp either side of them, subnormals, huge values, zero rows and blocks, outliers, -0 (no NaN).
Where torchao changed its numerics (NVFP4: 0.18 multiplies by the reciprocal of the combined scale), the course
follows the installed torchao and the last test shows the old rule differing from it.
"""

import ml_dtypes
import numpy as np
import pytest
import torch

torchao = pytest.importorskip("torchao", reason="torchao is pinned in requirements-dev.txt: run `make setup`")
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale  # noqa: E402
from torchao.quantization.quant_primitives import _choose_scale_float8, _quantize_affine_float8  # noqa: E402

from qmatmul import checks, fp4, fp8, mxfp4, nvfp4  # noqa: E402

E4M3 = torch.float8_e4m3fn


def test_the_pinned_torchao_is_installed():
    assert torchao.__version__.startswith("0.18"), torchao.__version__


def _next(v: torch.Tensor, direction: float) -> torch.Tensor:
    return torch.nextafter(v, torch.full_like(v, direction))


def e2m1_edge_values() -> torch.Tensor:
    """Every E2M1 value and midpoint, one ulp either side of each, beyond 6, huge, subnormal, ±0."""
    mids = torch.tensor([m for m, _ in fp4.E2M1_MIDPOINTS])
    grid = torch.cat([torch.tensor(fp4.E2M1_MAGNITUDES), mids])
    special = torch.tensor([6.0001, 7.0, 7.999, 8.0, 1e6, 3e38, 1e-45, 1e-40, 1e-38, 2.0**-126, 0.0])
    pos = torch.cat([grid, _next(grid, 0.0), _next(grid, 100.0), special])
    return torch.cat([pos, -pos, torch.tensor([-0.0])])


def test_e2m1_encode_matches_ml_dtypes_and_torchao():
    v = e2m1_edge_values()
    ours = fp4.e2m1_encode(v)
    assert np.array_equal(ours.numpy(), v.numpy().astype(ml_dtypes.float4_e2m1fn).view(np.uint8))
    assert torch.equal(ours, f32_to_f4_unpacked(v.clamp(-6, 6)))


def test_e2m1_decode_matches_ml_dtypes():
    codes = torch.arange(16, dtype=torch.uint8)
    oracle = codes.numpy().view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    ours = fp4.e2m1_decode(codes).numpy()
    assert np.array_equal(ours, oracle) and np.array_equal(np.signbit(ours), np.signbit(oracle))


def test_e8m0_codec_matches_torch_and_ml_dtypes():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = fp4.e8m0_decode(codes)
    by_torch = codes.view(torch.float8_e8m0fnu).float()
    by_ml = torch.from_numpy(codes.numpy().view(ml_dtypes.float8_e8m0fnu).astype(np.float32))
    finite = codes != fp4.E8M0_NAN
    assert torch.equal(ours[finite], by_torch[finite]) and torch.equal(ours[finite], by_ml[finite])
    assert torch.isnan(ours[~finite]).all() and torch.isnan(by_torch[~finite]).all()
    e = torch.arange(-127, 128, dtype=torch.int32)
    powers = torch.ldexp(torch.ones(e.shape), e.float())
    assert torch.equal(fp4.e8m0_from_exponent(e), powers.to(torch.float8_e8m0fnu).view(torch.uint8))


def e4m3_edge_values(g: torch.Generator) -> torch.Tensor:
    """Saturation at 448 (ties 464 = between 448 and the missing 480), subnormal ties, a log-uniform sweep, ±0."""
    special = torch.tensor(
        [448.0, 449.0, 463.99, 464.0, 464.01, 479.0, 480.0, 500.0, 1e4, 3e38, float("inf"), 2.0**-6, 2.0**-9,
         2.0**-10, 3 * 2.0**-10, 5 * 2.0**-11, 2.0**-11, 1e-45, 1.0625, 1.1875, 17.267, 240.0, 0.0]
    )  # fmt: skip
    sweep = torch.ldexp(
        torch.rand(2000, generator=g) + 1, torch.randint(-12, 10, (2000,), generator=g).float()
    )
    pos = torch.cat([special, sweep])
    return torch.cat([pos, -pos, torch.tensor([-0.0])])


def test_e4m3_saturating_cast_matches_torchao_ml_dtypes_and_saturates_at_448():
    v = e4m3_edge_values(checks.generator(0))
    ours = fp8.saturate(v).view(torch.uint8)
    by_torchao = _quantize_affine_float8(v, torch.ones(()), E4M3).view(torch.uint8)
    by_ml = torch.from_numpy(v.clamp(-448, 448).numpy().astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    assert torch.equal(ours, by_torchao) and torch.equal(ours, by_ml)
    big = v.abs() >= 448
    assert set((ours[big] & 0x7F).tolist()) == {0x7E}  # every overflow lands on 448, never on NaN (0x7F)
    # The NVFP4 block-scale cast (fp4.e4m3_encode) is torch's; in range it equals ml_dtypes' round-to-nearest-even.
    inrange = v.abs() <= 448
    assert torch.equal(fp4.e4m3_encode(v[inrange]), by_ml[inrange])


def fp8_matrix(R: int, C: int, g: torch.Generator) -> torch.Tensor:
    """Outlier channels, a tiny row, a huge row, a negative-dominated row; no all-zero block (torchao's scale 0)."""
    x = fp8.random_matrix(R, C, g, outliers=True)
    x[0] *= 1e-30
    x[1] *= 1e30
    x[2] = -x[2].abs()
    x[3, 5] = 0.0
    return x


@pytest.mark.parametrize("block", [(None, None), (1, None), (1, 128), (128, 128)])
def test_fp8_quantizer_matches_torchao(block):
    for seed in range(3):
        x = fp8_matrix(256, 384, checks.generator(seed))
        R, C = x.shape
        b = (block[0] or R, block[1] or C)
        q, s = fp8.quantize(x, b)
        s_ao = _choose_scale_float8(x, list(b), E4M3)
        assert torch.equal(s, s_ao)
        assert torch.equal(q.view(torch.uint8), _quantize_affine_float8(x, s_ao, E4M3).view(torch.uint8))


def test_fp8_zero_block_gets_scale_one_and_zero_codes():
    """torchao gives an all-zero block the scale 0 (and NaN codes); the course's rule gives s = 1, codes 0."""
    x = torch.zeros(4, 256)
    x[1, 200] = 3.0
    q, s = fp8.quantize(x, (1, 128))
    assert s[0].tolist() == [1.0, 1.0] and s[1, 1] == 3.0 / 448
    assert not q.float().isnan().any() and q.float()[0].abs().sum() == 0


def mx_weight(g: torch.Generator) -> torch.Tensor:
    """The course's adversarial MXFP4 weight plus blocks whose amax sits one ulp below a power of two (where
    float32 log2 rounds up), exactly on one, huge, subnormal, and an all-zero row."""
    w = mxfp4.adversarial_weight(8, 512, g)
    for i, e in enumerate(range(-20, 20, 5)):
        p = torch.tensor(2.0**e)
        w[4, 32 * i : 32 * i + 32] = torch.randn(32, generator=g).clamp(-1, 1) * p * 0.5
        w[4, 32 * i + 7] = _next(p, 0.0)
        w[5, 32 * i : 32 * i + 32] = torch.linspace(-1, 1, 32) * p
    w[6, 0:32] = torch.randn(32, generator=g) * 1e37
    w[6, 32:64] = torch.randn(32, generator=g) * 1e-44
    w[7] = 0.0
    return w


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mxfp4_reference_matches_torchao_to_mx(dtype):
    for seed in range(4):
        w = mx_weight(checks.generator(seed)).to(dtype)
        codes, scales = mxfp4.quantize_codes(w)
        s_ao, packed_ao = to_mx(w.contiguous(), torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)
        assert torch.equal(scales, s_ao.view(torch.uint8).reshape(scales.shape))
        assert torch.equal(fp4.pack_nibbles(codes), packed_ao.view(torch.uint8).reshape(w.shape[0], -1))


def nvfp4_weights(seed: int):
    g = checks.generator(seed)
    heavy = nvfp4.random_weight(32, 256, g) * torch.exp(torch.randn(32, 256, generator=g) * 1.5)
    tiny = nvfp4.random_weight(8, 64, g) * 1e-30
    zero_rows = nvfp4.random_weight(8, 64, g)
    zero_rows[3] = 0.0
    return [nvfp4.random_weight(48, 256, g), nvfp4.adversarial_weight(8, 128, g), heavy, tiny, zero_rows,
            nvfp4.tie_weight(8, 256, 0.37), nvfp4.tie_weight(8, 256, 1.0 + seed)]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_nvfp4_reference_matches_torchao_nvfp4_quantize(seed):
    for w in nvfp4_weights(seed):
        for dtype in (torch.float32, torch.bfloat16):
            wd = w.to(dtype)
            codes, scales, g = nvfp4.quantize_codes(wd)
            g_ao = per_tensor_amax_to_scale(wd.float().abs().amax())
            assert torch.equal(g.reshape(()), g_ao)
            s_ao, packed_ao = nvfp4_quantize(wd.contiguous(), 16, per_tensor_scale=g_ao)
            assert torch.equal(scales, s_ao.view(torch.uint8))
            assert torch.equal(fp4.pack_nibbles(codes), packed_ao.view(torch.uint8))


def test_nvfp4_all_zero_tensor_gets_g_one_as_torchao_with_scale_one():
    w = torch.zeros(4, 32)
    codes, scales, g = nvfp4.quantize_codes(w)
    s_ao, packed_ao = nvfp4_quantize(w, 16, per_tensor_scale=torch.ones(()))
    assert float(g) == 1.0 and torch.equal(scales, s_ao.view(torch.uint8))
    assert torch.equal(fp4.pack_nibbles(codes), packed_ao)


def test_nvfp4_dividing_by_g_times_s_differs_from_torchao_at_ties_only():
    """torchao <= 0.17 divided by g · s; 0.18 multiplies by (1 / g) / s. They differ on exact E2M1 ties."""
    w = nvfp4.tie_weight(8, 256, 0.37)
    g_ao = per_tensor_amax_to_scale(w.abs().amax())
    _, packed_ao = nvfp4_quantize(w, 16, per_tensor_scale=g_ao)
    old, scales_old, _ = nvfp4.quantize_codes(w, reciprocal=False)
    differ = fp4.unpack_nibbles(packed_ao) != old
    assert differ.any() and torch.equal(scales_old, nvfp4.quantize_codes(w)[1])
    ties = torch.tensor([m for m, _ in fp4.E2M1_MIDPOINTS])
    s = fp4.e4m3_decode(scales_old).repeat_interleave(16, 1)
    on_tie = [
        ((v.abs()[differ][:, None] == ties[None, :]).any(dim=1))
        for v in (w / (g_ao * s), w * ((1 / g_ao) / s))
    ]
    assert bool(
        (on_tie[0] | on_tie[1]).all()
    )  # at every difference, one of the two rules sits on an exact tie
