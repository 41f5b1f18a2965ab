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
from pathlib import Path

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
            if code is not None:
                codes.add(code)
    return codes


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
