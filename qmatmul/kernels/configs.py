"""Launch configurations: every launch of the course's own kernels as data, one function a class of GPU choosing it.

`choose(kernel, device, **shape)` gives a launch's keyword arguments (tiles, warps, stages, the kernel's other
constexprs) for a kernel's name on the class of GPU `gpu_class(device)` says:

* "interpreter": no CUDA device, Triton's interpreter on the CPU;
* "fma": a CUDA GPU older than sm_80 (a T4), where Triton's tl.dot has no tensor cores;
* "hopper": sm_90 (the H100 and H200, where the course's kernels were measured);
* "tensor_cores": sm_80 to sm_89, GPUs with tensor cores for tl.dot before Hopper (A100, RTX 30xx, L4);
* "blackwell": newer than sm_90 (the B200, RTX 50xx): the tensor-core GPUs' launches, and Hopper's where a rule
  takes them from sm_90 on.

One function a class (`interpreter`, `fma`, `hopper`, `tensor_cores`, `blackwell`) holds that class's launch of every
kernel it runs: a table of `Launch` where the launch is constant, a few lines of rules where it depends on the shape
(M, N, K, block, group_size) or on a path the chapter chose (`fp8_dot`), as Triton's python/triton_kernels
opt_flags.py does. The kernel names:

* "w8a16.tiled", "w8a16.decode", "w4a16.tiled", "w4a16.decode", "fp8.tiled", "fp8.decode", "fp8.block",
  "mxfp4.tiled", "mxfp4.decode", "mxfp4.dot_scaled" (CHAPTER_KERNELS): the chapters' kernels, which the chapters'
  config functions (qmatmul/scaffold/, the learner's notebook calls them) launch; NVFP4's are MXFP4's;
* "chapter.decode", "chapter.tiled": the tiles the chapters' kernels take off a tensor-core GPU (FMA_DECODE,
  FMA_TILED, INTERPRETER_DECODE, INTERPRETER_TILED);
* "gemm", "gemm.grouped": the plain Triton GEMM on a decoded weight (`qmatmul.kernels.gemm.matmul_kernel`), grouped
  when each step's product is scaled before it is added (W4A16);
* "gemm.tma", "gemm.tma.fp8", "gemm.tma.block", "gemm.tma.group": the TMA GEMM (`qmatmul.kernels.gemm.tma_kernel`) on
  16-bit operands (unscaled, or scaled by row or column), fp8 ones, FP8's block scales and W4A16's group scales;
* "expert.w4a16_gemv", "expert.w4a16_tc", "expert.fp4", "expert.w8a16_split": `qmatmul.kernels.expert`'s decodes;
* "mma.w4a16", "mma.fp4": `qmatmul.kernels.mma_decode`'s Gluon decodes (shape: M, N, K and, for fp4, the block).

The kernels in HOPPER_EVERYWHERE were tuned on the H200 alone: every CUDA GPU takes Hopper's launch of them, and
`choose` does not ask the GPU's compute capability for them (tools/sass.py reads the TMA and MMA launches on a machine
without a GPU).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from qmatmul.formats.fp8 import SCALE_BLOCK


@dataclass(frozen=True)
class Launch:
    """One launch's configuration: the tiles (BLOCK_M x BLOCK_N outputs a program, BLOCK_K of K a step), warps,
    software-pipeline stages, and the kernel's other constexprs and options (`extra`: SPLIT_K, GPI, R, maxnreg, ...).
    A field left None is not the kernel's: the GEMV has no BLOCK_M, the Gluon kernels no tiles and no stages.
    `order`: the keys in the order `of` was given them, which `kwargs` keeps (the order of the dicts the config
    functions wrote out before this table)."""

    BLOCK_M: int | None = None
    BLOCK_N: int | None = None
    BLOCK_K: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    extra: tuple[tuple[str, object], ...] = ()
    order: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, **values) -> Launch:
        """A Launch from keyword arguments: the fields by name, every other one into `extra`, in order."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "order"}
        extra = tuple((k, v) for k, v in values.items() if k not in names)
        return cls(**{k: v for k, v in values.items() if k in names}, extra=extra, order=tuple(values))

    def kwargs(self) -> dict:
        """The launch as the kernels' wrappers take it: the fields set (tiles, num_warps, num_stages) and extra, in
        `order` (fields first where it is empty)."""
        fields = (self.BLOCK_M, self.BLOCK_N, self.BLOCK_K, self.num_warps, self.num_stages)
        names = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
        given = {k: v for k, v in zip(names, fields, strict=True) if v is not None} | dict(self.extra)
        return {k: given[k] for k in self.order if k in given} | given

    def updated(self, **values) -> Launch:
        """This launch with `values` set: the keys it has keep their place in the order, new ones come last (as
        `dict(launch.kwargs(), **values)`)."""
        return Launch.of(**(self.kwargs() | values))


# The 4-bit decode kernels have no K masks, so their BLOCK_K must divide K. It is never below 64, two scale blocks a
# step or more: on the H200 (Triton 3.6, 2026-12-01) NVFP4's decode kernel gave wrong results on 99 % of the elements
# at BLOCK_K = 16 (K = 176, one e4m3 scale a step), where the interpreter and every tile of 128 or more were right.
MIN_DECODE_BLOCK_K = 64


# ----------------------------------------------------------------------------------------------------------
# Before sm_80 (a T4): tl.dot on FMAs

# Before sm_80 (a T4) Triton has no tensor-core tl.dot (from 3.2 on: triton-lang/triton#5066): it multiplies with
# FMAs, in float32, and takes the weight tile through shared memory as float32 (BLOCK_N x BLOCK_K x 4 bytes, within
# a T4's 64 KB). Compiled for sm_75 on a CPU (tools/sass.py --fit, docs/gpu-fit.md), a BLOCK_K of 32 is what keeps
# the kernels from spilling registers: the H200's decode tiles need 128 KB there (W8A16) or spill 1600 registers a
# step (MXFP4, NVFP4, FP8).
FMA = {
    "chapter.decode": Launch.of(BLOCK_M=16, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=1),
    "chapter.tiled": Launch.of(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1),
}
# The plain GEMM takes the FMA tiles on a T4, grouped or not (128 x 128 spilled 8000 registers there, tools/sass.py).
FMA["gemm"] = FMA["gemm.grouped"] = FMA["chapter.tiled"]
# The chapters' kernels take them too (W4A16's tiled kernel in `fma`; W4A16's decode and MXFP4's tl.dot_scaled keep
# Hopper's tiles, HOPPER_EVERYWHERE), FP8's decoding e4m3 to fp16 whatever the chapter's path (no fp8 tl.dot there).
FMA |= {
    "w8a16.tiled": FMA["chapter.tiled"],
    "w8a16.decode": FMA["chapter.decode"].updated(SPLIT_K=1),  # the K split not measured before Hopper
    "fp8.tiled": FMA["chapter.tiled"].updated(FP8_DOT=False),
    "fp8.decode": FMA["chapter.decode"].updated(FP8_DOT=False, SPLIT_K=1),
    # BLOCK_K stays the scale block, so a narrower tile (16 KB, not 64 KB)
    "fp8.block": FMA["chapter.tiled"].updated(BLOCK_N=32, BLOCK_K=SCALE_BLOCK, FP8_DOT=False),
    "mxfp4.tiled": FMA["chapter.tiled"],
    # Two scale blocks a step (divisible_k); 32 columns keep 64 of K free of spills on sm_75 (128 columns spilled 196
    # registers, tools/sass.py).
    "mxfp4.decode": FMA["chapter.decode"].updated(BLOCK_N=32, BLOCK_K=MIN_DECODE_BLOCK_K),
}


def fma(kernel: str, **shape) -> Launch:
    """A CUDA GPU older than sm_80 (a T4): the FMA tiles; Hopper's launch of the kernels tuned on the H200 alone."""
    if kernel in HOPPER_EVERYWHERE:
        return hopper(kernel, **shape)
    if kernel == "w4a16.tiled":  # BLOCK_K still divides the group size
        return FMA["chapter.tiled"].updated(BLOCK_K=min(FMA["chapter.tiled"].BLOCK_K, shape["group_size"]))
    return _held(FMA, kernel, "a GPU older than sm_80")


# ----------------------------------------------------------------------------------------------------------
# Triton's interpreter on the CPU

INTERPRETER = {
    # Triton's interpreter on the CPU (every chapter's config functions off a GPU): it prefers few, large programs.
    "chapter.decode": Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1),
    "chapter.tiled": Launch.of(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1),
    # the plain GEMM: never run (the wrappers decode first only on a GPU)
    "gemm": FMA["chapter.tiled"],
    "gemm.grouped": FMA["chapter.tiled"],
    # the TMA GEMM: small tiles; the block-scaled one steps one scale block at a time
    "gemm.tma": Launch.of(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1),
    "gemm.tma.fp8": Launch.of(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1),
    "gemm.tma.group": Launch.of(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1),
    "gemm.tma.block": Launch.of(BLOCK_M=32, BLOCK_N=32, BLOCK_K=SCALE_BLOCK, num_warps=4, num_stages=1),
    "expert.w4a16_gemv": Launch.of(BLOCK_N=32, GPI=2, num_warps=4, num_stages=1),
    "expert.w4a16_tc": Launch.of(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=1, SPLIT_K=2),
    "expert.fp4": Launch.of(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=1, SPLIT_K=2),
    "expert.w8a16_split": Launch.of(BLOCK_N=32, BLOCK_K=64, SPLIT_K=3, num_warps=4, num_stages=1),
}
# The chapters' kernels take the chapter tiles (W4A16's, FP8's and MXFP4's tl.dot_scaled with a change: `interpreter`).
INTERPRETER |= {
    "w8a16.tiled": INTERPRETER["chapter.tiled"],
    # K split in two, so that the CPU's checks run the split path a GPU takes where N is short
    "w8a16.decode": INTERPRETER["chapter.decode"].updated(SPLIT_K=2),
    "mxfp4.tiled": INTERPRETER["chapter.tiled"],
    "mxfp4.decode": INTERPRETER["chapter.decode"],
}


def interpreter(kernel: str, **shape) -> Launch:
    """No CUDA device: Triton's interpreter runs every kernel but the Gluon MMA decodes (Gluon has no interpreter),
    at every shape with one launch; the chapters' tiles where a chapter's kernel reads a group size or FP8's path
    (shape: group_size, fp8_dot, M)."""
    tiled, decode = INTERPRETER["chapter.tiled"], INTERPRETER["chapter.decode"]
    if kernel == "w4a16.tiled":  # BLOCK_K divides the group size
        return tiled.updated(BLOCK_K=min(64, shape["group_size"]))
    if kernel == "w4a16.decode":  # one group of K a step
        return decode.updated(BLOCK_K=shape["group_size"])
    if kernel == "fp8.tiled":  # on the path the chapter chose (the interpreter runs both)
        return tiled.updated(FP8_DOT=shape["fp8_dot"])
    if kernel == "fp8.decode":  # K split in two, as W8A16's: the CPU's checks run the split path
        return decode.updated(FP8_DOT=shape["fp8_dot"], SPLIT_K=2)
    if kernel == "fp8.block":  # a scale block a step
        return tiled.updated(BLOCK_K=SCALE_BLOCK, FP8_DOT=shape["fp8_dot"])
    if kernel == "mxfp4.dot_scaled":  # the prefill tiles above 16 rows, the decode tiles up to 16
        return tiled if shape["M"] > 16 else decode
    return _held(INTERPRETER, kernel, "the interpreter")


# ----------------------------------------------------------------------------------------------------------
# Hopper (sm_90): the H200's measured launches

# The W4A16 GEMM (each step's product scaled before it is added, so two accumulators live at once): 64 x 128 x 32,
# which spills nothing on sm_80, 90 and 100 where the ungrouped tiles spilled 92-460 registers (compiled here,
# docs/gpu-fit.md). Every tensor-core GPU takes it.
GROUPED_GEMM = Launch.of(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)

HOPPER = {
    # Hopper's 227 KB of shared memory takes three stages of 128 x 256 x 64 (144 KB).
    "gemm": Launch.of(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    "gemm.grouped": GROUPED_GEMM,
    # Graph-timed on the H200 (docs/perf-notes.md, fifth round): 99-100 % of cuBLAS bf16 at M = 2048, 93 % at 4096
    # (N = K = 8192), where the tutorial's matmul_kernel with gemm_config reached 73 % and 63 %.
    "gemm.tma": Launch.of(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    # Graph-timed on the H200 (docs/perf-notes.md, fourth round; tools/sweep_prefill.py --parts fp8tma): 84 % of
    # torch._scaled_mm row-wise at 4096 x 8192 x 8192, promoted, no wrong output.
    "gemm.tma.fp8": Launch.of(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=3),
    # Graph-timed on the H200 (docs/perf-notes.md, fifth round; tools/sweep_prefill.py --parts gemmtma): 51 % of
    # torch._scaled_mm row-wise at M = 2048 and 4096, N = K = 8192 with a scale vector a step; 256 x 128 24 %.
    "gemm.tma.block": Launch.of(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=4),
    # Graph-timed on the H200 (docs/perf-notes.md, sixth round; tools/sweep_prefill.py --parts gemmgroup): 70-73 %
    # of cuBLAS at M = 2048 and 4096 for 128-wide groups, swapped (the scales two a thread, not 32 with their
    # address arithmetic); the same tile unswapped 46-48 %, two programs an SM 45-54 %.
    "gemm.tma.group": Launch.of(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=3, SWAP=True),
    # Graph-timed on the H200 (docs/perf-notes.md, fourth round; tools/sweep_decode.py `lanes`, the same loop): 64 x 128,
    # 4 warps, 6 stages, split-K 4 reached 38 / 37, 36 / 36 and 31 / 31 % of copy at M = 1 / 16 on 28672 x 8192,
    # 8192 x 28672 and 8192 x 8192, where 32 columns, 5 stages and no split measured 37 / 27 / 25 % at M = 16.
    "expert.w4a16_tc": Launch.of(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=6, SPLIT_K=4),
}


def hopper(kernel: str, **shape) -> Launch:
    """sm_90: the launches measured on the H200 (docs/perf-notes.md); shape: the rules' M, N, K, block, group_size
    and fp8_dot. The chapters' kernels: W4A16's decode and MXFP4's tl.dot_scaled here (every CUDA GPU takes them),
    the tiled kernels' own launches above 64 rows, the rest as on the tensor-core GPUs before Hopper (`tensor_cores`).
    """
    if kernel == "expert.w4a16_gemv":
        # Best of 54 on the H200 (docs/expert-h200.md): 40 % of copy at 28672 x 8192, 39 % at 8192 x 28672.
        if shape["K"] >= 16384:
            return Launch.of(BLOCK_N=16, GPI=8, num_warps=4, num_stages=2)
        return Launch.of(BLOCK_N=16, GPI=4, num_warps=2, num_stages=2)
    if kernel == "expert.fp4":
        # Graph-timed on the H200 (docs/perf-notes.md, fourth round; tools/sweep_decode.py `lanes`): 64 x 512, 4 warps,
        # 3 stages, split 2 where N < 16384 reached 43 / 43 / 35 % (MXFP4) and 43 / 42 / 34 % (NVFP4) of copy on
        # 28672 x 8192, 8192 x 28672, 8192 x 8192, against 24-27 % for the chapters' readable kernels.
        split = 2 if shape["N"] < 16384 else 1
        return Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, num_warps=4, num_stages=3, SPLIT_K=split)
    if kernel == "expert.w8a16_split":
        return w8a16_split(shape["N"], shape["K"])
    if kernel == "mma.w4a16":
        return _mma_w4a16(shape["M"], shape["N"])
    if kernel == "mma.fp4":
        return _mma_fp4(shape["M"], shape["N"], shape["K"], shape.get("block", 32))
    if kernel == "w4a16.decode":
        # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), the tile read as it lies ([BLOCK_N, BLOCK_K/2]):
        # 32 columns, 4 warps, 4 stages reached 29 % of the copy bandwidth at 28672 x 8192 for M = 1 and 16 (16 columns:
        # 15 %; 128 columns with 8 warps: 22 %). The earlier [BLOCK_K/2, BLOCK_N] kernel's best was 25 / 16 %. One
        # group of K a step.
        return Launch.of(BLOCK_M=16, BLOCK_N=32, BLOCK_K=shape["group_size"], num_warps=4, num_stages=4)
    if kernel == "w8a16.decode":
        # the chapter's kernel is the split decode's: the same launches, all M rows a program
        return Launch.of(BLOCK_M=16, **w8a16_split(shape["N"], shape["K"]).kwargs())
    if kernel == "fp8.decode" and shape["fp8_dot"] and shape.get("split", True):
        # a Llama-3-8B block's layers (not the 70B ones), on the fp8 path; `split` False: exercise 6's launch (its
        # kernel does not split K)
        N, K = shape["N"], shape["K"]
        if K < 16384 and (N <= 6144 or 8192 < N < 16384):
            return fp8_split(N)
    if kernel == "mxfp4.dot_scaled":
        # The tl.dot_scaled bonus: the decode tiles for M <= 16 (BLOCK_N = 64 measured best for it on the H200), the
        # prefill tiles of the tensor-core GPUs above.
        if shape["M"] > 16:
            return mxfp4_prefill_tiles(shape["M"])
        return Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3)
    big = shape.get("M", 0) > 64
    if kernel == "w8a16.tiled" and big:
        # H200, graph-timed at M = 2048 / 4096, N = K = 8192 (docs/perf-notes.md): with the weight tile as tl.dot's
        # first operand, 82 / 79 % of cuBLAS's 8192^3 rate in the sweep (128 x 128 x 64, 4 warps: 57 / 52 %), the
        # notebook kernel 76 / 71 %. 3 stages need 120 KB of shared memory, which Hopper's 227 KB holds.
        return Launch.of(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
    if kernel == "fp8.tiled" and big and shape["fp8_dot"]:
        # Swept on the H200 at 4096 x 8192 x 8192 (docs/perf-notes.md, 2026-12-02), % of torch._scaled_mm: with the
        # partial sums promoted every BLOCK_K, 256 x 128 x 128 with 8 warps, 3 stages 51 %; 128 x 128 x 128 with 8 warps
        # 47 %, with 4 warps 32 % (it spills). Without promotion (wrong on Hopper) 128 x 128 x 128 with 4 warps: 65 %.
        # Hopper is where Triton's fp8 tl.dot accumulates imprecisely unless told otherwise
        # (qmatmul.scaffold.fp8.imprecise_fp8_accumulation): the promoted partial sums want two warp groups.
        return Launch.of(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=8, num_stages=3)
    if kernel == "fp8.block" and big and shape["fp8_dot"]:
        # Graph-timed on the H200 at M = 2048 and 4096, N = K = 8192 (docs/perf-notes.md, fifth round): 8 warps
        # 34-35 % of torch._scaled_mm row-wise, 4 warps 14 % (one warp group holds the step's product and the
        # accumulator: they spill), 256-row tiles 16-17 %.
        return Launch.of(
            BLOCK_M=128, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=True, num_warps=8, num_stages=4
        )
    if kernel == "mxfp4.tiled" and big:
        # Graph-timed on the H200 (docs/perf-notes.md): 12 % of cuBLAS at M = 2048 and 4096 against 7 % for
        # 128 x 128 x 64; Hopper's 227 KB of shared memory holds the three stages (an A100's 164 KB would not).
        return Launch.of(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)
    if kernel in CHAPTER_KERNELS:
        return tensor_cores(kernel, **shape)
    return _held(HOPPER, kernel, "Hopper")


def w8a16_split(N: int, K: int) -> Launch:
    """The W8A16 decode with K split (sm_90): the expert split decode's launch and the chapter's exercise 3's, which
    is the same kernel (qmatmul/kernels/expert.py `_w8_split_kernel`)."""
    # Graph-timed on the H200 (docs/perf-notes.md, eleventh round; sweep 25), % of copy at M = 1 / 16: 8192 x 28672
    # 92 / 92 with 64 x 512, K split 2 (the chapter's solution 88 / 87); 8192 x 8192 75 / 75 with 64 x 256, 4 stages
    # (solution 72 / 72). Where N >= 16384 the solution's 128-column strips already fill the GPU (92 %): no split.
    # A Llama-3-8B block's narrower layers, graph-timed on an H100 (tools/sweep_gemv.py "xfirst", 2026-12-07,
    # docs/sweep-gemv-h100.json), µs at M = 1 against the chapter's solution: 32 columns x 256 of K, 4 stages, K
    # split 8 at 1024 x 4096 (5.5 against 8.8) and 2 at 4096 x 4096, 6144 x 4096 and 4096 x 14336 (9.7, 12.6,
    # 24.8 against 10.2, 13.5, 27.5); 14336 x 4096 best unsplit on 64 columns (24.5; split 2: 26.7).
    if N >= 16384:
        return Launch.of(BLOCK_N=128, BLOCK_K=256, SPLIT_K=1, num_warps=4, num_stages=3)
    if K >= 16384:
        return Launch.of(BLOCK_N=64, BLOCK_K=512, SPLIT_K=2, num_warps=4, num_stages=3)
    if N <= 6144:
        split = 8 if N <= 1024 else 2
        return Launch.of(BLOCK_N=32, BLOCK_K=256, SPLIT_K=split, num_warps=4, num_stages=4)
    return Launch.of(BLOCK_N=64, BLOCK_K=256, SPLIT_K=2 if N <= 8192 else 1, num_warps=4, num_stages=4)


def fp8_split(N: int) -> Launch:
    """FP8's decode (exercise 4) on sm_90's native fp8 path at a Llama-3-8B block's layers (K < 16384, N <= 6144 or
    8192 < N < 16384); the 70B layers keep `tensor_cores`'s launches, unsplit."""
    # Graph-timed on an H100 (tools/sweep_gemv.py --formats fp8 --designs xfirst, 2026-12-07,
    # docs/sweep-gemv-fp8-h100.json), µs at M = 1 against the unsplit 64 x 512 (docs/sweep-gemv-h100.json): K split 8
    # on 32 columns at 1024 x 4096 (5.4 against 8.8); split 2 up to 6144 columns (4096 x 4096 9.5 against 10.0,
    # 4096 x 14336 23.9 against 24.4, 6144 x 4096 12.5 against 12.3); 14336 x 4096 unsplit on 64 x 256 (23.8 against
    # 25.2). 28672 x 4096 stays on 128 columns (43.3; 64 columns split 4: 45.7).
    if N > 6144:
        return Launch.of(
            BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, FP8_DOT=True, num_warps=4, num_stages=4, SPLIT_K=1
        )
    return Launch.of(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, FP8_DOT=True, num_warps=4, num_stages=4,
                     SPLIT_K=8 if N <= 1024 else 2)  # fmt: skip


def _mma_w4a16(M: int, N: int) -> Launch:
    """The W4A16 MMA decode: row tiles a warp (R), warps, how x is read, split-K."""
    # Graph-timed on the H200 (docs/perf-notes.md, eighth round, sweep 20), % of copy on 28672 x 8192, 8192 x 28672,
    # 8192 x 8192, with K split 2 ways where N is long and 8 where it is short. Up to M = 4 each lane reads its own x
    # (M = 1: 74 / 76 / 56; M = 4: 71 / 66 / 47, two tiles a warp where N is short: 56 / 44 with one); from M = 5 the
    # program reads x once through shared memory, where per lane every warp's reads of x outgrow the weight's
    # (M = 16, two tiles a warp: 54 / 57 / 39; per lane at best 45 / 48 / 39). M = 2-4 where N is short (twelfth
    # round, sweep 33): one tile a warp and K split 7 ways, 896 programs of 70 registers, one wave of seven an SM on
    # the H200, ahead of two tiles a warp and of 8 ways (two waves).
    split = 2 if N >= 16384 else 8
    if M == 1 or (M <= 4 and N >= 16384):
        return Launch.of(R=1, num_warps=4, X_SHARED=False, SPLIT_K=split)
    if M <= 4:
        return Launch.of(R=1, num_warps=4, X_SHARED=False, SPLIT_K=7)
    return Launch.of(R=1 if M <= 8 else 2, num_warps=4, X_SHARED=True, SPLIT_K=split)


def _mma_fp4(M: int, N: int, K: int, block: int) -> Launch:
    """The MXFP4 and NVFP4 MMA decodes (block: 32 or 16 values a scale): row tiles a warp, how x is read, split-K."""
    # Graph-timed on the H200 (docs/perf-notes.md, ninth and twelfth rounds, sweeps 21, 22, 28 and 31), the same rule
    # for MXFP4 and NVFP4. The block-diagonal kernel at M = 1, and at M = 2-4 where N is long (MXFP4 to 4, NVFP4 to 2:
    # its step of 64 values holds 8 / M blocks), K holding whole steps: two tiles a warp, K split 4 ways where N is
    # long, else 8. From M = 5, x through shared memory with two tiles a warp and K split 8 ways (per lane, every
    # warp's reads of x cost 4-9 points at M = 16); otherwise x per lane, two tiles a warp and K split 4 ways where N
    # is long, 16 ways where N is short and K long, one tile and 8 ways on 8192 x 8192.
    mp, nb = diag_shape(M, block)
    if nb * block >= 64 and K % (nb * block) == 0 and (M == 1 or (M <= 4 and N >= 16384)):
        # the block-diagonal kernel, at most 72 registers: seven programs of 4 warps an SM (896 at 28672 x 8192, one
        # wave on the H200's 132 SMs; with 80 registers six fit, and a second wave cost 15-25 points)
        return Launch.of(
            R=2, num_warps=4, DIAG=True, MP=mp, NB=nb, SPLIT_K=4 if N >= 16384 else 8, maxnreg=72
        )
    if M >= 5:
        return Launch.of(R=2, num_warps=4, X_SHARED=True, SPLIT_K=8)
    if N >= 16384:
        return Launch.of(R=2, num_warps=4, X_SHARED=False, SPLIT_K=4)
    if K >= 16384:
        return Launch.of(R=2, num_warps=4, X_SHARED=False, SPLIT_K=16)
    return Launch.of(R=1, num_warps=4, X_SHARED=False, SPLIT_K=8)


def diag_shape(M: int, sb: int) -> tuple[int, int]:
    """(MP, NB) of the block-diagonal kernel for M rows of x and blocks of sb values: MP rows padded to 1, 2 or 4, NB
    scale blocks a step, MP x NB of the MMA's eight columns; one row takes 128 values of K a step."""
    mp = 1 if M == 1 else 2 if M == 2 else 4
    return mp, 128 // sb if mp == 1 else 8 // mp


# ----------------------------------------------------------------------------------------------------------
# GPUs with tensor cores for tl.dot before Hopper (sm_80 to sm_89); the Blackwells take these launches too

TENSOR_CORES = {
    # From sm_80 on, Hopper aside: 128 x 128 x 32 (48 KB).
    "gemm": Launch.of(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3),
    "gemm.grouped": GROUPED_GEMM,
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01): with the tile read as it lies ([BLOCK_N, BLOCK_K/2]),
    # 32 columns x 512 of K, 4 warps, 3 stages reached 24-27 % of the copy bandwidth on all three shapes, M = 1 and
    # 16 (128 columns: 22 % on 28672 x 8192, 18 % on 8192 x 28672).
    "mxfp4.decode": Launch.of(BLOCK_M=16, BLOCK_N=32, BLOCK_K=512, num_warps=4, num_stages=3),
}


def tensor_cores(kernel: str, **shape) -> Launch:
    """sm_80 to sm_89 (A100, RTX 30xx, L4; the Blackwells through `blackwell`): the plain GEMM's tiles and the
    chapters' kernels (their launches on Hopper too, where `hopper` has none of its own); Hopper's launch of the
    kernels tuned on the H200 alone. Shape: M, N, K, group_size, fp8_dot (the chapter's path: the fp8 tl.dot or e4m3
    decoded to fp16)."""
    if kernel in HOPPER_EVERYWHERE:
        return hopper(kernel, **shape)
    M, N, K = shape.get("M", 0), shape.get("N", 0), shape.get("K", 0)
    big = M > 64
    if kernel == "w8a16.tiled":
        return Launch.of(
            BLOCK_M=128 if big else 64,
            BLOCK_N=128,
            BLOCK_K=64 if big else 128,
            num_warps=4,
            num_stages=3 if big else 4,
        )
    if kernel == "w8a16.decode":
        # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), fraction of copy at M = 1 / 16: 28672 x 8192 with
        # 128 columns x 256 of K 94 / 93 (64 x 256: 81 / 83); otherwise 64 x 512: 88 / 87 at 8192 x 28672, 74 / 73 at
        # 8192 x 8192 (64 x 256: 59 / 60; only 128 strips of 64 columns there).
        # No K split: not measured before Hopper (sm_90 takes `w8a16_split`).
        if N >= 16384:
            return Launch.of(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, num_warps=4, num_stages=3, SPLIT_K=1)
        stages = 4 if K >= 16384 else 3
        return Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, num_warps=4, num_stages=stages, SPLIT_K=1)
    if kernel == "w4a16.tiled":
        # The best of 8 configurations timed on the H200 at M = 2048, N = K = 8192 (still only 9.5 % of cuBLAS).
        return Launch.of(
            BLOCK_M=128 if big else 64,
            BLOCK_N=256 if big else 128,
            BLOCK_K=min(64, shape["group_size"]),
            num_warps=8 if big else 4,
            num_stages=3 if big else 4,
        )
    if kernel == "fp8.tiled":
        if not shape["fp8_dot"]:  # decode e4m3 to fp16 in registers: 16-bit tiles, as in W8A16
            return Launch.of(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, FP8_DOT=False, num_warps=8, num_stages=3)
        # the fp8 tl.dot, one warp group (on Hopper the promoted partial sums want two: `hopper`)
        return Launch.of(
            BLOCK_M=128 if big else 64, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=4, num_stages=4
        )
    if kernel == "fp8.decode":
        # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), fraction of copy at M = 1 / 16: 28672 x 8192 with
        # 128 x 256: 93 / 97; 8192 x 28672 with 64 x 1024, 8 warps: 97 / 97 (64 x 512: 90 / 99); 8192 x 8192 with
        # 64 x 512: 81 / 80 (64 x 256: 65 / 64). The fp16 path (no fp8 tensor cores) keeps its earlier tiles.
        # No K split here: Hopper's own rule splits where N is short (`fp8_split`).
        long_k = K >= 16384
        if not shape["fp8_dot"]:
            return Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512 if long_k else 256, FP8_DOT=False, num_warps=4,
                             num_stages=4 if long_k else 3, SPLIT_K=1)  # fmt: skip
        if N >= 16384:
            return Launch.of(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, FP8_DOT=True, num_warps=4, num_stages=3,
                             SPLIT_K=1)  # fmt: skip
        if long_k:
            return Launch.of(BLOCK_M=16, BLOCK_N=64, BLOCK_K=1024, FP8_DOT=True, num_warps=8, num_stages=3,
                             SPLIT_K=1)  # fmt: skip
        return Launch.of(
            BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, FP8_DOT=True, num_warps=4, num_stages=4, SPLIT_K=1
        )
    if kernel == "fp8.block":  # BLOCK_K is the scale block: one activation and one weight scale a step
        if not shape["fp8_dot"]:
            return Launch.of(
                BLOCK_M=64, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=False, num_warps=8, num_stages=3
            )
        return Launch.of(BLOCK_M=128 if big else 64, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=True, num_warps=4,
                         num_stages=4)  # fmt: skip
    if kernel == "mxfp4.tiled":
        return mxfp4_prefill_tiles(M)
    return _held(TENSOR_CORES, kernel, "this tensor-core GPU")


def mxfp4_prefill_tiles(M: int) -> Launch:
    """MXFP4's tiled kernel off Hopper (and its tl.dot_scaled bonus above 16 rows everywhere): BLOCK_K a multiple of
    32, whole MX blocks a step."""
    big = M > 64
    return Launch.of(
        BLOCK_M=128 if big else 64,
        BLOCK_N=128,
        BLOCK_K=64 if big else 128,
        num_warps=8 if big else 4,
        num_stages=3,
    )


# ----------------------------------------------------------------------------------------------------------
# Newer than Hopper (sm_100 on: the B200, the RTX 50xx)


def blackwell(kernel: str, **shape) -> Launch:
    """Newer than sm_90 (the B200, RTX 50xx): the tensor-core GPUs' launches, but MXFP4's tiled kernel, which takes
    Hopper's big tiles above 64 rows from sm_90 on (their three stages need 160 KB of the B200's 227 KB of shared
    memory, 96 KB of an RTX 50xx's 99 KB: compiled here, docs/gpu-fit.json)."""
    if kernel == "mxfp4.tiled":
        return hopper(kernel, **shape)
    return tensor_cores(kernel, **shape)


# ----------------------------------------------------------------------------------------------------------
# The choice

# The expert decodes, the TMA GEMM, the MMA decodes, W4A16's decode and MXFP4's tl.dot_scaled bonus were tuned on the
# H200 alone: every CUDA GPU takes Hopper's launch of them (the TMA GEMM runs from sm_90 on, the MMA decodes from sm_80
# on: their wrappers say where not; W4A16's decode keeps its tiles on a T4 too, one whole group of K a step as the
# notebook teaches, and its spills there: tests/test_gpu_fit.py).
HOPPER_EVERYWHERE = frozenset({
    "gemm.tma", "gemm.tma.fp8", "gemm.tma.block", "gemm.tma.group",
    "expert.w4a16_gemv", "expert.w4a16_tc", "expert.fp4", "expert.w8a16_split",
    "mma.w4a16", "mma.fp4", "w4a16.decode", "mxfp4.dot_scaled",
})  # fmt: skip

# The chapters' kernels, which the chapters' config functions launch (qmatmul/scaffold/; NVFP4 takes MXFP4's).
CHAPTER_KERNELS = frozenset({
    "w8a16.tiled", "w8a16.decode", "w4a16.tiled", "w4a16.decode", "fp8.tiled", "fp8.decode", "fp8.block",
    "mxfp4.tiled", "mxfp4.decode", "mxfp4.dot_scaled",
})  # fmt: skip

CLASSES = {
    "interpreter": interpreter,
    "fma": fma,
    "hopper": hopper,
    "tensor_cores": tensor_cores,
    "blackwell": blackwell,
}


def gpu_class(device) -> str:
    """The class of GPU whose launches `device` takes: "interpreter" (not a CUDA device), "fma" (older than sm_80),
    "hopper" (sm_90), "blackwell" (newer than sm_90) or "tensor_cores" (sm_80 to sm_89)."""
    device = torch.device(device)
    if device.type != "cuda":
        return "interpreter"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 0):
        return "fma"
    if cap == (9, 0):
        return "hopper"
    return "blackwell" if cap > (9, 0) else "tensor_cores"


def choose(kernel: str, device, **shape) -> dict:
    """The launch of `kernel` (a name of this module's tables) on `device`'s class of GPU, as keyword arguments; shape:
    what the kernel's rules read (M, N, K, block, group_size, fp8_dot)."""
    if torch.device(device).type != "cuda":
        cls = "interpreter"
    elif kernel in HOPPER_EVERYWHERE:  # no compute capability asked
        cls = "hopper"
    else:
        cls = gpu_class(device)
    return dict(_launch(cls, kernel, tuple(shape.items())))


@functools.lru_cache(maxsize=4096)
def _launch(cls: str, kernel: str, shape: tuple) -> dict:
    """A class's launch of a kernel at a shape, worked out once: a wrapper asks at every call, and its eager timing
    holds the asking (a copy goes back to each caller)."""
    return CLASSES[cls](kernel, **dict(shape)).kwargs()


def _held(table: dict, kernel: str, where: str) -> Launch:
    if kernel not in table:
        raise KeyError(f"no launch of {kernel!r} on {where}")
    return table[kernel]


# ----------------------------------------------------------------------------------------------------------
# What the chapters and the kernels' wrappers read

FMA_DECODE = FMA["chapter.decode"].kwargs()
FMA_TILED = FMA["chapter.tiled"].kwargs()
INTERPRETER_DECODE = INTERPRETER["chapter.decode"].kwargs()
INTERPRETER_TILED = INTERPRETER["chapter.tiled"].kwargs()


def chapter_device(device) -> str:
    """The device whose launches a chapter's config function chooses: they take a device type (the notebooks pass
    x.device.type), "cuda" the GPU and anything else the interpreter, as they did before this table (x.device itself
    or "cuda:0" too: a learner's wrapper passing one keeps the tiles it was graded with)."""
    return "cuda" if device == "cuda" else "cpu"


def gemm_config(device, grouped: bool = False) -> dict:
    """Tiles of the plain Triton GEMM (`qmatmul.kernels.gemm.matmul_kernel`) that the 4-bit chapters' wrappers run from
    DEQUANTIZE_FIRST_M rows on, once the weight is decoded, where the TMA GEMM cannot run; grouped: W4A16's, each
    step's product scaled before it is added ("gemm" and "gemm.grouped" above)."""
    return choose("gemm.grouped" if grouped else "gemm", device)
