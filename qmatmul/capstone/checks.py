"""The checks of exercises 1 to 3 (spearman, QuantLinear, quantize_model): each draws its inputs, has the drivers run
the learner's code (qmatmul/capstone/drivers.py), computes the expected results itself and decides."""

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
from qmatmul.capstone.grading_kernels import GradingKernels
from qmatmul.capstone.layers import ReferenceQuantLinear, reference_quantize_model
from qmatmul.capstone.model import course_model, embed, linear_names
from qmatmul.capstone.rebuild import (
    OTHER_THAN_BUFFERS,
    REBUILT_ON,
    course_class,
    differs,
    fresh_process,
    how_rebuilt,
    not_rebuilt,
    state_arg,
)
from qmatmul.capstone.registry import DECODE_MAX_M, using
from qmatmul.capstone.runtime import act_dtype, default_device
from qmatmul.capstone.stats import cosine, pearson, spearman_reference
from qmatmul.capstone.text import SENTENCES
from qmatmul.checks import CheckFailed


def _spearman_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        return [
            (torch.tensor([0.1, 0.4, 0.35, 0.8, 0.05]), torch.tensor([1.0, 3.0, 4.0, 5.0, 2.0])),
            (torch.tensor([0.9, 0.2, 0.2, 0.5, 0.7, 0.2]), torch.tensor([3.0, 1.0, 2.0, 2.0, 5.0, 0.5])),
        ]
    cases = []
    for _ in range(3):
        n = int(torch.randint(8, 60, (1,), generator=g))
        a = torch.randn(n, generator=g)
        b = a + torch.randn(n, generator=g) * 0.8
        cases.append((torch.round(a * 3) / 3, torch.round(b * 2) / 2))  # many ties in both
    n = int(torch.randint(10, 40, (1,), generator=g))
    a = torch.rand(n, generator=g)
    cases.append((a, torch.exp(a * 5)))  # monotone but not linear: rho = 1, Pearson < 1
    cases.append((a.to(torch.float32), -a.double()))  # rho = -1, mixed dtypes
    return cases


def _spearman_mistakes(a, b) -> list[tuple[str, str, float]]:
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()

    def plain_ranks(v):
        r = torch.empty_like(v)
        r[torch.argsort(v, stable=True)] = torch.arange(1, len(v) + 1, dtype=torch.float64)
        return r

    return [
        ("Pearson instead of Spearman", "Spearman's rho is the Pearson correlation of the *ranks*, not of the values: "
         "rank each vector first.", pearson(a, b)),
        ("ties not averaged", "Equal values must share the average of the positions they occupy (1, 2.5, 2.5, 4): "
         "ranking by argsort alone gives tied values different ranks.", pearson(plain_ranks(a), plain_ranks(b))),
        ("argsort taken for the ranks", "argsort(v) gives the indices that sort v, not the rank of each element: "
         "the ranks are the inverse permutation (argsort of argsort, or scatter positions into place).",
         pearson(torch.argsort(a).double(), torch.argsort(b).double())),
    ]  # fmt: skip


def check_spearman(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: spearman(a, b) equals the reference (ties averaged) within 1e-6."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    for a, b in _spearman_inputs(g, hidden):
        ctx = f" (n = {len(a)}, {len(torch.unique(a)) < len(a) or len(torch.unique(b)) < len(b) and 'with' or 'no'} ties)"
        a0, b0 = a.clone(), b.clone()
        got = checks.call_learner(fn, a.clone(), b.clone(), what="spearman")
        if isinstance(got, torch.Tensor):
            if got.numel() != 1:
                raise CheckFailed(
                    f"spearman must return one number, got a tensor of shape {list(got.shape)}{ctx}"
                )
            got = got.item()
        if not isinstance(got, (float, int)):
            raise CheckFailed(f"spearman must return a float, got {type(got).__name__}{ctx}")
        got = float(got)
        want = spearman_reference(a, b)
        if not math.isfinite(got) or abs(got - want) > 1e-6:
            lines = [f"spearman returned {got:.6f}, expected {want:.6f}{ctx}"]
            for name, explanation, value in _spearman_mistakes(a, b):
                if abs(got - value) <= 1e-6 and abs(value - want) > 1e-6:
                    lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                    break
            raise CheckFailed("\n".join(lines))
        if not (torch.equal(a, a0) and torch.equal(b, b0)):
            raise CheckFailed(f"spearman modified its inputs in place{ctx}")
    checks.passed(
        f"spearman: equals the reference on {'hidden' if hidden else 'visible'} inputs (seed {seed})"
    )


def _ql_cases(g, hidden: bool, device: str):
    if not hidden:
        return [("w8a16", 96, 256, True), ("w4a16", 72, 256, True), ("nvfp4", 80, 128, False)]
    cases = []
    for fmt in FORMATS:
        N = int(torch.randint(33, 300 if device == "cuda" else 160, (1,), generator=g))
        K = GROUP * int(torch.randint(1, 4, (1,), generator=g))  # a whole number of W4A16 groups
        cases.append((fmt, N + (N == K), K, bool(torch.randint(0, 2, (1,), generator=g)) or fmt == "fp8"))
    return cases


def check_quant_linear(cls, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: QuantLinear(linear, fmt) stores only the quantized weight (as buffers) and its forward runs
    the decode kernel for M <= 16 rows and the prefill kernel above, adds the bias, and keeps x's shape and dtype."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = default_device()
    act = act_dtype(device)
    n = 0
    cases = []
    for fmt, N, K, bias in _ql_cases(g, hidden, device):
        weight = w8a16.random_weight(N, K, g)
        b = torch.randn(N, generator=g) * 0.5 if bias else None
        M_small = int(torch.randint(1, DECODE_MAX_M + 1, (1,), generator=g)) if hidden else 5
        shapes = [(M_small, K), (2, 13, K)] + ([(DECODE_MAX_M, K), (DECODE_MAX_M + 1, K)] if hidden else [])
        xs = [(torch.randn(*s, generator=g) * 0.5).to(dt) for s in shapes for dt in (torch.float32, act)]
        cases.append({"fmt": fmt, "weight": weight, "bias": b, "xs": xs})
    everything, all_got = drive(cls, "quant_linear", cases, what="QuantLinear")
    built = []
    for c, case in enumerate(cases):  # what the module built on the real weight holds
        fmt, weight, b = case["fmt"], case["weight"], case["bias"]
        N, K = weight.shape
        ctx = f" ({LABELS[fmt]}, N={N}, K={K}, {'with' if b is not None else 'no'} bias)"
        try:
            meta = everything["cases"][c]
        except (KeyError, IndexError, TypeError):
            raise CheckFailed("QuantLinear: the grader could not read what your code did: flagged for your "
                              "instructor") from None  # fmt: skip
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        built.append(got)
        if meta.get("error"):
            raise_learner(meta["error"], ctx)
        if not meta.get("module"):
            raise CheckFailed(f"QuantLinear must be an nn.Module (class QuantLinear(torch.nn.Module)){ctx}")
        if course_class(meta.get("defined_in", "")):
            raise CheckFailed(f"QuantLinear(linear, fmt) made a {meta['defined_in']}.{meta['type']}, the course's "
                              f"own class: the exercise is to write QuantLinear{ctx}")  # fmt: skip
        if not torch.equal(got.get("weight_after", torch.empty(0)), weight):
            raise CheckFailed(f"QuantLinear changed the nn.Linear's weight in place; leave it untouched{ctx}")
        for where, dtype, shape in meta.get("weight_copies", []):
            raise CheckFailed(
                f"QuantLinear keeps a floating-point copy of the weight ({where}, {dtype} {shape}): store only the "
                f"quantized tensors, or the model is no smaller than before{ctx}"
            )
        stored_ref = reference_quantize(fmt, weight)  # the CPU's bits, as the grading kernels use
        buffers = [got[f"buffer{i}"] for i in range(len(meta.get("buffers", [])))]
        for i, ref in enumerate(stored_ref):
            if not any(same_stored([bf], [ref]) for bf in buffers):
                raise CheckFailed(
                    f"the quantized weight's tensor {i} ({str(ref.dtype).replace('torch.', '')} {list(ref.shape)}) is "
                    "not among the module's buffers: register each tensor that kernels(fmt).quantize returns with "
                    f"self.register_buffer(name, tensor), so that model.to(device) and state_dict() see it{ctx}"
                )
    # The forwards graded are those of QuantLinear rebuilt from these buffers, on decoy layers (hidden: in a fresh
    # worker).
    fresh = hidden
    fresh_process(cls, fresh)
    # The decoys' own seed: nothing in them leads to the real weights.
    dg = checks.generator(checks.fresh_seed())
    rebuild = []
    for case, got in zip(cases, built, strict=True):
        N, K = case["weight"].shape
        decoy_b = None if case["bias"] is None else torch.randn(N, generator=dg) * 0.5
        rebuild.append({"fmt": case["fmt"], "weight": w8a16.random_weight(N, K, dg), "bias": decoy_b,
                        "state": state_arg(got, "state|"), "xs": case["xs"]})  # fmt: skip
    everything, all_got = drive(cls, "quant_linear_rebuilt", rebuild, what="QuantLinear")
    for c, case in enumerate(cases):
        fmt, weight, b, xs = case["fmt"], case["weight"], case["bias"], case["xs"]
        N, K = weight.shape
        bias = b is not None
        ctx = f" ({LABELS[fmt]}, N={N}, K={K}, {'with' if bias else 'no'} bias)"
        try:
            meta = everything["cases"][c]
            assert isinstance(meta.get("forwards"), list)
        except (KeyError, IndexError, TypeError, AssertionError):
            raise CheckFailed("QuantLinear: the grader could not read what your code did: flagged for your "
                              "instructor") from None  # fmt: skip
        got = {k.split(":", 1)[1]: v for k, v in all_got.items() if k.split(":", 1)[0] == str(c)}
        if meta.get("error") and "at" not in meta["error"]:
            raise_learner(meta["error"], f"{ctx[:-1]}; QuantLinear {REBUILT_ON})")
        if meta.get("load"):
            raise not_rebuilt(
                "QuantLinear",
                f"{meta['load']}{ctx}",
                f"The layer graded is QuantLinear {how_rebuilt(cls, fresh)}",
            )
        stored_ref = reference_quantize(fmt, weight)
        w_deq = dequantized(fmt, stored_ref)
        for j, x in enumerate(xs):
            shape = tuple(x.shape)
            M = math.prod(shape[:-1])
            kind = "decode" if M <= DECODE_MAX_M else "prefill"
            c2 = f"{ctx[:-1]}, x {str(x.dtype).replace('torch.', '')} {list(shape)}: M = {M})"
            # What the module built on the real weight returned: it only names a mistake.
            first = built[c].get(f"y{j}")
            if j >= len(meta["forwards"]):
                if first is not None:
                    raise CheckFailed(
                        f"QuantLinear computes with something other than its registered buffers{c2}: "
                        f"{how_rebuilt(cls, fresh)}, its forward raised "
                        f"({learner_message(meta['error']).splitlines()[0]}) where the first returned a tensor. "
                        f"{OTHER_THAN_BUFFERS}"
                    )
                raise_learner(meta["error"], c2)
            fw = meta["forwards"][j]
            # The product and the weight belong to the kernels: no torch matmul, no 16- or 32-bit copy of the
            # weight. The bias add and the conversions around the kernel call are QuantLinear's own work.
            ops = [op for op in ops_records(fw["ops"]) if op.name in checks.MATMUL_OPS | checks.MEMORY_OPS]
            checks.assert_fused(ops, what="QuantLinear.forward", weight_shape=(N, K),
                                allowed_shapes=[shape, (M, K), (M, N), (*shape[:-1], N)])  # fmt: skip
            calls = [c for c in fw["calls"] if c[0] == fmt]
            if not calls:
                raise CheckFailed(
                    f"QuantLinear.forward called no kernel of capstone.kernels({fmt!r}): multiply with "
                    f"kernels(fmt).prefill or .decode{c2}"
                )
            if len(calls) > 1:
                raise CheckFailed(
                    f"QuantLinear.forward called the kernels {len(calls)} times; once is enough{c2}"
                )
            if calls[0][1] != kind:
                if kind == "decode":
                    raise CheckFailed(
                        f"QuantLinear.forward ran the prefill kernel for M = {M} rows: at M <= {DECODE_MAX_M} "
                        f"use the decode kernel (kernels(fmt).decode), made for this case{c2}"
                    )
                raise CheckFailed(
                    f"QuantLinear.forward ran the decode kernel for M = {M} rows > {DECODE_MAX_M}{c2}"
                )
            y = got.get(f"y{j}")
            if y is None:
                raise CheckFailed(f"QuantLinear.forward must return a tensor, got {fw['returned']}{c2}")
            if tuple(y.shape) != (*shape[:-1], N):
                raise CheckFailed(
                    f"QuantLinear.forward returned shape {list(y.shape)}, expected {[*shape[:-1], N]}: keep "
                    f"x's leading dimensions (flatten them for the kernel, reshape back after){c2}"
                )
            if y.dtype != x.dtype:
                raise CheckFailed(
                    f"QuantLinear.forward returned {y.dtype} for an input of {x.dtype}: convert the output back "
                    f"to x's dtype, as nn.Linear would return it{c2}"
                )
            if fw["x_changed"]:
                raise CheckFailed(f"QuantLinear.forward modified its input in place{c2}")
            raw = reference_matmul(fmt, x.reshape(M, K).to(act), stored_ref, w_deq).to(act).float()
            expected = raw + b if bias else raw
            mistakes = []
            if bias:
                mistakes += [checks.Mistake("bias forgotten", "nn.Linear adds its bias: y = x W^T + b.", raw),
                             checks.Mistake("bias added twice", "Add the bias once, after the kernel.", raw + 2 * b)]  # fmt: skip
            rtol = 4 * checks.tolerance_for(act)
            try:
                checks.compare(y.reshape(M, N).float(), expected, what="QuantLinear.forward", rtol=rtol,
                               mistakes=mistakes, context=c2)  # fmt: skip
            except CheckFailed:
                if first is None or not differs(y, first, rtol):
                    raise
                raise CheckFailed(
                    f"QuantLinear computes with something other than its registered buffers{c2}: "
                    f"{how_rebuilt(cls, fresh)}, it returns other numbers than the first. {OTHER_THAN_BUFFERS}"
                ) from None
            n += 1
    checks.passed(f"QuantLinear: {n} {'hidden' if hidden else 'visible'} calls right, kernels and buffers as they "
                  f"should be (seed {seed})")  # fmt: skip


# The graded bound: every sentence embedding of the learner's quantized model within this cosine similarity of
# the same model quantized by the course's reference QuantLinear (both run the same kernels).
MODEL_COSINE_BOUND = 0.999
_REF_EMBED: dict = {}


def _reference_embeddings(fmt: str, batch: list, device: str) -> torch.Tensor:
    """The same model quantized by the course's QuantLinear, with the grading kernels (cached per format)."""
    key = (fmt, device)
    if key not in _REF_EMBED:
        with using(GradingKernels().sets()):
            _REF_EMBED[key] = reference_quantize_model(course_model(device), fmt)
    with using(GradingKernels().sets()):
        return embed(_REF_EMBED[key], batch).cpu()


_REF_TABLE: dict = {}


def _reference_table(fmt: str, device: str) -> dict:
    """{"stored": name -> the reference quantizer's tensors of each Linear (CPU bits), "deq": name -> their
    dequantized weight}: what the check compares with, and what it hands the worker's grading kernels."""
    if (fmt, device) not in _REF_TABLE:
        if (fmt, device) not in _REF_EMBED:
            _reference_embeddings(fmt, SENTENCES[:1], device)
        model = _REF_EMBED[(fmt, device)]
        stored = {n: [getattr(m, f"w{i}").cpu() for i in range(m.n_stored)] for n, m in model.named_modules()
                  if isinstance(m, ReferenceQuantLinear)}  # fmt: skip
        _REF_TABLE[(fmt, device)] = {
            "stored": stored,
            "deq": {n: dequantized(fmt, s) for n, s in stored.items()},
        }
    return _REF_TABLE[(fmt, device)]


def _stored_format(shapes: list, N: int, K: int) -> str | None:
    """The format whose stored tensors (dtypes and shapes) a replaced layer holds, if exactly one matches."""
    held = sorted(shapes)
    w = torch.zeros(N, K)
    found = [
        f for f in FORMATS if sorted((str(t.dtype), tuple(t.shape)) for t in reference_quantize(f, w)) == held
    ]
    return found[0] if len(found) == 1 else None


def check_quantize_model(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3: quantize_model(model, fmt) replaces every nn.Linear of all-MiniLM-L6-v2 by a module of the
    notebook's (the learner's QuantLinear) that stores the format's quantized weight, and the model's sentence
    embeddings stay within cosine 0.999 of the same model quantized by the course's reference QuantLinear."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = default_device()
    base = course_model(device)
    before = linear_names(base)
    pool = list(SENTENCES)
    if not hidden:
        fmt, batches = "w8a16", [pool[:3]]
    else:
        others = [f for f in FORMATS if f != "w8a16"]
        fmt = others[int(torch.randint(0, len(others), (1,), generator=g))]
        pick = torch.randperm(len(pool), generator=g)[:5].tolist()
        batches = [
            [pool[i] for i in pick[:4]],
            [pool[pick[4]]],
        ]  # a batch (prefill) and one sentence (decode)
    ctx = f" ({LABELS[fmt]})"
    table = _reference_table(fmt, device)
    meta, got = drive(fn, "quantize_model", fmt, batches, table if checks.is_remote(fn) else None,
                       what="quantize_model")  # fmt: skip
    if meta.get("error") and "returned" not in meta:
        raise_learner(meta["error"], ctx)
    if meta.get("returned") is None:
        raise CheckFailed(
            "quantize_model returned None: return the model (changed in place is fine: `return model`)"
        )
    if "left" not in meta:
        raise CheckFailed(f"quantize_model must return the model, got {meta['returned']}")
    left = meta["left"]
    if left:
        done = len(before) - len(left)
        text = f"quantize_model replaced {done} of the model's {len(before)} nn.Linear layers{ctx}; still nn.Linear: "
        text += ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        if done == 0:
            text += (". The Linears sit deep inside the model (encoder.layer.0.attention.self.query): "
                     "model.named_children() sees only the top level. Walk model.named_modules() and set each "
                     "replacement on its parent module (model.get_submodule(parent_name)).")  # fmt: skip
        raise CheckFailed(text)
    if meta.get("missing"):
        raise CheckFailed(f"quantize_model removed or renamed modules ({meta['missing'][0]}, ...): keep each layer "
                          f"where it was{ctx}")  # fmt: skip
    reference = table["stored"]
    for name in before:
        info = meta["layers"][name]
        if info["linear"]:
            raise CheckFailed(f"the layer at {name} is still an nn.Linear (a {info['class']}, which keeps the float "
                              f"weight): replace each nn.Linear by your QuantLinear{ctx}")  # fmt: skip
        if course_class(info["module"]):
            raise CheckFailed(
                f"quantize_model put a {info['module']}.{info['class']} at {name}: the exercise is to replace each "
                f"nn.Linear by your QuantLinear{ctx}"
            )
        if info["copies"]:
            where, dtype, shape = info["copies"][0]
            raise CheckFailed(f"the layer at {name} keeps a floating-point copy of the weight ({where}, {dtype} "
                              f"{shape}): store only the quantized tensors{ctx}")  # fmt: skip
        held = [got[f"{name}|{b}"] for b in info["buffers"]]
        for ref in reference[name]:
            if not any(same_stored([h], [ref]) for h in held):
                lin = base.get_submodule(name)
                other = _stored_format([(str(h.dtype), tuple(h.shape)) for h in held], lin.out_features,
                                       lin.in_features)  # fmt: skip
                lines = [
                    f"the layer at {name} does not hold the {LABELS[fmt]} quantized weight among its buffers{ctx}"
                ]
                if other not in (None, fmt):
                    lines.insert(0, f"This matches a known mistake: the model was quantized as {LABELS[other]}, not "
                                 f"{LABELS[fmt]}: pass fmt on to QuantLinear.")  # fmt: skip
                raise CheckFailed("\n".join(lines))
    if meta.get("kept_copies"):
        dtype, shape = meta["kept_copies"][0]
        raise CheckFailed(f"after quantize_model, {len(meta['kept_copies'])} floating-point copies of the Linear weights "
                          f"({dtype} {shape}, ...) are still alive, held outside the model's modules: store only the "
                          f"quantized tensors, or the model is no smaller than before{ctx}")  # fmt: skip
    # The embeddings graded are those of the model rebuilt from these buffers, on decoy Linears (hidden: in a fresh
    # worker).
    fresh = hidden
    fresh_process(fn, fresh)
    rebuilt = how_rebuilt(fn, fresh, "rebuilt by quantize_model from a copy of the model whose Linears have other "
                       "weights")  # fmt: skip
    first = got
    meta, got = drive(fn, "quantize_model_rebuilt", fmt, batches, checks.fresh_seed(), state_arg(first, "state|"),
                       what="quantize_model")  # fmt: skip
    if meta.get("error") and "calls" not in meta:
        raise_learner(meta["error"], f"{ctx[:-1]}; quantize_model run again on a copy of the model whose Linears "
                       "have other weights)")  # fmt: skip
    if meta.get("load"):
        raise CheckFailed(f"quantize_model's layers do not rebuild from their buffers: {meta['load']}{ctx}. The model "
                          f"graded is the one {rebuilt}: give each layer the same buffers (names, dtypes, shapes) "
                          "whatever its weights")  # fmt: skip
    for i, batch in enumerate(batches):
        if i >= len(meta.get("calls", [])):
            if f"e{i}" in first:
                raise CheckFailed(
                    f"the quantized model computes with something other than its layers' registered buffers{ctx}: "
                    f"{rebuilt}, it raised ({learner_message(meta['error']).splitlines()[0]}) where the first "
                    f"gave embeddings. {OTHER_THAN_BUFFERS}"
                )
            raise_learner(meta["error"], ctx)
        want = _reference_embeddings(fmt, batch, device)
        e = got.get(f"e{i}")
        if e is None or tuple(e.shape) != tuple(want.shape):
            raise CheckFailed(f"the quantized model's embeddings have the wrong shape{ctx}")
        # Another answer than the first model's names the mistake: the layers compute with something else.
        elsewhere = f"e{i}" in first and differs(e, first[f"e{i}"], 1e-3)
        other = (f"the quantized model computes with something other than its layers' registered buffers{ctx}: "
                 f"{rebuilt}, it gives other embeddings than the first")  # fmt: skip
        if not torch.isfinite(e).all():
            if elsewhere:
                raise CheckFailed(f"{other} (NaN or inf). {OTHER_THAN_BUFFERS}")
            raise CheckFailed(f"the quantized model's embeddings hold NaN or inf{ctx}")
        if (
            meta["calls"][i] < len(before) - 1
        ):  # every Linear but the pooler, which the embedding does not use
            raise CheckFailed(
                f"the quantized model called the format's kernels {meta['calls'][i]} times for one batch; its "
                f"{len(before) - 1} Linear layers in use should call them once each{ctx}"
            )
        cos = cosine(e, want)
        if float(cos.min()) < MODEL_COSINE_BOUND:
            j = int(cos.argmin())
            if elsewhere:
                raise CheckFailed(f"{other} (its embedding of {batch[j]!r} has cosine similarity {float(cos[j]):.5f} "
                                  f"to the reference-quantized model's). {OTHER_THAN_BUFFERS}")  # fmt: skip
            raise CheckFailed(f"the quantized model's embedding of {batch[j]!r} has cosine similarity "
                              f"{float(cos[j]):.5f} to the reference-quantized model's; the bound is "
                              f"{MODEL_COSINE_BOUND}{ctx}")  # fmt: skip
    checks.passed(f"quantize_model: all {len(before)} nn.Linear layers replaced, embeddings within cosine "
                  f"{MODEL_COSINE_BOUND} of the reference ({LABELS[fmt]}; seed {seed})")  # fmt: skip
