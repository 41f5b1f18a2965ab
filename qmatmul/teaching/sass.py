"""What a decode kernel's main loop issues per weight, read from SASS compiled here for a GPU (no GPU needed).

The reading core of tools/sass.py (which adds its command line, its every-chapter rows, the GPU-fit report and the
sweeps), in the package so that a notebook can measure its own kernel: chapter "layouts",
qmatmul.teaching.layouts.instructions_per_weight.

A 4-bit decode kernel at M <= 16 has nothing for the tensor cores to do and too little time per weight for its
decoding: at the H200's copy bandwidth a weight arrives every 1 / 7.9e12 s, and 132 SMs x 128 lanes x 1.98 GHz
issue about 4 instructions per weight in that time (docs/perf-notes.md). So the instruction count of the loop body,
per weight a thread decodes, bounds what a kernel can reach: `ceiling` = that budget / the count, as a fraction of
the copy bandwidth. It is a bound, not a prediction (latency, the pipeline's depth and the grid come on top), and
it costs no device time: triton's own ptxas and cuobjdump compile and disassemble for sm_<arch> on a CPU.

Compile in a process that did not import triton with TRITON_INTERPRET set (a CPU notebook's does): there triton's own
@jit helpers (tl.cdiv, ...) are interpreter functions and no kernel compiles. `measure_decodes` runs one.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Instructions per weight a thread can issue at the H200's copy bandwidth (docs/perf-notes.md).
ISSUE_BUDGET = 4.2

# The decode shape the course measures at: a Llama-3-8B MLP projection, N x K.
DECODE_SHAPE = (28672, 8192)

# Pointer types of a bf16 call, by argument name; every other non-constexpr argument is an int32.
W4A16_TYPES = {"x_ptr": "*bf16", "p_ptr": "*u8", "s_ptr": "*fp32", "z_ptr": "*u8", "y_ptr": "*bf16"}
FP4_TYPES = {"x_ptr": "*bf16", "p_ptr": "*u8", "s_ptr": "*u8", "y_ptr": "*bf16"}
NVFP4_TYPES = {**FP4_TYPES, "g_ptr": "*fp32"}
# qmatmul.kernels.expert's kernels: the packed weight as int32 words, and qmatmul.kernels.splitk's workspace and counters.
SPLIT_TYPES = {"part_ptr": "*fp32", "count_ptr": "*i32"}
W4A16_WORDS_TYPES = {**W4A16_TYPES, "w_ptr": "*i32", **SPLIT_TYPES}
# qmatmul.kernels.gemm.matmul_kernel, which multiplies the 4-bit chapters' decoded weight (off Hopper: TMA there).
GEMM_TYPES = {"x_ptr": "*bf16", "w_ptr": "*bf16", "g_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*bf16"}
W8A16_TYPES = {"x_ptr": "*bf16", "q_ptr": "*i8", "s_ptr": "*fp32", "y_ptr": "*bf16"}
FP8_TYPES = {"x_ptr": "*u8", "w_ptr": "*u8", "sx_ptr": "*fp32", "sw_ptr": "*fp32", "y_ptr": "*bf16"}
# qmatmul.kernels.mma_decode's Gluon kernel: the repacked words, the split-K workspace and counters.
MMA_TYPES = {**W4A16_TYPES, "w_ptr": "*i32", "ws_ptr": "*fp32", "cnt_ptr": "*i32"}
MMA_FP4_TYPES = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*u8", "gs_ptr": "*fp32", "y_ptr": "*bf16",
                 "ws_ptr": "*fp32", "cnt_ptr": "*i32"}  # fmt: skip

# The strides the JIT sees as 1 (contiguous rows of x, y, the weights and the scales): it specializes them.
UNIT_STRIDES = ("stride_xk", "stride_yn", "stride_wk", "stride_qk", "stride_pk", "stride_pj", "stride_sk",
                "stride_sg", "stride_sxk", "stride_swk")  # fmt: skip


def pointer_types(chapter: str) -> dict:
    """Pointer types of a bf16 call of a chapter's kernels."""
    if chapter == "expert":
        return W4A16_WORDS_TYPES
    if chapter == "w8a16":
        return W8A16_TYPES
    if chapter == "w4a16":
        return W4A16_TYPES
    if chapter == "fp8":  # the wrappers pass the fp8 codes as uint8 views
        return FP8_TYPES
    return NVFP4_TYPES if chapter == "nvfp4" else FP4_TYPES


def row(chapter: str, kernel: str, cfg: dict) -> dict:
    """What to compile: chapter is a solution notebook's name, "expert" (qmatmul.kernels.expert), "gemm"
    (qmatmul.kernels.gemm) or "mma_decode"; cfg the launch's constexprs and options."""
    types = GEMM_TYPES if kernel == "matmul_kernel" else pointer_types(chapter)
    return dict(chapter=chapter, kernel=kernel, types=types, cfg=cfg,
                ones=tuple(n for n in UNIT_STRIDES if n not in cfg))  # fmt: skip


@contextlib.contextmanager
def capability(arch: int):
    """The chapters' config functions ask torch for the GPU's compute capability: answer arch."""
    import torch

    real = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda *a: divmod(arch, 10)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = real


def w4a16_decode_config(M: int = 16) -> dict:
    """Chapter 2's decode launch at DECODE_SHAPE, G = 128, as its wrapper configures it (call it under capability)."""
    from qmatmul.scaffold import w4a16

    N, K = DECODE_SHAPE
    return w4a16.decode_config(M, N, K, 128) | {"GROUP": 128}


def w4a16_row(M: int = 16, arch: int = 90) -> dict:
    """Chapter 2's decode kernel (w4a16_decode_kernel) as its wrapper launches it at M rows on a GPU of sm_<arch>."""
    with capability(arch):
        return row("w4a16", "w4a16_decode_kernel", w4a16_decode_config(M))


def mma_row(cfg: dict, bm: int) -> dict:
    """qmatmul.kernels.mma_decode's kernel with a config of its config() (or tools/sweep_mma.py's), x padded to bm columns."""
    cfg = {k: v for k, v in cfg.items() if k != "SPLIT_K"}  # split-K shapes the grid, not the loop
    # BLOCK_N is not the kernel's parameter (16 rows x R tiles a warp); weights_per_thread reads it
    cfg |= {"GROUP": 128, "BM": bm, "BLOCK_N": 16 * cfg["R"] * cfg["num_warps"]}
    return dict(row("mma_decode", "_w4_mma_kernel", cfg), types=MMA_TYPES, ones=())


def mma_w4a16_row(M: int = 16) -> dict:
    """The course's Gluon W4A16 decode as its config() launches it at M rows and DECODE_SHAPE."""
    from qmatmul.kernels import mma_decode

    return mma_row(mma_decode.config(M, *DECODE_SHAPE), 8 if M <= 8 else 16)


def jit_module(code: str, name: str):
    """The @triton.jit functions (and the constants) of a notebook's code, imported from a file of their own (Triton
    reads kernel source from files), with the course's modules they call (`w8a16.finish`, `fp8.e4m3_bits`): the
    notebook's other cells (its setup picks the interpreter on a CPU) left out."""
    tree = ast.parse(code)
    body = ast.parse("import triton\nimport triton.language as tl").body
    kept = []
    for node in tree.body:
        jit = isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list)
        if jit or (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
            kept.append(node)
    used = {n.id for node in kept for n in ast.walk(node) if isinstance(n, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "qmatmul":
            names = [a for a in node.names if (a.asname or a.name) in used]
            if names:
                body.append(ast.ImportFrom(module="qmatmul", names=names, level=0))
    body += kept
    path = Path(tempfile.mkdtemp(prefix="qmatmul-sass-")) / f"{name}.py"
    path.write_text(ast.unparse(ast.Module(body=body, type_ignores=[])) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jit_functions(chapter: str):
    """Where a row's kernel lives: qmatmul.kernels.<chapter> for "expert", "gemm" and "mma_decode", else the solution
    notebook's @triton.jit functions (solutions/<chapter>, the course checkout's)."""
    from qmatmul import course

    if chapter in ("expert", "gemm", "mma_decode"):
        return importlib.import_module(f"qmatmul.kernels.{chapter}")
    return jit_module(course.notebook_code(chapter), f"sass_{chapter}")


def compile_kernel(fn, row: dict, arch: int = 90):
    """fn (a @triton.jit or @gluon.jit function) compiled for sm_<arch> as row says: its cfg (constexprs, num_warps,
    num_stages, maxnreg), its pointer types, the strides the JIT would see as 1, 16-divisible pointers, N, K, strides."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = dict(row["cfg"])
    types = dict(row["types"])
    if arch < 80:  # no bf16 tensor cores (a T4): the chapters run fp16 activations there
        types = {k: "*fp16" if v == "*bf16" else v for k, v in types.items()}
    options = {k: cfg.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in cfg}
    signature, constants, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params, strict=True)):
        if name in cfg or name in row["ones"]:  # constexprs, and the strides the JIT specializes to 1
            signature[name], constants[name] = "constexpr", cfg.get(name, 1)
        elif param.is_constexpr and param.has_default:  # a constexpr the launch leaves at its default
            signature[name], constants[name] = "constexpr", param.default
        else:
            signature[name] = types.get(name, "i32")
            if signature[name].startswith("*") or name in ("N", "K") or name.startswith("stride_"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource
    # qmatmul.kernels.mma_decode is a Gluon kernel: its layouts are stated, no Triton pass chooses them
    if type(fn).__name__ == "GluonJITFunction":
        from triton.experimental.gluon._runtime import GluonASTSource as source
    return triton.compile(
        source(fn, signature, constants, attrs), target=GPUTarget("cuda", arch, 32), options=options
    )


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """What the cuobjdump that ships with triton prints of a cubin with `flag`."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(tool), flag, f.name], check=True, capture_output=True, text=True).stdout


def resources(cubin: bytes) -> dict:
    """A cubin's registers a thread and static shared memory (bytes)."""
    m = re.search(r"REG:(\d+).*?SHARED:(\d+)", _cuobjdump(cubin, "--dump-resource-usage"))
    return {"regs": int(m.group(1)), "static_shared": int(m.group(2))}


def disassemble(cubin: bytes) -> list[tuple[int, str]]:
    """(address, instruction) pairs of a cubin."""
    text = _cuobjdump(cubin, "-sass")
    return [(int(a, 16), ins.strip()) for a, ins in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", text)]


def loops(code: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(first, last) address of every loop: from a backward branch's target to the branch."""
    found = []
    for addr, ins in code:
        # "@!P5 BRA 0x..." (sm_90), "BRA.U !UP0, 0x..." (sm_100, sm_120)
        m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\w+,\s*)?(0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < addr:
            found.append((int(m.group(1), 16), addr))
    return found


def main_loop(code: list[tuple[int, str]]) -> list[str]:
    """The instructions of the longest loop."""
    if not (found := loops(code)):
        raise ValueError("no loop in this kernel's SASS")
    start, end = max(found, key=lambda r: r[1] - r[0])
    return [ins for addr, ins in code if start <= addr <= end]


def opcode(ins: str) -> str:
    """The opcode without predicate and modifiers: '@!P0 LDG.E.U8 R1, ...' -> 'LDG'."""
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def weights_per_thread(row: dict) -> float:
    """One loop iteration decodes BLOCK_N rows x BLOCK_K (the expert kernels: GPI groups of GROUP) weights."""
    cfg = row["cfg"]
    along_k = cfg["BLOCK_K"] if "BLOCK_K" in cfg else cfg["GROUP"] * cfg.get("GPI", 1)
    return cfg["BLOCK_N"] * along_k / (32 * cfg["num_warps"])


def measure(name: str, row: dict, arch: int = 90, fn=None) -> dict:
    """The main loop of row's kernel (fn, else the one jit_functions finds) compiled for sm_<arch>: its instructions,
    the weights a thread decodes an iteration, instructions per weight, the ceiling that leaves, its opcodes, spills."""
    fn = fn if fn is not None else getattr(jit_functions(row["chapter"]), row["kernel"])
    code = disassemble(compile_kernel(fn, row, arch).asm["cubin"])
    loop = main_loop(code)
    per = weights_per_thread(row)
    ops = collections.Counter(opcode(i) for i in loop)
    return dict(
        name=name,
        kernel=row["kernel"],
        loop=len(loop),
        weights=per,
        per_weight=len(loop) / per,
        ceiling=min(1.0, ISSUE_BUDGET / (len(loop) / per)),
        ops=ops,
        spills=sum(opcode(i) in ("LDL", "STL") for _, i in code),
    )


def readable_w4a16(M: int, arch: int, notebook: str, code: str | None) -> tuple[dict, str]:
    """measure() of chapter 2's decode kernel: the learner's (code: what their notebook at `notebook` defines, None
    where there is none) where it is finished and compiles, else the course's solution; and which one it was, and
    why. Any of the learner's kernels' failures falls back: this is feedback, never a grade."""
    r = w4a16_row(M, arch)
    why = f"no notebook at {notebook}" if code is None else ""
    if code is not None:
        try:
            fn = getattr(jit_module(code, f"sass_learner_w4a16_{os.getpid()}"), r["kernel"], None)
            # under a wrapper of the JIT function (@triton.autotune, @triton.heuristics): the function itself
            while fn is not None and not hasattr(fn, "arg_names") and hasattr(fn, "fn"):
                fn = fn.fn
            if fn is None:
                why = f"no {r['kernel']} in {notebook}"
            elif "NotImplementedError" in fn.src:
                why = f"exercise 3 of {notebook} is unfinished"
            else:
                return measure("yours", r, arch, fn), f"your {r['kernel']}, from {notebook}"
        except Exception as exc:  # noqa: BLE001 - the learner's kernel, whatever it holds
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            last = lines[-1][:160] if lines else ""
            why = (
                f"yours, from {notebook}, could not be measured for sm_{arch} ({type(exc).__name__}: {last})"
            )
    return measure("course", r, arch), f"the course's solution (solutions/w4a16): {why}"


# The measuring process's program. The learner's notebook is found and read as the capstone finds and reads it
# (qmatmul.course.chapter_notebook, defined_code).
_PROGRAM = """
import json, os, sys
from pathlib import Path
from qmatmul.course import chapter_notebook, defined_code
from qmatmul.teaching import sass

M, arch = int(sys.argv[1]), int(sys.argv[2])
notebook = chapter_notebook("w4a16")
code = defined_code(notebook) if notebook.is_file() else None
try:
    shown = os.path.relpath(notebook)
except ValueError:  # another drive
    shown = str(notebook)
rows = []
readable, source = sass.readable_w4a16(M, arch, shown, code)
rows.append(dict(readable, label=f"w4a16_decode_kernel ({readable['name']}, Triton)", source=source))
from qmatmul.kernels import mma_decode
if mma_decode.gluon is not None:
    rows.append(dict(sass.measure("mma", sass.mma_w4a16_row(M), arch), label="_w4_mma_kernel (course, Gluon)",
                     source="the course's qmatmul/kernels/mma_decode.py"))
print(json.dumps(rows, default=str))
"""


def compile_env() -> dict:
    """The environment of a process that compiles for a GPU here: without TRITON_INTERPRET (where it was set when triton
    was imported, triton's own helpers, tl.cdiv and the like, are interpreter functions and nothing compiles), the
    course package importable, the JIT's default fp fusion said aloud (no warning)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    return env


def measure_decodes(M: int = 16, arch: int = 90, timeout: float = 600) -> list[dict]:
    """measure() of chapter 2's readable W4A16 decode (the learner's, see readable_w4a16) and of the course's Gluon
    one (where triton has Gluon), as each launches at M rows and DECODE_SHAPE, compiled for sm_<arch> in a new
    process without TRITON_INTERPRET (any machine: a compile, not a run). Each row adds `label` and `source`."""
    run = subprocess.run([sys.executable, "-c", _PROGRAM, str(M), str(arch)], env=compile_env(), capture_output=True,
                         text=True, timeout=timeout)  # fmt: skip
    if run.returncode != 0:
        raise RuntimeError(f"the compile for sm_{arch} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])
