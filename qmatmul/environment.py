"""The first thing every chapter runs: find out what this machine can do and say it plainly.

`start()` must run before triton is imported anywhere: without a CUDA GPU it sets TRITON_INTERPRET=1 so
that kernels run in Triton's interpreter (numpy on the CPU).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field

MIN_TORCH = (2, 4)
MIN_TRITON = (3, 2)
# Seen on the course machines: triton 3.6's interpreter breaks on runtime loop bounds with numpy >= 2.4;
# triton 3.9's works. Versions in between are unknown, so the smoke kernel decides.
INTERPRETER_NUMPY_FIX = (3, 9)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
        if match.end() < len(piece):  # "0rc1": a pre-release tail ends the release number
            break
    return tuple(parts)


class SetupError(RuntimeError):
    """The environment cannot run the course; the message says what to do."""


@dataclass
class Env:
    device: str  # "cuda" or "cpu"
    interpret: bool  # kernels run in Triton's interpreter
    gpu_name: str | None
    capability: tuple[int, int] | None
    act_dtype: object  # torch.dtype used for activations in this chapter
    versions: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def has_bf16_dot(self) -> bool:
        return self.capability is not None and self.capability >= (8, 0)

    @property
    def has_fp8_dot(self) -> bool:
        return self.capability is not None and self.capability >= (8, 9)

    @property
    def has_native_fp4(self) -> bool:
        return self.capability is not None and self.capability >= (10, 0)

    def describe(self) -> str:
        v = self.versions
        lines = [
            f"qmatmul {v.get('qmatmul')} · python {v.get('python')} · torch {v.get('torch')} · "
            f"triton {v.get('triton')} · numpy {v.get('numpy')}"
        ]
        if self.has_gpu:
            cap = ".".join(map(str, self.capability))
            lines.append(
                f"device: {self.gpu_name} (sm_{cap.replace('.', '')}): kernels are compiled for the GPU"
            )
        else:
            lines.append(
                "device: CPU only -> Triton interpreter (TRITON_INTERPRET=1). Kernels run as numpy: "
                "correctness is checked, performance is not measured and its cells award no points here."
            )
        lines.append(f"activations: {str(self.act_dtype).replace('torch.', '')}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _pick_device(force_cpu: bool) -> tuple[str, bool]:
    import torch

    if not force_cpu and torch.cuda.is_available():
        return "cuda", False
    return "cpu", True


def start(chapter: str | None = None, *, force_cpu: bool | None = None, quiet: bool = False) -> Env:
    """Check versions, pick GPU or interpreter, run a known-answer kernel, and describe the result.

    force_cpu: use the interpreter even where a GPU exists (also QMATMUL_FORCE_CPU=1).
    """
    if force_cpu is None:
        force_cpu = os.environ.get("QMATMUL_FORCE_CPU", "") not in ("", "0")
    try:
        import numpy
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the learner's machine
        raise SetupError(
            f"{exc.name} is missing: run `pip install torch numpy` and restart the kernel."
        ) from exc

    from qmatmul.grader.kernels import COMPILE_ENV

    device, interpret = _pick_device(force_cpu)
    if os.environ.get(COMPILE_ENV) == "1":  # the grader's compile worker: real JIT functions, nothing runs
        device, interpret = "cpu", False
    triton_loaded = "triton" in sys.modules
    if interpret:
        if triton_loaded and os.environ.get("TRITON_INTERPRET") != "1":
            raise SetupError(
                "triton was imported before the setup cell chose the interpreter. "
                "Restart the kernel and run the setup cell first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        raise SetupError(
            "TRITON_INTERPRET=1 is set but this machine has a CUDA GPU: unset it "
            "(`%env TRITON_INTERPRET=0`), restart the kernel and run the setup cell again."
        )
    try:
        import triton
    except ImportError as exc:  # pragma: no cover
        raise SetupError("triton is missing: run `pip install triton` and restart the kernel.") from exc

    from qmatmul import __version__

    versions = {
        "qmatmul": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": numpy.__version__,
    }
    if _version_tuple(torch.__version__) < MIN_TORCH:
        raise SetupError(f"torch {torch.__version__} is too old: run `pip install -U 'torch>=2.4'`.")
    if _version_tuple(triton.__version__) < MIN_TRITON:
        raise SetupError(f"triton {triton.__version__} is too old: run `pip install -U 'triton>=3.2'`.")

    notes = []
    gpu_name = capability = None
    if device == "cuda":
        gpu_name = torch.cuda.get_device_name()
        capability = tuple(torch.cuda.get_device_capability())
        act_dtype = torch.bfloat16 if capability >= (8, 0) else torch.float16
        if capability < (8, 0):
            notes.append("this GPU has no bf16 tensor cores: activations are float16")
            notes.append(
                "Triton's tl.dot runs on FMAs here, not tensor cores (Triton uses them from sm_80 on): "
                "the kernels take smaller tiles (docs/gpu-fit.md)"
            )
    else:
        act_dtype = torch.float16
        notes.append("activations are float16: the interpreter's bf16 tl.dot gives wrong results")
    env = Env(device, interpret, gpu_name, capability, act_dtype, versions, notes)

    if os.environ.get("QMATMUL_WORKER_DIR"):
        return env  # the grader's worker: the smoke kernel ran in the notebook, and this start must be quick
    seconds = smoke_test(env)
    show_failures_briefly()
    if not quiet:
        print(env.describe())
        chapter_text = f" for {chapter}" if chapter else ""
        print(f"smoke kernel{chapter_text}: ok ({seconds:.2f} s, includes the first compile)")
    return env


def show_failures_briefly() -> None:
    """In a notebook, a failed check shows as its message alone, not as a traceback through the course's check code
    (10-15 lines of it): the message is the verdict and names the mistake. The cell still ends in an error output
    (ename CheckFailed) and an error status, as any failed cell does: Run All stops there and nbgrader sees it. The
    learner's own exceptions keep their tracebacks. Called by start(), the setup cell's."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "_showtraceback"):
        return

    def brief(shell, etype, value, tb, tb_offset=None):
        shell._showtraceback(
            etype, value, [f"{etype.__name__}: {value}"]
        )  # published as the cell's error output

    from qmatmul.checks import CheckFailed

    shell.set_custom_exc((CheckFailed,), brief)


def smoke_test(env: Env) -> float:
    """A tiny known-answer kernel with a runtime loop bound and a tl.dot: a broken install fails here."""
    import numpy
    import torch
    import triton

    from qmatmul.kernels import smoke

    x = torch.arange(16 * 48, dtype=torch.float32, device=env.device).reshape(16, 48) % 7 - 3
    w = torch.arange(48 * 16, dtype=torch.float32, device=env.device).reshape(48, 16) % 5 - 2
    x, w = x.to(torch.float16), w.to(torch.float16)
    y = torch.full((16, 16), float("nan"), device=env.device)
    t0 = time.perf_counter()
    try:
        smoke.dot_kernel[(1,)](x, w, y, 48, BLOCK=16)
        if env.has_gpu:
            torch.cuda.synchronize()
    except Exception as exc:
        hint = ""
        if (
            env.interpret
            and _version_tuple(triton.__version__) < INTERPRETER_NUMPY_FIX
            and _version_tuple(numpy.__version__) >= (2, 4)
        ):
            hint = (
                f" Known cause: triton {triton.__version__}'s interpreter fails with numpy "
                f"{numpy.__version__}. Fix: `pip install 'triton>=3.9'` (or `pip install 'numpy<2.4'`), "
                "then restart the kernel."
            )
        raise SetupError(f"the smoke kernel failed: {type(exc).__name__}: {exc}.{hint}") from exc
    seconds = time.perf_counter() - t0
    expected = x.float() @ w.float()
    if not torch.equal(y, expected):
        raise SetupError(
            "the smoke kernel ran but gave a wrong answer: this Triton install cannot be trusted. "
            f"(max error {(y - expected).abs().max().item()}; torch {torch.__version__}, "
            f"triton {triton.__version__})"
        )
    return seconds


def autograding() -> bool:
    """Under the autograder the notebook's ungraded cells that take long (the capstone's measurements, a compile for
    Hopper) skip themselves: they award nothing, and each would cost the class seconds per student."""
    from qmatmul.checks import AUTOGRADE_ENV

    if os.environ.get(AUTOGRADE_ENV) == "1":
        print("(not run under the autograder: this cell awards no points)")
        return True
    return False
