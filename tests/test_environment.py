"""The setup cell's machinery, and the platform facts the course relies on (seen here, not promised)."""

import subprocess
import sys

import pytest
import torch
from conftest import HAS_GPU


def test_start_picks_interpreter_and_fp16_without_gpu(env):
    if HAS_GPU:
        pytest.skip("this machine has a GPU")
    assert env.interpret and env.device == "cpu"
    assert env.act_dtype == torch.float16
    text = env.describe()
    assert "Triton interpreter" in text and "no points" in text


def test_importing_torch_or_qmatmul_does_not_import_triton():
    code = "import sys, torch, qmatmul, qmatmul.environment; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_start_refuses_when_triton_was_imported_first():
    code = (
        "import os; os.environ.pop('TRITON_INTERPRET', None); os.environ['CUDA_VISIBLE_DEVICES'] = ''\n"
        "import triton\nfrom qmatmul import environment\n"
        "try:\n    environment.start(quiet=True)\nexcept environment.SetupError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "refused: triton was imported before" in out


def test_smoke_kernel_catches_a_wrong_answer(env, monkeypatch):
    from qmatmul import environment
    from qmatmul.kernels import smoke

    class Broken:
        def __getitem__(self, grid):
            return lambda x, w, y, K, BLOCK: y.fill_(1.0)

    monkeypatch.setattr(smoke, "dot_kernel", Broken())
    with pytest.raises(environment.SetupError, match="wrong answer"):
        environment.smoke_test(env)


def test_version_parsing():
    from qmatmul.environment import _version_tuple

    assert _version_tuple("2.13.0+cpu") == (2, 13, 0)
    assert _version_tuple("3.6.0rc1") == (3, 6, 0)


@pytest.mark.skipif(HAS_GPU, reason="interpreter facts")
def test_fact_interpreter_fp16_dot_is_right_and_bf16_dot_is_not(env):
    """Why the chapters use fp16 on the CPU. If bf16 becomes right, the workaround can go."""
    import triton
    import triton.language as tl

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
        r = tl.arange(0, B)
        a = tl.load(a_ptr + r[:, None] * B + r[None, :])
        b = tl.load(b_ptr + r[:, None] * B + r[None, :])
        tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 32, generator=g), torch.randn(32, 32, generator=g)
    errors = {}
    for dtype in (torch.float16, torch.bfloat16):
        c = torch.empty(32, 32)
        dot[(1,)](a.to(dtype), b.to(dtype), c, B=32)
        ref = a.to(dtype).float() @ b.to(dtype).float()
        errors[dtype] = float((c - ref).norm() / ref.norm())
    assert errors[torch.float16] < 1e-3
    if errors[torch.bfloat16] < 1e-2:
        pytest.fail(f"the interpreter's bf16 tl.dot is right now ({errors}): bf16 could be used on the CPU")


# ---------------------------------------------------------------------------------------------------------
# The paths a learner's GPU takes: the detection logic with the capability mocked (T4, Hopper, laptop RTX 5070)

GPU_PATHS = {
    # capability: (bf16 dot, fp8 dot, native fp4, tl.dot_scaled runs, words in nvfp4.blackwell_status)
    (7, 5): (False, False, False, False, "no fp4 tensor cores"),  # T4 (Colab)
    (9, 0): (True, True, False, True, "no fp4 tensor cores"),  # H100, H200
    (12, 0): (True, True, True, True, "has fp4 tensor cores"),  # consumer Blackwell, e.g. a laptop RTX 5070
}


@pytest.mark.parametrize("cap", GPU_PATHS)
def test_each_gpu_takes_the_path_the_chapters_state(cap, monkeypatch):
    from qmatmul import environment, fp8, mxfp4, nvfp4
    from qmatmul.checks import common
    from qmatmul.kernels import configs

    bf16, fp8_dot, fp4, dot_scaled, words = GPU_PATHS[cap]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    env = environment.Env("cuda", False, "mocked", cap, torch.bfloat16 if bf16 else torch.float16)
    assert (env.has_bf16_dot, env.has_fp8_dot, env.has_native_fp4) == (bf16, fp8_dot, fp4)
    assert fp8.has_fp8_dot("cuda") == fp8_dot
    assert fp8.checked_paths("cuda") == ([True, False] if fp8_dot else [False])
    assert ("no fp8 tensor cores" in fp8.skipped_path_note("cuda")) == (not fp8_dot)
    assert common.act_dtypes("cuda") == ([torch.float16, torch.bfloat16] if bf16 else [torch.float16])
    assert (configs.gpu_class("cuda") == "fma") == (
        cap < (8, 0)
    )  # Triton's tl.dot has no tensor cores before sm_80
    ok, why = mxfp4.dot_scaled_status()
    assert ok == dot_scaled
    assert ("upcasts e2m1 to bf16" in why) == dot_scaled and ("needs sm_80" in why) == (cap < (8, 0))
    assert words in nvfp4.blackwell_status()


def test_fp8_performance_cells_say_why_on_a_t4(monkeypatch):
    """A T4 has no fp8 tensor cores: both FP8 performance cells award nothing and say so, before any timing."""
    from qmatmul import checks, fp8

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(checks, "STRICT", True)  # as under the trusted grader: NotMeasured decides the points
    for check in (fp8.check_prefill_speed, fp8.check_decode_bandwidth):
        with pytest.raises(checks.NotMeasured, match=r"sm_75\) has no fp8 tensor cores"):
            check(None)
