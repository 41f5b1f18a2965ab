""" "A kernel of your own", proven by Triton's compiler rather than read from the source.

Under Triton's interpreter a `@triton.jit` body runs as plain Python: it can call numpy or torch, or a function
named `jit` can pose as a kernel, and a reading of the source can be walked around. So a graded call's kernels are
observed where they are launched (every launch goes through `JITFunction.run`, or `InterpretedFunction.run` under
the interpreter, whatever helper or decorator form started it; a Gluon kernel's `GluonJITFunction` is a JITFunction
that keeps its `run`), and each launched kernel is then compiled by Triton's front end for a GPU target, with the
launch's own argument types and constexprs, in a process of its own (`compile_kernel`, served by a worker started
without the interpreter: compiling evaluates the learner's globals, so it never happens in the trusted process). A
Gluon kernel goes through Gluon's front end (its own AST source, which sets the layouts' context). Python that Triton
cannot compile is refused by the compiler, not by a list of constructs; a kernel whose IR writes nothing to global
memory (GLOBAL_WRITES) computed nothing.

    observe_launches()   worker side: a context recording each launch's kernel, argument types and constexprs
    compile_kernel(...)  compile side: one recorded launch through the front end (and on to the GPU's code)
"""

from __future__ import annotations

import contextlib
import dataclasses
import re

__all__ = [
    "COMPILE_ENV", "MAX_LAUNCHES", "TARGET_ARCH", "GLOBAL_WRITES", "install", "observe_launches", "compile_kernel",
    "front_end", "ast_source", "stores",
]  # fmt: skip

COMPILE_ENV = "QMATMUL_COMPILE_ONLY"  # the compile worker: define the kernels, never pick the interpreter
# Distinct launches one call may report (kernel, argument types, constexprs), each with its count
MAX_LAUNCHES = 32
TARGET_ARCH = 90  # compiled for sm_90 (Hopper): every feature the chapters' kernels use compiles there
# The ops that write global memory, in Triton's IR and in Gluon's (Triton's ops, plus the NVIDIA dialect's TMA
# stores): `tl.store`/`gl.store`, the atomics, the tensor descriptors' stores, TMA copies out of shared memory. A store
# to shared or tensor memory (ttg.local_store, ttng.tmem_store) leaves nothing behind when the kernel ends.
GLOBAL_WRITES = frozenset({
    "tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.atomic_store", "tt.descriptor_store", "tt.descriptor_reduce",
    "tt.descriptor_scatter", "ttng.async_tma_copy_local_to_global", "ttng.async_tma_reduce", "ttng.async_tma_scatter",
})  # fmt: skip
# An op's name where a line of MLIR's text states it (`%3 = tt.load ...`, `tt.store %1, ...`, `"tt.reduce"(...)`):
# never inside a location's or an attribute's string, where a kernel's file, names and messages go.
_OP_NAME = re.compile(r'^\s*(?:%[^=\n]*=\s*)?"?([A-Za-z_]\w*\.[\w.]+)', re.MULTILINE)


def _triton_object(value, depth: int = 0):
    """A constexpr made of Triton's own frozen dataclasses (a Gluon layout: gl.BlockedLayout, gl.SliceLayout of one,
    gl.NVMMASharedLayout, ...) as plain data: its class, and its fields as numbers, strings, lists and such objects.
    None when the value is anything else."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and depth < 8:
        items = [_triton_object(v, depth + 1) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value, strict=True)) else items
    cls = type(value)
    if not dataclasses.is_dataclass(value) or not cls.__module__.startswith("triton.") or depth >= 8:
        return None
    fields = {}
    for f in dataclasses.fields(value):
        if f.init:
            item = getattr(value, f.name)
            fields[f.name] = _triton_object(item, depth + 1)
            if fields[f.name] is None and item is not None:
                return None
    return {"triton_object": {"module": cls.__module__, "class": cls.__qualname__, "fields": fields}}


def _rebuilt(data):
    """_triton_object's data as the object again (in the compile worker): its class looked up in its module, which
    must be one of triton's."""
    import importlib

    if isinstance(data, list):
        return [_rebuilt(v) for v in data]
    if not isinstance(data, dict):
        return data
    obj = data["triton_object"]
    if not str(obj["module"]).startswith("triton."):
        raise ValueError(f"a constexpr of {obj['module']} is none of triton's")
    cls = importlib.import_module(obj["module"])
    for part in str(obj["class"]).split("."):
        cls = getattr(cls, part)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"{obj['module']}.{obj['class']} is not one of triton's constexpr classes")
    return cls(**{k: _rebuilt(v) for k, v in obj["fields"].items()})


def _spec(value):
    """A launch argument as plain data: a tensor's dtype, a scalar's value, a dtype's name, a Gluon layout's fields."""
    import torch

    if type(value).__name__ == "constexpr" and type(value).__module__.startswith("triton"):
        value = value.value  # tl.constexpr(...), gl.constexpr(...)
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, bool | int | float | str):
        return {"value": value}
    if hasattr(value, "value") and isinstance(value.value, bool | int | float | str | type(None)):
        return {"value": value.value}
    name = type(value).__name__
    if name == "dtype" and type(value).__module__.startswith("triton"):
        return {"tl_dtype": str(value)}
    obj = _triton_object(value)
    if isinstance(obj, dict):
        return obj  # a Gluon layout, handed to the kernel as a constexpr
    return {"other": name}


def _record(launches: list, fn, arg_names, args, kwargs) -> None:
    bound = dict(zip(arg_names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in arg_names})
    options = {k: v for k, v in kwargs.items() if k not in arg_names and isinstance(v, int | bool)}
    import sys

    from qmatmul.grader import reach

    code = getattr(fn, "__code__", None)
    frame, course = sys._getframe(2), []  # the launch's callers: which of the course's functions led to it
    while frame is not None and len(course) < 12:
        module = reach.module_of(frame.f_code.co_filename)
        if module is not None and not module.startswith("qmatmul.grader"):
            course.append(f"{module}.{frame.f_code.co_name}")
        frame = frame.f_back
    entry = {
        "name": getattr(fn, "__name__", "?"),
        "file": code.co_filename if code is not None else "",
        "course": course,
        "args": {k: _spec(v) for k, v in bound.items()},
        "options": options,
    }
    for seen in launches:  # a launch seen before is counted, not listed again
        if {k: v for k, v in seen.items() if k != "count"} == entry:
            seen["count"] += 1
            return
    if len(launches) < MAX_LAUNCHES:
        launches.append({**entry, "count": 1})


_RECORDING: list | None = None  # the launches of the call being observed (observe_launches), else None


def install() -> None:
    """Wrap JITFunction.run (and InterpretedFunction.run) once, for the life of the process: the worker does this
    before the learner's cells run, so no reference to the unwrapped methods exists for their code to keep. The
    wrappers record only while observe_launches is active."""
    from triton.runtime import jit

    classes = [jit.JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    for cls in classes:
        run = cls.__dict__.get("run")
        if run is None or getattr(run, "_qmatmul_observed", False):
            continue

        def launch(self, *args, grid, warmup, _run=run, **kwargs):
            if _RECORDING is not None and not warmup:
                _record(_RECORDING, self.fn, self.arg_names, args, kwargs)
            return _run(self, *args, grid=grid, warmup=warmup, **kwargs)

        launch._qmatmul_observed = True
        cls.run = launch


@contextlib.contextmanager
def observe_launches():
    """Record every kernel launch inside the block: a list of plain dicts, each distinct launch once with `count`, the
    times it ran (the same kernel launched twice on arguments of the same types is two launches)."""
    global _RECORDING
    install()
    _RECORDING = launches = []
    try:
        yield launches
    finally:
        _RECORDING = None


# ----------------------------------------------------------------------------------------------------------
# The compile side (a worker started with COMPILE_ENV=1, without the interpreter)


def _find(namespace: dict, name: str):
    """The JIT function launched as `name`: bound to that name, or any top-level JIT function whose Python
    function is called so (`kernel = triton.jit(body)` launches as `body`)."""
    from triton.runtime.jit import JITFunction

    fn = namespace.get(name)
    if isinstance(fn, JITFunction):
        return fn
    for value in list(namespace.values()):
        inner = value
        while not isinstance(inner, JITFunction) and hasattr(inner, "fn"):  # autotune / heuristics wrappers
            inner = inner.fn
        if isinstance(inner, JITFunction) and inner.fn.__name__ == name:
            return inner
    return None


def _signature_type(spec: dict) -> str:
    if "tensor" in spec:
        import torch
        from triton.runtime.jit import mangle_type

        return mangle_type(torch.empty(0, dtype=getattr(torch, spec["tensor"])))
    value = spec.get("value")
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return "constexpr"


def _constexpr(spec: dict):
    if "tl_dtype" in spec:
        import triton.language as tl

        return getattr(tl, spec["tl_dtype"], spec["tl_dtype"])
    if "triton_object" in spec:
        return _rebuilt(spec)
    return spec.get("value")


def ast_source(fn):
    """The front end's source class for a JIT function: Gluon's (GluonASTSource: the layouts' context, Gluon's
    code generator) for a `@gluon.jit` kernel, Triton's ASTSource for the rest. Asked of the function itself, as
    Triton's own launch asks it (JITFunction.is_gluon; GluonJITFunction.create_binder picks GluonASTSource)."""
    from triton.compiler import ASTSource

    is_gluon = getattr(fn, "is_gluon", None)
    if callable(is_gluon) and is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return ASTSource


def stores(ir_text: str) -> bool:
    """Does the IR write global memory: one of GLOBAL_WRITES among the ops its text states (_OP_NAME)?"""
    return any(m.group(1) in GLOBAL_WRITES for m in _OP_NAME.finditer(ir_text))


def compile_kernel(namespace: dict, launch: dict) -> dict:
    """Compile one recorded launch for sm_90 through the front end (Gluon's for a `@gluon.jit` kernel). {"status":
    "ok", "stores": bool} when it accepted the kernel, {"status": "rejected", "message": ...} when Triton's compiler
    refused the kernel's code, {"status": "missing"} when no JIT function of that name was defined at the notebook's
    top level."""
    from triton.compiler.errors import CompilationError

    fn = _find(namespace, launch["name"])
    if fn is None:
        return {"status": "missing"}
    args = launch["args"]
    signature, constants = {}, {}
    options = {k: v for k, v in launch.get("options", {}).items() if k in ("num_warps", "num_stages")}
    said: list[str] = []
    try:
        for name, param in zip(fn.arg_names, fn.params, strict=True):
            spec = args.get(name)
            if param.is_constexpr:
                signature[name] = "constexpr"
                constants[name] = _constexpr(spec) if spec is not None else param.default
            elif spec is None:
                signature[name], constants[name] = "constexpr", param.default  # left at its default
            else:
                kind = _signature_type(spec)
                signature[name] = kind
                if kind == "constexpr":
                    constants[name] = _constexpr(spec)
        with _diagnostics() as said:
            ir_text = front_end(ast_source(fn)(fn, signature, constants), options)
    except (CompilationError, RuntimeError, TypeError, ValueError, AssertionError, NameError) as exc:
        # MLIR's verifier says why on stderr, its exception only that it failed ("error encountered during parsing")
        why = _first_lines("\n".join(said) if said and isinstance(exc, RuntimeError) else str(exc))
        return {"status": "rejected", "message": f"{type(exc).__name__}: {why}"}
    return {"status": "ok", "stores": stores(ir_text)}


@contextlib.contextmanager
def _diagnostics():
    """MLIR's errors while the block runs (a Gluon layout the verifier refuses: "Layout has 8 warps per CTA, but the
    context requires 4"), which the compiler writes to the process's stderr and its exception leaves out ("error
    encountered during parsing"): yields the list the lines from each `error:` on are added to when the block ends.
    They still reach stderr (the compile worker's log)."""
    import os
    import sys
    import tempfile

    said: list[str] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
            sys.stderr.write(text)
            for line in text.splitlines():
                if "error: " in line:
                    said.append(line[line.index("error: ") :])
                elif said and line.strip() and not line[0].isspace():
                    said.append(line)  # the error's explanation, below it


def front_end(src, options: dict) -> str:
    """Triton's front end alone, for sm_90: the kernel's dependencies resolved (a global that is neither a JIT
    function nor a constant is refused here) and its AST turned into TTIR, or a Gluon kernel's into its IR with
    layouts (the code generator refuses what is not Triton, or not Gluon). Returns the IR as text. No optimization
    pass, no ptxas: a CPU machine runs it in seconds."""
    import inspect

    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget("cuda", TARGET_ARCH, 32)
    backend = make_backend(target)
    opts = backend.parse_options(dict(options))
    src.hash()  # the dependency walk: every global the body uses must be a JIT function or a constant
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    codegen_fns = backend.get_codegen_implementation(opts)
    module_map = backend.get_module_map()
    if "target" in inspect.signature(src.make_ir).parameters:  # triton >= 3.5
        module = src.make_ir(target, opts, codegen_fns, module_map, context)
    else:
        module = src.make_ir(opts, codegen_fns, module_map, context)
    return str(module)


def _first_lines(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("^")]
    return " ".join(lines[-2:])[:limit] if lines else ""
