"""W4A16: the reference against an independent oracle, and every check shown to fail on a wrong answer."""

import re

import numpy as np
import pytest
import torch

from qmatmul import checks, w4a16
from qmatmul.checks import CheckFailed, w4a16_bonus
from qmatmul.checks import w4a16 as w4a16_checks
from qmatmul.formats import w4a16 as w4a16_formats


@pytest.fixture(scope="session")
def w4a16_solution(env):
    from qmatmul import course

    return course.load_notebook_code("w4a16", name="test_w4a16_solution")


def numpy_quantize(w: np.ndarray, G: int):
    """An independent implementation: numpy float32, loops over groups, np.rint, nibbles packed by hand."""
    w = w.astype(np.float32)
    N, K = w.shape
    q = np.zeros((N, K), dtype=np.uint8)
    s = np.zeros((N, K // G), dtype=np.float32)
    z = np.zeros((N, K // G), dtype=np.uint8)
    for n in range(N):
        for g in range(K // G):
            grp = w[n, g * G : (g + 1) * G]
            lo = min(grp.min(), np.float32(0))
            hi = max(grp.max(), np.float32(0))
            scale = np.float32((hi - lo) / np.float32(15))
            if scale == 0:
                scale = np.float32(1)
            zero = np.clip(np.rint(-lo / scale), 0, 15)
            s[n, g], z[n, g] = scale, zero
            q[n, g * G : (g + 1) * G] = np.clip(np.rint(grp / scale) + zero, 0, 15)
    packed = np.zeros((N, K // 2), dtype=np.uint8)
    for i in range(K // 2):
        packed[:, i] = q[:, 2 * i] + 16 * q[:, 2 * i + 1]
    return packed, s, z


def adversarial_weights(G=32):
    g = checks.generator(7)
    w = w4a16.random_weight(8, 4 * G, g)
    w[0] = 0  # all zeros
    w[1, :G] = torch.linspace(0.01, 1.0, G)  # all positive: the range must still hold 0
    w[2, :G] = -torch.linspace(0.01, 1.0, G)  # all negative
    w[3, :G] = 0
    w[3, 0] = 15.0  # scale exactly 1, zero 0: codes are round(w) with exact ties below
    w[3, 1:6] = torch.tensor([0.5, 1.5, 2.5, 3.5, 14.5])
    w[4, G : 2 * G] = 1e-30  # a tiny, positive group
    w[5, 0] = 1e4  # one huge outlier
    return w


@pytest.mark.parametrize("G", w4a16.GROUP_SIZES)
@pytest.mark.parametrize("seed", range(3))
def test_reference_matches_numpy_oracle(seed, G):
    w = w4a16.random_weight(24, 4 * G, checks.generator(seed))
    for case in (w, adversarial_weights(G), w.half().float(), w.bfloat16().float()):
        p, s, z = w4a16.quantize(case, G)
        pn, sn, zn = numpy_quantize(case.numpy(), G)
        assert torch.equal(p, torch.from_numpy(pn))
        assert torch.equal(s, torch.from_numpy(sn))
        assert torch.equal(z, torch.from_numpy(zn))


def test_ties_round_half_to_even_and_special_groups():
    p, s, z = w4a16.quantize(adversarial_weights(32), 32)
    q = w4a16.unpack(p)
    assert float(s[3, 0]) == 1.0 and int(z[3, 0]) == 0
    assert q[3, :6].tolist() == [15, 0, 2, 2, 4, 14]
    assert float(s[0, 0]) == 1.0 and not q[0].any() and not z[0].any()  # all-zero group: codes equal the zero
    assert int(z[1, 0]) == 0 and int(q[1, 31]) == 15  # all-positive group: zero 0, no clipping below max
    assert int(z[2, 0]) == 15 and int(q[2, 31]) == 0  # all-negative group: zero 15
    deq = w4a16.dequantize(p, s, z, 32)
    wg = adversarial_weights(32)
    # Every weight within half a step of its group's scale (no clipping anywhere).
    assert ((deq - wg).abs() <= s.repeat_interleave(32, dim=1) / 2 * (1 + 1e-6)).all()


def test_pack_unpack_roundtrip_and_nibble_order():
    q = torch.randint(0, 16, (5, 64), dtype=torch.uint8, generator=checks.generator(0))
    p = w4a16.pack(q)
    assert torch.equal(w4a16.unpack(p), q)
    assert int(p[0, 0]) == int(q[0, 0]) | (int(q[0, 1]) << 4)
    c = w4a16.nibble_code(3, 12)
    assert c["byte"] == "11000011" and c["byte & 0xF"] == 3 and c["byte >> 4"] == 12


def test_bytes_model():
    assert w4a16.bytes_moved(1, 28672, 8192, 128) == 28672 * 4096 + 28672 * 64 * 5 + 2 * (8192 + 28672)
    assert abs(w4a16.bytes_per_weight(128) - 0.5390625) < 1e-12
    assert w4a16.bytes_moved_naive(1, 8, 128, 32) - w4a16.bytes_moved(1, 8, 128, 32) == 4 * 8 * 128


# ---------------------------------------------------------------------------------------------------------
# Exercise 1: every wrong quantizer is caught, with a message that names it


def _wrong(name):
    def fn(w, G=128):
        for n, _, p, s, z in w4a16_checks.quantizer_mistakes(w, G):
            if n == name:
                return p, s, z
        raise AssertionError(name)

    return fn


@pytest.mark.parametrize(
    "name",
    [
        "swapped nibbles",
        "zero point ignored",
        "one scale per column",
        "range without 0",
        "truncation instead of rounding",
        "16 levels instead of 15 steps",
    ],
)
def test_wrong_quantizer_is_named(name):
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        w4a16.check_quantizer(_wrong(name), hidden=True, seed=11)


@pytest.mark.parametrize(
    "fn,match",
    [
        (lambda w, G: (w4a16.unpack(w4a16.quantize(w, G)[0]), *w4a16.quantize(w, G)[1:]), "pack two codes"),
        (lambda w, G: (w4a16.quantize(w, G)[0], w4a16.quantize(w, G)[1][:, 0], w4a16.quantize(w, G)[2]),
         "one scale per column for all of K"),
        (lambda w, G: (w4a16.quantize(w, G)[0], w4a16.quantize(w, G)[1].half(), w4a16.quantize(w, G)[2]),
         "must be float32"),
        (lambda w, G: (w4a16.quantize(w, G)[0], w4a16.quantize(w, G)[1], w4a16.quantize(w, G)[2].int()),
         "zeros must be uint8"),
        (lambda w, G: (w4a16.quantize(w, G)[0], w4a16.quantize(w, G)[1].T.contiguous(), w4a16.quantize(w, G)[2]),
         "layout is \\[N, K/G\\]"),
        (lambda w, G: w4a16.quantize(w, G)[:2], "must return a triple"),
    ],
)  # fmt: skip
def test_wrong_shapes_and_types_are_explained(fn, match):
    with pytest.raises(CheckFailed, match=match):
        w4a16.check_quantizer(fn, seed=3)


def test_zero_group_may_use_any_zero_point():
    def other_zero(w, G=128):
        p, s, z = w4a16.quantize(w, G)
        zero_groups = w4a16.grouped(w, G).abs().amax(dim=2) == 0
        q = w4a16.unpack(p)
        z = torch.where(zero_groups, torch.full_like(z, 8), z)
        q = torch.where(zero_groups.repeat_interleave(G, dim=1), torch.full_like(q, 8), q)
        return w4a16.pack(q), torch.where(zero_groups, torch.full_like(s, 0.5), s), z

    w4a16.check_quantizer(other_zero, hidden=True, seed=5)


def test_zero_group_with_nonpositive_scale_is_caught():
    def zero_scale(w, G=128):
        p, s, z = w4a16.quantize(w, G)
        zero_groups = w4a16.grouped(w, G).abs().amax(dim=2) == 0
        return p, torch.where(zero_groups, torch.zeros_like(s), s), z

    with pytest.raises(CheckFailed, match="all-zero group got scale"):
        w4a16.check_quantizer(zero_scale, hidden=True, seed=5)


def test_rounding_difference_is_explained():
    def off_by_one(w, G=128):
        p, s, z = w4a16.quantize(w, G)
        q = w4a16.unpack(p)
        q[0, 5] = (int(q[0, 5]) + 1) % 16 if int(q[0, 5]) < 15 else 14
        return w4a16.pack(q), s, z

    with pytest.raises(CheckFailed, match="codes differ from the reference in 1 of"):
        w4a16.check_quantizer(off_by_one, seed=2)


def test_reference_quantizer_passes_hidden_checks():
    for seed in range(3):
        w4a16.check_quantizer(w4a16.quantize, hidden=True, seed=seed)


def test_in_place_quantizer_is_harmless_but_input_is_checked():
    def in_place(w, G=128):
        out = w4a16.quantize(w, G)
        w.zero_()
        return out

    w4a16.check_quantizer(in_place, seed=1)  # the check hands the learner a copy


# ---------------------------------------------------------------------------------------------------------
# Exercises 2 and 3: the solution passes, each known mistake is named


def test_solution_kernels_pass(w4a16_solution):
    for seed in range(2):
        w4a16.check_prefill(w4a16_solution.w4a16_matmul, hidden=True, seed=seed)
        w4a16.check_decode(w4a16_solution.w4a16_decode, hidden=True, seed=seed)


def _problem(G=32):
    return w4a16.random_problem(9, 40, 4 * G, G, torch.float16, "cpu", checks.generator(5))


@pytest.mark.parametrize(
    "name",
    [
        "swapped nibbles",
        "zero point ignored",
        "zero applied after the scale",
        "one scale per column",
        "scale missing",
        "group index from the byte index",
        "group index off by one",
    ],
)
def test_kernel_mistakes_are_named(name):
    x, p, s, z = _problem()
    mistakes = w4a16.kernel_mistakes(x, p, s, z, 32)
    wrong = next(m for m in mistakes if m.name == name).output.half()
    with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
        checks.compare(wrong, w4a16.reference(x, p, s, z, 32), what="k", rtol=checks.tolerance_for(torch.float16),
                       mistakes=mistakes)  # fmt: skip


def test_weights_rounded_to_16_bits_is_named_when_it_fails():
    # Tiny weights (fp16 subnormals after dequantization): rounding the weights visibly changes the output.
    g = checks.generator(3)
    w = w4a16.random_weight(40, 128, g) * 1e-4
    p, s, z = w4a16.quantize(w, 32)
    x = (torch.randn(9, 128, generator=g) * 1e3).half()
    mistakes = w4a16.kernel_mistakes(x, p, s, z, 32)
    rounded = next(m for m in mistakes if m.name == "weights rounded to 16 bits").output
    ref = w4a16.reference(x, p, s, z, 32)
    assert checks.mismatch(rounded.half(), ref, checks.tolerance_for(torch.float16)).any()
    with pytest.raises(CheckFailed, match="known mistake: weights rounded to 16 bits"):
        checks.compare(
            rounded.half(), ref, what="k", rtol=checks.tolerance_for(torch.float16), mistakes=mistakes
        )


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda x, p, s, z: (x.float(), p, s, z, 32), "x must be float16 or bfloat16"),
        (lambda x, p, s, z: (x, p.to(torch.int32), s, z, 32), "packed must be a 2-D uint8"),
        (lambda x, p, s, z: (x, p[:, :-1].contiguous(), s, z, 32), "the K's differ"),
        (lambda x, p, s, z: (x, p, s.half(), z, 32), "scales must be float32 of shape"),
        (lambda x, p, s, z: (x, p, s, z.int(), 32), "zeros must be uint8"),
        (lambda x, p, s, z: (x, p, s, z, 48), "group_size must be one of"),
        (lambda x, p, s, z: (x, p, s, z, 64), "scales must be float32 of shape"),
        (lambda x, p, s, z: (x[0], p, s, z, 32), "x must be 2-D"),
    ],
)
def test_bad_input_gets_a_clear_message(w4a16_solution, args, match):
    x, p, s, z = w4a16.random_problem(4, 32, 128, 32, torch.float16, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        w4a16_solution.w4a16_matmul(*args(x, p, s, z))


def test_bad_out_and_large_m(w4a16_solution):
    x, p, s, z = w4a16.random_problem(17, 32, 128, 32, torch.float16, "cpu", checks.generator(0))
    with pytest.raises(ValueError, match="out must be"):
        w4a16_solution.w4a16_matmul(x, p, s, z, 32, out=torch.empty(17, 31, dtype=torch.float16))
    with pytest.raises(ValueError, match="at most 16 rows"):
        w4a16_solution.w4a16_decode(x, p, s, z, 32)


def test_bandwidth_cell_awards_nothing_without_gpu(w4a16_solution):
    if torch.cuda.is_available():
        pytest.skip("measures on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        w4a16.check_decode_bandwidth(w4a16_solution.w4a16_decode)


def test_predictions_figures_and_widget_run_on_cpu(env, w4a16_solution, capsys):
    w4a16.predictions(env)
    w4a16.explain_format()
    fig = w4a16.compare_paths(env, w4a16_solution.w4a16_decode)
    fig2 = w4a16.error_against_group_size(w4a16.random_weight(32, 512, checks.generator(0)), w4a16.quantize)
    out = capsys.readouterr().out
    assert "floor" in out and "0.53906 B" in out and "torch._weight_int4pack_mm" in out
    assert fig.axes and fig2.axes
    # Smaller groups, smaller error; one range per row is the worst.
    heights = [b.get_height() for b in fig2.axes[0].patches]
    assert heights[0] < heights[1] < heights[2] < heights[3]
    pytest.importorskip("ipywidgets")
    assert w4a16.nibble_explorer() is not None


# ---------------------------------------------------------------------------------------------------------
# Bonus: the magic-number unpacking


def _magic_variant(old, new, name):
    from qmatmul import course

    src = "\n".join(ln for ln in course.solution_source("ex4_unpack_magic").splitlines() if "###" not in ln)
    assert old in src
    if "p >> 4" in new:  # a swap: exchange the two nibbles' expressions
        src = src.replace("((p >> 4) | 0x6400)", "HIGH").replace(old, new).replace("HIGH", old)
    else:
        src = src.replace(old, new)
    return course.load_notebook_code("w4a16", {"ex4_unpack_magic": src}, name=name)


def test_unpack_magic_solution_passes(w4a16_solution):
    w4a16.check_unpack_magic(w4a16_solution.unpack_magic, w4a16_solution.unpack_magic_kernel, seed=0)
    w4a16.check_unpack_magic(
        w4a16_solution.unpack_magic, w4a16_solution.unpack_magic_kernel, hidden=True, seed=1
    )


@pytest.mark.parametrize(
    "old,new,match",
    [
        ("((p & 0xF) | 0x6400)", "((p >> 4) | 0x6400)", "swapped nibbles"),
        (" - 1024.0", "", "1024 not subtracted"),
        ("| 0x6400).to(tl.float16, bitcast=True) - 1024.0", ").to(tl.float16)", "never bitcasts"),
        ("mask=mask)\n    tl.store(out_ptr + 2 * offs + 1", "mask=offs < n_bytes - 1)\n    tl.store(out_ptr + 2 * offs + 1",
         "codes differ"),
    ],
)  # fmt: skip
def test_unpack_magic_mistakes_are_named(env, old, new, match):
    module = _magic_variant(old, new, f"w4a16_magic_{abs(hash(old)) % 10**6}")
    with pytest.raises(CheckFailed, match=match):
        w4a16.check_unpack_magic(module.unpack_magic, module.unpack_magic_kernel, seed=0)


def test_unpack_magic_in_torch_is_refused():
    with pytest.raises(CheckFailed, match="computed floats with PyTorch"):
        w4a16.check_unpack_magic(lambda p: w4a16.unpack(p).half(), seed=0)


# ---------------------------------------------------------------------------------------------------------
# Bonus: reading a GPTQ checkpoint


def python_gptq_dequantize(qweight, qzeros, scales, G):
    """An independent oracle: GPTQ v1 dequantized weight by weight with Python ints (the words read as unsigned
    32-bit), zero points (nibble + 1) & 0xF, in numpy float32, in nn.Linear's layout [N, K]."""
    K, N = 8 * qweight.shape[0], qweight.shape[1]
    G = K if G == -1 else G
    qw, qz, sc = qweight.tolist(), qzeros.tolist(), scales.float().numpy()
    w = np.zeros((N, K), dtype=np.float32)
    for k in range(K):
        for n in range(N):
            q = ((qw[k // 8][n] & 0xFFFFFFFF) >> (4 * (k % 8))) & 0xF
            z = ((((qz[k // G][n // 8] & 0xFFFFFFFF) >> (4 * (n % 8))) & 0xF) + 1) & 0xF
            w[n, k] = np.float32(q - z) * sc[k // G, n]
    return w


# AutoGPTQ 0.7.1 reads qzeros' nibbles two ways (not installed here: its two rules, transcribed).
_WF = torch.tensor(list(range(0, 32, 4)), dtype=torch.int32).unsqueeze(0)  # the shifts, AutoGPTQ's self.wf


def autogptq_torch_zeros(qzeros: torch.Tensor) -> torch.Tensor:
    """auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, QuantLinear.forward (4 bits): shift without a mask, cast
    to int8, `zeros + 1`, then `torch.bitwise_and(zeros, 2**bits - 1)` ("It appears that casting here after the
    `zeros = zeros + 1` is important"). [K/G, N]."""
    zeros = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 8), _WF.unsqueeze(0)).to(
        torch.int8
    )
    zeros = zeros + 1
    zeros = torch.bitwise_and(zeros, (2**4) - 1)
    return zeros.reshape(zeros.shape[0], -1).to(torch.int32)


def autogptq_triton_zeros(qzeros: torch.Tensor) -> torch.Tensor:
    """auto_gptq/nn_modules/triton_utils/kernels.py, quant_matmul_248_kernel: `zeros = (zeros >> zeros_shifter)
    & maxq`, then `zeros = zeros + 1` (in int32: a nibble of 15 reads 16). [K/G, N]."""
    zeros = (qzeros.unsqueeze(2) >> _WF.unsqueeze(0)) & 15
    return (zeros + 1).reshape(qzeros.shape[0], -1)


def autogptq_pack(q: np.ndarray, zeros: np.ndarray):
    """AutoGPTQ's QuantLinear.pack (qlinear_cuda_old.py), 4 bits, as numpy uint32 loops: codes q [N, K] and zero
    points [N, K/G] -> (qweight, qzeros) int32. `zeros -= 1`, then uint32: a zero of 0 becomes 0xFFFFFFFF, whose
    shifted copy sets every higher nibble of its word too."""
    intweight = q.T.astype(np.uint32)  # [K, N]
    qweight = np.zeros((intweight.shape[0] // 8, intweight.shape[1]), dtype=np.uint32)
    for row in range(qweight.shape[0]):
        for j in range(8):
            qweight[row] |= intweight[8 * row + j] << np.uint32(4 * j)
    z = (zeros.T.astype(np.int64) - 1).astype(np.uint32)  # `zeros -= 1`: the v1 offset
    qzeros = np.zeros((z.shape[0], z.shape[1] // 8), dtype=np.uint32)
    for col in range(qzeros.shape[1]):
        for j in range(8):
            qzeros[:, col] |= z[:, 8 * col + j] << np.uint32(4 * j)
    return torch.from_numpy(qweight.astype(np.int32)), torch.from_numpy(qzeros.astype(np.int32))


def _random_gptq(N, K, G, seed, dtype=torch.float16):
    """Every int32 bit pattern is a valid v1 checkpoint: random words, negative ones included."""
    g = checks.generator(seed)
    groups = 1 if G == -1 else K // G
    qweight = torch.randint(-(2**31), 2**31, (K // 8, N), dtype=torch.int32, generator=g)
    qzeros = torch.randint(-(2**31), 2**31, (groups, N // 8), dtype=torch.int32, generator=g)
    scales = (torch.rand(groups, N, generator=g) * 0.05).to(dtype)
    return qweight, qzeros, scales


def test_platform_is_little_endian():
    # The solution reinterprets int32 words as bytes: byte b holds fields 2b (low nibble) and 2b + 1 (high).
    import sys

    assert sys.byteorder == "little"
    assert torch.tensor([0x76543210], dtype=torch.int32).view(torch.uint8).tolist() == [
        0x10,
        0x32,
        0x54,
        0x76,
    ]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_scales_to_fp32_are_exact(dtype):
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    h = bits.view(dtype)
    finite = torch.isfinite(h)
    assert torch.equal(h.float().to(dtype)[finite].view(torch.int16), bits[finite])


def test_bf16_to_fp16_is_not_exact():
    """Why scales are read into float32 and not fp16: a bf16 scale need not be an fp16 value."""
    s = torch.tensor([1e-6, 3e5, 1.0 + 2**-7], dtype=torch.bfloat16)
    assert not torch.equal(s.half().float(), s.float())


def test_the_zero_rule_is_autogptqs_torch_path_not_its_triton_kernel():
    words = torch.randint(-(2**31), 2**31, (6, 5), dtype=torch.int32, generator=checks.generator(1))
    words[0, 0] = -1  # every nibble 15
    course = w4a16_formats.gptq_zeros(w4a16.unpack_int32(words, dim=1))
    torch_rule, triton_rule = autogptq_torch_zeros(words), autogptq_triton_zeros(words)
    assert torch.equal(course, torch_rule)
    nibble = w4a16.unpack_int32(words, dim=1)
    assert bool((nibble == 15).any())
    # The two rules differ exactly where the nibble is 15: 0 on the torch path, 16 in the Triton kernel.
    assert torch.equal(torch_rule != triton_rule, nibble == 15)
    assert bool((triton_rule[nibble == 15] == 16).all()) and bool((torch_rule[nibble == 15] == 0).all())


@pytest.mark.parametrize("G", [*w4a16.GROUP_SIZES, -1])
def test_gptq_dequantize_matches_python_oracle(G):
    qweight, qzeros, scales = _random_gptq(64, 256, G, seed=abs(G))
    assert bool((qweight < 0).any()) and bool((qzeros < 0).any())
    got = w4a16.gptq_dequantize(qweight, qzeros, scales, G)
    assert got.dtype == torch.float32 and tuple(got.shape) == (64, 256)
    assert torch.equal(got, torch.from_numpy(python_gptq_dequantize(qweight, qzeros, scales, G)))


@pytest.mark.parametrize("G", w4a16.GROUP_SIZES)
def test_to_gptq_matches_autogptq_pack_and_dequantizes_equal(G):
    g = checks.generator(G)
    N, K = 24, 3 * G
    q = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
    z = torch.randint(
        1, 16, (N, K // G), dtype=torch.uint8, generator=g
    )  # 1..15: AutoGPTQ's packer writes them clean
    s = (torch.rand(N, K // G, generator=g) * 0.05).half().float()
    qweight, qzeros, s16 = w4a16.to_gptq(w4a16.pack(q), s, z, G)
    aw, az = autogptq_pack(q.numpy(), z.numpy())
    assert torch.equal(qweight, aw) and torch.equal(qzeros, az)
    assert qweight.dtype == qzeros.dtype == torch.int32 and s16.dtype == torch.float16
    assert tuple(qweight.shape) == (K // 8, N) and tuple(qzeros.shape) == (K // G, N // 8)
    assert torch.equal(s16, s.T.half())
    # The course's dequantization of the weight and GPTQ's of its checkpoint: equal, bit for bit.
    assert torch.equal(
        w4a16.dequantize(w4a16.pack(q), s, z, G), w4a16.gptq_dequantize(qweight, qzeros, s16, G)
    )


def test_a_zero_of_0_round_trips_as_nibble_15():
    """AutoGPTQ's packer writes zero 0 as nibble 15 (and, its -1 being a uint32, 15 into every higher nibble of the
    word); its torch path reads 15 back as 0. to_gptq writes that one nibble, and every rule-abiding reader gets 0."""
    q = torch.zeros(8, 32, dtype=torch.uint8)
    z = torch.tensor([[0], [3], [0], [7], [15], [1], [8], [0]], dtype=torch.uint8)
    qweight, qzeros, s16 = w4a16.to_gptq(w4a16.pack(q), torch.ones(8, 1), z, 32)
    assert int(qzeros[0, 0]) & 0xFFFFFFFF == 0xF70E6F2F  # n = 0 lowest: nibbles F, 2, F, 6, E, 0, 7, F
    _, autogptq_qzeros = autogptq_pack(q.numpy(), z.numpy())
    assert int(autogptq_qzeros[0, 0]) & 0xFFFFFFFF == 0xFFFFFFFF  # the uint32 -1 of n = 0 filled the word
    assert torch.equal(autogptq_torch_zeros(qzeros), z.T.int())
    assert torch.equal(autogptq_torch_zeros(autogptq_qzeros)[0, 0], torch.tensor(0, dtype=torch.int32))
    assert torch.equal(autogptq_triton_zeros(qzeros)[0, 0], torch.tensor(16, dtype=torch.int32))


def test_gptq_layout_facts():
    # Code k = 8r + j in bits 4j..4j+3 of qweight[r, n]; zero n = 8c + j in bits 4j.. of qzeros[g, c], minus one.
    q = torch.zeros(8, 32, dtype=torch.uint8)
    q[0, :8] = torch.arange(8)
    z = torch.full((8, 1), 8, dtype=torch.uint8)  # symmetric: every zero 8
    z[1, 0] = 0  # stored as nibble 15
    qweight, qzeros, _ = w4a16.to_gptq(w4a16.pack(q), torch.ones(8, 1), z, 32)
    assert int(qweight[0, 0]) == 0x76543210
    assert int(qzeros[0, 0]) & 0xFFFFFFFF == 0x777777F7


def test_to_gptq_refuses_what_v1_cannot_store():
    p = torch.zeros(8, 16, dtype=torch.uint8)
    with pytest.raises(ValueError, match="0..15"):
        w4a16.to_gptq(p, torch.ones(8, 1), torch.full((8, 1), 16, dtype=torch.uint8), 32)
    with pytest.raises(ValueError, match="exactly representable in float16"):
        w4a16.to_gptq(p, torch.full((8, 1), 0.1), torch.ones(8, 1, dtype=torch.uint8), 32)
    with pytest.raises(ValueError, match="exactly representable in bfloat16"):
        w4a16.to_gptq(p, torch.full((8, 1), 0.1), torch.ones(8, 1, dtype=torch.uint8), 32, torch.bfloat16)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda w, z, s: (w[:, :12], z, s[:, :12]), "N = 12 is not a multiple of 8"),
        (lambda w, z, s: (w.float(), z, s), "qweight must be a 2-D int32"),
        (lambda w, z, s: (w, z.to(torch.int64), s), "qzeros must be a 2-D int32"),
        (lambda w, z, s: (w, z, s.double()), "float16, bfloat16 or float32"),
        (lambda w, z, s: (w, z[:, :1], s), "qzeros must have shape"),
        (lambda w, z, s: (w, z, s[:1]), "scales must have shape"),
        (lambda w, z, s: (w[:3], z, s), "not a multiple of 32"),
    ],
)
def test_gptq_prepare_messages(change, match):
    qweight, qzeros, scales = _random_gptq(16, 64, 32, seed=0)
    with pytest.raises((TypeError, ValueError), match=match):
        w4a16.gptq_prepare(*change(qweight, qzeros, scales), 32)


def test_gptq_prepare_takes_one_group_per_column_and_every_scale_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        qweight, qzeros, scales = _random_gptq(16, 256, -1, seed=1, dtype=dtype)
        assert w4a16.gptq_prepare(qweight, qzeros, scales, -1) == (256, 16)
    with pytest.raises(ValueError, match="group_size must be -1"):
        w4a16.gptq_prepare(qweight, qzeros, scales, 0)
    with pytest.raises(ValueError, match=r"scales must have shape \[K/G, N\] = \[8, 16\]"):
        w4a16.gptq_prepare(qweight, qzeros, scales, 32)


@pytest.mark.parametrize("G", [*w4a16.GROUP_SIZES, -1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_from_gptq_solution_round_trips(w4a16_solution, G, dtype):
    qweight, qzeros, scales = _random_gptq(40, 256, G, seed=abs(G) + 1, dtype=dtype)
    packed, s, z = w4a16_solution.from_gptq(qweight, qzeros, scales, G)
    assert packed.dtype == torch.uint8 and s.dtype == torch.float32 and z.dtype == torch.uint8
    assert int(z.min()) == 0 and int(z.max()) <= 15  # random words hold nibble 15: zero 0
    assert torch.equal(z.T.int(), autogptq_torch_zeros(qzeros))
    assert torch.equal(s, scales.float().T)  # read exactly, whatever the dtype
    back = w4a16.to_gptq(packed, s, z, G, scale_dtype=dtype)
    for a, b in zip(back, (qweight, qzeros, scales), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(
        w4a16.dequantize(packed, s, z, 256 if G == -1 else G),
        w4a16.gptq_dequantize(qweight, qzeros, scales, G),
    )


def test_from_gptq_solution_passes(w4a16_solution):
    w4a16.check_from_gptq(w4a16_solution.from_gptq, seed=0)
    for seed in range(4):
        w4a16.check_from_gptq(w4a16_solution.from_gptq, hidden=True, seed=seed)


@pytest.mark.parametrize("G", [32, -1])
def test_kernel_reads_a_gptq_checkpoint(w4a16_solution, G):
    # Stored zeros of 15 are zero points 0; one group per column runs as groups of 32 (regroup: the same weight).
    qweight, qzeros, scales = _random_gptq(40, 64, G, seed=9, dtype=torch.bfloat16)
    qzeros[:, :2] = -1  # every stored zero of the first 16 columns 15: zero point 0
    packed, s, z = w4a16_solution.from_gptq(qweight, qzeros, scales, G)
    assert int(z.min()) == 0
    if G == -1:
        s, z = w4a16_formats.regroup(s, z, 64, 32)
    x = torch.randn(3, 64, generator=checks.generator(9)).half()
    y = w4a16_solution.w4a16_matmul(x, packed, s, z, 32)
    expected = x.float() @ w4a16.gptq_dequantize(qweight, qzeros, scales, G).T
    checks.compare(y, expected, what="gptq", rtol=checks.tolerance_for(torch.float16))


def _gptq_reader(plus=1, mask_top=True, reverse=False, zeros_axis=1, wrap=True):
    """A shift-and-mask reader with one mistake switched on."""

    def fn(qweight, qzeros, scales, G):
        K, N = w4a16.gptq_prepare(qweight, qzeros, scales, G)
        G = K if G == -1 else G

        def fields(words, dim):
            parts = []
            for j in range(8):
                jj = 7 - j if reverse else j
                v = words >> (4 * jj)
                parts.append(v & 0xF if (mask_top or jj != 7) else v)
            return torch.stack(parts, dim=dim + 1).flatten(dim, dim + 1)

        q = fields(qweight, 0).T
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8).contiguous()
        z = fields(qzeros, zeros_axis) + plus
        z = z & 0xF if wrap else z
        z = z.T if zeros_axis == 1 else z.reshape(K // G, N).T
        return packed, scales.float().T.contiguous(), z.to(torch.uint8).contiguous()

    return fn


def test_shift_and_mask_reader_passes():
    w4a16.check_from_gptq(_gptq_reader(), seed=0)
    w4a16.check_from_gptq(_gptq_reader(), hidden=True, seed=1)


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(plus=0), "zero offset: forgot the +1 of GPTQ's stored zeros"),
        (dict(wrap=False), "a stored zero of 15 read as 16 (the + 1 not kept to 4 bits)"),
        (dict(reverse=True), "nibble order reversed within the int32"),
        (dict(reverse=True, wrap=False), "nibble order reversed within the int32"),
        (
            dict(mask_top=False, wrap=False),
            "sign: used arithmetic shift on int32 so code 8..15 became negative",
        ),
        (dict(zeros_axis=0), "unpacked qzeros along the wrong axis"),
        (dict(zeros_axis=0, wrap=False), "unpacked qzeros along the wrong axis"),
    ],
)
def test_gptq_mistakes_are_named(kwargs, name, hidden):
    with pytest.raises(CheckFailed, match=f"known mistake: {re.escape(name)}"):
        w4a16.check_from_gptq(_gptq_reader(**kwargs), hidden=hidden, seed=2)


def test_a_sign_mistake_wrapped_to_4_bits_is_right():
    """Masking after the + 1 also undoes the arithmetic shift's sign ((-8..-1 + 1) & 0xF = (8..15 + 1) & 0xF)."""
    w4a16.check_from_gptq(_gptq_reader(mask_top=False), seed=2)


def _solution_triple(qweight, qzeros, scales, G):
    return _gptq_reader()(qweight, qzeros, scales, G)


@pytest.mark.parametrize(
    "fn,match",
    [
        (lambda *a: (a[0], *_solution_triple(*a)[1:]), "packed is qweight unchanged"),
        (lambda *a: (_solution_triple(*a)[0].T.contiguous(), *_solution_triple(*a)[1:]),
         r"transposed: returned \[K/2, N\]"),
        (lambda *a: (_solution_triple(*a)[0], a[2].float(), _solution_triple(*a)[2]), r"transposed: returned \[K/G, N\]"),
        (lambda *a: (*_solution_triple(*a)[:2], _solution_triple(*a)[2].T.contiguous()),
         r"transposed: returned \[K/G, N\] = \[\d+, \d+\] for zeros"),
        (lambda *a: (_solution_triple(*a)[0], a[2].T.contiguous(), _solution_triple(*a)[2]), "converts GPTQ's fp16"),
        (lambda *a: (_solution_triple(*a)[0], a[2].float().T, _solution_triple(*a)[2]), "not contiguous"),
        (lambda *a: (*_solution_triple(*a)[:2], (w4a16.unpack_int32(a[1], 0) + 1).to(torch.uint8)),
         "unpacked qzeros along the wrong axis"),
        (lambda *a: (*_solution_triple(*a)[:2], _solution_triple(*a)[2].int()), "zeros must be uint8"),
        (lambda *a: _solution_triple(*a)[:2], "must return a triple"),
    ],
)  # fmt: skip
def test_gptq_wrong_shapes_and_types_are_explained(fn, match):
    with pytest.raises(CheckFailed, match=match):
        w4a16.check_from_gptq(fn, seed=3)


def test_gptq_input_modified_in_place_is_caught():
    def in_place(qweight, qzeros, scales, G):
        out = _solution_triple(qweight, qzeros, scales, G)
        qzeros.zero_()
        return out

    with pytest.raises(CheckFailed, match="modified its input qzeros in place"):
        w4a16.check_from_gptq(in_place, seed=4)


def test_gptq_inputs_cover_the_traps():
    for hidden in (False, True):
        cases = w4a16_bonus.gptq_inputs(checks.generator(5), hidden)
        assert -1 in [G for *_, G, _ in cases] and torch.bfloat16 in [d for *_, d in cases]
        for packed, s, z, G, dtype in cases:
            qweight, qzeros, _ = w4a16.to_gptq(packed, s, z, G, scale_dtype=dtype)
            assert bool((qweight < 0).any())  # top nibbles 8..15: negative words
            if not bool((z == 8).all()):  # the symmetric checkpoint has qzeros 0x77777777
                nibble = w4a16.unpack_int32(qzeros, dim=1)
                assert bool((qzeros < 0).any()) and int(z.min()) == 0  # stored 15, in a top nibble
                assert bool((nibble[:, :-1] == 15).any())  # and below the top: 16 or 0 shows there
            N, K = packed.shape[0], 2 * packed.shape[1]
            assert N % 8 == 0 and N not in (K // 2, K // (K if G == -1 else G))


@pytest.mark.parametrize(
    "name",
    ["swapped nibbles", "zero point ignored", "one scale per column", "range without 0",
     "truncation instead of rounding", "16 levels instead of 15 steps"],
)  # fmt: skip
def test_visible_check_names_every_wrong_quantizer(name):
    """The visible inputs hold what the text warns about (all-zero, all-positive, all-negative groups), every run."""
    for seed in (0, 1):
        with pytest.raises(CheckFailed, match=f"known mistake: {name}"):
            w4a16.check_quantizer(_wrong(name), seed=seed)


@pytest.mark.parametrize("G", [32, 128])
def test_prefill_dequantize_first_path(w4a16_solution, G):
    """The path the wrapper takes on a GPU at M >= DEQUANTIZE_FIRST_M: decode the integers q - z once, exactly, then
    decoded_gemm scales each group's partial sums (its tutorial GEMM here; the TMA one is tests/test_gemm.py's). The
    CPU never takes it, so it is run here directly, on a ragged shape, against the reference; and on the case where
    scales folded into 16-bit weights miss the tolerance (test_gemm.py)."""
    x, p, s, z = w4a16.random_problem(37, 72, 4 * G, G, torch.float16, "cpu", checks.generator(7))
    w = w4a16_solution.w4a16_integers(p, z, G, x.dtype)
    q = w4a16.unpack(p).int()
    assert torch.equal(w, (q - z.int().repeat_interleave(G, dim=1)).half())
    out = w4a16.decoded_gemm(x, w, torch.empty(37, 72, dtype=x.dtype), s=s, group_size=G)
    checks.compare(out, w4a16.reference(x, p, s, z, G), what="y", rtol=checks.tolerance_for(x.dtype))


def test_the_given_decoded_gemm_opens_no_naive_path(w4a16_solution):
    """decoded_gemm is given to the learner's cell (GIVEN) for the wrapper's M >= 512 path. A wrapper that takes that
    path for every M decodes a weight-sized copy first, and the check refuses it by name as the naive path."""

    def every_m(x, packed, scales, zeros, group_size, out=None):
        M, N, K, out = w4a16.prepare(x, packed, scales, zeros, group_size, out)
        w = w4a16_solution.w4a16_integers(packed, zeros, group_size, x.dtype)
        return w4a16.decoded_gemm(x, w, out, s=scales, group_size=group_size)

    with pytest.raises(CheckFailed, match="naive dequantize-then-matmul"):
        w4a16.check_prefill(every_m, seed=3)
