"""The check of exercise 4 (FusedQuantLinear): several Linears that read the same x (q, k and v; gate and up) stored
as ONE quantized weight, the concatenation of theirs along N quantized as one tensor, and multiplied by ONE kernel
call, whose output is split back into one output per Linear.

As for QuantLinear (checks.py), the learner's class runs in the worker (drivers.drive_fused, drive_fused_rebuilt),
only data crosses, and the verdict is decided here: the buffers against the reference quantizer's tensors of the
concatenated weight, and the forwards of the module rebuilt from its buffers on decoy Linears (for the hidden check
in a fresh worker) against the fp32 reference. The two mistakes the exercise teaches are named: each weight
quantized on its own and the stored tensors concatenated (NVFP4's second-level scale is one float per tensor, so
its parts differ from the concatenation's), and one kernel call per Linear (not fused).
"""

from __future__ import annotations

import math

import torch

from qmatmul import checks, w8a16
from qmatmul.capstone.crossing import drive, learner_message, ops_records, raise_learner
from qmatmul.capstone.formats import (
    FORMATS,
    GROUP,
    LABELS,
    dequantized,
    reference_matmul,
    reference_quantize,
    same_stored,
)
from qmatmul.capstone.rebuild import (
    OTHER_THAN_BUFFERS,
    course_class,
    differs,
    fresh_process,
    how_rebuilt,
    not_rebuilt,
    state_arg,
)
from qmatmul.capstone.registry import DECODE_MAX_M
from qmatmul.capstone.runtime import act_dtype, default_device
from qmatmul.checks import CheckFailed

VISIBLE_PARTS = (64, 16, 16)  # q, k and v's out_features (a GQA layer: k and v narrower than q)
VISIBLE_K = 32
# Each part's largest |w|, relative to the first's: a tensor scale of its own (NVFP4, per part) differs from the
# concatenation's for every part but the first, whatever the seed.
PART_AMAX = (1.0, 0.01, 0.1)
REBUILT_ON = "built again on nn.Linear layers of the same shapes with other weights"
ONE_LAUNCH = ("one kernel call per Linear is not fused: it launches {n} kernels where serving engines launch one. "
              "Quantize the concatenated weight [{N}, {K}] once, multiply x with it in ONE kernel call, then split "
              "the output at the out_features boundaries (torch.split)")  # fmt: skip
PER_PART = ("This matches a known mistake: each weight quantized on its own and the stored tensors concatenated. "
            "NVFP4's second-level scale is one float32 per tensor: each part quantized under its own tensor scale "
            "is not the concatenation quantized under one (nor is any format whose stored tuple has a per-tensor "
            "part). Quantize torch.cat of the weights as one tensor.")  # fmt: skip


def _weights(Ns, K: int, g: torch.Generator) -> list:
    """One weight per part, [N_i, K], rows of distinct magnitudes, the part's largest |w| = 0.1 · PART_AMAX[i]."""
    out = []
    for i, n in enumerate(Ns):
        w = w8a16.random_weight(n, K, g)
        out.append(w * (0.1 * PART_AMAX[i % len(PART_AMAX)] / w.abs().max()))
    return out


def _biases(Ns, pattern: str, g: torch.Generator) -> list:
    """Each part's bias or None: "all", "none", or "mixed" (the first part without one, the others with)."""
    return [None if pattern == "none" or (pattern == "mixed" and i == 0) else torch.randn(n, generator=g) * 0.5
            for i, n in enumerate(Ns)]  # fmt: skip


def _x_shapes(g: torch.Generator, hidden: bool, K: int, act: torch.dtype) -> list:
    """(shape, dtype) of each x: visible M = 1 (decode) and 2 x 13 rows (prefill, leading dimensions); hidden a
    random M <= 16, leading dimensions at decode, M = 16 and 17 (either side of the cut), 26 rows."""
    if not hidden:
        return [(s, dt) for s in [(1, K), (2, 13, K)] for dt in (torch.float32, act)]
    M = int(torch.randint(1, DECODE_MAX_M + 1, (1,), generator=g))
    return [((M, K), torch.float32), ((M, K), act), ((2, 3, K), act), ((DECODE_MAX_M, K), act),
            ((DECODE_MAX_M + 1, K), torch.float32), ((2, 13, K), act)]  # fmt: skip


def _cases(g: torch.Generator, hidden: bool, device: str) -> list:
    if not hidden:
        plan = [("w8a16", VISIBLE_PARTS, VISIBLE_K, "all"), ("nvfp4", VISIBLE_PARTS, VISIBLE_K, "none")]
    else:
        top = 300 if device == "cuda" else 100
        first = int(torch.randint(0, 3, (1,), generator=g))  # every bias pattern in every hidden run
        plan = []
        for i, fmt in enumerate(FORMATS):
            parts = 3 if int(torch.randint(0, 3, (1,), generator=g)) else 2  # q, k, v; or gate and up
            Ns = tuple(int(n) for n in torch.randint(8, top, (parts,), generator=g))
            K = GROUP * int(torch.randint(1, 3, (1,), generator=g))  # a whole number of W4A16 groups
            plan.append((fmt, Ns, K, ("all", "none", "mixed")[(first + i) % 3]))
    cases = []
    for fmt, Ns, K, pattern in plan:
        xs = [
            (torch.randn(*s, generator=g) * 0.5).to(dt)
            for s, dt in _x_shapes(g, hidden, K, act_dtype(device))
        ]
        cases.append({"fmt": fmt, "weights": _weights(Ns, K, g), "biases": _biases(Ns, pattern, g), "xs": xs})
    return cases


def _context(case: dict) -> str:
    Ns = [w.shape[0] for w in case["weights"]]
    bias = [b is not None for b in case["biases"]]
    said = "with" if all(bias) else "no" if not any(bias) else "mixed"
    return f" ({LABELS[case['fmt']]}, N = {' + '.join(map(str, Ns))}, K = {case['weights'][0].shape[1]}, {said} bias)"


def _unreadable() -> CheckFailed:
    return CheckFailed(
        "FusedQuantLinear: the grader could not read what your code did: flagged for your instructor"
    )


def _one_launch(calls: list, Ns, K: int, ctx: str) -> CheckFailed:
    widths = ", ".join(str(c[4]) if len(c) > 4 else "?" for c in calls)
    return CheckFailed(f"FusedQuantLinear.forward called the kernels {len(calls)} times (over N = {widths}): "
                       + ONE_LAUNCH.format(n=len(calls), N=sum(Ns), K=K) + ctx)  # fmt: skip


def _per_part(fmt: str, weights: list) -> list:
    """What concatenating the separately quantized parts' stored tensors gives, tensor by tensor."""
    parts = [reference_quantize(fmt, w) for w in weights]
    return [torch.cat([t.reshape(-1) if t.dim() == 0 else t for t in ts]) for ts in zip(*parts, strict=True)]


def _side_by_side(outputs: list, M: int):
    """The first module's outputs as one [M, N] tensor (only to name a mistake), or None."""
    try:
        return torch.cat([y.reshape(M, -1) for y in outputs], 1)
    except (AttributeError, RuntimeError, TypeError):
        return None


def _check_built(case: dict, meta: dict, got: dict) -> None:
    """What the module built on the real weights holds (its buffers, no float copy) and how many kernel calls its
    first forward made."""
    fmt, weights = case["fmt"], case["weights"]
    Ns, K = [w.shape[0] for w in weights], weights[0].shape[1]
    ctx = _context(case)
    if meta.get("error"):
        raise_learner(meta["error"], ctx)
    if not meta.get("module"):
        raise CheckFailed(
            f"FusedQuantLinear must be an nn.Module (class FusedQuantLinear(torch.nn.Module)){ctx}"
        )
    if course_class(meta.get("defined_in", "")):
        raise CheckFailed(f"FusedQuantLinear(linears, fmt) made a {meta['defined_in']}.{meta['type']}, not a class "
                          f"of your notebook: the exercise is to write FusedQuantLinear{ctx}")  # fmt: skip
    for i, w in enumerate(weights):
        if not torch.equal(got.get(f"weight_after{i}", torch.empty(0)), w):
            raise CheckFailed(
                f"FusedQuantLinear changed nn.Linear {i}'s weight in place; leave it untouched{ctx}"
            )
    for where, dtype, shape in meta.get("weight_copies", []):
        raise CheckFailed(
            f"FusedQuantLinear keeps a floating-point copy of the weights ({where}, {dtype} {shape}): store only the "
            f"quantized tensors, or the layers are no smaller than before{ctx}"
        )
    forwards = meta.get("forwards") or []
    calls = [c for c in (forwards[0].get("calls", []) if forwards else []) if c and c[0] == fmt]
    if len(calls) > 1:
        raise _one_launch(calls, Ns, K, ctx)
    stored_ref = reference_quantize(fmt, torch.cat(weights))  # the CPU's bits, as the grading kernels use
    buffers = [got[f"buffer{i}"] for i in range(len(meta.get("buffers", []))) if f"buffer{i}" in got]
    for i, ref in enumerate(stored_ref):
        if any(same_stored([bf], [ref]) for bf in buffers):
            continue
        lines = [
            f"the quantized weight's tensor {i} ({str(ref.dtype).replace('torch.', '')} {list(ref.shape)}: "
            f"kernels(fmt).quantize of the {sum(Ns)} x {K} concatenation of the weights) is not among the module's "
            f"buffers: quantize torch.cat of the Linears' weights along N as one tensor and register each tensor it "
            f"returns with self.register_buffer(name, tensor){ctx}"
        ]
        wrong = [
            p for p, r in zip(_per_part(fmt, weights), stored_ref, strict=True) if not same_stored([p], [r])
        ]
        if any(same_stored([bf], [p]) for bf in buffers for p in wrong):
            lines.insert(0, PER_PART)
        raise CheckFailed("\n".join(lines))


def check_fused_quant_linear(cls, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 4: FusedQuantLinear(linears, fmt) stores one quantized weight, the Linears' weights concatenated
    along N and quantized as one tensor, as buffers (the biases concatenated), and its forward makes ONE kernel call
    over all N (decode for M <= 16 rows, prefill above) and returns one output per Linear, [..., N_i] in x's dtype."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = default_device()
    act = act_dtype(device)
    cases = _cases(g, hidden, device)
    everything, all_got = drive(cls, "fused", cases, what="FusedQuantLinear")
    built = []
    for c, case in enumerate(cases):
        try:
            meta = everything["cases"][c]
        except (KeyError, IndexError, TypeError):
            raise _unreadable() from None
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        built.append(got)
        _check_built(case, meta, got)
    # The forwards graded are those of FusedQuantLinear rebuilt from these buffers on decoy layers (hidden: in a
    # fresh worker); the decoys have a seed of their own.
    fresh = hidden
    fresh_process(cls, fresh)
    dg = checks.generator(checks.fresh_seed())
    rebuild = []
    for case, got in zip(cases, built, strict=True):
        Ns, K = [w.shape[0] for w in case["weights"]], case["weights"][0].shape[1]
        biases = [None if b is None else torch.randn(b.shape, generator=dg) * 0.5 for b in case["biases"]]
        rebuild.append({"fmt": case["fmt"], "weights": _weights(Ns, K, dg), "biases": biases,
                        "state": state_arg(got, "state|"), "xs": case["xs"]})  # fmt: skip
    everything, all_got = drive(cls, "fused_rebuilt", rebuild, what="FusedQuantLinear")
    rebuilt = how_rebuilt(cls, fresh, REBUILT_ON)
    n = 0
    for c, case in enumerate(cases):
        fmt, weights, xs = case["fmt"], case["weights"], case["xs"]
        Ns, K = [w.shape[0] for w in weights], weights[0].shape[1]
        N = sum(Ns)
        ctx = _context(case)
        try:
            meta = everything["cases"][c]
            assert isinstance(meta.get("forwards"), list)
        except (KeyError, IndexError, TypeError, AssertionError):
            raise _unreadable() from None
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        if meta.get("error") and "at" not in meta["error"]:
            raise_learner(meta["error"], f"{ctx[:-1]}; FusedQuantLinear {REBUILT_ON})")
        if meta.get("load"):
            raise not_rebuilt("FusedQuantLinear", f"{meta['load']}{ctx}", f"The layer graded is FusedQuantLinear {rebuilt}",
                              "every group of layers of these shapes, whatever their weights")  # fmt: skip
        stored_ref = reference_quantize(fmt, torch.cat(weights))
        w_deq = dequantized(fmt, stored_ref)
        bias = torch.cat(
            [torch.zeros(n_i) if b is None else b for n_i, b in zip(Ns, case["biases"], strict=True)]
        )
        for j, x in enumerate(xs):
            shape = tuple(x.shape)
            lead, M = shape[:-1], math.prod(shape[:-1])
            kind = "decode" if M <= DECODE_MAX_M else "prefill"
            c2 = f"{ctx[:-1]}, x {str(x.dtype).replace('torch.', '')} {list(shape)}: M = {M})"
            first = _side_by_side([built[c].get(f"y{j}.{i}") for i in range(len(Ns))], M)
            if j >= len(meta["forwards"]):
                if first is not None:
                    raise CheckFailed(
                        f"FusedQuantLinear computes with something other than its registered buffers{c2}: "
                        f"{rebuilt}, its forward raised ({learner_message(meta['error']).splitlines()[0]}) where "
                        f"the first returned its outputs. {OTHER_THAN_BUFFERS}"
                    )
                raise_learner(meta["error"], c2)
            fw = meta["forwards"][j]
            # The product and the weight belong to the kernel: no torch matmul, no 16- or 32-bit copy of the weight.
            ops = [op for op in ops_records(fw["ops"]) if op.name in checks.MATMUL_OPS | checks.MEMORY_OPS]
            outs = [
                shape,
                (M, K),
                (M, N),
                (*lead, N),
                *[(M, n_i) for n_i in Ns],
                *[(*lead, n_i) for n_i in Ns],
            ]
            checks.assert_fused(
                ops, what="FusedQuantLinear.forward", weight_shape=(N, K), allowed_shapes=outs
            )
            calls = [k for k in fw["calls"] if k and k[0] == fmt]
            if not calls:
                raise CheckFailed(f"FusedQuantLinear.forward called no kernel of capstone.kernels({fmt!r}): "
                                  f"multiply with kernels(fmt).prefill or .decode{c2}")  # fmt: skip
            if len(calls) > 1:
                raise _one_launch(calls, Ns, K, c2)
            if len(calls[0]) > 4 and calls[0][4] != N:
                raise CheckFailed(
                    f"FusedQuantLinear.forward's one kernel call computed N = {calls[0][4]} outputs, not all "
                    f"{N} = {' + '.join(map(str, Ns))}: the one weight it multiplies is the concatenation of every "
                    f"Linear's{c2}"
                )
            if calls[0][1] != kind:
                if kind == "decode":
                    raise CheckFailed(
                        f"FusedQuantLinear.forward ran the prefill kernel for M = {M} rows: at M <= {DECODE_MAX_M} "
                        f"use the decode kernel (kernels(fmt).decode), made for this case{c2}"
                    )
                raise CheckFailed(
                    f"FusedQuantLinear.forward ran the decode kernel for M = {M} rows > {DECODE_MAX_M}{c2}"
                )
            parts = fw.get("parts")
            if parts is None:
                if f"y{j}.all" in got:
                    raise CheckFailed(
                        f"FusedQuantLinear.forward returned one tensor of shape {list(got[f'y{j}.all'].shape)}: return "
                        f"a tuple of {len(Ns)} outputs, one per Linear, split at the out_features boundaries "
                        f"(torch.split(y, [{', '.join(map(str, Ns))}], dim=-1)){c2}"
                    )
                raise CheckFailed(f"FusedQuantLinear.forward must return a tuple of tensors, one per Linear, got "
                                  f"{fw['returned']}{c2}")  # fmt: skip
            if len(parts) != len(Ns):
                raise CheckFailed(f"FusedQuantLinear.forward returned {len(parts)} outputs for {len(Ns)} Linears: one "
                                  f"per Linear, in their order{c2}")  # fmt: skip
            ys = []
            for i, n_i in enumerate(Ns):
                y = got.get(f"y{j}.{i}")
                if y is None:
                    raise CheckFailed(
                        f"FusedQuantLinear.forward's output {i} is a {parts[i]}, not a tensor{c2}"
                    )
                if tuple(y.shape) != (*lead, n_i):
                    raise CheckFailed(
                        f"FusedQuantLinear.forward's output {i} has shape {list(y.shape)}, expected {[*lead, n_i]}: "
                        f"Linear {i}'s out_features, x's leading dimensions kept{c2}"
                    )
                if y.dtype != x.dtype:
                    raise CheckFailed(
                        f"FusedQuantLinear.forward returned {y.dtype} for an input of {x.dtype}: convert the output "
                        f"back to x's dtype, as nn.Linear would return it{c2}"
                    )
                ys.append(y.reshape(M, n_i).float())
            if fw["x_changed"]:
                raise CheckFailed(f"FusedQuantLinear.forward modified its input in place{c2}")
            raw = reference_matmul(fmt, x.reshape(M, K).to(act), stored_ref, w_deq).to(act).float()
            mistakes = [checks.Mistake("bias forgotten", "Each Linear adds its bias: the biases concatenated, a "
                                       "Linear without one adding nothing.", raw),
                        checks.Mistake("bias added twice", "Add the bias once, after the kernel.", raw + 2 * bias)]  # fmt: skip
            y = torch.cat(ys, dim=1)
            rtol = 4 * checks.tolerance_for(act)
            try:
                checks.compare(y, raw + bias, what="FusedQuantLinear.forward (its outputs side by side)", rtol=rtol,
                               mistakes=mistakes if bool(bias.any()) else [], context=c2)  # fmt: skip
            except CheckFailed:
                if first is None or not differs(y, first, rtol):
                    raise
                raise CheckFailed(
                    f"FusedQuantLinear computes with something other than its registered buffers{c2}: {rebuilt}, it "
                    f"returns other numbers than the first. {OTHER_THAN_BUFFERS}"
                ) from None
            n += 1
    checks.passed(f"FusedQuantLinear: {n} {'hidden' if hidden else 'visible'} calls right, one kernel call each over "
                  f"the concatenated weight, its buffers as they should be (seed {seed})")  # fmt: skip
