"""Chapter MXFP4: OCP microscaling. E2M1 (fp4) weights, one E8M0 (power-of-two) scale per 32 along K.

Weights use nn.Linear's layout W[N, K]; K must be a multiple of 32 (one MX block).
    X[n, b]  = 2^(floor(log2(max |W[n, 32b : 32b+32]|)) - 2)      (2 = emax of E2M1; clamped to 2^-127..2^127)
    code     = E2M1(round-to-nearest-even(W / X), saturated to ±6)  (fp4.e2m1_encode)
    packed   = uint8 [N, K/2], element 2i in the low nibble;  scales = uint8 [N, K/32], E8M0 codes
    y        = x @ (E2M1 value · X).T                               (x: [M, K] fp16/bf16, y: [M, N] in x's dtype)
"""

from __future__ import annotations

import torch

from qmatmul import checks, fp4, harness
from qmatmul.checks import CheckFailed, Mistake

BLOCK = 32  # elements per MX block (one E8M0 scale)
EMAX_E2M1 = 2  # the exponent of E2M1's largest power of two, 4 (6 = 1.5 · 2^2)
ACT_DTYPES = (torch.float16, torch.bfloat16)
BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_MS = (1, 16)
# Fraction of the copy bandwidth measured in the same process (the graded cell times eagerly, do_bench around the
# call). On the H200 (2026-12-01, triton 3.6, docs/bench-h200.json) the solution reaches 0.20 at M = 1 and 16
# (graph-timed 0.20-0.21), tl.dot_scaled 0.19-0.21, the naive path 0.01: decoding, not memory, bounds a plain Triton
# kernel for this format there. The bar is half the H200's figure (docs/perf-notes.md says why half), 10x naive.
BANDWIDTH_THRESHOLD = 0.12  # half the solution's 0.26 (eager) with no K masks: docs/perf-notes.md, 2026-12-01


# ----------------------------------------------------------------------------------------------------------
# The reference


def shared_exponent(amax: torch.Tensor, rule: str = "floor") -> torch.Tensor:
    """The block's scale exponent (int32). "floor": the spec's floor(log2(amax)) - 2, which may clip values in
    (6, 8)·X to 6. "ceil": ceil(log2(amax / 6)), which never clips but wastes up to a binade. amax = 0 gives
    the smallest scale, 2^-127."""
    if rule == "floor":
        e = fp4.floor_log2(amax) - EMAX_E2M1
    elif rule == "ceil":
        ratio = amax.float() / fp4.E2M1_MAX
        e = fp4.floor_log2(ratio)
        e = e + (ratio > torch.ldexp(torch.ones_like(ratio), e.float())).to(torch.int32)  # ceil
    else:
        raise ValueError(f"rule must be 'floor' or 'ceil', got {rule!r}")
    return torch.where(amax > 0, e, torch.full_like(e, -fp4.E8M0_BIAS)).clamp(-fp4.E8M0_BIAS, fp4.E8M0_BIAS)


def quantize_codes(w: torch.Tensor, rule: str = "floor") -> tuple[torch.Tensor, torch.Tensor]:
    """Unpacked E2M1 codes (uint8 [N, K]) and E8M0 scale codes (uint8 [N, K/32])."""
    w = w.float()
    N, K = w.shape
    if K % BLOCK:
        raise ValueError(f"K must be a multiple of {BLOCK} (one MX block), got K = {K}")
    blocks = w.reshape(N, K // BLOCK, BLOCK)
    e = shared_exponent(blocks.abs().amax(dim=2), rule)
    # Dividing by a power of two is exact (multiplying by 2^-e): no rounding happens before the E2M1 rounding.
    v = torch.ldexp(blocks, -e[:, :, None].float())
    return fp4.e2m1_encode(v).reshape(N, K), fp4.e8m0_from_exponent(e)


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference quantizer: (packed uint8 [N, K/2], scales uint8 [N, K/32])."""
    codes, scales = quantize_codes(w)
    return fp4.pack_nibbles(codes), scales


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 [N, K] from packed codes and E8M0 scales."""
    values = fp4.e2m1_decode(fp4.unpack_nibbles(packed))
    return values * fp4.e8m0_decode(scales).repeat_interleave(BLOCK, dim=1)


def reference(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """y = x @ W.T in float32 (the grading reference)."""
    return x.float() @ dequantize(packed, scales).T


def naive(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The naive path: dequantize the whole weight into memory (as torch ops on the GPU), then a dense matmul."""
    table = fp4.e2m1_table(x.dtype).to(x.device)
    N = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(N, -1).long()
    scale = torch.exp2(scales.float() - 127).to(x.dtype).repeat_interleave(BLOCK, dim=1)
    return x @ (table[codes] * scale).T


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use


def prepare(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor | None = None):
    """Validate the inputs of an MXFP4 matmul with clear messages; allocate out if needed. Returns M, N, K, out."""
    for name, t in (("x", x), ("packed", packed), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {list(x.shape)}")
    if x.dtype not in ACT_DTYPES:
        raise TypeError(f"x must be float16 or bfloat16, got {x.dtype}")
    if packed.dim() != 2 or packed.dtype != torch.uint8:
        raise TypeError(
            f"packed must be a 2-D uint8 tensor [N, K/2], got {packed.dtype} of shape {list(packed.shape)}"
        )
    M, K = x.shape
    N, half = packed.shape
    if K % BLOCK:
        raise ValueError(f"K must be a multiple of {BLOCK} (one MX block), got K = {K}")
    if 2 * half != K:
        raise ValueError(
            f"x is [M, K] = {list(x.shape)} but packed is [N, K/2] = {list(packed.shape)}: the K's differ"
        )
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // BLOCK):
        raise ValueError(
            f"scales must be uint8 E8M0 codes of shape [N, K/32] = [{N}, {K // BLOCK}], got {scales.dtype} "
            f"of shape {list(scales.shape)}"
        )
    if not (x.device == packed.device == scales.device):
        raise ValueError(
            f"x, packed and scales must be on one device, got {x.device}, {packed.device}, {scales.device}"
        )
    if not packed.is_contiguous() or not scales.is_contiguous():
        raise ValueError("packed and scales must be contiguous (x and out may be strided)")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (M, N) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must be {x.dtype} of shape [{M}, {N}] on {x.device}, got {out.dtype} {list(out.shape)} "
            f"on {out.device}"
        )
    return M, N, K, out


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel (BLOCK_K is a multiple of 32: whole MX blocks per step)."""
    if device != "cuda":
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)
    big = M > 64
    if big and torch.cuda.get_device_capability() >= (9, 0):
        # Graph-timed on the H200 (docs/perf-notes.md): 12 % of cuBLAS at M = 2048 and 4096 against 7 % for
        # 128 x 128 x 64; Hopper's 227 KB of shared memory holds the three stages (an A100's 164 KB would not).
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)
    return _prefill_tiles(M)


def _prefill_tiles(M: int) -> dict:
    old = torch.cuda.get_device_capability() < (8, 0)
    big = M > 64
    return dict(
        BLOCK_M=128 if big else 64,
        BLOCK_N=128,
        BLOCK_K=64 if big else 128,
        num_warps=8 if big else 4,
        num_stages=2 if old else 3,
    )


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N."""
    if device != "cuda":
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1)
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01): with the tile read as it lies ([BLOCK_N, BLOCK_K/2]),
    # 32 columns x 512 of K, 4 warps, 3 stages reached 24-27 % of the copy bandwidth on all three shapes, M = 1 and
    # 16 (128 columns: 22 % on 28672 x 8192, 18 % on 8192 x 28672).
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=512, num_warps=4, num_stages=3)


def dot_scaled_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tl.dot_scaled bonus: the decode tiles for M <= 16 (BLOCK_N = 64 measured best for it on
    the H200), the prefill tiles above."""
    if M > 16:
        return prefill_config(M, N, K, device) if device != "cuda" else _prefill_tiles(M)
    if device != "cuda":
        return decode_config(M, N, K, device)
    return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3)


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def bytes_per_weight() -> float:
    """Half a byte of E2M1 plus a 32nd of a byte of E8M0: 4.25 bits."""
    return 0.5 + 1 / BLOCK


def bytes_moved(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The bytes a fused MXFP4 matmul must move: packed codes, scales, activations in, output out."""
    return N * K // 2 + N * K // BLOCK + act_bytes * (M * K + M * N)


def bytes_moved_naive(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    """The naive path: read the packed weight, write the dequantized 16-bit weight, read it back."""
    return bytes_moved(M, N, K, act_bytes) + 2 * act_bytes * N * K


def bytes_moved_dense(M: int, N: int, K: int, act_bytes: int = 2) -> int:
    return act_bytes * (N * K + M * K + M * N)


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def explain_format() -> None:
    """Print the E2M1 code table, the E8M0 rule and the bytes per weight."""
    print("E2M1 codes (bit 3 sign | bits 2-1 exponent, bias 1 | bit 0 mantissa):")
    for c in range(8):
        e, m = c >> 1, c & 1
        how = f"0.{5 * m} (subnormal: m · 0.5)" if e == 0 else f"2^{e - 1} · 1.{5 * m}"
        print(
            f"  {c:04b}  {fp4.E2M1_MAGNITUDES[c]:>3g}   = {how}      {c | 8:04b}  -{fp4.E2M1_MAGNITUDES[c]:g}"
        )
    print("E8M0 scale code e: the value 2^(e - 127); 0xFF is NaN. No sign, no mantissa: a pure power of two.")
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("W8A16 (int8 + fp32 per row)", 1.0),
        ("MXFP4 (E2M1 + E8M0 per 32)", bytes_per_weight()),
    ]
    print("Bytes per weight:")
    for name, b in rows:
        print(f"  {name:<30} {b:.5f} B  ({8 * b:.2f} bits)")
    print(f"At decode MXFP4 can be up to {2 / bytes_per_weight():.2f}x faster than bf16.")


# ----------------------------------------------------------------------------------------------------------
# The widget: one block of 32 values, its scale and each code


def block_table(values, rule: str = "floor") -> dict:
    """What the explorer shows for one block of 32 values."""
    v = torch.as_tensor(values, dtype=torch.float32).reshape(1, BLOCK)
    codes, scales = quantize_codes(v, rule)
    X = float(fp4.e8m0_decode(scales)[0, 0])
    back = fp4.e2m1_decode(codes) * X
    return {
        "amax": float(v.abs().max()),
        "scale_code": int(scales[0, 0]),
        "exponent": int(scales[0, 0]) - fp4.E8M0_BIAS,
        "X": X,
        "values": v[0].tolist(),
        "ratios": (v[0] / X).tolist(),
        "codes": codes[0].tolist(),
        "dequantized": back[0].tolist(),
        "clipped": int((v[0].abs() / X > fp4.E2M1_MAX).sum()),
        "rel_error": float((back - v).norm() / v.norm().clamp_min(1e-30)),
    }


def block_text(values, rule: str = "floor") -> str:
    t = block_table(values, rule)
    lines = [
        f"amax = {t['amax']:.5g};  floor(log2 amax) - 2 = {t['exponent']}  ->  E8M0 code {t['scale_code']} "
        f"({t['scale_code']:08b}), X = 2^{t['exponent']} = {t['X']:.5g}"
        if rule == "floor"
        else f"amax = {t['amax']:.5g};  ceil(log2(amax / 6)) = {t['exponent']}  ->  E8M0 code {t['scale_code']}, "
        f"X = {t['X']:.5g}",
        f"{'i':>3} {'w':>10} {'w / X':>8} {'code':>5} {'E2M1':>6} {'code·X':>10}",
    ]
    for i in range(BLOCK):
        c = t["codes"][i]
        lines.append(
            f"{i:>3} {t['values'][i]:>10.4g} {t['ratios'][i]:>8.3f} {c:04b}  {float(fp4.e2m1_decode(torch.tensor(c))):>6g} "
            f"{t['dequantized'][i]:>10.4g}" + ("  clipped to ±6" if abs(t["ratios"][i]) > 6 else "")
        )
    lines.append(f"clipped: {t['clipped']};  relative error of the block: {t['rel_error']:.3%}")
    return "\n".join(lines)


def block_explorer():
    """Sliders: a block of 32 Gaussian weights (seed), one outlier's size, and the scale rule."""
    import ipywidgets as W

    out = W.HTML()

    def show(seed: int, outlier: float, rule: str) -> None:
        g = checks.generator(seed)
        v = torch.randn(BLOCK, generator=g) * 0.02
        v[5] = outlier * 0.02
        out.value = "<pre>" + block_text(v, rule) + "</pre>"

    seed = W.IntSlider(value=0, min=0, max=50, description="block")
    outlier = W.FloatSlider(value=3.5, min=-8, max=8, step=0.05, description="w[5] / 0.02")
    rule = W.ToggleButtons(options=["floor", "ceil"], description="scale rule")
    W.interactive_output(show, {"seed": seed, "outlier": outlier, "rule": rule})
    show(seed.value, outlier.value, rule.value)
    return W.VBox([W.HBox([seed, outlier]), rule, out])


# ----------------------------------------------------------------------------------------------------------
# The comparison figure: floor vs ceil rule, MXFP4 vs int4 at equal bits


def int4_groupwise(w: torch.Tensor, group: int) -> torch.Tensor:
    """Dequantized symmetric int4 (-7..7) with one bf16 absmax scale per group of `group` along K."""
    N, K = w.shape
    b = w.float().reshape(N, K // group, group)
    s = (b.abs().amax(dim=2, keepdim=True) / 7).to(torch.bfloat16).float()
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (torch.round(b / s).clamp(-7, 7) * s).reshape(N, K)


def realistic_weights(kind: str, N: int = 512, K: int = 2048, seed: int = 0) -> torch.Tensor:
    """Gaussian rows of distinct scales, or heavy-tailed (Student t, 4 degrees of freedom) like LLM weights."""
    g = checks.generator(seed)
    row = torch.exp(torch.empty(N, 1).uniform_(-1.0, 1.0, generator=g)) * 0.02
    if kind == "gaussian":
        return torch.randn(N, K, generator=g) * row
    z = torch.randn(N, K, generator=g)
    chi2 = sum(torch.randn(N, K, generator=g) ** 2 for _ in range(4)) / 4
    return z / chi2.sqrt() * row


def error_table(w: torch.Tensor) -> list[tuple[str, float, float]]:
    """(method, bits per weight, relative RMS error) on w."""

    def rel(deq):
        return float((deq - w).norm() / w.norm())

    def mx(rule):
        codes, scales = quantize_codes(w, rule)
        return dequantize(fp4.pack_nibbles(codes), scales)

    return [
        ("MXFP4, spec (floor)", 4.25, rel(mx("floor"))),
        ("MXFP4, ceil(log2(amax/6))", 4.25, rel(mx("ceil"))),
        ("int4 g=64, bf16 scale", 4.25, rel(int4_groupwise(w, 64))),
        ("int4 g=32, bf16 scale", 4.5, rel(int4_groupwise(w, 32))),
    ]


def compare_rules_figure(seed: int = 0):
    """Relative error of each method on two weight distributions; prints the table too."""
    import matplotlib.pyplot as plt

    kinds = ["gaussian", "heavy-tailed"]
    tables = {k: error_table(realistic_weights(k, seed=seed)) for k in kinds}
    fig, ax = plt.subplots(figsize=(9, 3.4))
    methods = [m for m, _, _ in tables[kinds[0]]]
    width = 0.38
    for i, k in enumerate(kinds):
        errs = [e for _, _, e in tables[k]]
        bars = ax.barh([j + i * width for j in range(len(methods))], errs, height=width, label=k)
        for b, e in zip(bars, errs, strict=True):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {e:.2%}", va="center", fontsize=8)
    ax.set_yticks([j + width / 2 for j in range(len(methods))])
    ax.set_yticklabels([f"{m} ({b:g} bits)" for m, b, _ in tables[kinds[0]]])
    ax.invert_yaxis()
    ax.set_xlabel("‖dequantized − w‖ / ‖w‖")
    ax.legend(loc="lower right")
    ax.set_title("512 × 2048 weights: relative error by format and scale rule")
    fig.tight_layout()
    for k in kinds:
        print(k + ": " + ", ".join(f"{m} {e:.3%}" for m, _, e in tables[k]))
    return fig


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Weights whose rows and blocks have distinct magnitudes (so the blocks get distinct scales)."""
    row = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=g)) * 0.02
    blk = torch.exp(torch.empty(N, K // BLOCK, 1).uniform_(-1.5, 1.5, generator=g)).repeat_interleave(
        BLOCK, 1
    )
    return (torch.randn(N, K, generator=g) * row * blk.reshape(N, K)).to(dtype)


def adversarial_weight(N: int, K: int, g: torch.Generator) -> torch.Tensor:
    """Every corner of the rounding and scale rules, one block per case (N >= 4, K >= 8 blocks)."""
    w = random_weight(N, K, g)
    X = 2.0 ** int(torch.randint(-8, -2, (1,), generator=g))
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 4.0]) * X  # amax 5X: floor -> X
    w[0, 0:32] = torch.cat([ties, -ties, ties.flip(0), -ties.flip(0)])
    w[0, 32:64] = 0  # an all-zero block
    w[1, 0:32] = torch.randn(32, generator=g) * 1e-41  # a subnormal-sized block
    w[1, 32:64] = torch.randn(32, generator=g).clamp(-1, 1) * 4 * X
    w[1, 33] = 4 * X  # amax exactly a power of two
    w[2, 0:32] = torch.linspace(-7.9, 7.9, 32) * X  # values in (6, 8)·X clip to ±6
    w[2, 5] = 7.99 * X
    w[3, 0:32] = -(torch.rand(32, generator=g) * 0.2 + 0.01) * X  # negative values that round to -0
    w[3, 0] = -X * 4.5  # a negative amax
    return w


def log2_weight(N: int = 2, K: int = 256) -> torch.Tensor:
    """Deterministic blocks whose amax is one float32 ulp below a power of two, 2^k for k = -8, -3, 3, ...: there
    float32 `torch.log2(amax)` rounds up to k, and floor(log2(amax)) = k - 1 is lost. The notebook warns of it."""
    w = torch.linspace(-0.9, 0.9, BLOCK).repeat(N, K // BLOCK)
    for i in range(N * (K // BLOCK)):
        n, b = divmod(i, K // BLOCK)
        p = torch.tensor(2.0 ** (-8 + 5 * (i % 4) + (i % 3)))
        w[n, BLOCK * b : BLOCK * (b + 1)] *= p
        w[n, BLOCK * b + (i % BLOCK)] = torch.nextafter(p, torch.zeros(()))  # the block's amax
    return w


def random_problem(M: int, N: int, K: int, dtype, device: str, g: torch.Generator, strided: bool = False):
    """x [M, K] (a strided view when `strided`), packed, scales from the reference quantizer."""
    packed, scales = quantize(random_weight(N, K, g))
    pad = 7 if strided else 0
    x_full = torch.randn(M, K + pad, generator=g).to(dtype).to(device)
    return x_full[:, :K], packed.to(device), scales.to(device)


def _poisoned_out(M: int, N: int, dtype, device: str, strided: bool):
    pad = 5 if strided else 0
    full = torch.full((M, N + pad), float("nan"), dtype=dtype, device=device)
    return full, full[:, :N]


def _act_dtypes(device: str) -> list:
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return [torch.float16, torch.bfloat16]
    return [torch.float16]


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------------------------------------------------
# Checks for exercise 1: the quantizer and packer


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        return [random_weight(4, 64, g), adversarial_weight(8, 256, g), log2_weight()]
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        N = int(torch.randint(5, 40, (1,), generator=g))
        K = BLOCK * int(torch.randint(8, 12, (1,), generator=g))
        cases.append(
            adversarial_weight(N, K, g).to(dtype) if dtype == torch.float32 else random_weight(N, K, g, dtype)
        )
    # A long row: more than 31 blocks, where a block count computed with a wrong divisor stops coinciding.
    cases.append(random_weight(3, BLOCK * int(torch.randint(32, 48, (1,), generator=g)), g))
    return cases


def _swap_nibbles(p: torch.Tensor) -> torch.Tensor:
    return (p >> 4) | ((p & 0xF) << 4)


def _no_saturation_codes(w: torch.Tensor) -> torch.Tensor:
    """Codes of a quantizer that rounds |v| > 6 on up, past E2M1's top (6 -> "8" = 0b1000), and ORs the sign."""
    N, K = w.shape
    blocks = w.float().reshape(N, K // BLOCK, BLOCK)
    e = shared_exponent(blocks.abs().amax(dim=2))
    v = torch.ldexp(blocks, -e[:, :, None].float())
    mag = fp4.e2m1_encode_magnitude(v.abs()).int() + (v.abs() >= 7).int()
    return ((mag | (torch.signbit(v).int() << 3)) & 0xF).to(torch.uint8).reshape(N, K)


def _float_log2_codes(w: torch.Tensor):
    """Codes and scales of a quantizer that takes floor(torch.log2(amax)) in float32 (the notebook's pitfall)."""
    N, K = w.shape
    blocks = w.float().reshape(N, K // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=2)
    e = torch.floor(torch.log2(amax)).nan_to_num(neginf=-(1 << 20)).to(torch.int32) - EMAX_E2M1
    e = torch.where(amax > 0, e, torch.full_like(e, -fp4.E8M0_BIAS)).clamp(-fp4.E8M0_BIAS, fp4.E8M0_BIAS)
    v = torch.ldexp(blocks, -e[:, :, None].float())
    return fp4.e2m1_encode(v).reshape(N, K), fp4.e8m0_from_exponent(e)


def _quantizer_mistakes(w: torch.Tensor):
    """(name, explanation, packed, scales) of the known wrong quantizers."""
    codes, scales = quantize_codes(w)
    packed = fp4.pack_nibbles(codes)
    ceil_codes, ceil_scales = quantize_codes(w, "ceil")
    log2_codes, log2_scales = _float_log2_codes(w)
    mistakes = [
        ("nibble order", "Element 2i goes in the LOW nibble and element 2i+1 in the high nibble: "
         "packed = codes[:, 0::2] | (codes[:, 1::2] << 4).", _swap_nibbles(packed), scales),
        ("E8M0 bias off by one (128)", "The E8M0 code of 2^e is e + 127 (bias 127, like fp32's exponent).",
         packed, (scales.int() + 1).clamp(0, 254).to(torch.uint8)),
        ("E8M0 bias off by one (126)", "The E8M0 code of 2^e is e + 127 (bias 127, like fp32's exponent).",
         packed, (scales.int() - 1).clamp(0, 254).to(torch.uint8)),
        ("ceil instead of floor", "The OCP spec takes X = 2^(floor(log2(amax)) - 2): the largest power of two "
         "of the block minus emax = 2, not ceil(log2(amax / 6)). Values in (6, 8)·X then saturate to ±6.",
         fp4.pack_nibbles(ceil_codes), ceil_scales),
        ("missing saturation", "Values of |w / X| above 6 (up to 8 with the floor rule) must saturate to code "
         "0b0111 (±6); rounding them up overflows into the sign bit.",
         fp4.pack_nibbles(_no_saturation_codes(w)), scales),
        ("sign bit lost", "Bit 3 of each code is the sign of w: code = (w < 0) << 3 | magnitude code.",
         fp4.pack_nibbles(codes & 0x7), scales),
        ("floor(torch.log2(amax)) rounded up", "Just below a power of two, float32 log2(amax) rounds up to the "
         "integer (log2(0.99999994 · 8) gives 3.0), so floor() is one too large. Take the exponent from the bits: "
         "torch.frexp(amax) gives amax = m · 2^e with 0.5 <= m < 1, exactly, so floor(log2(amax)) = e - 1.",
         fp4.pack_nibbles(log2_codes), log2_scales),
    ]  # fmt: skip
    # A variant equal to the reference on this input (no amax just below a power of two) names nothing.
    return [m for m in mistakes if not (torch.equal(m[2], packed) and torch.equal(m[3], scales))]


def _named_quantizer_mistake(w, packed, scales) -> str | None:
    for name, explanation, mp, ms in _quantizer_mistakes(w):
        if torch.equal(packed, mp) and torch.equal(scales, ms):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, _mp, ms in _quantizer_mistakes(w):
        if torch.equal(scales, ms) and name.startswith(("E8M0", "ceil")):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, mp, _ms in _quantizer_mistakes(w):
        if torch.equal(packed, mp) and not name.startswith("E8M0"):
            return f"This matches a known mistake: {name}. {explanation}"
    return None


def _code_diff_hint(w, codes, codes_ref, scales_ref) -> str:
    """Where the element codes differ, and what those elements have in common."""
    N, K = w.shape
    bad = codes != codes_ref
    v = torch.ldexp(w.float(), -(scales_ref.int() - 127).repeat_interleave(BLOCK, 1).float())
    i = bad.nonzero()[0].tolist()
    r = float(v[i[0], i[1]])
    text = (
        f"first at [n={i[0]}, k={i[1]}]: w / X = {r:.6g}, got code {int(codes[i[0], i[1]]):04b} "
        f"({float(fp4.e2m1_decode(codes[i[0], i[1]])):g}), expected {int(codes_ref[i[0], i[1]]):04b} "
        f"({float(fp4.e2m1_decode(codes_ref[i[0], i[1]])):g})."
    )
    a = v.abs()[bad]
    ties = torch.tensor([m for m, _ in fp4.E2M1_MIDPOINTS])
    if bool((a[:, None] == ties[None, :]).any(dim=1).all()):
        text += (" Every difference is an exact tie between two E2M1 values: round half to the EVEN code "
                 "(0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).")  # fmt: skip
    elif bool((a > 6).all()):
        text += " Every difference has |w / X| > 6: those must saturate to ±6 (code 0b0111 with its sign)."
    elif bool(((codes ^ codes_ref)[bad] == 8).all()):
        text += " Only the sign bit (bit 3) differs: it is the sign of w, also for values that round to 0."
    return text


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: packed codes and E8M0 scales must equal the reference bit for bit."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    what = "quantize_mxfp4"
    for w in _quantizer_inputs(g, hidden):
        N, K = w.shape
        ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}])"
        w_before = w.clone()
        result = checks.call_learner(fn, w, what=what)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise CheckFailed(f"{what} must return a pair (packed, scales), got {type(result).__name__}")
        packed, scales = result
        if not isinstance(packed, torch.Tensor) or not isinstance(scales, torch.Tensor):
            raise CheckFailed(f"{what} must return two tensors (packed, scales)")
        if not torch.equal(w, w_before):
            raise CheckFailed(f"{what} modified its input w in place; leave the weights untouched.{ctx}")
        if tuple(packed.shape) == (N, K):
            raise CheckFailed(
                f"packed has shape [N, K] = [{N}, {K}]: pack two codes per byte, shape [N, K/2] = [{N}, {K // 2}].{ctx}"
            )
        if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
            raise CheckFailed(
                f"packed must be uint8 of shape [{N}, {K // 2}], got {packed.dtype} {list(packed.shape)}{ctx}"
            )
        if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // BLOCK):
            hint = (
                " Return the E8M0 codes (e + 127) as uint8, not the float scales."
                if scales.is_floating_point()
                else ""
            )
            raise CheckFailed(
                f"scales must be uint8 E8M0 codes of shape [{N}, {K // BLOCK}] (one per block of 32 along K), got "
                f"{scales.dtype} {list(scales.shape)}.{hint}{ctx}"
            )
        packed_ref, scales_ref = quantize(w)
        if torch.equal(packed, packed_ref) and torch.equal(scales, scales_ref):
            continue
        named = _named_quantizer_mistake(w, packed, scales)
        lines = [named] if named else []
        if not torch.equal(scales, scales_ref):
            bad = scales != scales_ref
            i, b = bad.nonzero()[0].tolist()
            amax = float(w.float()[i, b * BLOCK : (b + 1) * BLOCK].abs().max())
            lines.insert(
                0, f"scales differ from the reference in {int(bad.sum())} of {bad.numel()} blocks{ctx}"
            )
            lines.append(
                f"First at [n={i}, block={b}]: amax = {amax:.6g}, got code {int(scales[i, b])}, expected "
                f"{int(scales_ref[i, b])} (X = 2^{int(scales_ref[i, b]) - 127}). Blocks differ "
                f"{checks._where_2d(bad, ('rows', 'blocks'))}."
            )
        else:
            codes, codes_ref = fp4.unpack_nibbles(packed), fp4.unpack_nibbles(packed_ref)
            bad = codes != codes_ref
            lines.insert(
                0, f"packed differs from the reference in {int(bad.sum())} of {bad.numel()} codes{ctx}"
            )
            if not named:
                lines.append(_code_diff_hint(w, codes, codes_ref, scales_ref))
            lines.append(f"Differences lie {checks._where_2d(bad, ('rows', 'columns'))}.")
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Checks for exercises 2 and 3: the kernels


def kernel_mistakes(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> list[Mistake]:
    xf = x.float().cpu()
    packed, scales = packed.cpu(), scales.cpu()
    M, K = xf.shape
    w = dequantize(packed, scales)
    scale = fp4.e8m0_decode(scales).repeat_interleave(BLOCK, 1)
    codes = fp4.unpack_nibbles(packed)
    out = [
        Mistake("nibble order", "Element 2i is the LOW nibble (p & 0xF) and element 2i+1 the high one "
                "(p >> 4): pair the low nibbles with x's even columns.", xf @ dequantize(_swap_nibbles(packed), scales).T),
        Mistake("E8M0 bias off by one", "The E8M0 code e stands for 2^(e - 127): the float with exponent "
                "field e, i.e. (e << 23) bitcast to float32.", xf @ (2 * w).T),
        Mistake("E8M0 bias off by one", "The E8M0 code e stands for 2^(e - 127): the float with exponent "
                "field e, i.e. (e << 23) bitcast to float32.", xf @ (0.5 * w).T),
        Mistake("block scale missing", "Each E2M1 value must be multiplied by its block's E8M0 scale.",
                xf @ fp4.e2m1_decode(codes).T),
        Mistake("sign bit lost", "Bit 3 of each code is the sign: codes 8..15 are the negative values.",
                xf @ (fp4.e2m1_decode(codes & 7) * scale).T),
        Mistake("block index off", "The scale of element k is scales[n, k // 32]; a byte at offset kb "
                "holds elements 2kb and 2kb+1, so its block is kb // 16.",
                xf @ (fp4.e2m1_decode(codes) * fp4.e8m0_decode(scales).repeat_interleave(2 * BLOCK, 1)[:, :K]
                      if K >= 2 * BLOCK else w).T),
    ]  # fmt: skip
    for bk in (64, 128, 256, 512):
        kt = (K // bk) * bk
        if 0 < kt < K:
            out.append(Mistake(f"last partial K block dropped (BLOCK_K = {bk})", "The loop or the K mask skips "
                               "the final, partial block of K: loop over range(0, K, BLOCK_K) and mask k < K.",
                               xf[:, :kt] @ w[:, :kt].T))  # fmt: skip
    return out


def _check_kernel(fn, what: str, shapes, device: str, dtypes, g, strided_cases=(False, True)) -> int:
    n = 0
    for M, N, K in shapes:
        for dtype in dtypes:
            for strided in strided_cases:
                x, packed, scales = random_problem(M, N, K, dtype, device, g, strided=strided)
                full, out = _poisoned_out(M, N, dtype, device, strided)
                inputs = dict(x=x, packed=packed, scales=scales)
                before = checks.snapshot(inputs)
                ctx = f" (M={M}, N={N}, K={K}, {str(dtype).replace('torch.', '')}{', strided x and out' if strided else ''})"
                y, ops = checks.run_audited(fn, x, packed, scales, out=out, what=what)
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(x, packed, scales),
                                            mistakes=kernel_mistakes(x, packed, scales), ctx=ctx)  # fmt: skip
                n += 1
    return n


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: the tiled kernel on ragged shapes, poisoned output, strided views, fused."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(32, 64, 64), (50, 70, 96)]
    else:
        big = device == "cuda"
        shapes = []
        for _ in range(2):
            M = int(torch.randint(17, 300 if big else 100, (1,), generator=g))
            N = int(torch.randint(33, 700 if big else 150, (1,), generator=g))
            K = BLOCK * int(torch.randint(2, 40 if big else 8, (1,), generator=g))
            # The audit flags any float tensor shaped like the weight, and the interpreter copies x [M, K] and
            # out [M, N] inside the call: keep M apart from N and K so no activation looks like a weight.
            M = M - 1 if M == K else M
            N = N + 1 if N == M else N
            shapes.append((M, N, K))
        shapes.append((1, 129, 160))
    n = _check_kernel(fn, "mxfp4_matmul", shapes, device, _act_dtypes(device), g)
    checks.passed(
        f"mxfp4_matmul: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N, K a multiple of 32."""
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    if not hidden:
        shapes = [(1, 64, 128), (16, 96, 192)]
    else:
        big = device == "cuda"
        shapes = [
            (M, int(torch.randint(33, 2000 if big else 200, (1,), generator=g)),
             BLOCK * int(torch.randint(2, 100 if big else 9, (1,), generator=g)))
            for M in (1, int(torch.randint(2, 16, (1,), generator=g)), 16)
        ]  # fmt: skip
        if not big:  # one long row on the CPU too: K past 1024, where a wrong block divisor stops coinciding
            shapes.append((1, int(torch.randint(17, 48, (1,), generator=g)),
                           BLOCK * int(torch.randint(36, 48, (1,), generator=g))))  # fmt: skip
    n = _check_kernel(fn, "mxfp4_decode", shapes, device, _act_dtypes(device), g)
    checks.passed(
        f"mxfp4_decode: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})"
    )


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth."""
    if not torch.cuda.is_available():
        return harness.not_on_cpu("mxfp4_decode", threshold)
    N, K = BANDWIDTH_SHAPE
    dtype = _act_dtypes("cuda")[-1]
    return harness.check_bandwidth(
        fn, what="mxfp4_decode", module=__name__, N=N, K=K, Ms=BANDWIDTH_MS, out_dtype=dtype,
        nbytes=lambda M: bytes_moved(M, N, K, dtype.itemsize), threshold=threshold, seed=seed,
        hint="The naive path moves each weight about nine times its packed size: load each packed tile once, "
        "decode it in registers, and keep the per-element work to a few integer operations.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/harness.py): random e2m1 pairs and e8m0 scales near 2^-7."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=g.device, generator=g)
    scales = torch.randint(118, 123, (N, K // BLOCK), dtype=torch.uint8, device=g.device, generator=g)
    return packed, scales


def timing_inputs(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    return (torch.randn(n, M, K, device=g.device, generator=g).to(_act_dtypes(g.device.type)[-1]),)


# ----------------------------------------------------------------------------------------------------------
# The bonus: tl.dot_scaled


def dot_scaled_status() -> tuple[bool, str]:
    """Can this triton run tl.dot_scaled with e2m1 weights here? (ok, why)."""
    import os

    import triton
    import triton.language as tl

    if not hasattr(tl, "dot_scaled"):
        return False, f"triton {triton.__version__} has no tl.dot_scaled"
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    if interp:
        major, minor = (int(p) for p in triton.__version__.split(".")[:2])
        if (major, minor) < (3, 9):
            return False, f"triton {triton.__version__}'s interpreter has no tl.dot_scaled (3.9 has)"
        return True, f"triton {triton.__version__}'s interpreter emulates tl.dot_scaled in numpy"
    cap = torch.cuda.get_device_capability()
    if cap >= (10, 0):
        return True, f"sm_{cap[0]}{cap[1]}: native fp4 tensor cores"
    if cap >= (8, 0):
        return True, f"sm_{cap[0]}{cap[1]}: no fp4 tensor cores, triton upcasts e2m1 to bf16 before the MMA"
    return False, f"sm_{cap[0]}{cap[1]}: tl.dot_scaled needs sm_80 or newer"


def check_dot_scaled(fn, *, seed: int | None = None) -> None:
    """The bonus: same checks as the prefill kernel, where tl.dot_scaled can run (else it says why)."""
    ok, why = dot_scaled_status()
    if not ok:
        return checks.not_measured(f"tl.dot_scaled cannot run here: {why}. Nothing to check.")
    seed = checks.fresh_seed() if seed is None else seed
    g = checks.generator(seed)
    device = _device()
    shapes = [(32, 64, 64), (50, 70, 96), (1, 129, 160)]
    n = _check_kernel(fn, "mxfp4_matmul_dot_scaled", shapes, device, _act_dtypes(device)[-1:], g)
    checks.passed(f"mxfp4_matmul_dot_scaled: {n} cases match the reference (seed {seed}); {why}")


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Measured on the course's H200 (docs/mxfp4-h200.md) at M = 1, N x K = 28672 x 8192, bf16 activations.
H200_RECORDED_US = {
    "dense bf16 (cuBLAS)": 124.1,
    "naive: dequantize, then matmul": 2999.2,
    "mxfp4_matmul (tiled)": 229.9,
    "mxfp4_decode": 184.6,
    "tl.dot_scaled kernel": 156.6,
}


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    from qmatmul import roofline

    ceil = roofline.ceilings(env)
    N, K = BANDWIDTH_SHAPE
    rows = []
    for M in (1, 16, 2048):
        rows.append((f"dense bf16, M={M}", bytes_moved_dense(M, N, K), flops(M, N, K)))
        rows.append((f"MXFP4 fused, M={M}", bytes_moved(M, N, K), flops(M, N, K)))
    rows.append(("MXFP4 naive path, M=1", bytes_moved_naive(1, N, K), flops(1, N, K)))
    print(f"A Linear layer with N x K = {N} x {K} weights:")
    roofline.print_predictions(ceil, rows)


def compare_paths(env, prefill_fn, decode_fn, dot_scaled_fn=None, M: int = 1):
    """Time the dense matmul, the naive path and the learner's kernels at decode; plot bytes and time."""
    from qmatmul import plots

    N, K = BANDWIDTH_SHAPE
    rows = [
        ("dense bf16 (cuBLAS)", bytes_moved_dense(M, N, K)),
        ("naive: dequantize, then matmul", bytes_moved_naive(M, N, K)),
        ("mxfp4_matmul (tiled)", bytes_moved(M, N, K)),
        ("mxfp4_decode", bytes_moved(M, N, K)),
    ]
    if dot_scaled_fn is not None:
        rows.append(("tl.dot_scaled kernel", bytes_moved(M, N, K)))
    if not env.has_gpu:
        times = [H200_RECORDED_US.get(label) for label, _ in rows]
        rows = [(plots.recorded_label(label), nbytes) for label, nbytes in rows]
        note = plots.recorded_note()
    else:
        from qmatmul import bench

        g = checks.generator(0, "cuda")
        dtype = env.act_dtype
        packed, scales = timing_weights(N, K, g)
        w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fns = [lambda: x @ w.T, lambda: naive(x, packed, scales), lambda: prefill_fn(x, packed, scales),
               lambda: decode_fn(x, packed, scales)]  # fmt: skip
        if dot_scaled_fn is not None:
            fns.append(lambda: dot_scaled_fn(x, packed, scales))
        times = bench.time_paths(fns)
        rows = [(plots.measured_label(label), nbytes) for label, nbytes in rows]
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    return plots.paths_report(rows, times, f"M={M}, N x K = {N} x {K}: {note}")


# ----------------------------------------------------------------------------------------------------------
# The benchmark (tools/bench.py calls this on a CUDA GPU)


def benchmark(sol, record, env, quick: bool = False) -> None:
    """Time the solution kernels beside the dense matmul and the naive path, over rotating weight copies."""
    from qmatmul import bench

    dtype = env.act_dtype
    g = checks.generator(0, "cuda")
    has_ds = hasattr(sol, "mxfp4_matmul_dot_scaled") and dot_scaled_status()[0]

    def recheck(fn, M, N, K):
        def run():
            x, packed, scales = random_problem(M, N, K, dtype, "cuda", checks.generator(1))
            try:
                checks.compare(fn(x, packed, scales), reference(x, packed, scales), what="recheck",
                               rtol=checks.tolerance_for(dtype))  # fmt: skip
                return True
            except CheckFailed as exc:
                print(exc)
                return False

        return run

    shapes = [BANDWIDTH_SHAPE] if quick else [(8192, 8192), (28672, 8192), (8192, 28672)]
    for N, K in shapes:
        ws = [timing_weights(N, K, g) for _ in range(bench.copies_needed(bytes_moved(1, N, K)))]
        dense = [
            torch.randn(N, K, device="cuda", generator=g).to(dtype)
            for _ in range(bench.copies_needed(2 * N * K))
        ]
        for M in (1, 16) if quick else (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            fused = bytes_moved(M, N, K)
            record("decode", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
                   bytes_moved_dense(M, N, K))  # fmt: skip
            record(
                "decode",
                "naive: dequantize, matmul",
                M,
                N,
                K,
                [lambda x=x, w=w: naive(x, *w) for w in ws],
                fused,
            )
            record("decode", "solution mxfp4_decode", M, N, K, [lambda x=x, w=w: sol.mxfp4_decode(x, *w) for w in ws],
                   fused, recheck(sol.mxfp4_decode, M, N, K))  # fmt: skip
            record("decode", "solution mxfp4_matmul (tiled)", M, N, K,
                   [lambda x=x, w=w: sol.mxfp4_matmul(x, *w) for w in ws], fused)  # fmt: skip
            if has_ds:
                record("decode", "solution tl.dot_scaled", M, N, K,
                       [lambda x=x, w=w: sol.mxfp4_matmul_dot_scaled(x, *w) for w in ws], fused,
                       recheck(sol.mxfp4_matmul_dot_scaled, M, N, K))  # fmt: skip
    N = K = 8192
    ws = [timing_weights(N, K, g) for _ in range(2)]
    dense = [torch.randn(N, K, device="cuda", generator=g).to(dtype) for _ in range(2)]
    for M in (2048,) if quick else (2048, 4096):
        x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        fused = bytes_moved(M, N, K)
        record("prefill", "dense (cuBLAS)", M, N, K, [lambda x=x, w=w: x @ w.T for w in dense],
               bytes_moved_dense(M, N, K))  # fmt: skip
        record(
            "prefill",
            "naive: dequantize, matmul",
            M,
            N,
            K,
            [lambda x=x, w=w: naive(x, *w) for w in ws],
            fused,
        )
        record("prefill", "solution mxfp4_matmul", M, N, K, [lambda x=x, w=w: sol.mxfp4_matmul(x, *w) for w in ws],
               fused, recheck(sol.mxfp4_matmul, 300, 1000, 768))  # fmt: skip
        if has_ds:
            record("prefill", "solution tl.dot_scaled", M, N, K,
                   [lambda x=x, w=w: sol.mxfp4_matmul_dot_scaled(x, *w) for w in ws], fused,
                   recheck(sol.mxfp4_matmul_dot_scaled, 300, 1000, 768))  # fmt: skip
