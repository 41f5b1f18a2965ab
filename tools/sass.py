"""What a decode kernel's main loop issues per weight, read from SASS compiled here for a GPU (no GPU needed).

    python -m tools.sass [--arch 90] [--ops 12] [--set BLOCK_N=64,num_warps=2] [NAME ...]
    python -m tools.sass --fit [--write]      every graded launch on every GPU class (docs/gpu-fit.md)
    python -m tools.sass --sweep w4a16,mxfp4,nvfp4   tools/sweep_decode.py's candidates, as candidates() lists them
    python -m tools.sass --tma                 qmatmul.kernels.gemm's TMA GEMM: its K loop per scale mode
    python -m tools.sass --waves               the layouts chapter's Gluon decode (qmatmul.kernels.mma_decode) as
                                               config() launches it at M = 1, 4, 16 on the bench's and a Llama-3-8B
                                               block's shapes: registers, programs a SM, grid, waves, barriers a group

A 4-bit decode kernel at M <= 16 has nothing for the tensor cores to do and too little time per weight for its
decoding: at the H200's copy bandwidth a weight arrives every 1 / 7.9e12 s, and 132 SMs x 128 lanes x 1.98 GHz
issue about 4 instructions per weight in that time (docs/perf-notes.md). So the instruction count of the loop body,
per weight a thread decodes, bounds what a kernel can reach: `ceiling` = that budget / the count, as a fraction of
the copy bandwidth. It is a bound, not a prediction (latency, the pipeline's depth and the grid come on top), and
it costs no device time: triton's own ptxas and cuobjdump compile and disassemble for sm_<arch> on a CPU.

Each NAME is a row of kernels(): the solution notebook's decode kernel (or qmatmul.kernels.expert's) with the configuration
its wrapper takes at 28672 x 8192 on a GPU of the given --arch, the argument types of a bf16 call and the
divisibility the JIT would see. `ceiling` uses the H200's budget whatever the --arch.

--fit compiles each launch of launches() for each class of GPUS with the chapters' own config functions answering
for that class, and reports its shared memory against the class's limit, its spilled registers and the MMA it
compiles to; --write records them in docs/gpu-fit.json and docs/gpu-fit.md (tests/test_gpu_fit.py keeps them true).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path

# The reading core lives in the package (a notebook measures its own kernel with it: qmatmul/teaching/sass.py), one
# source; its names are this module's too (tools.sass.main_loop, ...).
from qmatmul.teaching.sass import (  # noqa: F401 - re-exported
    ISSUE_BUDGET,
    MMA_FP4_TYPES,
    NVFP4_TYPES,
    SPLIT_TYPES,
    capability,
    compile_kernel,
    disassemble,
    loops,
    main_loop,
    mma_row,
    opcode,
    resources,
    w4a16_decode_config,
    weights_per_thread,
)
from qmatmul.teaching.sass import jit_functions as _package_jit_functions
from qmatmul.teaching.sass import measure as _measure
from qmatmul.teaching.sass import row as _row

ROOT = Path(__file__).resolve().parent.parent


def sweep_rows(fmt: str) -> dict:
    """NAME -> what to compile: tools/sweep_decode.py's candidates for fmt ("w4a16", "mxfp4", "nvfp4"), each
    (name, config) once whatever its split-K (split-K changes the grid, not the loop), at K = 8192."""
    from tools import sweep_decode

    rows = {}
    for name, _, cfg, _ in sweep_decode.candidates(fmt):
        spec = sweep_decode.sass_spec(fmt, name, cfg)
        if spec is None:  # "old": the notebook's kernel, a row of kernels()
            continue
        kernel, constants, types = spec
        label = f"{fmt}-{name}-{cfg['BLOCK_N']}x{constants['BLOCK_K']}w{cfg['num_warps']}s{cfg['num_stages']}"
        rows.setdefault(label, dict(_row("sweep", kernel, constants), types=types))
    return rows


def _expert(config: str, *args) -> dict:
    from qmatmul.kernels import expert

    return dict(getattr(expert, config)(*args, device="cuda"))


def kernels(arch: int = 90) -> dict:
    """NAME -> what to compile: each chapter's decode launch of launches() (28672 x 8192, M = 16, its tiles as the
    chapter chooses them on a GPU of compute capability arch), and the expert kernels."""
    N, K = 28672, 8192
    with capability(arch):
        rows = {label.split()[0]: _row(chapter, kernel, cfg())
                for label, chapter, kernel, cfg in launches() if label.endswith(" decode")}  # fmt: skip
        rows["expert-tc"] = _row("expert", "_w4_tc_kernel", _expert("tc_config", 16, N) | {"GROUP": 128})
        rows["expert-gemv"] = _row("expert", "_w4_gemv_kernel", _expert("gemv_config", N, K) | {"GROUP": 128})
        for fmt, sb in (("mxfp4", 32), ("nvfp4", 16)):
            cfg = _expert("fp4_config", N, K) | {"SB": sb, "NV": fmt == "nvfp4"}
            rows[f"expert-{fmt}"] = dict(_row("expert", "_fp4_decode_kernel", cfg),
                                         types=NVFP4_TYPES | {"p_ptr": "*i32", **SPLIT_TYPES})  # fmt: skip
    rows.update(mma_rows(N, K))
    return rows


def mma_rows(N: int = 28672, K: int = 8192) -> dict:
    """qmatmul.kernels.mma_decode's Gluon kernel as its config() launches it at M = 1 and M = 16 (needs triton with Gluon)."""
    from qmatmul.kernels import mma_decode

    if mma_decode.gluon is None:
        return {}
    rows = {f"mma-w4a16-m{M}": mma_row(mma_decode.config(M, N, K), 8 if M <= 8 else 16) for M in (1, 16)}
    for fmt, sb in (("mxfp4", 32), ("nvfp4", 16)):
        rows |= {
            f"mma-{fmt}-m{M}": mma_fp4_row(mma_decode.config_fp4(M, N, K, sb), 8 if M <= 8 else 16, sb)
            for M in (1, 16)
        }
    return rows


def mma_fp4_row(cfg: dict, bm: int, sb: int) -> dict:
    """qmatmul.kernels.mma_decode's fp4 kernel (sb = 32: MXFP4, 16: NVFP4) with a config of its config_fp4() (the block-diagonal
    kernel's MP and NB, where the config leaves them out, one row's)."""
    from qmatmul.kernels import mma_decode

    diag = cfg.get("DIAG", False)  # the block-diagonal kernel: NB scale blocks a step for MP rows of x
    cfg = {k: v for k, v in cfg.items() if k not in ("SPLIT_K", "DIAG") and not (diag and k == "X_SHARED")}
    cfg |= {
        "SB": sb,
        "BM": bm,
        "HAS_GS": sb == 16,
        "BLOCK_K": cfg.setdefault("NB", mma_decode.diag_shape(1, sb)[1]) * sb if diag else 64,
        **({"MP": cfg.get("MP", 1)} if diag else {}),
        "BLOCK_N": 16 * cfg["R"] * cfg["num_warps"],
    }
    kernel = "_fp4_diag_kernel" if diag else "_fp4_mma_kernel"
    return dict(_row("mma_decode", kernel, cfg), types=MMA_FP4_TYPES, ones=())


# The GPU classes a learner may have (compute capability: a card of that class, the most shared memory one
# program may take, in bytes, from the CUDA programming guide's table of compute capabilities).
GPUS = {
    75: ("T4 (Colab)", 64 * 1024),
    80: ("A100", 163 * 1024),
    86: ("RTX 30xx, A10", 99 * 1024),
    89: ("L4, RTX 40xx", 99 * 1024),
    90: ("H100, H200", 227 * 1024),
    100: ("B200", 227 * 1024),
    120: ("RTX 50xx (consumer Blackwell)", 99 * 1024),
}


def launches() -> list[tuple[str, str, str, callable]]:
    """(label, chapter, kernel, cfg()) for every kernel a chapter's graded cells launch on a GPU, at the shapes
    they are graded at: decode at 28672 x 8192 (M = 16), the tiled kernels at M = 33 and 256 (N = K = 4096).
    cfg() runs the chapter's own config function, so call it with torch.cuda.get_device_capability patched."""
    from qmatmul import fp8, mxfp4, nvfp4, w4a16, w8a16
    from qmatmul.kernels import configs

    N, K = 28672, 8192
    rows = [
        ("w8a16 decode", "w8a16", "w8a16_decode_kernel", lambda: w8a16.decode_config(16, N, K)),
        ("w4a16 decode", "w4a16", "w4a16_decode_kernel", lambda: w4a16_decode_config(16)),
        ("mxfp4 decode", "mxfp4", "mxfp4_decode_kernel", lambda: mxfp4.decode_config(16, N, K)),
        ("nvfp4 decode", "nvfp4", "nvfp4_decode_kernel", lambda: nvfp4.decode_config(16, N, K)),
        ("fp8 decode", "fp8", "fp8_decode_kernel",
         lambda: fp8.decode_config(16, N, K) | {"SPLIT_K": fp8.decode_split(16, N, K)}),
        ("4-bit decoded GEMM", "gemm", "matmul_kernel",
         lambda: configs.gemm_config("cuda") | {"GROUP_M": 8, "HAS_G": False, "GROUP": 0}),
        ("W4A16 decoded GEMM", "gemm", "matmul_kernel",
         lambda: configs.gemm_config("cuda", grouped=True) | {"GROUP_M": 8, "HAS_G": False, "GROUP": 128}),
    ]  # fmt: skip
    n = k = 4096
    for M in (33, 256):
        rows += [
            (f"w8a16 tiled M={M}", "w8a16", "w8a16_matmul_kernel",
             lambda M=M: w8a16.prefill_config(M, n, k) | {"GROUP_M": 8}),
            (f"w4a16 tiled M={M}", "w4a16", "w4a16_matmul_kernel",
             lambda M=M: w4a16.prefill_config(M, n, k, 128) | {"GROUP": 128}),
            (f"mxfp4 tiled M={M}", "mxfp4", "mxfp4_matmul_kernel", lambda M=M: mxfp4.prefill_config(M, n, k)),
            (f"nvfp4 tiled M={M}", "nvfp4", "nvfp4_matmul_kernel", lambda M=M: nvfp4.prefill_config(M, n, k)),
            (f"fp8 tiled M={M}", "fp8", "fp8_matmul_kernel", lambda M=M: fp8.prefill_config(M, n, k) | {"GROUP_M": 8}),
            (f"fp8 block M={M}", "fp8", "fp8_block_matmul_kernel",
             lambda M=M: fp8.block_config(M, n, k) | {"GROUP_M": 8, "SCALE": fp8.SCALE_BLOCK}),
            (f"mxfp4 dot_scaled M={M}", "mxfp4", "mxfp4_dot_scaled_kernel", lambda M=M: _dot_scaled(M)),
        ]  # fmt: skip
    return rows


def _dot_scaled(M: int) -> dict | None:
    """The MXFP4 bonus's tiles, bf16 activations; None where the chapter does not launch it (before sm_80)."""
    import torch

    from qmatmul import mxfp4

    if torch.cuda.get_device_capability() < (8, 0):
        return None
    return mxfp4.dot_scaled_config(M, 4096, 4096) | {"X_FORMAT": "bf16"}


def mma_kind(ptx: str) -> str:
    """What multiplies in the PTX: the tensor-core instruction family and its operand type, or "fma"."""
    m = re.search(r"tcgen05\.mma\.\S*kind::(\w+)", ptx)
    if m:
        return f"tcgen05 {m.group(1)}"
    m = re.search(r"wgmma\.mma_async\.\S*?\.f32\.(\w+)\.\w+", ptx)
    if m:
        return f"wgmma {m.group(1)}"
    m = re.search(r"mma\.sync\.aligned\.\w+\.row\.col\.f32\.(\w+)\.", ptx)
    return f"mma.sync {m.group(1)}" if m else "fma"


def fit(arch: int, label: str, chapter: str, kernel: str, cfg) -> dict:
    """Compile one launch for sm_<arch>: shared memory against the class's limit, spilled registers, tensor
    cores or not."""
    with capability(arch):
        config = cfg()
    if config is None:
        return dict(arch=arch, gpu=GPUS[arch][0], label=label, skipped=True, config=None)
    row = _row(chapter, kernel, config)
    compiled = compile_row(row, arch)
    code = disassemble(compiled.asm["cubin"])
    spills = sum(opcode(i) in ("LDL", "STL") for _, i in code)
    name, limit = GPUS[arch]
    return dict(
        arch=arch,
        gpu=name,
        label=label,
        shared=compiled.metadata.shared,
        limit=limit,
        fits=compiled.metadata.shared <= limit,
        spills=spills,
        tensor_cores="mma" in compiled.asm["ttgir"],
        mma=mma_kind(compiled.asm["ptx"]),
        config=config,
    )


def jit_functions(chapter: str):
    """Where a row's kernel lives: tools/sweep_decode.py for "sweep", else as the package finds it (qmatmul.kernels, or
    the solution notebook's @triton.jit functions, compiled for a GPU: its other cells left out)."""
    if chapter == "sweep":
        from tools import sweep_decode

        return sweep_decode
    return _package_jit_functions(chapter)


def compile_row(row: dict, arch: int = 90):
    """The compiled kernel of one row (kernels(), fit()) for sm_<arch>."""
    return compile_kernel(getattr(jit_functions(row["chapter"]), row["kernel"]), row, arch)


def measure(name: str, row: dict, arch: int = 90) -> dict:
    """The main loop of one row's kernel for sm_<arch> (qmatmul.teaching.sass.measure): instructions, weights a thread
    decodes an iteration, per weight, ceiling, opcodes, spills."""
    return _measure(name, row, arch, getattr(jit_functions(row["chapter"]), row["kernel"]))


def tma_rows() -> dict:
    """NAME -> (scales, x's dtype, config): qmatmul.kernels.gemm's TMA kernel with the tiles tma_config gives on a GPU, and the
    group-scaled mode untransposed (the fifth round's) beside the transposed one (the sixth's)."""
    import torch

    from qmatmul.kernels import gemm

    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    rows = {"tma-bf16": (gemm.NO_SCALES, bf16), "tma-group": (gemm.GROUP_SCALES, bf16),
            "tma-fp8-row": (gemm.ROW_SCALES, fp8), "tma-fp8-block": (gemm.BLOCK_SCALES, fp8)}  # fmt: skip
    out = {name: (scales, dt, gemm.tma_config(dt, scales, "cuda")) for name, (scales, dt) in rows.items()}
    out["tma-group-plain"] = (gemm.GROUP_SCALES, bf16, out["tma-group"][2] | {"SWAP": False})
    return out


def compile_tma(scales: int, dtype, cfg: dict, arch: int = 90):
    """qmatmul.kernels.gemm.tma_kernel compiled for sm_<arch> as tma_matmul would launch it (132 programs, 128-wide groups)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from qmatmul.kernels import gemm

    cfg = dict(cfg)
    options = {k: cfg.pop(k) for k in ("num_warps", "num_stages")}
    bm, bn, bk = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    dt = "bf16" if dtype.itemsize == 2 else "fp8e4nv"
    constants = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.pop("GROUP_M", 8), NUM_SMS=132, SCALES=scales,
                     HAS_G=False, PROMOTE=dtype.itemsize == 1 and scales == gemm.ROW_SCALES,
                     FLATTEN=cfg.pop("FLATTEN", False), GROUP=128 if scales == gemm.GROUP_SCALES else 0,
                     SWAP=cfg.pop("SWAP", False))  # fmt: skip
    fn = gemm.tma_kernel
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_desc"):
            signature[name] = f"tensordesc<{dt}[{bm if name == 'x_desc' else bn}, {bk}]>"
        else:
            signature[name] = "*bf16" if name == "y_ptr" else "*fp32" if name.endswith("_ptr") else "i32"
            if name != "M":
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", arch, 32),
                          options=options)  # fmt: skip


def mma_loop(code: list[tuple[int, str]]) -> list[str]:
    """The instructions of the innermost loop that issues the MMAs (a persistent kernel's K loop)."""
    with_mma = [r for r in loops(code) if any("GMMA" in i for a, i in code if r[0] <= a <= r[1])]
    if not with_mma:
        raise ValueError("no loop with an MMA in this kernel's SASS")
    start, end = min(with_mma, key=lambda r: r[1] - r[0])
    return [ins for addr, ins in code if start <= addr <= end]


def tma_report(arch: int = 90) -> dict:
    """NAME -> the K loop of each tma_rows() kernel: instructions a thread issues a step, MMAs, global loads, waits for
    the MMAs, spilled registers, shared memory."""
    out = {}
    for name, (scales, dtype, cfg) in tma_rows().items():
        k = compile_tma(scales, dtype, cfg, arch)
        code = disassemble(k.asm["cubin"])
        loop = mma_loop(code)
        ops = collections.Counter(opcode(i) for i in loop)
        out[name] = dict(cfg=cfg, loop=len(loop), mma=sum("GMMA" in op for op in ops.elements()), ldg=ops["LDG"],
                         waits=sum("WARPGROUP.DEPBAR" in i for i in loop), ffma=ops["FFMA"],
                         spills=sum(opcode(i) in ("LDL", "STL") for _, i in code), shared=k.metadata.shared)  # fmt: skip
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 (default), 80, 100")
    parser.add_argument("--ops", type=int, default=10, help="how many opcodes to list per kernel")
    parser.add_argument(
        "--set",
        default="",
        metavar="K=V,...",
        help="override the configuration, e.g. BLOCK_N=64,num_warps=8 (every row named)",
    )
    parser.add_argument(
        "--fit",
        action="store_true",
        help="instead: every graded launch on every GPU class, shared memory and spills",
    )
    parser.add_argument("--write", action="store_true", help="with --fit: record docs/gpu-fit.json and .md")
    parser.add_argument(
        "--sweep",
        default="",
        metavar="FMT,...",
        help="instead of kernels(): tools/sweep_decode.py's candidates for these formats (w4a16, mxfp4, nvfp4)",
    )
    parser.add_argument(
        "--tma",
        action="store_true",
        help="instead: qmatmul.kernels.gemm's TMA GEMM, its K loop per mode (tma_rows())",
    )
    parser.add_argument(
        "--waves",
        action="store_true",
        help="instead: the layouts chapter's Gluon decode at M = 1, 4, 16: registers, programs a SM, waves",
    )
    parser.add_argument("names", nargs="*", help="rows of kernels() (default: all)")
    args = parser.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU, whatever the shell says
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the JIT's default, said aloud (no warning)
    if args.tma:
        print(f"sm_{args.arch}: qmatmul.kernels.gemm.tma_kernel, the K loop a thread issues per step")
        for name, r in tma_report(args.arch).items():
            print(f"{name:16} loop {r['loop']:4}  MMA {r['mma']:2}  LDG {r['ldg']:2}  FFMA {r['ffma']:3}  "
                  f"waits {r['waits']}  spills {r['spills']:3}  shared {r['shared'] // 1024} KB  {r['cfg']}")  # fmt: skip
        return 0
    if args.fit:
        return fit_report(args.write)
    if args.waves:
        print(f"sm_{args.arch}, {SMS} SMs: qmatmul.kernels.mma_decode._w4_mma_kernel as config() launches it")
        for r in waves_report(args.arch):
            print(f"M={r['M']:2} {r['N']:5} x {r['K']:5}  regs {r['regs']:3}  shared {r['shared']:5} B  "
                  f"programs/SM {r['per_sm']}  grid {r['grid']:5}  waves {r['waves']:.2f}  warps/SM {r['warps_per_sm']:2}  "
                  f"barriers/group {r['barriers']}  instr/weight {r['per_weight']:.2f}  {r['cfg']}")  # fmt: skip
        return 0
    if args.sweep:
        rows = {k: v for fmt in args.sweep.split(",") for k, v in sweep_rows(fmt).items()}
    else:
        rows = kernels(args.arch)
    unknown = set(args.names) - set(rows)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))} (choose from {', '.join(rows)})")
    print(f"sm_{args.arch}: SASS in the main loop, per weight a thread decodes (issue budget {ISSUE_BUDGET})")
    width = max(8, *(len(n) for n in args.names or rows))
    print(
        f"{'kernel':{width}} {'loop':>5} {'weights':>7} {'/weight':>7} {'ceiling':>7} {'spills':>6}  most issued"
    )
    overrides = {k: int(v) for k, v in (kv.split("=") for kv in args.set.split(",") if kv)}
    for name in args.names or rows:
        row = dict(rows[name], cfg=rows[name]["cfg"] | overrides)
        r = measure(name, row, args.arch)
        top = " ".join(f"{op} {n}" for op, n in r["ops"].most_common(args.ops))
        print(f"{name:{width}} {r['loop']:5} {r['weights']:7.0f} {r['per_weight']:7.2f} {r['ceiling']:7.0%} "
              f"{r['spills']:6}  {top}")  # fmt: skip
    return 0


# An H200's (and an H100 SXM's) SM: 132 of them, 64 K registers, 64 warps, 32 blocks (shared memory: GPUS).
SMS, SM_REGS, SM_WARPS, SM_BLOCKS = 132, 65536, 64, 32
WAVE_SHAPES = ((28672, 8192), (8192, 28672), (8192, 8192), (28672, 4096), (14336, 4096), (4096, 14336),
               (6144, 4096), (4096, 4096), (1024, 4096))  # fmt: skip


def waves_report(arch: int = 90, Ms=(1, 4, 16)) -> list[dict]:
    """Per M: the compiled kernel's registers, shared memory and the programs an SM holds (the tightest of registers,
    shared memory, warps and blocks), its main loop's barriers and instructions a weight; per shape: config()'s
    grid and the waves it makes (grid / (SMs x programs an SM)). Occupancy from the compiled resources, not measured."""
    import math

    from qmatmul.kernels import mma_decode

    fn = jit_functions("mma_decode")._w4_mma_kernel
    rows = []
    for M in Ms:
        row = mma_row(mma_decode.config(M, *WAVE_SHAPES[0]), 8 if M <= 8 else 16)
        k = compile_kernel(fn, row, arch)
        res = resources(k.asm["cubin"])
        loop = main_loop(disassemble(k.asm["cubin"]))
        warps = row["cfg"]["num_warps"]
        shared = max(res["static_shared"], k.metadata.shared)
        per_sm = min(SM_REGS // (res["regs"] * 32 * warps), SM_WARPS // warps, SM_BLOCKS,
                     GPUS[arch][1] // shared if shared else SM_BLOCKS)  # fmt: skip
        for N, K in WAVE_SHAPES:
            cfg = mma_decode.config(M, N, K)
            grid = math.ceil(N / (16 * cfg["R"] * cfg["num_warps"])) * cfg["SPLIT_K"]
            rows.append(dict(M=M, N=N, K=K, cfg=cfg, regs=res["regs"], shared=shared, per_sm=per_sm, grid=grid,
                             waves=grid / (SMS * per_sm), warps_per_sm=min(per_sm, math.ceil(grid / SMS)) * warps,
                             barriers=sum(opcode(i).startswith("BAR") for i in loop),
                             per_weight=len(loop) / weights_per_thread(row)))  # fmt: skip
    return rows


FIT_JSON = ROOT / "docs" / "gpu-fit.json"
FIT_MD = ROOT / "docs" / "gpu-fit.md"


def fit_rows() -> list[dict]:
    rows = []
    for arch in GPUS:
        for label, chapter, kernel, cfg in launches():
            try:
                r = fit(arch, label, chapter, kernel, cfg)
            except Exception as exc:  # noqa: BLE001 - a compiler crash is a row of the report
                r = dict(
                    arch=arch, gpu=GPUS[arch][0], label=label, error=f"{type(exc).__name__}: {exc}"[:300]
                )
            print(describe(r), flush=True)
            rows.append(r)
    return rows


def describe(r: dict) -> str:
    if r.get("skipped"):
        return f"sm_{r['arch']:<4} {r['label']:20} not launched there (the chapter skips it)"
    if "error" in r:
        return f"sm_{r['arch']:<4} {r['label']:20} DOES NOT COMPILE: {r['error'][:150]}"
    return (
        f"sm_{r['arch']:<4} {r['label']:20} {r['shared'] / 1024:6.1f} KB of {r['limit'] // 1024:3d}"
        f"{'' if r['fits'] else ' DOES NOT FIT'}  spills {r['spills']:5d}  "
        f"{r['mma']}"
    )


def render_fit(data: dict) -> str:
    """docs/gpu-fit.md from docs/gpu-fit.json: one table, a launch a row, a GPU class a column."""
    meta, rows = data["meta"], data["rows"]
    archs = list(dict.fromkeys(r["arch"] for r in rows))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    cell = {(r["arch"], r["label"]): r for r in rows}
    gpus = {r["arch"]: r["gpu"] for r in rows}
    lines = [
        "# The graded kernels on every GPU class, compiled here",
        "",
        f"Generated by `python -m tools.sass --fit` from docs/gpu-fit.json (triton {meta['triton']}, {meta['date']}; "
        "compiled on a CPU for each compute capability with the chapters' own tile choices, no GPU). Each cell: the "
        "shared memory one program takes (KB), the registers spilled to local memory (instructions, `sp`), `fma` "
        "where Triton has no tensor-core `tl.dot` for the GPU, and for `tl.dot_scaled` the operand type of the MMA "
        "it compiles to (bf16: the e2m1 weights are upcast first). A cell over the class's limit would stop the learner's "
        "cell with OutOfResources; spills slow a kernel down. Measured on a GPU: only the H200 (docs/benchmark-h200.md).",
        "",
        "| launch | " + " | ".join(f"sm_{a} {gpus[a]}" for a in archs) + " |",
        "|---|" + "---|" * len(archs),
    ]
    for label in labels:
        out = []
        for a in archs:
            r = cell[(a, label)]
            if r.get("skipped"):
                out.append("skipped")
                continue
            if "error" in r:
                out.append("**does not compile**")
                continue
            text = f"{r['shared'] / 1024:.0f} KB"
            text += f", sp {r['spills']}" if r["spills"] else ""
            text += "" if r["tensor_cores"] else ", fma"
            if "dot_scaled" in label:  # tcgen05's kind::f16 is the 16-bit float kind: bf16 here
                kind = r["mma"].split()[-1]
                text += ", bf16 MMA" if kind in ("bf16", "f16") else f", {kind} MMA"
            out.append(text if r["fits"] else f"**{text} > {r['limit'] // 1024} KB**")
        lines.append(f"| {label} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def fit_report(write: bool) -> int:
    """Compile every launch for every GPU class; with write, record docs/gpu-fit.json and .md. 1 if one fails."""
    import datetime
    import json

    import triton

    rows = fit_rows()
    if write:
        data = {
            "meta": {"triton": triton.__version__, "date": datetime.date.today().isoformat()},
            "rows": rows,
        }
        FIT_JSON.write_text(json.dumps(data, indent=1, default=str) + "\n")
        FIT_MD.write_text(render_fit(data))
    return 1 if any("error" in r or not (r.get("skipped") or r["fits"]) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
