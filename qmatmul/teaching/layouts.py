"""Chapter "layouts", the teaching cells: the instruction budget a 4-bit decode has at the copy bandwidth, and
`mma.sync.m16n8k16`'s A fragment drawn as the tile the learner's repack lays out."""

from __future__ import annotations

import contextlib
import io
import os

from qmatmul import checks, environment
from qmatmul.kernels.mma_repack import SLOTS, tile_index
from qmatmul.teaching import recorded

__all__ = [
    "H200_SMS", "LANES_PER_CLOCK", "CLOCK_HZ", "budget", "explain_budget", "fragment_table", "explain_fragment",
    "compiles", "instructions_per_weight", "claims",
]  # fmt: skip

# The H200 (sm_90): streaming multiprocessors, instructions an SM issues a clock (4 schedulers, one warp
# instruction each, i.e. 4 x 32 lanes' worth), boost clock. NVIDIA's H200 / H100 SXM data sheets.
H200_SMS, LANES_PER_CLOCK, CLOCK_HZ = 132, 128, 1.98e9


def budget(bits_per_weight: float = 4.25) -> dict:
    """Instructions a lane may issue per weight when the weights stream at the H200's recorded copy bandwidth.

    The copy bandwidth counts bytes read and written; a decode reads. bits_per_weight: 4 bits a code and a 16-bit
    scale and 8-bit zero per 128 (W4A16, G = 128) is 4.19; 4.25 rounds in MXFP4's scales."""
    c = recorded.ceilings()
    weights_per_s = c["copy_bandwidth"] * 8 / bits_per_weight
    per_weight = H200_SMS * LANES_PER_CLOCK * CLOCK_HZ / weights_per_s
    return {"weights_per_s": weights_per_s, "per_weight": per_weight, "gpu": c["gpu"], "date": c["date"]}


def explain_budget() -> None:
    b = budget()
    print(f"{b['gpu']}, copy bandwidth as recorded {b['date']}: 4-bit weights arrive at "
          f"{b['weights_per_s'] / 1e12:.1f} x 10^12 a second.")  # fmt: skip
    print(f"{H200_SMS} SMs x {LANES_PER_CLOCK} lanes x {CLOCK_HZ / 1e9:.2f} GHz can issue about "
          f"{b['per_weight']:.1f} instructions per weight in that time, loads, address arithmetic and the "
          "loop included.")  # fmt: skip
    print(
        "A kernel whose loop issues more per weight cannot reach the copy bandwidth, however it is tuned: at n "
        f"instructions a weight its ceiling is about {b['per_weight']:.1f} / n of the copy bandwidth."
    )


def fragment_table() -> list[list[str]]:
    """The 16 x 16 A tile of mma.m16n8k16: which lane holds each element and as which of its 8 values ("l:v")."""
    rows, cols = tile_index()
    table = [["" for _ in range(16)] for _ in range(16)]
    for lane in range(32):
        for v in range(8):
            table[int(rows[lane, v])][int(cols[lane, v])] = f"{lane}:{v}"
    return table


def explain_fragment() -> None:
    """Print the tile, lane:value in each element, and where value v sits in a lane's word after the repack."""
    print("mma.sync.m16n8k16, operand A (16 x 16 bf16): element (row, column) is held by lane:value")
    print("      " + "".join(f"{c:>6}" for c in range(16)))
    for r, row in enumerate(fragment_table()):
        print(f"{r:>4}  " + "".join(f"{e:>6}" for e in row))
    print("\nIn the repacked word of a lane, value v sits in nibble SLOTS[v]:",
          ", ".join(f"v{v}->n{s}" for v, s in enumerate(SLOTS)))  # fmt: skip
    print(
        "so one shift by 4 j and one mask give nibbles j and j + 4: values 2 j and 2 j + 1, one register pair."
    )


# The kernel's pointer arguments in a bf16 call; every other non-constexpr argument is an int32.
_POINTERS = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*fp32", "z_ptr": "*u8", "y_ptr": "*bf16", "ws_ptr": "*fp32",
             "cnt_ptr": "*i32"}  # fmt: skip


_HEADER = (
    "from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n"
    "from qmatmul import layouts\n"
)

_COMPILE = """
import sys, time, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
sys.path.insert(0, sys.argv[1])
import learner_kernel as m
kernel, arch, pointers = getattr(m, sys.argv[2]), int(sys.argv[3]), eval(sys.argv[4])
for bm, shared in ((8, False), (16, True)):
    constants = {"GROUP": 128, "R": 1, "BM": bm, "X_SHARED": shared}
    signature = {p.name: "constexpr" if p.is_constexpr else pointers.get(p.name, "i32") for p in kernel.params}
    where = f"BM = {bm}, x {'through shared memory' if shared else 'per lane'}"
    t0 = time.perf_counter()
    try:
        triton.compile(GluonASTSource(kernel, signature, {k: v for k, v in constants.items() if k in signature}),
                       target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})
    except Exception as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        print(f"{kernel.__name__} does not compile for sm_{arch} ({where}):")
        print("\\n".join(lines[-14:]))
        sys.exit(3)
    print(f"{kernel.__name__} compiles for sm_{arch} with {where}, every assert_trivial conversion proven "
          f"({time.perf_counter() - t0:.0f} s)")
"""


def compiles(kernel, arch: int = 90) -> bool:
    """Compile the notebook's Gluon decode kernel for sm_<arch> as its wrapper launches it at M = 1 (each lane reads
    its x) and M = 16 (x through shared memory), on any machine with Gluon: its `assert_trivial` conversions are
    proven or refused by the compiler. Feedback for the learner, never a grade (the grade runs the kernel).

    It compiles in a new process: where the notebook chose Triton's interpreter, triton's own helpers (tl.cdiv, ...)
    are interpreter functions in this one and no kernel compiles. That process gets the source of every Gluon
    function the notebook defines (the kernel and the helpers it calls), under the chapter's imports."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from qmatmul.kernels import mma_decode

    if environment.autograding():
        return False
    if mma_decode.gluon is None:
        import triton

        print(f"Gluon is not in this triton ({triton.__version__}): the kernel cannot be compiled here.")
        return False
    gluon_fn = type(kernel)
    sources = ["@gluon.jit\n" + v.src.lstrip() for v in kernel.fn.__globals__.values() if isinstance(v, gluon_fn) and v.fn.__module__ ==
               kernel.fn.__module__]  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="qmatmul-compile-"))
    (folder / "learner_kernel.py").write_text(_HEADER + "\n\n" + "\n\n".join(sources) + "\n")
    from qmatmul.teaching.sass import compile_env

    env = compile_env()
    run = subprocess.run([sys.executable, "-c", _COMPILE, str(folder), kernel.__name__, str(arch), repr(_POINTERS)],
                         env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    print(run.stdout.rstrip() or run.stderr[-3000:])
    return run.returncode == 0


def instructions_per_weight(M: int = 1, arch: int = 90) -> list[dict]:
    """Measure, on any machine (a compile, not a run), what the main loop of chapter 2's W4A16 decode issues per
    weight, yours where ../w4a16/w4a16.ipynb beside this notebook has it finished (else the course's solution), against
    the course's Gluon decode: both as they launch at M rows of 28672 x 8192 on an H200, compiled for sm_<arch> with
    triton's own ptxas and read back with its cuobjdump (qmatmul/teaching/sass.py). Prints a table; returns its rows.

    ceiling = the budget of explain_budget() / instructions per weight, at most 100 %: a bound on the fraction of the
    copy bandwidth the loop lets the kernel reach, not a prediction. It compiles in a new process without the
    interpreter (see `compiles`): about 10 s on two CPU cores, triton's cache empty."""
    from qmatmul.teaching import sass

    if environment.autograding():
        return []
    rows = sass.measure_decodes(M, arch)
    per = budget()["per_weight"]
    print(f"Compiled for sm_{arch} (no kernel ran), each as it launches at M = {M}, 28672 x 8192:")
    for r in rows:
        print(f"  {r['label']}: {r['source']}")
    w = max(len(r["label"]) for r in rows)
    print(f"{'kernel':{w}} {'SASS in loop':>12} {'weights/thread':>14} {'per weight':>10} {'ceiling':>8}")
    for r in rows:
        r["ceiling"] = min(1.0, per / r["per_weight"])
        print(
            f"{r['label']:{w}} {r['loop']:12} {r['weights']:14.0f} {r['per_weight']:10.2f} {r['ceiling']:8.0%}"
        )
    print(f"(the loop's instructions a thread issues / the weights it decodes an iteration; ceiling = {per:.1f} / that, "
          "the share of the copy bandwidth the issue rate allows)")  # fmt: skip
    return rows


def claims() -> dict[str, float]:
    """The numbers the chapter's text quotes (`<!-- claim: layouts | key -->`, tests/test_text_claims.py), computed:
    the issue budget at the recorded copy bandwidth, and the SASS instructions per weight of chapter 2's solution
    decode and of the course's Gluon decode at M = 1 on sm_90 (a compile here, about 10 s)."""
    from qmatmul.teaching import sass

    old = os.environ.pop(checks.AUTOGRADE_ENV, None)  # a claim is computed, never skipped
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            rows = sass.measure_decodes(1, 90)
    finally:
        if old is not None:
            os.environ[checks.AUTOGRADE_ENV] = old
    readable, gluon = rows[0], rows[-1]
    return {
        "budget": budget()["per_weight"],
        "readable": readable["per_weight"],
        "gluon": gluon["per_weight"],
    }
