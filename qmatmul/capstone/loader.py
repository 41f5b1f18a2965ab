"""The learner's own quantizers and kernels, loaded from the finished chapter notebooks where they work.

`load_kernels()` reads the learner's finished chapter notebooks (../<chapter>/<chapter>.ipynb beside the capstone's),
checks each quantizer and kernel on a tiny problem, and falls back to the course's reference path (PyTorch:
dequantize, then matmul) for any that is missing or wrong, saying so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from qmatmul import checks
from qmatmul.capstone.formats import (
    FORMATS,
    GROUP,
    LABELS,
    quantize_activation_fp8,
    reference_matmul,
    reference_quantize,
    same_stored,
)
from qmatmul.capstone.registry import KernelSet, kernels, reference_kernels, use_kernels
from qmatmul.capstone.runtime import act_dtype, autograding, default_device
from qmatmul.checks import CheckFailed
from qmatmul.course import defined_code as notebook_code
from qmatmul.course import notebooks_folder

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


def _self_check(fmt: str, part: str, fn: Callable, device: str) -> None:
    """A quick test of one loaded function on a small problem; raises CheckFailed with the reason."""
    g = checks.generator(1234)
    w = torch.randn(72, 256, generator=g) * torch.exp(torch.empty(72, 1).uniform_(-2, 1, generator=g)) * 0.05
    if (
        part == "quantize"
    ):  # on the CPU, as the chapters grade it (on the H200 the solutions' quantizers differed
        # from the CPU reference in the last bit of some scales: the GPU's float32 arithmetic is not the CPU's)
        got = checks.call_learner(fn, w, what=f"{fmt} quantizer")
        if not same_stored(got, reference_quantize(fmt, w)):
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
    device = device or default_device()
    folder = notebooks_folder(folder)
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
    if autograding():
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
