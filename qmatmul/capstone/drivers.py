"""What the grader runs in the worker, beside the learner's code: the drive_* functions of exercises 2 to 5 and of
the stack-speed cell.

Under the trusted grader, QuantLinear and quantize_model live in the worker process, and only data crosses. A
check names a driver (drive_*), which runs in the worker beside the learner's code: it builds and exercises
their QuantLinear or quantize_model with the grading kernels and returns what it saw as data (a JSON string and
tensors). The check (checks.py, stack.py) draws the inputs, computes the expected results itself and decides. In the learner's
own notebook the same drivers run in-process. A driver never decides: what it reports can only take points away.

Every forward that is graded runs on a module rebuilt from its registered tensors: a first driver builds the
learner's QuantLinear (or quantized model) on the real weights and returns its buffers and parameters (what
state_dict() holds, non-persistent buffers too); for a hidden check and the stack the worker is then stopped, and
in a fresh one (the notebook's cells run again) a second driver builds the learner's class on a decoy nn.Linear
of the same shape, dtype and bias (other weights, drawn here from a seed of their own), loads the first one's
tensors into it and runs it. No closure, global or hidden copy of the real weight exists in that process, so a
forward that computes from anything but its buffers computes with the decoy's weights and fails; the first
module's outputs only name that mistake. A visible check rebuilds in the same worker (rebuild.fresh_process says why).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from qmatmul import checks, timing, w8a16
from qmatmul.capstone import stack
from qmatmul.capstone.crossing import describe_exception, ops_data, pack
from qmatmul.capstone.formats import FORMATS
from qmatmul.capstone.grading_kernels import DEQUANTIZED_CACHE, GradingKernels, OpAudit, preload_caches
from qmatmul.capstone.model import MODEL_CACHE, MiniLM, course_model, embed, linear_names
from qmatmul.capstone.rebuild import BUILT, born_since, load_state, state_of, weight_copies, weight_sized
from qmatmul.capstone.registry import KernelSet, reference_kernels, using
from qmatmul.capstone.runtime import default_device


def _linear_for(case: dict, device) -> nn.Linear:
    N, K = case["weight"].shape
    lin = nn.Linear(K, N, bias=case["bias"] is not None, device=device)
    with torch.no_grad():
        lin.weight.copy_(case["weight"])
        if case["bias"] is not None:
            lin.bias.copy_(case["bias"])
    return lin


def drive_quant_linear(cls, cases: list) -> dict:
    """Where the learner's code runs: for each case {fmt, weight, bias, xs}, QuantLinear(linear, fmt) on a Linear
    of that weight and bias. Returns data, never a verdict: meta["cases"][i] and tensors named "i:...": what the
    module holds (its buffers, its state to rebuild it from, the weight-sized float tensors it keeps) and, to name
    a mistake only, its outputs for xs. The graded forwards run on the rebuilt module (drive_quant_linear_rebuilt)."""
    device = default_device()
    meta, tensors = {"cases": []}, {}
    grading = GradingKernels()
    sets = grading.sets()
    DEQUANTIZED_CACHE.clear()
    lins = [_linear_for(case, device) for case in cases]
    shapes = {tuple(c["weight"].shape) for c in cases}
    alive = weight_sized(shapes)
    mods = []
    for c, (case, lin) in enumerate(zip(cases, lins, strict=True)):
        info = {"error": None}
        meta["cases"].append(info)
        try:
            with using(sets):
                mod = cls(lin, case["fmt"])
        except BaseException as exc:  # noqa: BLE001 - the learner's error, reported as data
            info["error"] = describe_exception(exc, "QuantLinear(linear, fmt)")
            mod = None
        mods.append(mod)
        if mod is not None:
            info["module"] = isinstance(mod, nn.Module)
            info["type"], info["defined_in"] = type(mod).__name__, type(mod).__module__
            tensors[f"{c}:weight_after"] = lin.weight.detach()
    mine = [t for c in cases for t in (c["weight"], c["bias"]) if t is not None] + list(tensors.values())
    born = born_since(alive, shapes, exclude=mine)
    for c, (case, mod) in enumerate(zip(cases, mods, strict=True)):
        info = meta["cases"][c]
        if mod is None or not info["module"]:
            continue
        N, K = case["weight"].shape
        info["weight_copies"] = weight_copies(mod, N, K) or [
            ["a tensor kept outside the module", *b] for b in born if sorted(b[1][-2:]) == sorted((N, K))
        ]
        info["buffers"] = []
        for i, (name, b) in enumerate(mod.named_buffers()):
            info["buffers"].append(name)
            tensors[f"{c}:buffer{i}"] = b
        for name, t in state_of(mod).items():
            tensors[f"{c}:state|{name}"] = t
        for j, x in enumerate(case["xs"]):  # what this module computes (only to name a mistake)
            try:
                with using(sets), torch.no_grad():
                    y = mod(x.to(device, copy=True))
            except BaseException:  # noqa: BLE001 - the rebuilt module's forward says what is wrong
                break
            if isinstance(y, torch.Tensor):
                tensors[f"{c}:y{j}"] = y
    BUILT[:] = [m for m in mods if m is not None]
    return pack(meta, tensors)


def _rebuild(make, what: str, state: dict, sets: dict, info: dict):
    """The learner's module made by make() under the grading kernels (on a decoy Linear, dropped once made) with the
    state of the module built on the real weights loaded into it; None, the reason in info, when make raises,
    makes no nn.Module or the module does not take the state."""
    try:
        with using(sets):
            mod = make()
    except BaseException as exc:  # noqa: BLE001 - the learner's error, reported as data
        info["error"] = describe_exception(exc, what)
        return None
    if not isinstance(mod, nn.Module):
        info["load"] = f"{what} made a {type(mod).__name__}, not an nn.Module"
        return None
    info["load"] = load_state(mod, state)
    return None if info["load"] else mod


def drive_quant_linear_rebuilt(cls, cases: list) -> dict:
    """Where the learner's code runs (under the trusted grader, a fresh worker): for each case {fmt, weight, bias,
    state, xs}, QuantLinear(linear, fmt) on a decoy Linear of that weight and bias, `state` (the buffers and
    parameters of the module built on the real weight) loaded into it, then a forward of each x under the grading
    kernels, the learner's own torch ops recorded. Returns data: meta["cases"][i] and tensors "i:y{j}"."""
    device = default_device()
    meta, tensors = {"cases": []}, {}
    grading = GradingKernels(fresh=True)
    sets = grading.sets()
    DEQUANTIZED_CACHE.clear()
    for c, case in enumerate(cases):
        info = {"error": None, "forwards": []}
        meta["cases"].append(info)
        mod = _rebuild(lambda case=case: cls(_linear_for(case, device), case["fmt"]), "QuantLinear(linear, fmt)",
                       case["state"], sets, info)  # fmt: skip
        if mod is None:
            continue
        for j, x in enumerate(case["xs"]):
            x = x.to(device)
            x0 = x.clone()
            grading.calls.clear()
            grading.audit = OpAudit()
            try:
                with using(sets), grading.audit, torch.no_grad():
                    y = mod(x)
            except BaseException as exc:  # noqa: BLE001
                info["error"] = {**describe_exception(exc, "QuantLinear.forward"), "at": j}
                break
            finally:
                ops, grading.audit = grading.audit.ops, None
            info["forwards"].append({"calls": [list(k) for k in grading.calls], "ops": ops_data(ops),
                                     "returned": type(y).__name__, "x_changed": not torch.equal(x, x0)})  # fmt: skip
            if isinstance(y, torch.Tensor):
                tensors[f"{c}:y{j}"] = y
    BUILT.clear()
    return pack(meta, tensors)


def _group_for(case: dict, device) -> list:
    """The nn.Linear layers of one fused case (q, k, v: one weight and bias each), on the device."""
    return [
        _linear_for({"weight": w, "bias": b}, device)
        for w, b in zip(case["weights"], case["biases"], strict=True)
    ]


def _with_widths(grading: GradingKernels) -> dict:
    """The grading kernel sets, each call's log entry (fmt, kind, M, K) completed with the N it returned."""

    def logged(fn):
        def run(x, *stored, **kw):
            y = fn(x, *stored, **kw)
            grading.calls[-1] = (*grading.calls[-1], int(y.shape[-1]))
            return y

        return run

    return {f: KernelSet(f, ks.quantize, logged(ks.prefill), logged(ks.decode), ks.source)
            for f, ks in grading.sets().items()}  # fmt: skip


def _fused_forward(mod, x, sets, grading, info: dict, tensors: dict, key: str, audit: bool) -> bool:
    """One forward of a FusedQuantLinear: its kernel calls, its ops (audit), what it returned (tensors key.i).
    False when it raised (the error in info)."""
    x0 = x.clone()
    grading.calls.clear()
    grading.audit = OpAudit() if audit else None
    try:
        with using(sets), grading.audit if audit else contextlib.nullcontext(), torch.no_grad():
            y = mod(x)
    except BaseException as exc:  # noqa: BLE001
        info["error"] = {**describe_exception(exc, "FusedQuantLinear.forward"), "at": len(info["forwards"])}
        return False
    finally:
        ops, grading.audit = (grading.audit.ops if audit else []), None
    parts = list(y) if isinstance(y, (tuple, list)) else None
    info["forwards"].append({"calls": [list(k) for k in grading.calls], "ops": ops_data(ops),
                             "returned": type(y).__name__, "x_changed": not torch.equal(x, x0),
                             "parts": None if parts is None else [type(p).__name__ for p in parts]})  # fmt: skip
    if isinstance(y, torch.Tensor):
        tensors[f"{key}.all"] = y
    for i, p in enumerate(parts or []):
        if isinstance(p, torch.Tensor):
            tensors[f"{key}.{i}"] = p
    return True


def drive_fused(cls, cases: list) -> dict:
    """Where the learner's code runs: for each case {fmt, weights, biases, xs}, FusedQuantLinear(linears, fmt) on
    nn.Linear layers of those weights and biases (the same in_features). Returns data, never a verdict:
    meta["cases"][i] and tensors "i:...": the module's buffers, its state to rebuild it from, the weight-sized float
    tensors it keeps, and (to name a mistake only) the kernel calls and outputs of a forward of each x. The graded
    forwards run on the rebuilt module (drive_fused_rebuilt)."""
    device = default_device()
    meta, tensors = {"cases": []}, {}
    grading = GradingKernels()
    sets = _with_widths(grading)
    DEQUANTIZED_CACHE.clear()
    groups = [_group_for(case, device) for case in cases]
    shapes = {tuple(w.shape) for c in cases for w in c["weights"]}
    shapes |= {(sum(w.shape[0] for w in c["weights"]), c["weights"][0].shape[1]) for c in cases}
    alive = weight_sized(shapes)
    mods = []
    for c, (case, lins) in enumerate(zip(cases, groups, strict=True)):
        info = {"error": None}
        meta["cases"].append(info)
        try:
            with using(sets):
                mod = cls(list(lins), case["fmt"])
        except BaseException as exc:  # noqa: BLE001 - the learner's error, reported as data
            info["error"] = describe_exception(exc, "FusedQuantLinear(linears, fmt)")
            mod = None
        mods.append(mod)
        if mod is not None:
            info["module"] = isinstance(mod, nn.Module)
            info["type"], info["defined_in"] = type(mod).__name__, type(mod).__module__
            for i, lin in enumerate(lins):
                tensors[f"{c}:weight_after{i}"] = lin.weight.detach()
    mine = [t for c in cases for t in [*c["weights"], *c["biases"]] if t is not None] + list(tensors.values())
    born = born_since(alive, shapes, exclude=mine)
    for c, (case, mod) in enumerate(zip(cases, mods, strict=True)):
        info = meta["cases"][c]
        if mod is None or not info["module"]:
            continue
        K = case["weights"][0].shape[1]
        Ns = [w.shape[0] for w in case["weights"]]
        mine = {tuple(sorted((n, K))) for n in [*Ns, sum(Ns)]}
        info["weight_copies"] = weight_copies(mod, min(Ns), K) or [
            ["a tensor kept outside the module", *b] for b in born if tuple(sorted(b[1][-2:])) in mine
        ]
        info["buffers"] = []
        for i, (name, b) in enumerate(mod.named_buffers()):
            info["buffers"].append(name)
            tensors[f"{c}:buffer{i}"] = b
        for name, t in state_of(mod).items():
            tensors[f"{c}:state|{name}"] = t
        info["forwards"] = []
        for j, x in enumerate(case["xs"]):  # what this module does (only to name a mistake)
            if not _fused_forward(
                mod, x.to(device, copy=True), sets, grading, info, tensors, f"{c}:y{j}", False
            ):
                info["error"] = None  # the rebuilt module's forward says what is wrong
                break
    BUILT[:] = [m for m in mods if m is not None]
    return pack(meta, tensors)


def drive_fused_rebuilt(cls, cases: list) -> dict:
    """Where the learner's code runs (under the trusted grader for a hidden check, a fresh worker): for each case
    {fmt, weights, biases, state, xs}, FusedQuantLinear(linears, fmt) on decoy Linears of those weights and biases,
    `state` (the buffers and parameters of the module built on the real weights) loaded into it, then a forward of
    each x under the grading kernels, the learner's own torch ops recorded. Returns data: meta["cases"][i] and
    tensors "i:y{j}.{part}"."""
    device = default_device()
    meta, tensors = {"cases": []}, {}
    grading = GradingKernels(fresh=True)
    sets = _with_widths(grading)
    DEQUANTIZED_CACHE.clear()
    for c, case in enumerate(cases):
        info = {"error": None, "forwards": []}
        meta["cases"].append(info)
        mod = _rebuild(lambda case=case: cls(_group_for(case, device), case["fmt"]), "FusedQuantLinear(linears, fmt)",
                       case["state"], sets, info)  # fmt: skip
        if mod is None:
            continue
        for j, x in enumerate(case["xs"]):
            if not _fused_forward(mod, x.to(device), sets, grading, info, tensors, f"{c}:y{j}", True):
                break
    BUILT.clear()
    return pack(meta, tensors)


def drive_quantize_model(fn, fmt: str, batches: list, table: dict | None = None) -> dict:
    """Where the learner's code runs: quantize_model(all-MiniLM-L6-v2, fmt) under the grading kernels, then the
    quantized model's embeddings of each batch of sentences. Returns what it saw, as data."""
    device = default_device()
    meta, tensors = {"error": None}, {}
    grading = GradingKernels()
    sets = grading.sets()
    model = course_model(device)
    if table:
        preload_caches(fmt, model, table, device)
    before = linear_names(model)
    shapes = {tuple(model.get_submodule(n).weight.shape) for n in before}
    alive = weight_sized(shapes)
    try:
        with using(sets), torch.no_grad():
            result = fn(model, fmt)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = describe_exception(exc, "quantize_model")
        return pack(meta, tensors)
    meta["returned"] = None if result is None else type(result).__name__
    if not isinstance(result, nn.Module):
        return pack(meta, tensors)
    meta["left"] = linear_names(result)
    del (
        model
    )  # the Linears left alive now are kept by the result (or by something quantize_model left behind)
    if not meta["left"]:
        meta["kept_copies"] = born_since(alive, shapes)
    layers = {}
    for name in before:
        try:
            layers[name] = result.get_submodule(name)
        except AttributeError:
            meta.setdefault("missing", []).append(name)
    meta["layers"] = {}
    for name, m in layers.items():
        cls = type(m)
        N, K = getattr(m, "out_features", 0), getattr(m, "in_features", 0)
        info = {"class": cls.__name__, "module": cls.__module__, "linear": isinstance(m, nn.Linear),
                "copies": weight_copies(m, N, K)[:1] if isinstance(N, int) and isinstance(K, int) and N * K else [],
                "buffers": []}  # fmt: skip
        for bname, b in m.named_buffers():
            if bname != "bias":
                tensors[f"{name}|{bname}"] = b
                info["buffers"].append(bname)
        meta["layers"][name] = info
    for name, t in state_of(result).items():  # what rebuilds the model (drive_quantize_model_rebuilt)
        tensors[f"state|{name}"] = t
    # The embeddings graded are the rebuilt model's (drive_quantize_model_rebuilt); these only name a mistake.
    _embeddings(result, batches, sets, grading, meta, tensors)
    BUILT[:] = [result]
    return pack(meta, tensors)


def _embeddings(model, batches, sets, grading, meta: dict, tensors: dict) -> None:
    meta["calls"] = []
    for i, batch in enumerate(batches):
        grading.calls.clear()
        try:
            with using(sets):
                tensors[f"e{i}"] = embed(model, batch)
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = describe_exception(exc, "the quantized model")
            break
        meta["calls"].append(len(grading.calls))


def _decoy_model(device: str, seed: int) -> MiniLM:
    """The course's MiniLM with every Linear's weight and bias drawn from `seed`: what quantize_model runs on again
    before the first model's buffers are loaded into its result."""
    model = course_model(device)
    MODEL_CACHE.pop(("course", device), None)  # no copy of the real Linears left in this process's caches
    g = checks.generator(seed)
    with torch.no_grad():
        for name in linear_names(model):
            lin = model.get_submodule(name)
            lin.weight.copy_(w8a16.random_weight(*lin.weight.shape, g))
            if lin.bias is not None:
                lin.bias.copy_(torch.randn(lin.bias.shape, generator=g) * 0.1)
    return model


def drive_quantize_model_rebuilt(fn, fmt: str, batches: list, seed: int, state: dict) -> dict:
    """Where the learner's code runs (under the trusted grader, a fresh worker): quantize_model on a decoy MiniLM
    (every Linear's weight and bias drawn from `seed`), `state` (the buffers and parameters of the model quantized
    from the real weights) loaded into what it returns, then that model's embeddings of each batch."""
    device = default_device()
    meta, tensors = {"error": None}, {}
    grading = GradingKernels(fresh=True)
    sets = grading.sets()
    model = _decoy_model(device, seed)
    try:
        with using(sets), torch.no_grad():
            result = fn(model, fmt)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = describe_exception(exc, "quantize_model")
        return pack(meta, tensors)
    del model
    if not isinstance(result, nn.Module):
        meta["load"] = f"quantize_model returned a {type(result).__name__}, not the model"
        return pack(meta, tensors)
    meta["load"] = load_state(result, state)
    if not meta["load"]:
        _embeddings(result, batches, sets, grading, meta, tensors)
    BUILT.clear()
    return pack(meta, tensors)


_STACK: dict = {}  # the stack rebuilt in this worker (drive_stack's "rebuild"), kept for the timed runs


def _stack_probe(layers, full: dict, probe: int, device: str, meta: dict, tensors: dict) -> None:
    """Each layer's output for one row (inputs from `probe`): the stack built on the real weights and the one rebuilt
    from its buffers must agree, layer by layer."""
    xs = stack.stack_inputs(probe, 1, device)
    try:
        with using(full), torch.no_grad():
            for i, (_, K) in enumerate(stack.LLAMA_BLOCK):
                tensors[f"probe{i}"] = layers[i](xs[K])
    except BaseException as exc:  # noqa: BLE001
        meta["probe_error"] = describe_exception(exc, "QuantLinear.forward")


def drive_stack(cls, op: str, seed: int, M: int = 1, reps: int = 1, probe: int = 0, state=None) -> dict:
    """Where the learner's code runs. op "build": one Llama-3-8B block's Linears (weights from `seed`) as
    QuantLinear(linear, "w8a16"), returning their buffers and parameters ("i|name") and their outputs for one row
    of inputs from `probe`; "rebuild" (under the trusted grader, in a fresh worker): the same on decoy weights (from
    `seed`), `state` loaded into each, the probe's outputs, and that stack kept for the timed runs; "run": reps
    forwards of the rebuilt stack at M rows (inputs from `seed`), through the W8A16 kernels ("yours"), the same
    captured once as a CUDA graph and replayed ("graph", on a GPU) or the reference path ("naive"), the device
    synchronized; "nothing": the round trip alone."""
    meta, tensors = {"error": None}, {}
    device = stack.stack_device() or "cpu"
    if op == "nothing":
        return pack(meta, tensors)
    if op in ("build", "rebuild"):
        _STACK.clear()
        ks, where = stack.stack_kernels()
        if ks is None:
            meta["no_kernels"] = True
            return pack(meta, tensors)
        full = {f: reference_kernels(f) for f in FORMATS} | {"w8a16": ks}
        g = checks.generator(seed, device)
        try:
            with using(full):
                layers = stack.llama_stack(cls, "w8a16", device, g)
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = describe_exception(exc, "QuantLinear(linear, 'w8a16')")
            return pack(meta, tensors)
        meta["where"] = where
        if op == "build":
            for i, m in enumerate(layers):
                for name, t in state_of(m).items():
                    tensors[f"{i}|{name}"] = t
        else:
            for i, m in enumerate(layers):
                why = load_state(
                    m, {k.split("|", 1)[1]: v for k, v in state.items() if k.split("|", 1)[0] == str(i)}
                )
                if why:
                    meta["load"] = f"{why} (the layer {list(stack.LLAMA_BLOCK[i])})"
                    return pack(meta, tensors)
            _STACK.update(layers=layers, full=full, where=where)
        _stack_probe(layers, full, probe, device, meta, tensors)
        return pack(meta, tensors)
    mode = op.split(":")[1]
    if mode == "fetch":  # the last timed run's outputs, after the clock stopped
        for i, y in enumerate(_STACK.get("last", [])):
            tensors[f"y{i}"] = y
        return pack(meta, tensors)
    sets = _STACK["full"] if mode in ("yours", "graph") else {f: reference_kernels(f) for f in FORMATS}
    xs = stack.stack_inputs(seed, M, device, reps)  # each step its own inputs
    try:
        with using(sets), torch.no_grad():
            if mode == "graph" and device == "cuda":
                outs = _replay(M, xs, reps)
            else:  # eagerly (a CPU, in the tests, runs "graph" so)
                outs = [_step({K: x[i] for K, x in xs.items()}) for i in range(reps)]
            ys = stack.by_layer(outs)
            meta["checksum"] = stack.steps_checksum(ys)
            timing.sync(device)
    except BaseException as exc:  # noqa: BLE001
        what = "the stack through your QuantLinear"
        meta["error"] = describe_exception(
            exc, f"{what}, captured as a CUDA graph" if mode == "graph" else what
        )
        return pack(meta, tensors)
    _STACK["last"] = ys
    return pack(meta, tensors)


def _step(xs: dict) -> list:
    """One step of the rebuilt stack: each Linear on the activations of its K."""
    return [m(xs[m.in_features]) for m in _STACK["layers"]]


CAPTURE_HINT = (
    f"A CUDA graph records the GPU work of one forward and replays it without Python: {stack.NO_WAITING}"
)


def _replay(M: int, xs: dict, reps: int) -> list:
    """The rebuilt stack's `reps` steps at M rows captured once as one CUDA graph (stack.captured_steps: each step on
    inputs of its own, copied into the graph's buffers) and replayed: what a serving engine runs, and nothing a
    replay skips goes unseen. The steps' outputs, the graph's buffers."""
    graphs = _STACK.setdefault("graphs", {})
    if (M, reps) not in graphs:
        try:
            graphs[M, reps] = stack.captured_steps(_step, xs, reps)
        except BaseException as exc:  # noqa: BLE001 - the first error is the forward's; capture's end adds its own
            first = exc
            while first.__context__ is not None:
                first = first.__context__
            said = str(first).splitlines()[0] if str(first) else ""
            raise RuntimeError(f"{type(first).__name__}: {said}. {CAPTURE_HINT}") from None
    run, outs = graphs[M, reps]
    run(xs)
    return outs


_CAPTURE: dict = {}  # the learner's replay of the course's block step in this worker (drive_capture's "build")


def drive_capture(fn, op: str, seed: int, M: int = 1, probe: int = 0) -> dict:
    """Where the learner's capture runs. op "build": the course's W8A16 block step on weights from `seed`
    (capture.make_step), example inputs from seed + 1, replay = fn(step, x, h); then replay on PROBES fresh inputs
    (from probe, probe + 1, ...), each call's outputs copied out ("p{call}_{layer}"). "run": CAPTURE_REPS steps of
    the replay on inputs of their own (from `seed`), by capture.run_steps, the device synchronized, the outputs' sum
    answered; "fetch": those outputs, after the clock stopped; "nothing": the round trip alone."""
    from qmatmul.capstone import capture

    meta, tensors = {"error": None}, {}
    device = stack.stack_device() or "cpu"
    if op == "nothing":
        return pack(meta, tensors)
    if op == "fetch":
        for i, y in enumerate(_CAPTURE.get("last", [])):
            tensors[f"y{i}"] = y
        return pack(meta, tensors)
    if op == "build":
        _CAPTURE.clear()
        step = capture.make_step(capture.block_weights(seed, device))
        try:
            with torch.no_grad():
                replay = fn(step, *capture.step_inputs(seed + 1, M, device))
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = describe_exception(exc, capture.WHAT)
            return pack(meta, tensors)
        if not callable(replay):
            meta["returned"] = type(replay).__name__
            return pack(meta, tensors)
        # the step owns the block's weights, which the graph reads by address: kept alive as long as the replay (a
        # replay that outlived them would read freed memory, whatever took it since)
        _CAPTURE.update(replay=replay, step=step, M=M)
        try:
            for j in range(capture.PROBES):
                with torch.no_grad():
                    ys = replay(*capture.step_inputs(probe + j, M, device))
                for i, y in enumerate(ys):
                    if isinstance(y, torch.Tensor):
                        tensors[f"p{j}_{i}"] = y.clone()
        except BaseException as exc:  # noqa: BLE001
            meta["error"] = describe_exception(exc, "replay(x, h)")
        return pack(meta, tensors)
    inputs = capture.step_inputs(seed, M, device, capture.CAPTURE_REPS)
    outs = capture.outputs_for(M, capture.CAPTURE_REPS, device)
    try:
        with torch.no_grad():
            capture.run_steps(_CAPTURE["replay"], inputs, outs)
            meta["checksum"] = stack.steps_checksum(outs)
            timing.sync(device)
    except BaseException as exc:  # noqa: BLE001
        meta["error"] = describe_exception(exc, "replay(x, h)")
        return pack(meta, tensors)
    _CAPTURE["last"] = outs
    return pack(meta, tensors)
