"""The learner's own quantizers and kernels, loaded from the finished chapter notebooks where they work.

`load_kernels()` reads the learner's finished chapter notebooks (../<chapter>/<chapter>.ipynb beside the capstone's),
checks each quantizer and kernel on a tiny problem, and falls back to the course's reference path (PyTorch:
dequantize, then matmul) for any that is missing or wrong, saying so. The layouts chapter's Gluon `w4a16_mma_decode`
replaces W4A16's decode where it passes the same check (on a CUDA GPU of sm_80+ with Gluon; the weight repacked once,
at load: RepackedDecode), chapter 2's decode taking what that kernel cannot; where its bonus's `repack_fp4` is bit for
bit the course's, MXFP4's and NVFP4's decodes are the course's Gluon fp4 kernel on its words (RepackedFp4Decode: the
learner's layout, the course's kernel), their chapters' decodes taking what it cannot. FP8's `fp8_decode_fused` (the
activation quantized inside the kernel, one launch) is the decode only where the notebook's `fp8_decode` is missing or
wrong: on the H200 it ran slower than quantizing x once and calling `fp8_decode`.
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
from torch.utils.weak import WeakIdKeyDictionary

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
from qmatmul.capstone.registry import DECODE_MAX_M, KernelSet, kernels, reference_kernels, use_kernels
from qmatmul.capstone.runtime import act_dtype, autograding, default_device
from qmatmul.checks import CheckFailed
from qmatmul.course import defined_code as notebook_code
from qmatmul.course import notebooks_folder
from qmatmul.kernels import mma_decode, mma_repack

# What each chapter's notebook defines: (function name, exercise number).
CHAPTER_FUNCTIONS = {
    "w8a16": {"quantize": ("quantize_int8_per_channel", 1), "prefill": ("w8a16_matmul", 2),
              "decode": ("w8a16_decode", 3)},
    "w4a16": {"quantize": ("quantize_int4", 1), "prefill": ("w4a16_matmul", 2), "decode": ("w4a16_decode", 3)},
    "fp8": {"quantize": ("quantize_fp8", 1), "prefill": ("fp8_matmul", 3), "decode": ("fp8_decode", 4)},
    "mxfp4": {"quantize": ("quantize_mxfp4", 1), "prefill": ("mxfp4_matmul", 2), "decode": ("mxfp4_decode", 3)},
    "nvfp4": {"quantize": ("quantize_nvfp4", 1), "prefill": ("nvfp4_matmul", 2), "decode": ("nvfp4_decode", 3)},
}  # fmt: skip
# FP8's faster decode, (function name, exercise): x quantized inside the kernel, one launch. The decode where the
# notebook defines it and it passes the same self-check; nothing is said where the notebook has none.
FP8_FUSED = ("fp8_decode_fused", 6)
# FP8's activation quantizer in one launch, (function name, exercise): where the notebook defines it and it passes a
# quick check, every FP8 kernel call quantizes x with it (quantize_fp8's PyTorch ops otherwise).
FP8_ROWS = ("quantize_fp8_rows", 7)
# The layouts chapter (../layouts/layouts.ipynb): W4A16's decode in Gluon, on the weight repacked once.
LAYOUTS_FUNCTIONS = {"repack": ("repack", "1b"), "decode": ("w4a16_mma_decode", 3)}
LAYOUTS_SOURCE = "yours (w4a16_mma_decode, repacked at load)"
# Its bonus: MXFP4's and NVFP4's e2m1 codes in the same tiles (repack_fp4), for the course's Gluon fp4 decode
# (mma_decode.decode_fp4: exercise 3's kernel with each pair decoded as the bonus's fp4_pair), a scale block of 32
# or 16.
LAYOUTS_FP4 = ("repack_fp4", "the bonus")
LAYOUTS_FP4_SOURCE = "course's Gluon on your repack_fp4"
FP4_BLOCKS = {"mxfp4": 32, "nvfp4": 16}
_PART_WORDS = {"quantize": "quantizer", "prefill": "prefill kernel", "decode": "decode kernel"}


_MODULES: list = []  # the process's one folder of imported notebook code, removed when the process exits


def _import_code(code: str, name: str):
    """Import code as a module from a file (Triton reads kernel source from files) in the process's folder of them."""
    if not _MODULES:
        _MODULES.append(tempfile.TemporaryDirectory(prefix="qmatmul-capstone-"))
    path = Path(_MODULES[0].name) / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with contextlib.redirect_stdout(io.StringIO()):
        spec.loader.exec_module(module)
    return module


def _adapt(
    fmt: str, part: str, fn: Callable, quantize_act: Callable, *, quantizes_x: bool = False
) -> Callable:
    """A chapter's own signature turned into the KernelSet's (quantizes_x: an FP8 kernel that quantizes the
    activation itself, fp8_decode_fused, takes x as it comes)."""
    if part == "quantize":
        if fmt == "w4a16":
            return lambda w: tuple(fn(w, GROUP))
        if fmt == "fp8":
            return lambda w: tuple(fn(w, (1, w.shape[1])))
        return lambda w: tuple(fn(w))
    if fmt == "w4a16":
        return lambda x, p, s, z, out=None: fn(x, p, s, z, GROUP, out=out)
    if fmt == "fp8" and not quantizes_x:
        return lambda x, wq, sw, out=None: fn(*quantize_act(x), wq, sw, out=out)
    return lambda x, *stored, out=None: fn(x, *stored, out=out)


def _self_check(fmt: str, part: str, fn: Callable, device: str, M: int | None = None) -> None:
    """A quick test of one loaded function on a small problem (M rows of x: 3 for a decode, 20 for a prefill, unless
    given); raises CheckFailed with the reason."""
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
    M = M or (3 if part == "decode" else 20)
    x = torch.randn(M, 256, generator=g).to(act_dtype(device)).to(device)
    out = torch.full((M, 72), float("nan"), dtype=x.dtype, device=device)
    y = checks.call_learner(fn, x, *stored, out=out, what=f"{fmt} {part}")
    checks.compare(y, reference_matmul(fmt, x, stored), what=f"{fmt} {part}", rtol=4 * checks.tolerance_for(x.dtype),
                   poisoned=True)  # fmt: skip


class RepackedDecode:
    """W4A16's decode through the layouts chapter's Gluon kernel, called as a KernelSet's decode(x, packed, scales,
    zeros, out=None): `decode(x, words, scales, zeros, GROUP, N, out=out)` on `repack(packed)`'s words.

    The words are made once per stored weight, on the first call with it (the model's load or warm-up, before any
    CUDA graph is captured; repack is host code, so on a CPU copy, the words moved to the weight's device) and kept
    in a dictionary keyed by the tensor's identity with a weak reference (WeakIdKeyDictionary): another weight gets
    words of its own, a freed one frees its words, and one changed in place (load_state_dict copies into buffers)
    is repacked again. An x the kernel does not take (`takes`), or a weight not yet repacked while a CUDA graph is
    being captured, goes to `fallback` (chapter 2's decode)."""

    def __init__(self, repack: Callable, decode: Callable, fallback: Callable, device_type: str = "cuda"):
        self.repack, self.decode, self.fallback, self.device_type = repack, decode, fallback, device_type
        self.words = WeakIdKeyDictionary()  # packed -> (its version counter when repacked, words)

    def takes(self, x, packed, scales, zeros, *, out=None) -> bool:
        """Whether the kernel takes these operands: the rules of the layouts chapter's `prepare`
        (qmatmul/scaffold/layouts.py; the messages are its own) as one test: bf16 x [M, K] of 1 to 16 rows on this
        device type, groups of GROUP (64 times a power of two) dividing K, which repack needs a multiple of 64;
        float32 scales and uint8 zeros; every tensor on x's device; out with unit stride along N."""
        return (x.dim() == 2 and x.dtype == torch.bfloat16 and 0 < x.shape[0] <= DECODE_MAX_M
                and x.device.type == self.device_type and mma_decode.supports(GROUP, x.shape[1])
                and 2 * packed.shape[-1] == x.shape[1] and scales.dtype == torch.float32 and zeros.dtype == torch.uint8
                and packed.device == scales.device == zeros.device == x.device
                and (out is None or (out.device == x.device and out.stride(-1) == 1)))  # fmt: skip

    def words_of(self, packed: torch.Tensor) -> torch.Tensor | None:
        """The weight's words, repacked now if they are not made yet (None while a CUDA graph is being captured)."""
        version = _version(packed)
        held = self.words.get(packed)
        if held is not None and held[0] == version:
            return held[1]
        if packed.is_cuda and torch.cuda.is_current_stream_capturing():
            return None
        words = self.repack(packed.detach().cpu()).to(packed.device)
        self.words[packed] = (version, words)
        return words

    def run(self, x, words, packed, scales, zeros, out=None):
        """The kernel on the weight's words."""
        return self.decode(x, words, scales, zeros, GROUP, packed.shape[0], out=out)

    def mma(self, x, packed, *stored, out=None):
        """The kernel alone, whatever x is (the self-check's call)."""
        return self.run(x, self.words_of(packed), packed, *stored, out=out)

    def __call__(self, x, packed, *stored, out=None):
        words = self.words_of(packed) if self.takes(x, packed, *stored, out=out) else None
        if words is None:
            return self.fallback(x, packed, *stored, out=out)
        return self.run(x, words, packed, *stored, out=out)


class RepackedFp4Decode(RepackedDecode):
    """MXFP4's (block 32) or NVFP4's (block 16) decode through the course's Gluon fp4 kernel
    (`mma_decode.decode_fp4`: exercise 3's tiles, each pair decoded as the bonus's fp4_pair) on the words of the
    learner's `repack_fp4` (the layouts chapter's bonus), called as the chapter's decode(x, packed, scales[, g],
    out=None); the cache and the fallback as RepackedDecode's."""

    def __init__(self, block: int, repack_fp4: Callable, fallback: Callable, device_type: str = "cuda",
                 decode: Callable | None = None):  # fmt: skip
        super().__init__(lambda packed: repack_fp4(packed, block), decode or mma_decode.decode_fp4, fallback,
                         device_type)  # fmt: skip
        self.block = block

    def takes(self, x, packed, scales, *g, out=None) -> bool:
        """The rules of `mma_decode.decode_fp4` as one test: bf16 x [M, K] of 1 to 16 rows on this device type, K a
        multiple of 64, uint8 scale codes [N, K/block], NVFP4's float32 global scale; every tensor on x's device; out
        with unit stride along N."""
        K = x.shape[-1]
        nv = self.block == 16
        return (x.dim() == 2 and x.dtype == torch.bfloat16 and 0 < x.shape[0] <= DECODE_MAX_M
                and x.device.type == self.device_type and K % 64 == 0 and 2 * packed.shape[-1] == K
                and scales.dtype == torch.uint8 and tuple(scales.shape) == (packed.shape[0], K // self.block)
                and len(g) == nv and all(t.dtype == torch.float32 and t.numel() == 1 for t in g)
                and all(t.device == x.device for t in (packed, scales, *g))
                and (out is None or (out.device == x.device and out.stride(-1) == 1)))  # fmt: skip

    def run(self, x, words, packed, scales, *g, out=None):
        return self.decode(x, words, scales, g[0] if g else None, packed.shape[0], out=out)


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter (and cannot be changed in place)
        return None


def _describe_folder(folder: Path) -> str:
    try:
        return os.path.relpath(folder, Path.cwd())
    except ValueError:
        return str(folder)


def _load_notebook(nb: Path, shown: str, name: str):
    """(module, None), or (None, why) for a missing notebook or one whose code does not run."""
    if not nb.is_file():
        return None, f"no notebook at {shown}"
    name = f"qmatmul_capstone_{name}_{os.getpid()}_{time.monotonic_ns()}"
    try:
        return _import_code(notebook_code(nb), name), None
    except Exception as exc:  # noqa: BLE001 - the learner's notebook, whatever it holds
        first = str(exc).splitlines()[0][:120] if str(exc) else ""
        return None, f"{shown} did not run ({type(exc).__name__}: {first})"


def _reason(exc: CheckFailed, exercise) -> str:
    text, what = str(exc), exercise if str(exercise).startswith("the ") else f"exercise {exercise}"
    if "not implemented yet" in text:
        return f"{what} unfinished"
    return f"{what} fails a quick self-check: {text.splitlines()[0][:140]}"


def _fp8_fused(fn: Callable, quantize_act: Callable, device: str) -> tuple[Callable | None, str]:
    """(FP8's decode as the learner's fp8_decode_fused, the line that says so), or (None, why not) where it fails the
    self-check. Asked only where the notebook's fp8_decode is missing or wrong."""
    name, exercise = FP8_FUSED
    adapted = _adapt("fp8", "decode", fn, quantize_act, quantizes_x=True)
    try:
        _self_check("fp8", "decode", adapted, device)
    except CheckFailed as exc:
        return None, f"`{name}` not used either ({_reason(exc, exercise)}); the decode is the reference path"
    return (
        adapted,
        f"the decode kernel is your `{name}` (x quantized inside the kernel), as your `fp8_decode` fails",
    )


def _fp8_rows(fn: Callable, device: str) -> tuple[Callable | None, str]:
    """(the learner's quantize_fp8_rows as FP8's activation quantizer, the line that says so), or (None, why not):
    its codes and scales bit for bit those of the reference quantizer on 3 and 20 rows on this device."""
    name, exercise = FP8_ROWS
    g = checks.generator(4321)
    try:
        for M in (3, 20):
            x = torch.randn(M, 256, generator=g) * torch.exp(torch.empty(M, 1).uniform_(-3, 3, generator=g))
            x = x.to(act_dtype(device))
            got = checks.call_learner(fn, x.to(device), what=name)
            want = quantize_activation_fp8(x)
            if not (isinstance(got, tuple | list) and len(got) == 2 and same_stored(tuple(got), want)):
                raise CheckFailed("codes or scales not bit-exact with the reference quantizer")
    except CheckFailed as exc:
        return None, f"`{name}` not used ({_reason(exc, exercise)}); x is quantized by PyTorch operations"
    return lambda x: tuple(fn(x)), f"x is quantized by your `{name}` (one launch a call)"


# Why a working fp8_decode_fused is not the decode where fp8_decode works: measured (docs/decode-step-h200.md).
FUSED_NOT_TAKEN = (
    "`fp8_decode_fused` is not used: quantizing x once, then your `fp8_decode`, ran faster on the H200 (every "
    "program of the one-launch kernel quantizes all of x again; docs/decode-step-h200.md)"
)


def _layouts_why_not(device: str) -> str:
    """What keeps the layouts chapter's decode from running here, or "" (the chapter's own why_not on a GPU)."""
    if torch.device(device).type != "cuda":
        return "needs a CUDA GPU (sm_80+) with Gluon"
    from qmatmul.scaffold import layouts

    return layouts.why_not()


def _layouts_notebook(folder: Path, where: str, device: str) -> tuple:
    """(the layouts notebook's module, its path as shown), or (None, why not) where this machine cannot run its Gluon
    or the notebook is missing or does not run."""
    why = _layouts_why_not(device)
    if why:
        return None, why
    shown = f"{where}/layouts/layouts.ipynb"
    module, why = _load_notebook(folder / "layouts" / "layouts.ipynb", shown, "layouts")
    return (module, shown) if module is not None else (None, why)


# The layouts decodes' formats: how their lines name each and its own decode (the fallback where it has one).
LAYOUTS_FALLBACK = {"w4a16": ("W4A16", "chapter 2's kernel"), "mxfp4": ("MXFP4", "its chapter's kernel"),
                    "nvfp4": ("NVFP4", "its chapter's kernel")}  # fmt: skip


def _fallback(ks: KernelSet) -> str:
    """What decodes the x a layouts kernel does not take: the chapter's kernel, or the reference path."""
    mine = ks.source.get("decode", "").startswith("yours")
    return LAYOUTS_FALLBACK[ks.fmt][1] if mine else "the reference path"


def _kept(ks: KernelSet, why: str, lines: list) -> KernelSet:
    """ks unchanged, and the line that says why the layouts kernel is not its decode."""
    lines.append(f"layouts: {why}; {LAYOUTS_FALLBACK[ks.fmt][0]} decodes with {_fallback(ks)}")
    return ks


def _repack_checked(fn: Callable, course: Callable, fmt: str, what: str, *args) -> None:
    """The learner's repack bit for bit the course's on a small weight (host code: on the CPU); raises CheckFailed."""
    packed = reference_quantize(fmt, torch.randn(40, 256, generator=checks.generator(7)))[0]
    got, want = checks.call_learner(fn, packed, *args, what=what), course(packed, *args)
    if not (isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
            and torch.equal(got, want)):  # fmt: skip
        raise CheckFailed(f"your {what}'s words differ from the course's (int32 {list(want.shape)})")


def _with_layouts_decode(ks: KernelSet, module, shown: str, device: str, lines: list) -> KernelSet:
    """W4A16's kernel set with the layouts chapter's decode (RepackedDecode, falling back to ks.decode), where the
    learner's repack and w4a16_mma_decode (in `module`, the notebook shown as `shown`) pass a quick check; else ks,
    and a line says why."""
    fns = {}
    for key, (name, exercise) in LAYOUTS_FUNCTIONS.items():
        fns[key] = getattr(module, name, None)
        if fns[key] is None:
            return _kept(ks, f"no `{name}` in {shown} (exercise {exercise})", lines)
    decode = RepackedDecode(fns["repack"], fns["decode"], ks.decode)
    try:  # the repack bit-exact on the CPU (host code), then the kernel on this GPU at 3 and 16 rows
        exercise = LAYOUTS_FUNCTIONS["repack"][1]
        _repack_checked(fns["repack"], mma_repack.repack, "w4a16", "repack")
        for M in (3, DECODE_MAX_M):
            exercise = LAYOUTS_FUNCTIONS["decode"][1]
            _self_check("w4a16", "decode", decode.mma, device, M=M)
    except CheckFailed as exc:
        return _kept(ks, f"`w4a16_mma_decode` not used ({_reason(exc, exercise)})", lines)
    lines.append(f"layouts: your w4a16_mma_decode from {shown} is W4A16's decode (bf16 x of at most {DECODE_MAX_M} "
                 f"rows; the weight repacked at load by your repack), other x go to {_fallback(ks)}")  # fmt: skip
    return KernelSet(ks.fmt, ks.quantize, ks.prefill, decode, {**ks.source, "decode": LAYOUTS_SOURCE})


def _with_layouts_fp4(ks: KernelSet, module, shown: str, device: str, lines: list) -> KernelSet:
    """MXFP4's or NVFP4's kernel set with the course's Gluon fp4 decode on the learner's repack_fp4 words
    (RepackedFp4Decode, falling back to ks.decode), where the bonus's repack_fp4 (in `module`) is bit for bit the
    course's (the kernel then checked on this GPU); else ks, and a line says why."""
    name, exercise = LAYOUTS_FP4
    fn = getattr(module, name, None)
    if fn is None:
        return _kept(ks, f"no `{name}` in {shown} ({exercise})", lines)
    decode = RepackedFp4Decode(FP4_BLOCKS[ks.fmt], fn, ks.decode)
    try:
        _repack_checked(fn, mma_repack.repack_fp4, ks.fmt, name, decode.block)
        for M in (3, DECODE_MAX_M):
            _self_check(ks.fmt, "decode", decode.mma, device, M=M)
    except CheckFailed as exc:
        return _kept(ks, f"`{name}` not used ({_reason(exc, exercise)})", lines)
    lines.append(f"layouts: the course's Gluon fp4 decode on your {name} words from {shown} is {LABELS[ks.fmt]}'s "
                 f"decode (bf16 x of at most {DECODE_MAX_M} rows; repacked at load), other x go to "
                 f"{_fallback(ks)}")  # fmt: skip
    return KernelSet(ks.fmt, ks.quantize, ks.prefill, decode, {**ks.source, "decode": LAYOUTS_FP4_SOURCE})


def load_kernels(folder=None, formats=FORMATS, *, device: str | None = None, verbose: bool = True) -> dict:
    """The learner's own quantizers and kernels from the finished chapter notebooks, where they work.

    folder: where the chapter folders are (default: $QMATMUL_KERNEL_NOTEBOOKS, else the folder above the
    current one, i.e. notebooks/ when this notebook runs in notebooks/capstone/). Each function is checked on
    a small problem; a missing, unfinished or wrong one is replaced by the course's reference path, and a line
    says which and why. FP8's decode is `fp8_decode_fused` only where `fp8_decode` fails and it passes; W4A16's is the
    layouts chapter's (folder/layouts/layouts.ipynb) where this machine runs it and it passes (RepackedDecode), and
    MXFP4's and NVFP4's the course's Gluon fp4 kernel on the words of that chapter's bonus `repack_fp4` where it is bit
    for bit the course's (RepackedFp4Decode).
    Returns {format: KernelSet} (register it with use_kernels).
    """
    device = device or default_device()
    folder = notebooks_folder(folder)
    where = _describe_folder(folder)
    sets, lines = {}, []
    for fmt in formats:
        ref = reference_kernels(fmt)
        parts = {"quantize": ref.quantize, "prefill": ref.prefill, "decode": ref.decode}
        source = {p: "reference" for p in parts}
        shown = f"{where}/{fmt}/{fmt}.ipynb"
        module, why = _load_notebook(folder / fmt / f"{fmt}.ipynb", shown, fmt)
        label = LABELS[fmt].split()[0]
        if module is None:
            lines.append(f"{label}: {why}; using the reference path (PyTorch: dequantize, then matmul)")
            sets[fmt] = ref
            continue
        quantize_act = quantize_activation_fp8
        problems, notes = {}, []
        rows = getattr(module, FP8_ROWS[0], None) if fmt == "fp8" else None
        rows_act = None
        if rows is not None:
            rows_act, note = _fp8_rows(rows, device)
            notes.append(note)
            quantize_act = rows_act or quantize_act
        for part, (name, exercise) in CHAPTER_FUNCTIONS[fmt].items():
            fn = getattr(module, name, None)
            if fn is None:
                problems[part] = f"no {_PART_WORDS[part]} `{name}` in {shown} (exercise {exercise})"
                continue
            adapted = _adapt(fmt, part, fn, quantize_act)
            try:
                _self_check(fmt, part, adapted, device)
            except CheckFailed as exc:
                problems[part] = f"no {_PART_WORDS[part]} found in {shown} ({_reason(exc, exercise)})"
                continue
            parts[part] = adapted
            source[part] = f"yours ({name})"
            if fmt == "fp8" and part == "quantize":
                quantize_act = rows_act or (lambda x, fn=fn: fn(x, (1, x.shape[1])))  # noqa: E731
        fused = getattr(module, FP8_FUSED[0], None) if fmt == "fp8" else None
        if fused is not None and "decode" in problems:  # a kernel of the learner's before the reference path
            adapted, note = _fp8_fused(fused, quantize_act, device)
            if adapted is not None:
                parts["decode"], source["decode"] = adapted, f"yours ({FP8_FUSED[0]})"
                problems.pop("decode", None)
            notes.append(note)
        elif fused is not None:
            notes.append(FUSED_NOT_TAKEN)
        sets[fmt] = KernelSet(fmt, parts["quantize"], parts["prefill"], parts["decode"], source)
        if not problems:
            lines.append(f"{label}: your quantizer, prefill and decode kernels from {shown}")
        lines.extend(f"{label}: {p}; using the reference path" for p in problems.values())
        lines.extend(f"{label}: {n}" for n in notes)
    taken = [fmt for fmt in LAYOUTS_FALLBACK if fmt in sets]
    module, shown = _layouts_notebook(folder, where, device) if taken else (None, "")
    for fmt in taken:  # shown: the notebook's path, or why it cannot be used here
        if module is None:
            sets[fmt] = _kept(sets[fmt], shown, lines)
        else:
            with_layouts = _with_layouts_decode if fmt == "w4a16" else _with_layouts_fp4
            sets[fmt] = with_layouts(sets[fmt], module, shown, device, lines)
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
