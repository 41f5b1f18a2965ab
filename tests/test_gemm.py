"""qmatmul.kernels.gemm under the interpreter: the tutorial GEMM and the TMA-fed one equal the products they stand for, on
ragged shapes (TMA descriptors zero-fill past the edges), and the TMA GEMM refuses what its descriptors cannot take."""

import pytest
import torch

from qmatmul import checks, fp8, w4a16, w8a16
from qmatmul.kernels import expert, gemm

# Cases written for the interpreter (CPU tensors); on a GPU the compiled kernels need CUDA tensors (`make bench`
# times and rechecks them there).
INTERPRETER_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="the kernels under the interpreter")


def _operands(M, N, K, dtype, seed):
    g = checks.generator(seed)
    return torch.randn(M, K, generator=g).to(dtype), torch.randn(N, K, generator=g).to(dtype)


@INTERPRETER_ONLY
@pytest.mark.parametrize("tensor_scale", [False, True])
def test_both_gemms_compute_x_wt(tensor_scale):
    x, w = _operands(50, 70, 200, torch.float16, 1)
    g = torch.tensor([0.375]) if tensor_scale else None
    want = (x.double() @ w.double().T) * (0.375 if tensor_scale else 1.0)
    out = torch.full((50, 70), float("nan"), dtype=torch.float16)
    y = gemm.tma_matmul(x, w, out, g=g)
    checks.compare(y, want.float(), what="tma_matmul", rtol=checks.tolerance_for(x.dtype))
    swapped = gemm.tma_matmul(x, w, torch.full_like(out, float("nan")), g=g, **gemm.tma_config(x.dtype, 0, "cpu"),
                              SWAP=True)  # fmt: skip
    checks.compare(swapped, want.float(), what="tma_matmul swapped", rtol=checks.tolerance_for(x.dtype))
    out2 = torch.full((50, 70), float("nan"), dtype=torch.float16)
    cfg = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1)
    gemm.tutorial_matmul(x, w, out2, g=g, **cfg)
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


@INTERPRETER_ONLY
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


def test_tma_refuses_operands_of_two_dtypes():
    """int8 codes converted inside the TMA kernel returned wrong outputs on ragged shapes on the H200 (triton 3.6):
    the W8A16 wrapper converts them first (`gemm.as_16bit`)."""
    x, q, s = w8a16.random_problem(16, 64, 128, torch.float16, "cpu", checks.generator(6))
    with pytest.raises(ValueError, match="one dtype"):
        gemm.tma_matmul(x, q, torch.empty(16, 64, dtype=torch.float16), sw=s, scales=gemm.COLUMN_SCALES)


def test_the_swapped_gemm_refuses_block_scales():
    p = fp8.random_block_problem(16, 128, 128, "cpu", checks.generator(4))
    with pytest.raises(ValueError, match="no block scales"):
        expert.fp8_block_matmul_tma(*p, BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, num_warps=4, SWAP=True)


def _near_cancelling_w4a16():
    """A W4A16 problem (rows of the H200 bench's recheck, 2026-12-03) whose output [6, 10] cancels nearly: with the
    scales folded into bf16 weights it misses the course's tolerance, with exact integers and each group's scale on
    its partial sum it does not."""
    x, p, s, z = w4a16.random_problem(520, 1000, 768, 128, torch.bfloat16, "cpu", checks.generator(1))
    return x[96:112], p[592:624], s[592:624], z[592:624]


def test_folding_w4a16_scales_into_bf16_weights_misses_the_tolerance():
    x, p, s, z = _near_cancelling_w4a16()
    folded = x.float() @ w4a16.dequantize(p, s, z, 128).to(torch.bfloat16).float().T
    bad = checks.mismatch(
        folded.to(torch.bfloat16), w4a16.reference(x, p, s, z, 128), checks.tolerance_for(x.dtype)
    )
    assert bad.nonzero().tolist() == [[6, 10]]


@INTERPRETER_ONLY
@pytest.mark.parametrize("tma", [False, True, "swapped"])
def test_group_scales_on_integer_weights(tma):
    """decoded_gemm's group mode, both kernels, the TMA one plain and swapped as on Hopper (fp16 in the interpreter,
    whose bf16 dot is wrong): q - z exactly, the scales of each 128-wide group applied to that group's partial sums."""
    x, p, s, z = _near_cancelling_w4a16()
    x = x.to(torch.float16)
    q = (w4a16.unpack(p).int() - z.int().repeat_interleave(128, dim=1)).to(torch.float16)
    out = torch.full((16, 32), float("nan"), dtype=torch.float16)
    if tma:
        cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1, SWAP=tma == "swapped")
        y = gemm.tma_matmul(x, q, out, sw=s, scales=gemm.GROUP_SCALES, group=128, **cfg)
    else:
        y = gemm.decoded_gemm(x, q, out, s=s, group_size=128)
    checks.compare(
        y, w4a16.reference(x, p, s, z, 128), what="group-scaled GEMM", rtol=checks.tolerance_for(x.dtype)
    )


@pytest.mark.parametrize("tma", [False, True])
def test_a_group_step_that_does_not_divide_the_group_is_refused(tma):
    """Both GEMMs take one rule (gemm.group_step): each K step lies in one group, or its product would take one
    group's scales for two."""
    x, p, s, z = _near_cancelling_w4a16()
    q = torch.zeros(32, 768, dtype=torch.float16)
    out = torch.empty(16, 32, dtype=torch.float16)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=96, num_warps=4, num_stages=1)
    run = gemm.tma_matmul if tma else gemm.tutorial_matmul
    kwargs = dict(sw=s, scales=gemm.GROUP_SCALES, group=128) if tma else dict(s=s, group=128)
    with pytest.raises(ValueError, match="divide the group size 128"):
        run(x.half(), q, out, **kwargs, **cfg)


@INTERPRETER_ONLY
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_as_16bit_is_exact_on_every_code(dtype):
    """W8A16's decoding: every int8 value, in a shape no block divides, equals torch's own conversion; a strided view
    is read as its values, and anything but int8 codes to a 16-bit float is refused."""
    q = torch.arange(-128, 128, dtype=torch.int8).repeat(9)[:2051].reshape(1, 2051)
    assert torch.equal(gemm.as_16bit(q, dtype), q.to(dtype))
    wide = torch.arange(-128, 128, dtype=torch.int8).reshape(16, 16)
    assert torch.equal(gemm.as_16bit(wide[:, ::2], dtype), wide[:, ::2].to(dtype))
    with pytest.raises(ValueError, match="int8 codes to bfloat16 or float16"):
        gemm.as_16bit(q.to(torch.uint8), dtype)
    with pytest.raises(ValueError, match="int8 codes to bfloat16 or float16"):
        gemm.as_16bit(q, torch.float32)


@pytest.mark.parametrize("kernel", ["tutorial", "tma", "tma swapped"])
def test_column_scales_on_integer_weights(kernel):
    """decoded_gemm's column mode (W8A16 converted first), both kernels and the TMA one swapped (fp16 in the
    interpreter): equal to the chapter's reference on a ragged shape, where each row's scale on another row is caught;
    and refused beside group scales."""
    g, dev = checks.generator(3), "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(37, 200, generator=g).to(torch.float16).to(dev)
    q = torch.randint(-127, 128, (70, 200), generator=g, dtype=torch.int8).to(dev)
    s = (torch.rand(70, generator=g) * 0.01 + 1e-3).to(dev)
    out = torch.full((37, 70), float("nan"), dtype=torch.float16, device=dev)
    w = gemm.as_16bit(q, x.dtype)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1, SWAP=kernel == "tma swapped")

    def product(scales):
        if kernel == "tutorial":
            return gemm.decoded_gemm(x, w, out.clone(), sw=scales)
        return gemm.tma_matmul(x, w, out.clone(), sw=scales, scales=gemm.COLUMN_SCALES, **cfg)

    want = w8a16.reference(x, q, s)
    checks.compare(product(s), want, what="column-scaled GEMM", rtol=checks.tolerance_for(x.dtype))
    assert checks.mismatch(product(s.flip(0)), want, checks.tolerance_for(x.dtype)).any()
    with pytest.raises(ValueError, match="not both"):
        gemm.decoded_gemm(x, w, out, s=s[:, None], group_size=200, sw=s)


@pytest.mark.parametrize(
    "cap, cls", [((7, 5), "fma"), ((8, 0), "tensor_cores"), ((8, 9), "tensor_cores"), ((9, 0), "hopper"),
                 ((10, 0), "blackwell"), ((12, 0), "blackwell")],
)  # fmt: skip
def test_each_gpu_class_takes_its_own_launches(cap, cls, monkeypatch):
    """qmatmul/kernels/configs.py: `choose` dispatches on the class of GPU; the kernels tuned on the H200 alone take
    Hopper's launch on every GPU without asking for the compute capability (tools/sass.py reads them on a CPU)."""
    from qmatmul.kernels import configs

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    assert configs.gpu_class("cuda") == configs.gpu_class(torch.device("cuda")) == cls
    assert configs.gpu_class("cpu") == "interpreter"
    for name in ("gemm", "gemm.grouped"):
        assert configs.choose(name, "cuda") == configs.CLASSES[cls](name).kwargs()
        assert configs.choose(name, "cpu") == configs.FMA_TILED
    shape = dict(M=4, N=8192, K=28672, block=16, group_size=128)
    want = {name: configs.hopper(name, **shape).kwargs() for name in configs.HOPPER_EVERYWHERE}
    assert {name: configs.CLASSES[cls](name, **shape).kwargs() for name in want} == want
    # every class launches every chapter kernel
    chapter = dict(M=256, N=4096, K=4096, group_size=128, fp8_dot=True)
    assert all(
        configs.CLASSES[c](name, **chapter).BLOCK_N
        for c in (cls, "interpreter")
        for name in configs.CHAPTER_KERNELS
    )

    def no_gpu(*a):
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_gpu)
    assert {name: configs.choose(name, "cuda", **shape) for name in want} == want


def test_a_launch_keeps_the_order_it_was_written_in():
    from qmatmul.kernels import configs

    gemv = configs.Launch.of(BLOCK_N=16, GPI=4, num_warps=2, num_stages=2)
    assert list(gemv.kwargs().items()) == [("BLOCK_N", 16), ("GPI", 4), ("num_warps", 2), ("num_stages", 2)]
    assert gemv == configs.Launch(BLOCK_N=16, num_warps=2, num_stages=2, extra=(("GPI", 4),))
    assert list(configs.Launch(num_warps=4, BLOCK_M=16).kwargs()) == ["BLOCK_M", "num_warps"]
    changed = gemv.updated(num_warps=4, SPLIT_K=2)  # as dict(gemv.kwargs(), num_warps=4, SPLIT_K=2)
    assert list(changed.kwargs().items()) == [
        ("BLOCK_N", 16),
        ("GPI", 4),
        ("num_warps", 4),
        ("num_stages", 2),
        ("SPLIT_K", 2),
    ]
    assert configs.interpreter("gemm.tma.block").BLOCK_K == gemm.SCALE_BLOCK
    with pytest.raises(KeyError, match="mma.w4a16"):  # Gluon has no interpreter
        configs.interpreter("mma.w4a16")
    # a tensor-core GPU has its own tiles for each chapter kernel
    with pytest.raises(KeyError, match="chapter.decode"):
        configs.hopper("chapter.decode")


# What the chapters' config functions give on each class of GPU (called as the notebooks call them, through the
# chapter modules; cap None: no GPU, the interpreter), written out: an edit of the chapters' launches in
# qmatmul/kernels/configs.py that changes a tile, a warp, a stage or the keys' order fails here.
CHAPTER_LAUNCHES = [
    (None, "w8a16.decode_config", (16, 28672, 8192, "cpu"),
     dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1, SPLIT_K=2)),
    (None, "w4a16.prefill_config", (33, 4096, 4096, 32, "cpu"),
     dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1)),
    (None, "w4a16.decode_config", (16, 28672, 8192, 128, "cpu"),
     dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1)),
    (None, "fp8.block_config", (256, 4096, 4096, "cpu"),
     dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1, FP8_DOT=False)),
    (None, "mxfp4.dot_scaled_config", (256, 4096, 4096, "cpu"),
     dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)),
    ((7, 5), "w8a16.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1)),
    ((7, 5), "w4a16.prefill_config", (256, 4096, 4096, 128, "cuda"),
     dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1)),
    ((7, 5), "w4a16.decode_config", (16, 28672, 8192, 128, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=4)),
    ((7, 5), "fp8.block_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=1, FP8_DOT=False)),
    ((7, 5), "mxfp4.decode_config", (16, 28672, 8192, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1)),
    ((8, 0), "w8a16.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3)),
    ((8, 0), "w8a16.decode_config", (16, 28672, 8192, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, num_warps=4, num_stages=3, SPLIT_K=1)),
    ((8, 0), "fp8.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, FP8_DOT=False, num_warps=8, num_stages=3)),
    ((8, 9), "fp8.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=4, num_stages=4)),
    ((8, 9), "fp8.block_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=4, num_stages=4)),
    ((8, 0), "mxfp4.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)),
    ((9, 0), "w8a16.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)),
    ((9, 0), "w4a16.prefill_config", (256, 4096, 4096, 128, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)),
    ((9, 0), "fp8.decode_config", (1, 1024, 4096, "cuda"),  # exercise 4's tiles where K is split 8 ways
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, FP8_DOT=True, num_warps=4, num_stages=4)),
    ((9, 0), "fp8.fused_config", (1, 1024, 4096, "cuda"),  # exercise 6's: unsplit
     dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, FP8_DOT=True, num_warps=4, num_stages=4)),
    ((9, 0), "w8a16.decode_config", (1, 1024, 4096, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, SPLIT_K=8, num_warps=4, num_stages=4)),
    ((9, 0), "w8a16.decode_config", (16, 28672, 8192, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, SPLIT_K=1, num_warps=4, num_stages=3)),
    ((9, 0), "w4a16.decode_config", (16, 28672, 8192, 64, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=4)),
    ((9, 0), "fp8.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=8, num_stages=3)),
    ((9, 0), "fp8.decode_config", (16, 8192, 28672, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=1024, FP8_DOT=True, num_warps=8, num_stages=3)),
    ((9, 0), "fp8.block_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=8, num_stages=4)),
    ((9, 0), "mxfp4.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)),
    ((9, 0), "nvfp4.decode_config", (16, 28672, 8192, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=512, num_warps=4, num_stages=3)),
    ((9, 0), "mxfp4.dot_scaled_config", (16, 4096, 4096, "cuda"),
     dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3)),
    ((10, 0), "w8a16.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3)),
    ((10, 0), "fp8.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=4, num_stages=4)),
    ((10, 0), "mxfp4.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)),
    ((12, 0), "nvfp4.prefill_config", (256, 4096, 4096, "cuda"),
     dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)),
]  # fmt: skip


@pytest.mark.parametrize(
    "cap, function, args, launch",
    CHAPTER_LAUNCHES,
    ids=[f"{f}-sm{c[0]}{c[1]}" if c else f"{f}-cpu" for c, f, _, _ in CHAPTER_LAUNCHES],
)
def test_the_chapters_launches_are_the_measured_ones(cap, function, args, launch, monkeypatch):
    import importlib

    if cap is not None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    chapter, name = function.split(".")
    got = getattr(importlib.import_module(f"qmatmul.{chapter}"), name)(*args)
    assert list(got.items()) == list(launch.items())
