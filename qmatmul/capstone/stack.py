"""The stack-speed cell (GPU only): a Llama-sized layer stack through the learner's QuantLinear, captured as a CUDA
graph as a serving engine runs it, beats the same block in 16-bit nn.Linear."""

from __future__ import annotations

import contextlib
import time

import torch
from torch import nn

from qmatmul import checks, timing
from qmatmul.capstone.crossing import drive, learner_message, raise_learner
from qmatmul.capstone.formats import dequantized, reference_quantize
from qmatmul.capstone.loader import load_kernels
from qmatmul.capstone.rebuild import (
    OTHER_THAN_BUFFERS,
    REBUILT_ON,
    differs,
    fresh_process,
    how_rebuilt,
    not_rebuilt,
)
from qmatmul.capstone.registry import KernelSet, using
from qmatmul.capstone.runtime import act_dtype
from qmatmul.checks import CheckFailed

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
BLOCK_WEIGHTS = sum(N * K for N, K in LLAMA_BLOCK)  # 218 M
STACK_MS = (1, 16)  # the rows timed: one token, and the most the decode kernel takes
# What a CUDA graph cannot hold, in the words of both capture hints (drivers: the course captures your stack;
# capture: you capture the course's step).
NO_WAITING = (
    "nothing in it may wait for the GPU (torch.cuda.synchronize(), .item(), .cpu(), printing a tensor's values) "
    "or copy between host and GPU"
)
# The learner's QuantLinear stack (W8A16), captured as a CUDA graph as a serving engine runs it, must be this many
# times faster than the same block in 16-bit nn.Linear (cuBLAS), captured alike in the grader's own process. The
# H200 measured the course's kernels at 1.22x (M = 1) and 1.20x (M = 16) this way, 2026-12-05 (docs/decode-step-h200.md,
# where the fused block reaches 1.46x); the weights' bytes would allow about 2.6x.
STACK_SPEEDUP = 1.05
# Steps timed: about 20 ms of GPU time, so that the wall clock's round trip is noise. Each step has inputs of its own
# and every step's outputs are checked: a replay that skipped work (a rebound CUDAGraph.replay) shows.
STACK_REPS = 200


def stack_kernels() -> tuple[KernelSet | None, str]:
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


def stack_device() -> str | None:
    """Where the stack is timed: a CUDA GPU, or None (not measured)."""
    return "cuda" if torch.cuda.is_available() else None


def stack_inputs(seed: int, M: int, device: str, steps: int | None = None) -> dict:
    """The activations of the block's Linears, by K: [M, K], or [steps, M, K] (one row block a step, all distinct)."""
    g = checks.generator(seed, device)
    shape = (M,) if steps is None else (steps, M)
    return {K: torch.randn(*shape, K, device=device, generator=g).to(act_dtype(device))
            for K in sorted({k for _, k in LLAMA_BLOCK})}  # fmt: skip


def steps_checksum(ys: list) -> int:
    """What a timed run answers with: the sum of its outputs' bits (known only to whoever computed them)."""
    from qmatmul.checks.harness import outputs_checksum

    return sum(outputs_checksum(y) for y in ys)


def dense_block(device, dtype) -> list:
    """One Llama-3-8B block's Linears in 16 bits, as nn.Linear (cuBLAS; no bias): what every format is timed
    against."""
    return [nn.Linear(K, N, bias=False, device=device, dtype=dtype) for N, K in LLAMA_BLOCK]


def llama_stack(cls, fmt, device, g, kernel_sets=None):
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


def check_stack_speed(cls, *, seed: int | None = None) -> None:
    """GPU only: the Llama-sized stack in W8A16 through the learner's QuantLinear, with the W8A16 kernels that
    load_kernels() finds (the course's solution kernels where a course checkout has them and the learner's
    are missing), captured once as a CUDA graph and replayed, must beat 16-bit nn.Linear (captured alike, timed in
    the grader's own process) by STACK_SPEEDUP at M = 1 and 16. The clock is the grader's. What is timed is the stack
    rebuilt from its buffers on decoy weights, in a fresh worker (see drive_stack)."""
    device = stack_device()
    if device is None:
        checks.not_measured(
            "Performance not measured: no CUDA GPU here. On a GPU this cell times a Llama-3-8B block's seven "
            f"Linears through your QuantLinear (W8A16), captured as a CUDA graph, at M = 1 and 16; it must be "
            f"{STACK_SPEEDUP:g}x faster than the same block in 16-bit nn.Linear."
        )
        return
    seed = checks.fresh_seed() if seed is None else seed
    what = "the stack through your QuantLinear"
    probe = checks.fresh_seed()
    meta, built = drive(cls, "stack", "build", seed, probe=probe, what=what)
    if meta.get("no_kernels"):
        raise CheckFailed("no W8A16 decode kernel of yours was found (finish ../w8a16/w8a16.ipynb): the reference "
                          "path is the naive path, which reads every weight several times: it cannot beat 16 bits")  # fmt: skip
    if meta.get("error"):
        raise_learner(meta["error"])
    # Timed and checked: the stack rebuilt from these buffers on decoy weights (their own seed), in a fresh worker.
    fresh_process(cls, True)
    state = {k: v for k, v in built.items() if not k.startswith("probe")}
    meta, again = drive(cls, "stack", "rebuild", checks.fresh_seed(), probe=probe, state=state, what=what)
    built = {
        k: v for k, v in built.items() if k.startswith("probe")
    }  # the 218 M weights' buffers: no longer needed
    del state
    if meta.get("error"):
        raise_learner(meta["error"], f" (QuantLinear {REBUILT_ON})")
    if meta.get("load"):
        raise not_rebuilt(
            "QuantLinear", meta["load"], f"The layers timed are QuantLinear {how_rebuilt(cls, True)}"
        )
    rtol = 4 * checks.tolerance_for(act_dtype(device))
    for i, (N, K) in enumerate(LLAMA_BLOCK):
        first, y = built.get(f"probe{i}"), again.get(f"probe{i}")
        if first is None or (y is not None and not differs(y, first, rtol)):
            continue
        how = "it returns other numbers than the first"
        if y is None and meta.get("probe_error"):
            how = f"its forward raised ({learner_message(meta['probe_error']).splitlines()[0]})"
        raise CheckFailed(
            f"QuantLinear computes with something other than its registered buffers (the stack's layer [{N}, {K}], "
            f"one row): {how_rebuilt(cls, True)}, {how}. {OTHER_THAN_BUFFERS}"
        )
    weights = _stack_weights(
        seed, device
    )  # the build's weights (what the rebuilt stack's buffers hold), dequantized

    def clock(op, M, reps, inputs=0):
        t0 = time.perf_counter()
        m, t = drive(cls, "stack", op, inputs, M, reps, what=what)
        elapsed = time.perf_counter() - t0
        if m.get("error"):
            raise_learner(m["error"])
        return elapsed, m

    ratios = []
    for M in STACK_MS:
        trip = min(clock("nothing", M, 1)[0] for _ in range(5))
        clock("run:graph", M, STACK_REPS)  # warm: compiles, allocates, captures the graph
        inputs = checks.fresh_seed()
        with timing.gpulock.exclusive():
            t_mine, said = clock("run:graph", M, STACK_REPS, inputs)
            dense = dense_stack_us(M, STACK_REPS, device)
        mine = (t_mine - trip) * 1e6 / STACK_REPS
        check_steps(cls, said, inputs, M, weights, device, what)
        print(f"M = {M}: your QuantLinear stack {mine:.0f} µs a step as a CUDA graph, 16-bit nn.Linear {dense:.0f} µs "
              f"({dense / mine:.2f}x), with {meta.get('where')}")  # fmt: skip
        ratios.append(f"{dense / mine:.2f}x at M = {M} ({mine:.0f} µs against {dense:.0f})")
        if dense / mine < STACK_SPEEDUP:
            raise CheckFailed(
                f"at M = {M} the stack through your QuantLinear, captured as a CUDA graph, takes {mine:.0f} µs and "
                f"16-bit nn.Linear {dense:.0f} µs: it must be {STACK_SPEEDUP:g}x faster. Does forward copy, convert "
                "or dequantize the weight, or run the naive path?"
            )
    checks.passed(
        f"the Llama-sized stack through your QuantLinear, as a CUDA graph, beats 16-bit nn.Linear by "
        f"{' and '.join(ratios)}; at least {STACK_SPEEDUP:g}x was needed"
    )


def _stack_weights(seed: int, device: str) -> list:
    """The block's weights as the build made them from `seed` (llama_stack: normal_(0, 0.02) from one generator, layer
    after layer), through the reference W8A16 quantizer and back: what the rebuilt stack's buffers hold, float32."""
    g = checks.generator(seed, device)
    out = []
    for N, K in LLAMA_BLOCK:
        w = torch.empty(N, K, device=device).normal_(0, 0.02, generator=g)
        out.append(dequantized("w8a16", reference_quantize("w8a16", w)).to(device))
        del w
    return out


def check_steps(cls, said: dict, seed: int, M: int, weights: list, device: str, what: str) -> None:
    """Every output of every timed step, fetched after the clock stopped: it must sum to what the timed run answered
    (so it was computed then) and match the reference on that step's own inputs, regenerated here from `seed`."""
    meta, got = drive(cls, "stack", "run:fetch", 0, M, STACK_REPS, what=what)
    if meta.get("error"):
        raise_learner(meta["error"])
    ys = [got.get(f"y{i}") for i in range(len(LLAMA_BLOCK))]
    shapes = [(STACK_REPS, M, N) for N, _ in LLAMA_BLOCK]
    if any(y is None or tuple(y.shape) != shape for y, shape in zip(ys, shapes, strict=True)):
        raise CheckFailed(f"{what}: the timed steps' outputs did not come back whole (each layer's [{STACK_REPS}, M, "
                          "N]): flagged for your instructor")  # fmt: skip
    if steps_checksum(ys) != said.get("checksum"):
        raise CheckFailed(
            f"{what}: the outputs fetched after the timed run are not those it answered with: every step's outputs "
            "are computed inside the timed run (a replay that skipped work, or outputs made later, shows here)"
        )
    xs = stack_inputs(seed, M, device, STACK_REPS)
    for i, ((N, K), w) in enumerate(zip(LLAMA_BLOCK, weights, strict=True)):
        want = (xs[K].reshape(-1, K).float() @ w.T).reshape(STACK_REPS, M, N)
        checks.compare(ys[i].to(device).float(), want, what=f"the stack's layer [{N}, {K}] at each timed step "
                       "(captured as a CUDA graph)", rtol=4 * checks.tolerance_for(act_dtype(device)))  # fmt: skip


def captured_steps(step, xs: dict, steps: int):
    """`steps` calls of step(inputs) captured as one CUDA graph, each on its own slice of xs ({K: [steps, M, K]},
    copied into the graph's buffers): (run, outputs). run() copies new inputs in (None: keep them) and replays once;
    outputs is a list of the steps' outputs, each step's list of tensors. Warmed on a side stream first, as
    torch.cuda.graphs asks. What the grader times of the learner's stack and of 16-bit nn.Linear alike."""
    static = {K: x.clone() for K, x in xs.items()}
    graph, outs = timing.capture(
        lambda: [step({K: x[i] for K, x in static.items()}) for i in range(steps)],
        warm=lambda: step({K: x[0] for K, x in static.items()}),
    )

    def run(new=None):
        for K, x in (new or {}).items():
            static[K].copy_(x)
        graph.replay()

    return run, outs


def by_layer(outs: list) -> list:
    """The steps' outputs [[layer outputs] a step] -> one tensor a layer, [steps, M, N]."""
    return [torch.stack([step[i] for step in outs]) for i in range(len(outs[0]))]


def dense_stack_us(M: int, reps: int, device: str) -> float:
    """µs of one step through the block's seven Linears in 16-bit nn.Linear (cuBLAS), timed here, in the grader's
    own process, as the learner's stack is: `reps` steps on inputs of their own captured as one CUDA graph (on a GPU)
    and replayed once, the outputs gathered a layer each and summed, the device synchronized, by the wall clock."""
    dtype = act_dtype(device)
    with torch.no_grad():
        layers = dense_block(device, dtype)
        xs = stack_inputs(0, M, device, reps)

        def step(x):
            return [m(x[m.in_features]) for m in layers]

        if device == "cuda":
            run, outs = captured_steps(step, xs, reps)
        else:
            outs = []

            def run():
                outs[:] = [step({K: x[i] for K, x in xs.items()}) for i in range(reps)]

        run()
        timing.sync(device)
        t0 = time.perf_counter()
        run()
        steps_checksum(by_layer(outs))
        timing.sync(device)
        return (time.perf_counter() - t0) * 1e6 / reps
