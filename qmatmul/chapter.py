"""What every chapter module is built from besides its format (qmatmul/formats/) and the timing harness
(qmatmul/harness.py): the device and activation dtypes a chapter grades on, the NaN-poisoned output, the loop that
checks a learner's kernel on a list of problems, the validation behind each chapter's `prepare`, and the cell that
compares the paths at decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from qmatmul import bench, checks, harness, plots
from qmatmul.checks import CheckFailed

ACT_DTYPES = (torch.float16, torch.bfloat16)


def device() -> str:
    """Where the checks run the learner's kernels: the GPU, or Triton's interpreter on the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


# Before sm_80 (a T4) Triton has no tensor-core tl.dot (from 3.2 on: triton-lang/triton#5066): it multiplies with
# FMAs, in float32, and takes the weight tile through shared memory as float32 (BLOCK_N x BLOCK_K x 4 bytes, within
# a T4's 64 KB). Compiled for sm_75 on a CPU (tools/sass.py --fit, docs/gpu-fit.md), a BLOCK_K of 32 is what keeps
# the kernels from spilling registers: the H200's decode tiles need 128 KB there (W8A16) or spill 1600 registers a
# step (MXFP4, NVFP4, FP8).
FMA_DECODE = dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=1)
FMA_TILED = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1)
# Triton's interpreter on the CPU (every chapter's config functions off a GPU): it prefers few, large programs.
INTERPRETER_DECODE = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1)
INTERPRETER_TILED = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)


def gemm_config(device, grouped: bool = False) -> dict:
    """Tiles of the plain Triton GEMM (`qmatmul.gemm.matmul_kernel`) that the 4-bit chapters' wrappers run from
    DEQUANTIZE_FIRST_M rows on, once the weight is decoded, where the TMA GEMM cannot run: Hopper's 227 KB of shared
    memory takes three stages of 128 x 256 x 64 (144 KB); from sm_80 on 128 x 128 x 32 (48 KB); a T4 the FMA tiles
    (128 x 128 spilled 8000 registers there, tools/sass.py). grouped (W4A16: each step's product scaled before it is
    added, so two accumulators live at once): 64 x 128 x 32, which spills nothing on sm_80, 90 and 100 where those
    tiles spilled 92-460 registers (compiled here, docs/gpu-fit.md)."""
    device = torch.device(device)
    if device.type != "cuda":
        return dict(FMA_TILED)  # never run: the wrappers decode first only on a GPU
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 0):
        return dict(FMA_TILED)
    if grouped:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)
    if cap == (9, 0):
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)


def fma_dot(device: str) -> bool:
    """True on a CUDA GPU without tensor cores for Triton's tl.dot (older than sm_80): the FMA_* tiles apply."""
    return device == "cuda" and torch.cuda.get_device_capability() < (8, 0)


# The 4-bit decode kernels have no K masks, so their BLOCK_K must divide K. It is never below 64, two scale blocks a
# step or more: on the H200 (Triton 3.6, 2026-12-01) NVFP4's decode kernel gave wrong results on 99 % of the elements
# at BLOCK_K = 16 (K = 176, one e4m3 scale a step), where the interpreter and every tile of 128 or more were right.
MIN_DECODE_BLOCK_K = 64


def divisible_k(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, block_k: int, block: int):
    """The operands and BLOCK_K of a decode kernel without K masks: `block_k` halved until it divides K, never below
    MIN_DECODE_BLOCK_K. A K with no such divisor (no real model has one) is padded with zero weights, zero scales and
    zero activations, which add nothing to the product. Returns (x, packed, scales, block_k)."""
    K = x.shape[1]
    block_k = max(block_k, MIN_DECODE_BLOCK_K)
    while K % block_k and block_k > MIN_DECODE_BLOCK_K:
        block_k //= 2
    if K % block_k:
        kp = -(-K // block_k) * block_k

        def padded(t: torch.Tensor, cols: int) -> torch.Tensor:
            out = t.new_zeros((t.shape[0], cols))  # zeros, then a copy: no arithmetic on the host
            out[:, : t.shape[1]].copy_(t)
            return out

        x, packed, scales = padded(x, kp), padded(packed, kp // 2), padded(scales, kp // block)
    return x, packed, scales, block_k


def act_dtypes(device: str) -> list:
    """The activation dtypes the kernels are checked in on `device`; the last one is the one timed."""
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return [torch.float16, torch.bfloat16]
    return [torch.float16]  # the interpreter's bf16 tl.dot is wrong; T4 has no bf16 tensor cores


def timing_activations(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    """n activations [M, K] for the timed calls, stacked, drawn straight in the timed dtype (the timed window
    holds the draw: no float32 temporary)."""
    return (torch.randn(n, M, K, device=g.device, generator=g, dtype=act_dtypes(g.device.type)[-1]),)


def problem(x_shape, weights, dtype, device: str, g: torch.Generator, strided: bool) -> tuple:
    """A kernel check's call: random activations x [M, K] in `dtype` (a view of a wider buffer when `strided`),
    drawn after the weight, then the weight's tensors, all on `device`."""
    M, K = x_shape
    pad = 7 if strided else 0
    x_full = torch.randn(M, K + pad, generator=g).to(dtype).to(device)
    return x_full[:, :K], *(t.to(device) for t in weights)


# The rounding probe: one fixed problem on which a kernel that multiplies a scale into its 16-bit weights before tl.dot
# fails on every run, in fp16 and bf16 and for every group size; the random problems alone caught that in 2 to 77 runs
# of 100 (W8A16, W4A16, NVFP4's tensor scale and FP8's two scales, visible and hidden checks, 100-200 seeds on the CPU,
# 2026-12-04). x is all ones; along K each row of the weights repeats (1, 1, 1, -3) and ends in (1, 1, 1, -2), so it
# sums to 1 and the exact output is one scale. Every scale is PROBE_SCALE (NVFP4: its block scales are 1 and its tensor
# scale is PROBE_SCALE), a float32 for which 3·round16(s) - round16(3s) is 3 units in the last place of s in fp16 and in
# bf16, of one sign: rounding the weights adds 3 units a quad, K / 4 quads of one sign, 24 times the tolerance at K =
# 128, while a kernel that keeps the weights exact in the dot and scales the sums afterwards is exact up to fp32
# rounding (tests/test_checks.py).
PROBE_SCALE = float.fromhex("0x1.5921p-7")  # 0.0105325


def rounding_probe_weights(N: int, K: int) -> torch.Tensor:
    """The probe's weights [N, K] (int8: the codes minus the zero point, or the E2M1 values): each row sums to 1."""
    if K % 4:
        raise ValueError(f"the rounding probe needs K divisible by 4, got {K}")
    d = torch.tensor([1, 1, 1, -3], dtype=torch.int8).repeat(N, K // 4)
    d[:, -1] = -2
    return d


def rounding_probe_x(M: int, K: int, dtype, device: str, strided: bool) -> torch.Tensor:
    """The probe's activations: ones [M, K] in `dtype` (a view of a wider buffer when `strided`)."""
    return torch.ones(M, K + (7 if strided else 0), dtype=dtype, device=device)[:, :K]


def poisoned_out(M: int, N: int, dtype, device: str, strided: bool):
    """A NaN-filled output (a view of a wider buffer when strided, so stray writes can be seen): (full, out)."""
    pad = 5 if strided else 0
    full = torch.full((M, N + pad), float("nan"), dtype=dtype, device=device)
    return full, full[:, :N]


def cell(seed: int | None) -> tuple[int, torch.Generator, str]:
    """A check cell's seed (fresh when None: no learner can predict it), the generator it seeds, the device."""
    seed = checks.fresh_seed() if seed is None else seed
    return seed, checks.generator(seed), device()


def call_quantizer(
    fn, w: torch.Tensor, *args, what: str, returns: Sequence[str], ctx: str, copy: bool = False
) -> tuple:
    """Call a learner's quantizer on w: it must return one tensor per name in `returns` and leave w untouched.

    copy=True hands the learner a copy of w, so that a quantizer which changes its input in place is harmless
    (W8A16 and W4A16, whose tests say so); otherwise w itself, and an in-place change fails the cell."""
    before = w.clone()
    result = checks.call_learner(fn, w.clone() if copy else w, *args, what=what)
    kind = {2: "pair", 3: "triple"}.get(len(returns), f"{len(returns)}-tuple")
    if not (isinstance(result, (tuple, list)) and len(result) == len(returns)):
        raise CheckFailed(f"{what} must return a {kind} ({', '.join(returns)}), got {type(result).__name__}")
    for name, t in zip(returns, result, strict=True):
        if not isinstance(t, torch.Tensor):
            raise CheckFailed(f"{what} must return {len(returns)} tensors; {name} is a {type(t).__name__}")
    if not torch.equal(w, before):
        raise CheckFailed(f"{what} modified its input w in place; leave the weights untouched.{ctx}")
    return tuple(result)


def check_kernel(fn, what: str, cases, *, g: torch.Generator, hidden: bool, seed: int, names: Sequence[str],
                 problem: Callable, reference: Callable, mistakes: Callable, dtypes=None,
                 strided_cases=(False, True), note: str = "", probe: Callable | None = None,
                 probe_case: tuple = ()) -> None:  # fmt: skip
    """A kernel check cell: the learner's matmul kernel on every case, dtype and layout, then one line of success.

    cases: (M, N, K) or (M, N, K, group_size), drawn from the cell's generator g (chapter.cell; seed is named in the
    success line). problem(*case, dtype, device, g, strided=strided), the chapter's random_problem, returns the
    call's tensors in order (named by `names`, x first); the case's entries after K are passed after them. Each call
    writes into a NaN-poisoned `out` and must pass checks.verify_kernel_result against reference(*args), naming the
    known mistakes(*args) it matches. dtypes: the activation dtypes (default: every one this device checks).
    probe(*probe_case, dtype, device, strided=strided), where given, builds one fixed problem more (the rounding
    probe above), run last in every dtype and layout, visible and hidden checks alike.
    """
    dev = device()
    n = 0
    runs = [(case, lambda *a, strided: problem(*a, g, strided=strided), "") for case in cases]
    if probe is not None:
        runs.append((probe_case, probe, ", the rounding probe: x = 1"))
    for case, make, label in runs:
        M, N, K, *extra = case
        for dtype in act_dtypes(dev) if dtypes is None else dtypes:
            for strided in strided_cases:
                tensors = make(*case, dtype, dev, strided=strided)
                inputs = dict(zip(names, tensors, strict=True))
                full, out = poisoned_out(M, N, dtype, dev, strided)
                before = checks.snapshot(inputs)
                args = (*tensors, *extra)
                group = "".join(f", group_size={G}" for G in extra)
                ctx = (f" (M={M}, N={N}, K={K}{group}, {str(dtype).replace('torch.', '')}"
                       f"{', strided x and out' if strided else ''}{label})")  # fmt: skip
                y, ops = checks.run_audited(fn, *args, out=out, what=what)
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(*args),
                                            mistakes=mistakes(*args), ctx=ctx)  # fmt: skip
                n += 1
    checks.passed(
        f"{what}: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed}){note}"
    )


def check_decode_bandwidth(fn, *, what: str, module: str, shape, Ms, nbytes, threshold: float, seed, hint: str,
                           out_dtype=None):  # fmt: skip
    """A decode kernel's performance cell (qmatmul/harness.py times it); without a CUDA GPU it awards nothing."""
    if not torch.cuda.is_available():
        return harness.not_on_cpu(what, threshold)
    N, K = shape
    return harness.check_bandwidth(
        fn, what=what, module=module, N=N, K=K, Ms=Ms, out_dtype=out_dtype or act_dtypes("cuda")[-1],
        nbytes=nbytes, threshold=threshold, hint=hint, seed=seed,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# The validation behind each chapter's `prepare` (the notebook's wrappers call it before launching)


def _listed(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def require_tensors(**tensors) -> None:
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def require_activations(x: torch.Tensor) -> tuple[int, int]:
    """x must be a 2-D fp16/bf16 tensor [M, K]; returns M, K."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    return x.shape


def require_codes(name: str, t: torch.Tensor, dtype: torch.dtype, layout: str = "") -> None:
    """Quantized codes: a 2-D tensor of `dtype`, laid out as `layout` (e.g. "[N, K/2]")."""
    if t.dim() != 2 or t.dtype != dtype:
        kind = str(dtype).replace("torch.", "") + " tensor" + (f" {layout}" if layout else "")
        raise TypeError(f"{name} must be a 2-D {kind}, got {t.dtype} of shape {list(t.shape)}")


def require_same_k(x_name: str, x: torch.Tensor, w_name: str, w: torch.Tensor, layout: str, w_k: int) -> None:
    if w_k != x.shape[1]:
        raise ValueError(
            f"{x_name} is [M, K] = {list(x.shape)} but {w_name} is {layout} = {list(w.shape)}: the K's differ"
        )


def require_one_device(**tensors) -> None:
    devices = [t.device for t in tensors.values()]
    if len(set(devices)) > 1:
        raise ValueError(
            f"{_listed(tensors)} must be on one device, got {', '.join(str(d) for d in devices)}"
        )


def require_contiguous(activation: str = "x", **tensors) -> None:
    """The weight-side tensors must be contiguous; the activations and the output may be strided views."""
    if not all(t.is_contiguous() for t in tensors.values()):
        raise ValueError(f"{_listed(tensors)} must be contiguous ({activation} and out may be strided)")


def require_block_scaled(x, packed, scales, *, block: int, block_name: str, codes: str, **per_tensor):
    """The inputs of a block-scaled 4-bit matmul (MXFP4, NVFP4): x [M, K] with K a multiple of `block`, packed
    uint8 [N, K/2], scales uint8 `codes` [N, K/block]; `per_tensor` (NVFP4's g) need only be tensors here.
    Returns M, N, K."""
    require_tensors(x=x, packed=packed, scales=scales, **per_tensor)
    M, K = require_activations(x)
    require_codes("packed", packed, torch.uint8, "[N, K/2]")
    N = packed.shape[0]
    if K % block:
        raise ValueError(f"K must be a multiple of {block} (one {block_name} block), got K = {K}")
    require_same_k("x", x, "packed", packed, "[N, K/2]", 2 * packed.shape[1])
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // block):
        raise ValueError(
            f"scales must be uint8 {codes} of shape [N, K/{block}] = [{N}, {K // block}], got {scales.dtype} "
            f"of shape {list(scales.shape)}"
        )
    return M, N, K


def placed(x: torch.Tensor, out, M: int, N: int, weight: dict, **per_tensor) -> torch.Tensor:
    """The end of a chapter's `prepare`: x, the weight's tensors and its per-tensor scales (NVFP4's g) on one
    device, the weight's tensors contiguous; then the output (output)."""
    require_one_device(x=x, **weight, **per_tensor)
    require_contiguous(**weight)
    return output(out, M, N, x.dtype, x.device)


def output(out, M: int, N: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The [M, N] output: allocated when out is None, else checked."""
    if out is None:
        return torch.empty((M, N), dtype=dtype, device=device)
    if tuple(out.shape) != (M, N) or out.dtype != dtype or out.device != device:
        raise ValueError(
            f"out must be {dtype} of shape [{M}, {N}] on {device}, got {out.dtype} {list(out.shape)} "
            f"on {out.device}"
        )
    return out


# ----------------------------------------------------------------------------------------------------------
# The paths compared at decode


def compare_paths(env, rows, fns: Callable, recorded: dict, *, M: int, shape, where_known: bool = False):
    """Bytes and time of each path (rows: label, bytes moved) at one M; plotted and printed.

    On a GPU fns() builds one zero-argument function per row, each timed with the L2 flushed (a path that fails
    shows as "not measured"); without one, the H200's recorded µs by label, where known.
    """
    N, K = shape
    if not env.has_gpu:
        times = [recorded.get(label) for label, _ in rows]
        rows = [(plots.recorded_label(label), nbytes) for label, nbytes in rows]
        note = plots.recorded_note(where_known=where_known)
    else:
        times = bench.time_paths(fns())
        rows = [(plots.measured_label(label), nbytes) for label, nbytes in rows]
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    return plots.paths_report(rows, times, f"M={M}, N x K = {N} x {K}: {note}")
