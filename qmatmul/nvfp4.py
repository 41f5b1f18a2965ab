"""Chapter NVFP4: E2M1 weights, an e4m3 scale per 16 along K, and one float32 scale per tensor.

Weights use nn.Linear's layout W[N, K]; K must be a multiple of 16. torchao's two-level rule, step by step in
float32 (the order matters for bit-exactness):
    g        = max |W| / (448 · 6)                       (the tensor scale; an all-zero tensor gets g = 1)
    s[n, b]  = e4m3(clamp((amax_block / 6) / g, 2^-6, 448))   (the block scale, rounded to e4m3)
    r[n, b]  = (1 / g) / s                                (the reciprocal of the combined scale)
    code     = E2M1(clamp(W · r, -6, 6))                  (round to nearest even; fp4.e2m1_encode)
    packed   = uint8 [N, K/2] (element 2i low nibble), scales = uint8 [N, K/16] (e4m3 bits), g: float32 [1]
    y        = (x @ (E2M1 value · s).T) · g
The element step follows torchao 0.18 (`nvfp4_quantize`), which multiplies by r "to match the MSLK triton kernel
numerics"; torchao up to 0.17 divided by g · s instead. The two differ only where W / (g · s) lies on an exact
E2M1 midpoint (tests/test_oracles.py compares with the installed torchao, bit for bit).
"""

from __future__ import annotations

import torch

from qmatmul import checks, fp4, harness, mxfp4
from qmatmul.checks import CheckFailed, Mistake

BLOCK = 16
ACT_DTYPES = (torch.float16, torch.bfloat16)
BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_MS = (1, 16)
# Fraction of the copy bandwidth measured in the same process (the graded cell times eagerly). On the H200
# (2026-12-01, triton 3.6, docs/bench-h200.json) the solution reaches 0.15 at M = 1 and 16 (graph-timed 0.15-0.16),
# the naive path 0.01. The bar is half the H200's figure (docs/perf-notes.md says why half), 7x naive.
BANDWIDTH_THRESHOLD = (
    0.13  # half the solution's 0.265 (eager) with no K masks: docs/perf-notes.md, 2026-12-01
)


# ----------------------------------------------------------------------------------------------------------
# The reference


def tensor_scale(w: torch.Tensor) -> torch.Tensor:
    """g = max |w| / (448 · 6) as a float32 tensor of shape [1]; 1 for an all-zero tensor."""
    amax = w.float().abs().amax().reshape(1)
    return torch.where(amax > 0, amax / (fp4.E4M3_MAX * fp4.E2M1_MAX), torch.ones_like(amax))


def quantize_codes(
    w: torch.Tensor,
    block: int = BLOCK,
    two_level: bool = True,
    round_scale: bool = True,
    reciprocal: bool = True,
):
    """(codes uint8 [N, K], block scales uint8 [N, K/block] as e4m3 bits, g float32 [1]).

    two_level=False, round_scale=False and reciprocal=False give known wrong variants (no tensor scale; data
    scaled by the unrounded block scale; data divided by g · s, torchao <= 0.17's numerics)."""
    w = w.float()
    N, K = w.shape
    if K % block:
        raise ValueError(f"K must be a multiple of {block}, got K = {K}")
    g = tensor_scale(w) if two_level else torch.ones(1)
    blocks = w.reshape(N, K // block, block)
    amax = blocks.abs().amax(dim=2)
    s = torch.clamp((amax / fp4.E2M1_MAX) / g, fp4.E4M3_TINY, fp4.E4M3_MAX)
    bits = fp4.e4m3_encode(s)
    s_used = fp4.e4m3_decode(bits) if round_scale else s
    if reciprocal:
        v = blocks * ((1.0 / g) / s_used)[:, :, None]
    else:
        v = blocks / (g * s_used)[:, :, None]
    v = torch.clamp(v, -fp4.E2M1_MAX, fp4.E2M1_MAX)
    return fp4.e2m1_encode(v).reshape(N, K), bits, g


def quantize(w: torch.Tensor):
    """The reference quantizer: (packed uint8 [N, K/2], scales uint8 [N, K/16], g float32 [1])."""
    codes, scales, g = quantize_codes(w)
    return fp4.pack_nibbles(codes), scales, g


def dequantize(packed, scales, g) -> torch.Tensor:
    values = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    return values * fp4.e4m3_decode(scales).repeat_interleave(BLOCK, dim=1) * g.float()


def reference(x, packed, scales, g) -> torch.Tensor:
    """y = x @ W.T in float32: (x @ (E2M1 · s).T) · g, the order the kernels use."""
    w = fp4.e2m1_decode(fp4.unpack_nibbles(packed)) * fp4.e4m3_decode(scales).repeat_interleave(BLOCK, dim=1)
    return (x.float() @ w.T) * g.float()


def naive(x, packed, scales, g):
    """Decode the whole weight into memory with torch ops, then a dense matmul."""
    table = fp4.e2m1_table(x.dtype).to(x.device)
    N = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(N, -1).long()
    s = scales.view(torch.float8_e4m3fn).to(x.dtype).repeat_interleave(BLOCK, dim=1)
    return (x @ (table[codes] * s).T) * g.to(x.dtype)


# ----------------------------------------------------------------------------------------------------------
# Scaffolding


def prepare(x, packed, scales, g, out=None):
    """Validate the inputs of an NVFP4 matmul with clear messages; allocate out if needed. Returns M, N, K, out."""
    for name, t in (("x", x), ("packed", packed), ("scales", scales), ("g", g)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    if packed.dim() != 2 or packed.dtype != torch.uint8:
        raise TypeError(
            f"packed must be a 2-D uint8 tensor [N, K/2], got {packed.dtype} {list(packed.shape)}"
        )
    M, K = x.shape
    N, half = packed.shape
    if K % BLOCK:
        raise ValueError(f"K must be a multiple of {BLOCK} (one NVFP4 block), got K = {K}")
    if 2 * half != K:
        raise ValueError(
            f"x is [M, K] = {list(x.shape)} but packed is [N, K/2] = {list(packed.shape)}: the K's differ"
        )
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // BLOCK):
        raise ValueError(
            f"scales must be uint8 e4m3 bits of shape [N, K/16] = [{N}, {K // BLOCK}], got {scales.dtype} "
            f"of shape {list(scales.shape)}"
        )
    if g.dtype != torch.float32 or g.numel() != 1:
        raise ValueError(f"g must be a float32 tensor of one element, got {g.dtype} of shape {list(g.shape)}")
    if not (x.device == packed.device == scales.device == g.device):
        raise ValueError("x, packed, scales and g must be on one device")
    if not packed.is_contiguous() or not scales.is_contiguous():
        raise ValueError("packed and scales must be contiguous (x and out may be strided)")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (M, N) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must be {x.dtype} of shape [{M}, {N}] on {x.device}, got {out.dtype} {list(out.shape)} on {out.device}"
        )
    return M, N, K, out


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    return mxfp4.prefill_config(M, N, K, device)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Not swept for NVFP4: the MXFP4 decode tiles (same loop structure)."""
    return mxfp4.decode_config(M, N, K, device)


def bytes_per_weight() -> float:
    """Half a byte of E2M1 plus a 16th of a byte of e4m3: 4.5 bits (the tensor scale is negligible)."""
    return 0.5 + 1 / BLOCK


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return N * K // 2 + N * K // BLOCK + 4 + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return bytes_moved(M, N, K, act_bytes) + 2 * act_bytes * N * K


def explain_format() -> None:
    print("NVFP4 stores E2M1 codes (as in MXFP4), two per byte, and two levels of scale:")
    print(
        "  a block scale per 16 weights along K, in e4m3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits):"
    )
    print(
        "    positive values from 2^-9 to 448, 3 significant bits: it can be 1.25 or 1.75, not only a power of two;"
    )
    print(
        "  one float32 scale g per tensor, g = max|W| / (448 · 6): it moves the block scales to where e4m3 is precise."
    )
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("MXFP4 (E8M0 per 32)", mxfp4.bytes_per_weight()),
        ("NVFP4 (e4m3 per 16)", bytes_per_weight()),
    ]
    print("Bytes per weight:")
    for name, b in rows:
        print(f"  {name:<24} {b:.5f} B  ({8 * b:.2f} bits)")


# ----------------------------------------------------------------------------------------------------------
# The widget: the two scale levels of one block


def block_text(block_values, tensor_amax: float) -> str:
    """One block of 16 values inside a tensor whose largest magnitude is tensor_amax."""
    v = torch.as_tensor(block_values, dtype=torch.float32).reshape(1, BLOCK)
    amax_t = max(float(v.abs().max()), tensor_amax)
    w = torch.cat([v, torch.full((1, BLOCK), 0.0)], dim=0)
    w[1, 0] = amax_t  # another block holds the tensor's largest magnitude
    codes, scales, g = quantize_codes(w)
    s = float(fp4.e4m3_decode(scales[0, 0]))
    raw = float(v.abs().max()) / 6 / float(g)
    back = fp4.e2m1_decode(codes[0]) * s * float(g)
    lines = [
        f"tensor: max|W| = {amax_t:.5g}  ->  g = max|W| / (448 · 6) = {float(g):.6g}",
        f"block:  amax = {float(v.abs().max()):.5g}  ->  (amax / 6) / g = {raw:.5g}  ->  e4m3 {int(scales[0, 0]):08b} = {s:g}",
        f"        total scale g · s = {float(g) * s:.6g};  r = (1 / g) / s = {(1 / float(g)) / s:.6g}",
        f"{'i':>3} {'w':>10} {'w · r':>10} {'code':>5} {'E2M1':>6} {'code·s·g':>10}",
    ]
    for i in range(BLOCK):
        c = int(codes[0, i])
        lines.append(
            f"{i:>3} {float(v[0, i]):>10.4g} {float(v[0, i]) * ((1 / float(g)) / s):>10.3f} {c:04b}  "
            f"{float(fp4.e2m1_decode(torch.tensor(c))):>6g} {float(back[i]):>10.4g}"
        )
    err = float((back - v[0]).norm() / v[0].norm().clamp_min(1e-30))
    lines.append(f"relative error of the block: {err:.3%}")
    return "\n".join(lines)


def block_explorer():
    import ipywidgets as W

    out = W.HTML()

    def show(seed: int, block_scale: float, tensor_amax: float) -> None:
        g = checks.generator(seed)
        v = torch.randn(BLOCK, generator=g) * 10**block_scale
        out.value = "<pre>" + block_text(v, 10**tensor_amax) + "</pre>"

    seed = W.IntSlider(value=0, min=0, max=50, description="block")
    bs = W.FloatSlider(value=-2, min=-6, max=1, step=0.1, description="log10 block σ")
    ta = W.FloatSlider(value=-1, min=-4, max=3, step=0.1, description="log10 max|W|")
    W.interactive_output(show, {"seed": seed, "block_scale": bs, "tensor_amax": ta})
    show(seed.value, bs.value, ta.value)
    return W.VBox([W.HBox([seed, bs, ta]), out])


def compare_figure(seed: int = 0):
    """NVFP4 against MXFP4 and int4 g=16 on the same weights."""
    import matplotlib.pyplot as plt

    kinds = ["gaussian", "heavy-tailed"]
    tables = {}
    for k in kinds:
        w = mxfp4.realistic_weights(k, seed=seed)

        def rel(deq, w=w):
            return float((deq - w).norm() / w.norm())

        p, s, g = quantize(w)
        codes1, s1, g1 = quantize_codes(w, two_level=False)
        mp, ms = mxfp4.quantize(w)
        tables[k] = [
            ("NVFP4 (e4m3 per 16, fp32 per tensor)", 4.5, rel(dequantize(p, s, g))),
            ("NVFP4 without the tensor scale", 4.5, rel(dequantize(fp4.pack_nibbles(codes1), s1, g1))),
            ("MXFP4 (E8M0 per 32)", 4.25, rel(mxfp4.dequantize(mp, ms))),
            ("int4 g=16, bf16 scale", 5.0, rel(mxfp4.int4_groupwise(w, 16))),
        ]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    methods = tables[kinds[0]]
    width = 0.38
    for i, k in enumerate(kinds):
        errs = [e for _, _, e in tables[k]]
        bars = ax.barh([j + i * width for j in range(len(methods))], errs, height=width, label=k)
        for b, e in zip(bars, errs, strict=True):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {e:.2%}", va="center", fontsize=8)
    ax.set_yticks([j + width / 2 for j in range(len(methods))])
    ax.set_yticklabels([f"{m} ({b:g} bits)" for m, b, _ in methods])
    ax.invert_yaxis()
    ax.set_xlabel("‖dequantized − w‖ / ‖w‖")
    ax.legend(loc="lower right")
    ax.set_title("512 × 2048 weights: relative error by format")
    fig.tight_layout()
    for k in kinds:
        print(k + ": " + ", ".join(f"{m} {e:.3%}" for m, _, e in tables[k]))
    return fig


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    row = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=gen)) * 0.02
    blk = torch.exp(torch.empty(N, K // BLOCK, 1).uniform_(-2.5, 1.5, generator=gen)).repeat_interleave(
        BLOCK, 1
    )
    return (torch.randn(N, K, generator=gen) * row * blk.reshape(N, K)).to(dtype)


def adversarial_weight(N: int, K: int, gen: torch.Generator) -> torch.Tensor:
    """Zero blocks, tiny blocks whose scale clamps to 2^-6, exact ties, a single huge outlier (N >= 4, K >= 64)."""
    w = random_weight(N, K, gen)
    w[0, :16] = 0
    w[1, :16] = w[1, :16] * 1e-6  # block scale below e4m3's tiny: clamps to 2^-6, codes round to 0
    w[2, 0] = float(w.abs().max()) * 3  # the tensor's amax: its block scale is exactly 448
    w[3, 16:32] = -w[3, 16:32].abs()
    return w


def tie_weight(N: int = 4, K: int = 128, amax: float = 0.37) -> torch.Tensor:
    """Deterministic blocks of exact E2M1 midpoints: each block holds ±{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}, 6 and
    0 times g · s for an e4m3 value s, so that w / (g · s) lands on the ties. There, dividing by g · s and
    multiplying by (1 / g) / s round differently (about 3 in 10 codes for amax = 0.37)."""
    g = torch.tensor(amax / (fp4.E4M3_MAX * fp4.E2M1_MAX), dtype=torch.float32)
    e4m3 = fp4.e4m3_decode(torch.arange(0x08, 0x7F, dtype=torch.int32).to(torch.uint8))  # the normal values
    mids = torch.tensor([m for m, _ in fp4.E2M1_MIDPOINTS])
    pattern = torch.cat([mids, -mids, torch.tensor([fp4.E2M1_MAX, 0.0])])
    w = torch.zeros(N, K)
    for i in range(N * (K // BLOCK)):
        n, b = divmod(i, K // BLOCK)
        w[n, BLOCK * b : BLOCK * (b + 1)] = pattern * (g * e4m3[(7 * i + 3) % len(e4m3)])
    w[0, BLOCK - 1] = amax  # the tensor's largest magnitude
    return w


def random_problem(M, N, K, dtype, device, gen, strided=False):
    packed, scales, g = quantize(random_weight(N, K, gen))
    pad = 7 if strided else 0
    x_full = torch.randn(M, K + pad, generator=gen).to(dtype).to(device)
    return x_full[:, :K], packed.to(device), scales.to(device), g.to(device)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------------------------------------------------
# Exercise 1: the two-level quantizer


def _quantizer_inputs(gen, hidden):
    if not hidden:
        return [random_weight(4, 64, gen), adversarial_weight(8, 128, gen), tie_weight()]
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        N = int(torch.randint(5, 40, (1,), generator=gen))
        K = BLOCK * int(torch.randint(4, 20, (1,), generator=gen))
        cases.append(
            adversarial_weight(N, K, gen).to(dtype)
            if dtype == torch.float32
            else random_weight(N, K, gen, dtype)
        )
    return cases


def _quantizer_mistakes(w):
    codes, scales, g = quantize_codes(w)
    c1, s1, g1 = quantize_codes(w, two_level=False)
    c2, s2, _ = quantize_codes(w, round_scale=False)
    c3, s3, _ = quantize_codes(w, reciprocal=False)
    return [
        ("tensor scale missing", "Two levels: g = max|W| / (448 · 6) first, then each block's (amax / 6) / g is "
         "rounded to e4m3, and the data is multiplied by (1 / g) / s.", fp4.pack_nibbles(c1), s1, g1),
        ("block scale not rounded before dividing", "Scale the data by (1 / g) / s with s the e4m3-ROUNDED block "
         "scale (decode the e4m3 bits back to float32 first), so the dequantization reproduces it.",
         fp4.pack_nibbles(c2), s2, g),
        ("divided by g · s", "The course follows torchao 0.18: multiply w by r = (1 / g) / s (s the e4m3-rounded "
         "block scale), not w / (g · s). The two round differently where w / (g · s) is an exact tie between two "
         "E2M1 values.", fp4.pack_nibbles(c3), s3, g),
        ("nibble order", "Element 2i goes in the LOW nibble: packed = codes[:, 0::2] | (codes[:, 1::2] << 4).",
         mxfp4._swap_nibbles(fp4.pack_nibbles(codes)), scales, g),
        ("sign bit lost", "Bit 3 of each code is the sign of w.", fp4.pack_nibbles(codes & 7), scales, g),
    ]  # fmt: skip


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    seed = checks.fresh_seed() if seed is None else seed
    gen = checks.generator(seed)
    what = "quantize_nvfp4"
    for w in _quantizer_inputs(gen, hidden):
        N, K = w.shape
        ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}])"
        w_before = w.clone()
        result = checks.call_learner(fn, w, what=what)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            raise CheckFailed(f"{what} must return a triple (packed, scales, g), got {type(result).__name__}")
        packed, scales, g = result
        if not all(isinstance(t, torch.Tensor) for t in (packed, scales, g)):
            raise CheckFailed(f"{what} must return three tensors (packed, scales, g)")
        if not torch.equal(w, w_before):
            raise CheckFailed(f"{what} modified its input w in place; leave the weights untouched.{ctx}")
        if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
            raise CheckFailed(
                f"packed must be uint8 of shape [{N}, {K // 2}], got {packed.dtype} {list(packed.shape)}{ctx}"
            )
        if tuple(scales.shape) == (N, K // 32):
            raise CheckFailed(
                f"scales has shape [N, K/32] = {list(scales.shape)}: this matches a known mistake: blocks of 32 "
                f"instead of 16. NVFP4 blocks are 16 elements long: shape [{N}, {K // BLOCK}].{ctx}"
            )
        if scales.dtype == torch.float8_e4m3fn:
            scales = scales.view(torch.uint8)
        if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // BLOCK):
            raise CheckFailed(
                f"scales must be the e4m3 bits (uint8, or float8_e4m3fn) of shape [{N}, {K // BLOCK}], got "
                f"{scales.dtype} {list(scales.shape)}{ctx}"
            )
        if g.dtype != torch.float32 or g.numel() != 1:
            raise CheckFailed(
                f"g must be a float32 tensor of one element, got {g.dtype} {list(g.shape)}{ctx}"
            )
        p_ref, s_ref, g_ref = quantize(w)
        g = g.reshape(1)
        if torch.equal(packed, p_ref) and torch.equal(scales, s_ref) and torch.equal(g, g_ref):
            continue
        named = None
        for name, explanation, mp, ms, mg in _quantizer_mistakes(w):
            if torch.equal(packed, mp) and torch.equal(scales, ms) and torch.equal(g, mg.reshape(1)):
                named = f"This matches a known mistake: {name}. {explanation}"
                break
        lines = [named] if named else []
        if not torch.equal(g, g_ref):
            lines.insert(
                0,
                f"g = {float(g):.8g} differs from the reference {float(g_ref):.8g} = max|W| / (448 · 6){ctx}",
            )
        elif not torch.equal(scales, s_ref):
            bad = scales != s_ref
            i, b = bad.nonzero()[0].tolist()
            lines.insert(
                0, f"scales differ from the reference in {int(bad.sum())} of {bad.numel()} blocks{ctx}"
            )
            lines.append(
                f"First at [n={i}, block={b}]: got e4m3 {int(scales[i, b]):08b} ({float(fp4.e4m3_decode(scales[i, b])):g}), "
                f"expected {int(s_ref[i, b]):08b} ({float(fp4.e4m3_decode(s_ref[i, b])):g}): "
                "s = e4m3(clamp((amax / 6) / g, 2^-6, 448)), computed in float32 in that order."
            )
        else:
            bad = fp4.unpack_nibbles(packed) != fp4.unpack_nibbles(p_ref)
            lines.insert(
                0, f"packed differs from the reference in {int(bad.sum())} of {bad.numel()} codes{ctx}"
            )
            lines.append(f"Differences lie {checks._where_2d(bad, ('rows', 'columns'))}.")
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Exercises 2 and 3: the kernels


def kernel_mistakes(x, packed, scales, g) -> list[Mistake]:
    xf = x.float().cpu()
    packed, scales, g = packed.cpu(), scales.cpu(), g.cpu().float()
    M, K = xf.shape
    vals = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    s = fp4.e4m3_decode(scales).repeat_interleave(BLOCK, 1)
    raw = xf @ (vals * s).T
    out = [
        Mistake("tensor scale missing", "Multiply the accumulator by the tensor scale g once, in the epilogue.", raw),
        Mistake("tensor scale applied twice", "Apply g once: in the epilogue, not also to the weight tile.", raw * g * g),
        Mistake("e4m3 scale decoded as E8M0", "NVFP4's block scales are e4m3 (sign, 4 exponent bits with bias 7, "
                "3 mantissa bits), not E8M0 powers of two: ((b & 0x7F) << 7) as fp16 bits, times 2^8.",
                (xf @ (vals * fp4.e8m0_decode(scales).repeat_interleave(BLOCK, 1)).T) * g),
        Mistake("nibble order", "Element 2i is the LOW nibble (p & 0xF), paired with x's even columns.",
                (xf @ (fp4.e2m1_decode(fp4.unpack_nibbles(mxfp4._swap_nibbles(packed))) * s).T) * g),
    ]  # fmt: skip
    if K >= 2 * BLOCK:
        s32 = fp4.e4m3_decode(scales).repeat_interleave(2 * BLOCK, 1)[:, :K]
        out.append(Mistake("blocks of 32 instead of 16", "An NVFP4 block is 16 elements = 8 bytes: the byte at "
                           "column kb uses scales[n, kb // 8].", (xf @ (vals * s32).T) * g))  # fmt: skip
    return out


def _check_kernel(fn, what, shapes, device, dtypes, gen) -> int:
    n = 0
    for M, N, K in shapes:
        for dtype in dtypes:
            for strided in (False, True):
                x, packed, scales, g = random_problem(M, N, K, dtype, device, gen, strided=strided)
                pad = 5 if strided else 0
                full = torch.full((M, N + pad), float("nan"), dtype=dtype, device=device)
                out = full[:, :N]
                inputs = dict(x=x, packed=packed, scales=scales, g=g)
                before = checks.snapshot(inputs)
                ctx = f" (M={M}, N={N}, K={K}, {str(dtype).replace('torch.', '')}{', strided x and out' if strided else ''})"
                y, ops = checks.run_audited(fn, x, packed, scales, g, out=out, what=what)
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(x, packed, scales, g),
                                            mistakes=kernel_mistakes(x, packed, scales, g), ctx=ctx)  # fmt: skip
                n += 1
    return n


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    seed = checks.fresh_seed() if seed is None else seed
    gen = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(32, 64, 64), (50, 70, 96)]
    else:
        big = device == "cuda"
        shapes = []
        for _ in range(2):
            M = int(torch.randint(17, 300 if big else 100, (1,), generator=gen))
            N = int(torch.randint(33, 700 if big else 150, (1,), generator=gen))
            K = BLOCK * int(torch.randint(3, 80 if big else 16, (1,), generator=gen))
            # The audit flags any float tensor shaped like the weight, and the interpreter copies x [M, K] and
            # out [M, N] inside the call: keep M apart from N and K so no activation looks like a weight.
            M = M - 1 if M == K else M
            N = N + 1 if N == M else N
            shapes.append((M, N, K))
        shapes.append((1, 129, 144))
    n = _check_kernel(fn, "nvfp4_matmul", shapes, device, mxfp4._act_dtypes(device), gen)
    checks.passed(
        f"nvfp4_matmul: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    seed = checks.fresh_seed() if seed is None else seed
    gen = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(1, 64, 128), (16, 96, 176)]
    else:
        big = device == "cuda"
        shapes = [
            (M, int(torch.randint(33, 2000 if big else 200, (1,), generator=gen)),
             BLOCK * int(torch.randint(3, 200 if big else 18, (1,), generator=gen)))
            for M in (1, int(torch.randint(2, 16, (1,), generator=gen)), 16)
        ]  # fmt: skip
        if not big:  # one long row on the CPU too: K past 1024, where a wrong block divisor stops coinciding
            shapes.append((1, int(torch.randint(17, 48, (1,), generator=gen)),
                           BLOCK * int(torch.randint(72, 96, (1,), generator=gen))))  # fmt: skip
    n = _check_kernel(fn, "nvfp4_decode", shapes, device, mxfp4._act_dtypes(device), gen)
    checks.passed(
        f"nvfp4_decode: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth."""
    if not torch.cuda.is_available():
        return harness.not_on_cpu("nvfp4_decode", threshold)
    N, K = BANDWIDTH_SHAPE
    dtype = mxfp4._act_dtypes("cuda")[-1]
    return harness.check_bandwidth(
        fn, what="nvfp4_decode", module=__name__, N=N, K=K, Ms=BANDWIDTH_MS, out_dtype=dtype,
        nbytes=lambda M: bytes_moved(M, N, K, dtype.itemsize), threshold=threshold, seed=seed,
        hint="Load each packed tile once, decode it in registers with a few integer operations per element, "
        "and apply the tensor scale once in the epilogue.",
    )  # fmt: skip


def timing_weights(N: int, K: int, gen: torch.Generator) -> tuple:
    """The timed weight (qmatmul/harness.py): random e2m1 pairs, e4m3 block scales, a tensor scale."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=gen.device, generator=gen)
    scales = torch.randint(0x30, 0x60, (N, K // BLOCK), dtype=torch.uint8, device=gen.device, generator=gen)
    return packed, scales, torch.full((1,), 1e-3, device=gen.device)


def timing_inputs(M: int, K: int, gen: torch.Generator, n: int) -> tuple:
    return (
        torch.randn(n, M, K, device=gen.device, generator=gen).to(mxfp4._act_dtypes(gen.device.type)[-1]),
    )


def blackwell_status() -> str:
    """Say what this machine can run of NVFP4's native path."""
    if not torch.cuda.is_available():
        return "no CUDA GPU: the hand-decoded kernels run in Triton's interpreter."
    cap = torch.cuda.get_device_capability()
    if cap in ((10, 0), (12, 0)) or cap >= (10, 0):
        return (f"sm_{cap[0]}{cap[1]} has fp4 tensor cores. The course has not run an NVFP4 tl.dot_scaled kernel on "
                "Blackwell: try it as an extension (rhs_format 'e2m1' with e4m3 scales), and compare.")  # fmt: skip
    return (f"sm_{cap[0]}{cap[1]} has no fp4 tensor cores, and tl.dot_scaled with e4m3 scales crashed triton 3.6's "
            "compiler on Hopper: the hand-decoded kernels are the path here.")  # fmt: skip


def predictions(env) -> None:
    from qmatmul import roofline

    ceil = roofline.ceilings(env)
    N, K = BANDWIDTH_SHAPE
    rows = []
    for M in (1, 16):
        rows.append((f"dense bf16, M={M}", mxfp4.bytes_moved_dense(M, N, K), mxfp4.flops(M, N, K)))
        rows.append((f"NVFP4 fused, M={M}", bytes_moved(M, N, K), mxfp4.flops(M, N, K)))
    rows.append(("NVFP4 naive path, M=1", bytes_moved_naive(1, N, K), mxfp4.flops(1, N, K)))
    print(f"A Linear layer with N x K = {N} x {K} weights:")
    roofline.print_predictions(ceil, rows)


def benchmark(sol, record, env, quick: bool = False) -> None:
    """Time the solution kernels beside the dense matmul and the naive path (tools/bench.py calls this)."""
    from qmatmul import bench

    dtype = env.act_dtype
    gen = checks.generator(0, "cuda")

    def recheck(fn, M, N, K):
        def run():
            x, p, s, g = random_problem(M, N, K, dtype, "cuda", checks.generator(1))
            try:
                checks.compare(
                    fn(x, p, s, g), reference(x, p, s, g), what="recheck", rtol=checks.tolerance_for(dtype)
                )
                return True
            except CheckFailed as exc:
                print(exc)
                return False

        return run

    shapes = [BANDWIDTH_SHAPE] if quick else [(8192, 8192), (28672, 8192), (8192, 28672)]
    for N, K in shapes:
        ws = [timing_weights(N, K, gen) for _ in range(bench.copies_needed(bytes_moved(1, N, K)))]
        dense = [torch.randn(N, K, device="cuda", generator=gen).to(dtype)
                 for _ in range(bench.copies_needed(2 * N * K))]  # fmt: skip
        for M in (1, 16) if quick else (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
            fused = bytes_moved(M, N, K)
            record("decode", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
                   mxfp4.bytes_moved_dense(M, N, K))  # fmt: skip
            record(
                "decode",
                "naive: dequantize, matmul",
                M,
                N,
                K,
                [lambda x=x, w=w: naive(x, *w) for w in ws],
                fused,
            )
            record("decode", "solution nvfp4_decode", M, N, K, [lambda x=x, w=w: sol.nvfp4_decode(x, *w) for w in ws],
                   fused, recheck(sol.nvfp4_decode, M, N, K))  # fmt: skip
