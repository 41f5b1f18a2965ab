"""Chapter W4A16, the trusted grading of the bonuses: the magic-number dequantization (check_unpack_magic) and
reading a GPTQ checkpoint (check_from_gptq), with their test inputs and known mistakes. The exercises' checks are
qmatmul/checks/w4a16.py.
"""

from __future__ import annotations

import inspect

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, common
from qmatmul.formats.w4a16 import (
    GPTQ_PACK,
    GROUP_SIZES,
    dequantize,
    gptq_dequantize,
    gptq_group_size,
    gptq_zeros,
    pack,
    to_gptq,
    unpack,
    unpack_int32,
)
from qmatmul.scaffold import validation

# ----------------------------------------------------------------------------------------------------------
# Bonus: the magic-number dequantization

# Ops that allocate, move or view a float tensor without computing one (the interpreter itself runs set_ and copy_).
_ALLOCATIONS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "full", "fill_", "set_",
    "copy_", "detach", "alias", "view", "as_strided", "_reshape_alias", "reshape", "t", "transpose", "permute",
    "slice", "select", "unsqueeze", "squeeze", "expand", "lift_fresh",
}  # fmt: skip


def _kernel_source(kernel) -> str:
    """The source of a @triton.jit function, compiled (JITFunction.src) or interpreted (InterpretedFunction.fn)."""
    src = getattr(kernel, "src", None)
    if src is None:
        try:
            src = inspect.getsource(getattr(kernel, "fn", kernel))
        except (OSError, TypeError):
            src = "bitcast=True"  # source unavailable: do not fail the learner on our inability to read it
    return src


def check_unpack_magic(fn, kernel=None, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus: fn(packed) -> float16 codes [N, K], bit for bit, computed by a Triton kernel that bitcasts."""
    seed, g, _ = common.cell(seed)
    what = "unpack_magic"
    device = validation.device()
    shapes = [(4, 64), (3, 100)] if not hidden else [
        (int(torch.randint(1, 40, (1,), generator=g)), 2 * int(torch.randint(1, 700, (1,), generator=g)))
        for _ in range(3)
    ]  # fmt: skip
    for N, K in shapes:
        q = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
        k = min(32, K)
        q[0, :k] = torch.arange(k) % 16  # every code appears (where K allows)
        packed = pack(q).to(device)
        ctx = f" (packed [{N}, {K // 2}])"
        y, ops = checks.run_audited(fn, packed, what=what)
        used = sorted(
            {
                op.name
                for op in ops
                if op.name not in _ALLOCATIONS and any(d.is_floating_point for d in op.dtypes)
            }
        )
        if used:
            raise CheckFailed(
                f"{what} computed floats with PyTorch ({', '.join(used)}): do the whole unpacking in the Triton "
                f"kernel.{ctx}"
            )
        if not isinstance(y, torch.Tensor) or y.dtype != torch.float16 or tuple(y.shape) != (N, K):
            got = f"{y.dtype} {list(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
            raise CheckFailed(f"{what} must return float16 codes of shape [{N}, {K}], got {got}{ctx}")
        expected = q.to(y.device).half()
        if torch.equal(y, expected) and kernel is not None:
            # The wrapper's torch.empty may hand back memory that already holds the right codes: launch the
            # kernel once more into NaN, as the wrapper does, so that an element it never writes shows.
            import triton

            y = torch.full((N, K), float("nan"), dtype=torch.float16, device=device)
            n = packed.numel()
            checks.call_learner(kernel[(triton.cdiv(n, 1024),)], packed, y, n, BLOCK=1024, what=what)
        if torch.equal(y, expected):
            continue
        yc = y.float().cpu()
        qf = q.float()
        known = [
            ("swapped nibbles", "byte & 0xF is element 2i, byte >> 4 element 2i+1.",
             torch.stack([qf[:, 1::2], qf[:, 0::2]], dim=-1).reshape(N, K)),
            ("1024 not subtracted", "0x6400 | q reads as 1024 + q: subtract 1024.0 (exact in fp16).", qf + 1024),
        ]  # fmt: skip
        lines = []
        for name, explanation, out in known:
            if torch.equal(yc, out):
                lines.append(f"This matches a known mistake: {name}. {explanation}")
        bad = yc != qf
        nan = torch.isnan(yc)
        lines.append(f"{what}: {int(bad.sum())} of {N * K} codes differ from byte & 0xF / byte >> 4{ctx}")
        if nan.any():
            lines.append(f"{int(nan.sum())} are NaN: check the store mask and that every byte is read.")
        i = int(bad.flatten().nonzero()[0])
        lines.append(
            f"First at [{i // K}, {i % K}]: got {float(yc.flatten()[i])}, expected {float(qf.flatten()[i])}."
        )
        raise CheckFailed("\n".join(lines))
    if kernel is not None and "bitcast=True" not in _kernel_source(kernel):
        raise CheckFailed(
            f"{what}: the kernel never bitcasts. The trick is to OR each code into the bits of fp16 1024.0 "
            "(0x6400) and reinterpret them: `.to(tl.float16, bitcast=True)`, then subtract 1024."
        )
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Bonus: reading a GPTQ checkpoint (the layout: qmatmul/formats/w4a16.py)


def gptq_inputs(g: torch.Generator, hidden: bool):
    """(packed, scales, zeros, group_size, scale dtype): checkpoints in the course layout, zeros in 0..15, scales exact
    in the checkpoint's dtype. group_size -1 is one group per column (G = K)."""
    if not hidden:
        # N = 40 is ragged (not a multiple of 64); the second is symmetric: every zero 8, qzeros 0x77777777; the third
        # has one group per column (group_size -1) and bfloat16 scales, as AutoGPTQ stores a bf16 layer's.
        shapes = [(40, 64, 32, False, torch.float16), (24, 256, 128, True, torch.float16),
                  (16, 96, -1, False, torch.bfloat16)]  # fmt: skip
    else:
        shapes = []
        for G in (*GROUP_SIZES, -1):
            K = (G if G > 0 else 32) * int(torch.randint(1, 5, (1,), generator=g))
            N = GPTQ_PACK * int(torch.randint(1, 40, (1,), generator=g))
            while N in (
                K // 2,
                K // gptq_group_size(G, K),
            ):  # no square shapes: a transposed answer must show
                N += GPTQ_PACK
            dtype = (torch.float16, torch.bfloat16, torch.float32)[
                int(torch.randint(0, 3, (1,), generator=g))
            ]
            shapes.append((N, K, G, False, dtype))
    cases = []
    for N, K, G, symmetric, dtype in shapes:
        groups = K // gptq_group_size(G, K)
        q = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
        k = min(K, 64)
        q[0, :k] = torch.arange(k) % 16  # every code appears, in every position of a word
        if symmetric:
            z = torch.full((N, groups), 8, dtype=torch.uint8)
        else:
            z = torch.randint(0, 16, (N, groups), dtype=torch.uint8, generator=g)
            z.view(-1)[: min(16, z.numel())] = torch.arange(16, dtype=torch.uint8)[: min(16, z.numel())]
            z[7, 0] = (
                0  # zero 0 is stored as nibble 15, in the top nibble of a qzeros word: the word is negative
            )
            z[3, -1] = (
                0  # and in a lower nibble: (15 + 1) & 0xF = 0, where 15 + 1 = 16 is AutoGPTQ's Triton rule
            )
            if N > 15:
                z[15, 0] = 12  # a top nibble of 8..14 (stored 11): a negative word whose top field is no 15
        s = (torch.rand(N, groups, generator=g) * 0.05 + 1e-4).to(dtype).float()
        cases.append((pack(q), s, z, G, dtype))
    return cases


def _gptq_mistakes(packed, scales, zeros, qzeros, G):
    """(name, explanation, tensor name, wrong value) for the known mistakes of a GPTQ reader."""
    N, half = packed.shape
    K = 2 * half
    groups = K // gptq_group_size(G, K)
    q = unpack(packed)
    stored = (zeros.to(torch.int32) - 1) & 0xF  # [N, K/G]: the nibbles of qzeros
    rev_q = q.reshape(N, K // 8, 8).flip(-1).reshape(N, K)
    rev_s = stored.T.reshape(groups, N // 8, 8).flip(-1).reshape(groups, N).T
    # Arithmetic shift of the int32 without a mask on the top nibble: nibble 7 of a negative word comes out
    # negative (stored - 16). In the packed bytes the wrap to uint8 hides it; in the zeros it shows.
    top = (torch.arange(N) % 8 == 7)[:, None] & (stored >= 8)
    signed = torch.where(top, stored - 16, stored)
    # qzeros unpacked as if packed along K/G (qweight's axis): [8 K/G, N/8], then reshaped to fit.
    wrong_axis = unpack_int32(qzeros, dim=0)
    rule = ("The zero point is the stored nibble + 1 in 4 bits, (stored + 1) & 0xF: a stored 15 is a zero point of "
            "0 (AutoGPTQ's packer writes zero 0 as -1).")  # fmt: skip
    # Each zero-point mistake with the + 1 wrapped to 4 bits (the rule) and without (16 for a stored 15).
    out = [
        ("zero offset: forgot the +1 of GPTQ's stored zeros",
         "The v1 format (checkpoint_format \"gptq\") stores zero − 1: the zero point is (nibble + 1) & 0xF.",
         "zeros", [stored]),
        ("a stored zero of 15 read as 16 (the + 1 not kept to 4 bits)",
         f"{rule} 16 is the rule of AutoGPTQ's Triton kernel; the course reads as its torch path does.",
         "zeros", [stored + 1]),
        ("nibble order reversed within the int32",
         "Element 8i + j of a word is bits 4j..4j+3 (j = 0 in the lowest bits): shift right by 4·j.",
         "packed", [pack(rev_q)]),
        ("nibble order reversed within the int32",
         "Zero point 8c + j of a qzeros word is bits 4j..4j+3 (j = 0 in the lowest bits): shift right by 4·j.",
         "zeros", [gptq_zeros(rev_s), rev_s + 1]),
        ("sign: used arithmetic shift on int32 so code 8..15 became negative",
         "qzeros and qweight are signed int32 and `>>` copies the sign bit into the top: mask every field, "
         "top nibble included, with & 0xF (or reinterpret the bytes as uint8).",
         "zeros", [signed + 1]),
        ("unpacked qzeros along the wrong axis",
         "qweight packs 8 codes along K (its rows), qzeros 8 zero points along N (its columns): qzeros[g, c] "
         "holds the zeros of n = 8c … 8c + 7 in group g.",
         "zeros", [f(wrong_axis).reshape(groups, N).T.contiguous() for f in (gptq_zeros, lambda v: v + 1)]
         + [f(wrong_axis).T.reshape(N, groups).contiguous() for f in (gptq_zeros, lambda v: v + 1)]),
    ]  # fmt: skip
    return [(name, why, tensor, v.to(torch.uint8)) for name, why, tensor, values in out for v in values]


def _check_gptq_types(result, what, N, K, G, ctx):
    if not (isinstance(result, (tuple, list)) and len(result) == 3):
        raise CheckFailed(
            f"{what} must return a triple (packed, scales, zeros), got {type(result).__name__}{ctx}"
        )
    for name, t in zip(("packed", "scales", "zeros"), result, strict=True):
        if not isinstance(t, torch.Tensor):
            raise CheckFailed(f"{what} must return three tensors; {name} is a {type(t).__name__}{ctx}")
    packed, s, z = result
    groups = K // G
    if tuple(packed.shape) == (K // 8, N) and packed.dtype == torch.int32:
        raise CheckFailed(f"packed is qweight unchanged (int32 [K/8, N]): the course layout is uint8 [N, K/2] = "
                          f"[{N}, {K // 2}], two codes per byte along K.{ctx}")  # fmt: skip
    if tuple(packed.shape) == (K // 2, N) != (N, K // 2):
        raise CheckFailed(f"transposed: returned [K/2, N] = [{K // 2}, {N}] for packed. GPTQ stores [K/8, N] "
                          f"(in_features first); the course layout is [N, K/2] = [{N}, {K // 2}]: one row per "
                          f"output channel n.{ctx}")  # fmt: skip
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
        raise CheckFailed(f"packed must be uint8 of shape [N, K/2] = [{N}, {K // 2}], got {packed.dtype} "
                          f"{list(packed.shape)}{ctx}")  # fmt: skip
    for name, t in (("scales", s), ("zeros", z)):
        if tuple(t.shape) == (groups, N) != (N, groups):
            raise CheckFailed(f"transposed: returned [K/G, N] = [{groups}, {N}] for {name}, GPTQ's layout; the "
                              f"course layout is [N, K/G] = [{N}, {groups}].{ctx}")  # fmt: skip
    if tuple(z.shape) in ((N // 8, 8 * groups), (8 * groups, N // 8)) and tuple(z.shape) != (N, groups):
        raise CheckFailed(f"zeros has shape {list(z.shape)}: unpacked qzeros along the wrong axis. qzeros "
                          f"[K/G, N/8] packs 8 zero points per int32 along N; zeros must be [N, K/G] = "
                          f"[{N}, {groups}].{ctx}")  # fmt: skip
    if tuple(s.shape) != (N, groups):
        raise CheckFailed(f"scales must have shape [N, K/G] = [{N}, {groups}], got {list(s.shape)}{ctx}")
    if s.dtype != torch.float32:
        raise CheckFailed(f"scales must be float32, got {s.dtype}: .float() converts GPTQ's fp16 (or bf16) scales "
                          f"exactly (every fp16 and bf16 value is a float32 value).{ctx}")  # fmt: skip
    if tuple(z.shape) != (N, groups) or z.dtype != torch.uint8:
        raise CheckFailed(f"zeros must be uint8 of shape [N, K/G] = [{N}, {groups}], got {z.dtype} "
                          f"{list(z.shape)}{ctx}")  # fmt: skip
    for name, t in (("packed", packed), ("scales", s), ("zeros", z)):
        if not t.is_contiguous():
            raise CheckFailed(f"{name} is not contiguous (a transposed view?): w4a16_matmul's prepare() refuses "
                              f"it. Call .contiguous().{ctx}")  # fmt: skip
    return packed, s, z


def check_from_gptq(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus: fn(qweight, qzeros, scales, group_size) -> (packed, scales, zeros) in the course layout, bit for bit,
    reading GPTQ's v1 format (zeros stored minus one, in 4 bits). Ragged N (a multiple of 8), G = 32/64/128 and -1
    (one group per column), scales in float16, bfloat16 or float32."""
    seed, g, _ = common.cell(seed)
    what = "from_gptq"
    for packed, s, z, group_size, dtype in gptq_inputs(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        G = gptq_group_size(group_size, K)
        qweight, qzeros, s16 = to_gptq(packed, s, z, group_size, scale_dtype=dtype)
        ctx = (
            f" (qweight [{K // 8}, {N}], qzeros [{K // G}, {N // 8}], {str(dtype).removeprefix('torch.')} scales "
            f"[{K // G}, {N}], group_size={group_size})"
        )
        inputs = dict(qweight=qweight, qzeros=qzeros, scales=s16)
        before = {k: v.clone() for k, v in inputs.items()}
        result = checks.call_learner(fn, qweight, qzeros, s16, group_size, what=what)
        for name, t in inputs.items():
            if not torch.equal(t, before[name]):
                raise CheckFailed(
                    f"{what} modified its input {name} in place; leave the checkpoint untouched.{ctx}"
                )
        got = dict(
            zip(("packed", "scales", "zeros"), _check_gptq_types(result, what, N, K, G, ctx), strict=True)
        )
        got = {k: v.cpu() for k, v in got.items()}
        expected = dict(packed=packed, scales=s, zeros=z)
        wrong = [k for k in expected if not torch.equal(got[k], expected[k])]
        if wrong:
            lines = [f"{what}: {' and '.join(wrong)} differ{'s' if len(wrong) == 1 else ''} from the course "
                     f"layout of the same weight{ctx}"]  # fmt: skip
            for name, explanation, tensor, value in _gptq_mistakes(packed, s, z, qzeros, G):
                line = f"This matches a known mistake: {name}. {explanation}"
                if tensor in wrong and torch.equal(got[tensor], value) and line not in lines:
                    lines.append(line)
            for name in wrong:
                bad = (got[name] != expected[name]).nonzero().tolist()
                r, c = bad[0]
                fmt = (lambda v: f"{float(v):.8g}") if name == "scales" else (lambda v: f"{int(v)}")
                lines.append(f"{name}: {len(bad)} of {expected[name].numel()} differ, first at [{r}, {c}]: got "
                             f"{fmt(got[name][r, c])}, expected {fmt(expected[name][r, c])}")  # fmt: skip
            deq = dequantize(got["packed"], got["scales"], got["zeros"], G)
            n_bad = int((deq != gptq_dequantize(qweight, qzeros, s16, group_size)).sum())
            lines.append(f"Dequantized, {n_bad} of {N * K} weights differ from GPTQ's (q − ((stored zero + 1) & 0xF)) "
                         "· scale.")  # fmt: skip
            raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs, the dequantized weights equal "
                  f"GPTQ's (seed {seed})")  # fmt: skip
