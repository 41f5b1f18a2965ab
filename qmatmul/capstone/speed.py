"""Speed: the small model (launch-bound) and a Llama-sized layer stack (bandwidth-bound), timed on a GPU; on a
machine without one, what the course's H200 measured (docs/capstone-h200.json)."""

from __future__ import annotations

import json

import torch
from torch import nn

from qmatmul import checks
from qmatmul.capstone import stack
from qmatmul.capstone.formats import FORMATS, LABELS
from qmatmul.capstone.layers import dense16
from qmatmul.capstone.model import load_model
from qmatmul.capstone.registry import kernel_word, kernels, reference_kernels, using
from qmatmul.capstone.runtime import act_dtype, autograding
from qmatmul.capstone.stack import STACK_MS
from qmatmul.capstone.text import SENTENCES, features


def _recorded() -> dict:
    """The course's H200 run (docs/capstone-h200.json, written by tools/capstone_h200.py), if this checkout has it."""
    from qmatmul import course

    root = course.repo_root()
    path = root / "docs" / "capstone-h200.json" if root else None
    return json.loads(path.read_text()) if path and path.is_file() else {}


def _time_us(fn) -> float:
    from qmatmul import timing

    fn()
    torch.cuda.synchronize()
    return timing.median_ms(fn) * 1e3


def time_model(quantize_model_fn, formats=FORMATS, batches=(1, 24)) -> dict:
    """Median µs of one forward of all-MiniLM-L6-v2 per format (GPU only; recorded H200 figures elsewhere)."""
    if autograding():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("model")
        return {}
    pool = SENTENCES
    out = {}
    variants = [("16-bit", None)] + [(f, f) for f in formats]
    for name, fmt in variants:
        with torch.no_grad():
            m = dense16(load_model()) if fmt is None else quantize_model_fn(load_model(), fmt)
            for b in batches:
                feats = features(pool[:b], "cuda")
                out[(name, b)] = _time_us(lambda m=m, feats=feats: m(feats))
    print("all-MiniLM-L6-v2, one forward (median µs, L2 flushed):")
    print(f"{'format':<22}" + "".join(f"{f'batch {b}':>12}" for b in batches))
    for name, _ in variants:
        print(f"{LABELS[name]:<22}" + "".join(f"{out[(name, b)]:>12.0f}" for b in batches))
    lin = 10.76e6
    print(f"The Linear weights are {lin * 2 / 1e6:.0f} MB in 16 bits: {lin * 2 / 4.25e12 * 1e6:.0f} µs of memory time "
          "on an H200. The forward takes far longer: it is made of ~140 small kernel launches, and launches, not "
          "bytes, set its time. Quantization cannot speed up such a model; it pays where the weights are large.")  # fmt: skip
    return out


def time_llama_stack(cls, formats=FORMATS, ms=STACK_MS) -> dict:
    """One Llama-3-8B block's seven Linears (218 M weights) through `cls` (your QuantLinear) per format, beside
    16-bit nn.Linear and the naive path (GPU only; recorded H200 figures elsewhere)."""
    if autograding():
        return {}
    if not torch.cuda.is_available():
        _show_recorded("stack")
        return {}
    g = checks.generator(0, "cuda")
    dtype = act_dtype("cuda")
    out = {}
    dense = [nn.Linear(K, N, bias=False, device="cuda", dtype=dtype) for N, K in stack.LLAMA_BLOCK]
    for M in ms:
        xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in {k for _, k in stack.LLAMA_BLOCK}}
        out[("16-bit", M)] = _time_us(lambda xs=xs, dense=dense: [lin(xs[lin.in_features]) for lin in dense])
    del dense
    for fmt in formats:
        layers = stack.llama_stack(cls, fmt, "cuda", g)
        for M in ms:
            xs = {K: torch.randn(M, K, device="cuda", dtype=dtype) for K in {k for _, k in stack.LLAMA_BLOCK}}
            with torch.no_grad():
                out[(fmt, M)] = _time_us(lambda xs=xs, layers=layers: [m(xs[m.in_features]) for m in layers])
                with using({f: reference_kernels(f) for f in FORMATS}):
                    out[(fmt + " naive", M)] = _time_us(
                        lambda xs=xs, layers=layers: [m(xs[m.in_features]) for m in layers]
                    )
        del layers
        torch.cuda.empty_cache()
    print("One Llama-3-8B block's seven Linears (218 M weights), median µs, L2 flushed:")
    print(f"{'path':<30}" + "".join(f"{f'M = {M}':>12}" for M in ms))
    for key in ["16-bit"] + [k for f in formats for k in (f, f + " naive")]:
        label = (
            LABELS.get(key, LABELS.get(key.split()[0], key) + " naive path")
            if key.endswith("naive")
            else LABELS[key]
        )
        word = "" if key == "16-bit" or key.endswith("naive") else f" ({kernel_word(kernels(key))})"
        print(f"{(label + word)[:30]:<30}" + "".join(f"{out[(key, M)]:>12.0f}" for M in ms))
    return out


def _show_recorded(what: str) -> None:
    """On a machine without a GPU: what the course's H200 measured (docs/capstone-h200.md), as a table."""
    rec = _recorded()
    data = rec.get({"stack": "stack_us", "model": "model_us"}[what])
    if not data:
        print("No CUDA GPU here: nothing is timed (the course's H200 figures are in docs/capstone-h200.md).")
        return
    where = "; ".join(rec.get("env", "").splitlines()[:2]) or "the course's H200"
    cols = ("M=1", "M=16") if what == "stack" else ("batch 1", "batch 24")
    print(f"No CUDA GPU here; recorded on the course's H200 ({where}), median µs:")
    rows = dict.fromkeys(k.rsplit(" ", 2 if what == "model" else 1)[0] for k in data)
    print(f"  {'path':<24}" + "".join(f"{c:>10}" for c in cols))
    for row in rows:
        cells = [data.get(f"{row} {c}") for c in cols]
        label = LABELS.get(row, LABELS.get(row.split()[0], row) + (" naive" if row.endswith("naive") else ""))
        print(f"  {label:<24}" + "".join(f"{v:>10.0f}" if v is not None else f"{'':>10}" for v in cells))
