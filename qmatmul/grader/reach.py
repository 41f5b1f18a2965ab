"""What of the course's own code a learner's call ran: observed by where the running code lives, not by how it was
reached.

The course package holds every exercise's answer (the formats' quantizers, the byte counts, the expert kernels).
A reading of the source stops `w8a16.quantize(w)`, but not a string that names it (`pickle.loads(b"c...")`,
`pkgutil.resolve_name("qmatmul...")`). Whatever the route, the answer's code runs from a file of the package. So
during a graded call the worker watches every Python function that starts (sys.setprofile) and records those
whose code lives in the package, unless a function the chapter gives (its GIVEN) is running at that moment: what
the course gives may use the rest of the package. A launch of a course kernel is judged the same way
(kernels.py records the package functions on the stack at each launch).

    course_frames(stack)   the package's functions among a stack's frames, as "module.function"
    observe(given)         worker side: the course functions a call ran outside what is given
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from pathlib import Path

__all__ = [
    "PACKAGE", "GRADER", "MAX_REPORTED", "module_of", "given_codes", "within_given", "observe", "HOST_READS",
    "HOST_READ_FUNCTIONS", "install_host_reads", "host_reads",
]  # fmt: skip

PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep
GRADER = str(Path(__file__).resolve().parent) + os.sep  # the grader's own machinery, running in the worker
MAX_REPORTED = 16


def module_of(filename: str) -> str | None:
    """qmatmul/formats/w8a16.py -> "qmatmul.formats.w8a16"; None outside the package."""
    if not filename.startswith(PACKAGE):
        return None
    rel = Path(filename[len(PACKAGE) :]).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["qmatmul", *parts])


def given_codes(given: dict[str, list[str]]) -> set:
    """The code objects of what the chapter gives (module -> names), as running functions show them."""
    import importlib

    codes = set()
    for module, names in given.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for name in names:
            obj = getattr(mod, name, None)
            while obj is not None and not hasattr(obj, "__code__") and hasattr(obj, "fn"):
                obj = obj.fn  # a JIT function: the Python function it wraps
            code = getattr(obj, "__code__", None)
            # a code object, not an object that answers every attribute with itself (layouts.NO_GLUON)
            if isinstance(code, types.CodeType):
                codes.add(code)
    return codes


def given_functions(given: dict[str, list[str]]) -> set[str]:
    """What the chapter gives, as "module.function" where each function's code lives (the form course_frames and a
    launch's recorded callers take): `w8a16.as_16bit` is "qmatmul.kernels.gemm.as_16bit". What it gives of triton's own
    (Gluon's `mma_v2`) lives outside the package and is no course function."""
    return {f"{module}.{code.co_name}" for code in given_codes(given)
            if (module := module_of(code.co_filename)) is not None}  # fmt: skip


def within_given(frame, codes: set) -> bool:
    """Whether a function the chapter gives is running in this frame or one of its callers."""
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def observe(given: dict[str, list[str]], exempt=()):
    """Record "module.function" for each function of the package that starts inside the block while nothing
    given is running (each once, at most MAX_REPORTED). `exempt`: objects of the course's that the grader itself
    put around the call (the contexts the trusted side asked for): their methods count as given."""
    codes = given_codes(given)
    for obj in exempt:
        for cls in type(obj).__mro__:
            codes.update(f.__code__ for f in vars(cls).values() if hasattr(f, "__code__"))
    seen: list[str] = []
    depth = 0
    previous = sys.getprofile()

    def hook(frame, event, arg):
        nonlocal depth
        if event == "call":
            code = frame.f_code
            if code in codes:
                depth += 1
            elif (
                depth == 0
                and code.co_filename.startswith(PACKAGE)
                and not code.co_filename.startswith(GRADER)
            ):
                name = f"{module_of(code.co_filename)}.{code.co_name}"
                if name not in seen and len(seen) < MAX_REPORTED:
                    seen.append(name)
        elif event == "return" and frame.f_code in codes:
            depth -= 1

    sys.setprofile(hook)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


# What leaves torch for the host. numpy and Python lists compute where no op audit sees: a product computed in
# numpy (reached by any route) and copied into `out` by a kernel that stores would pass every other check. Every
# route from a tensor's values to numpy or Python goes through one of these methods (or through ctypes, which the
# escape flags name).
HOST_READS = {
    "Tensor": ("numpy", "__array__", "tolist", "__dlpack__"),
    "UntypedStorage": ("tolist",),
    "TypedStorage": ("tolist",),
}
HOST_READ_FUNCTIONS = (
    ("torch", "to_dlpack"),
    ("torch.utils.dlpack", "to_dlpack"),
)  # a tensor in, a capsule out


_READS: list | None = None  # what the call being watched read to the host (host_reads), else None


def install_host_reads() -> None:
    """Wrap the HOST_READS methods once, for the life of the process (before the learner's cells run, so their
    code holds no unwrapped method); the wrappers record only while host_reads is active."""
    import torch

    for cls_name, methods in HOST_READS.items():
        cls = getattr(torch, cls_name)
        for name in methods:
            original = getattr(cls, name, None)  # inherited too: Tensor.numpy and .tolist live on TensorBase
            if original is None or getattr(original, "_qmatmul_observed", False):
                continue

            def reading(self, *args, _original=original, _name=name, **kwargs):
                if _READS is not None and len(_READS) < MAX_REPORTED:
                    _READS.append([_name, int(self.numel() if hasattr(self, "numel") else self.nbytes())])
                return _original(self, *args, **kwargs)

            reading._qmatmul_observed = True
            setattr(cls, name, reading)
    import importlib

    for module_name, name in HOST_READ_FUNCTIONS:
        module = importlib.import_module(module_name)
        original = getattr(module, name, None)
        if original is None or getattr(original, "_qmatmul_observed", False):
            continue

        def exported(tensor, *args, _original=original, _name=name, **kwargs):
            if _READS is not None and len(_READS) < MAX_REPORTED and hasattr(tensor, "numel"):
                _READS.append([_name, int(tensor.numel())])
            return _original(tensor, *args, **kwargs)

        exported._qmatmul_observed = True
        setattr(module, name, exported)


@contextlib.contextmanager
def host_reads():
    """Record [method, elements] for each tensor whose values a call reads into numpy or Python inside the block."""
    global _READS
    install_host_reads()
    _READS = seen = []
    try:
        yield seen
    finally:
        _READS = None
