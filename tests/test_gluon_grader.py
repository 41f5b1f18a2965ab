"""Gluon kernels in the grader: a `@gluon.jit` kernel of the notebook's own counts as "a kernel of your own", as a
`@triton.jit` one does, and the defences hold for it.

Static (qmatmul/grader/static): Source.jit reads a decorator through the cells' imports (a path under `triton` ending
in `jit`), so Gluon's decorator under any spelling makes a kernel and a look-alike does not; a wrapper that computes
on the host, or hands the work to the course's expert Gluon kernel or its repacking, earns nothing.
Launches and compiles (qmatmul/grader/kernels.py): a Gluon launch goes through JITFunction.run, where the worker
records it; the compile worker (a process of its own, without TRITON_INTERPRET: tests/test_mma_decode.py says why)
compiles it through Gluon's front end for sm_90, rejects what is not Gluon and sees whether it writes memory. Gluon
has no interpreter, so nothing here runs a Gluon kernel: on a CPU each launch fails after it is recorded."""

import importlib.util
import sys

import pytest
import torch

from qmatmul import w4a16
from qmatmul.checks import CheckFailed
from qmatmul.grader import kernels, notebook, static
from qmatmul.grader.remote import RemoteFunction, Worker
from qmatmul.grader.static.own_kernel import NO_KERNEL
from qmatmul.kernels import mma_decode

pytestmark = pytest.mark.skipif(mma_decode.gluon is None, reason="triton without Gluon")

DEV = "cuda" if torch.cuda.is_available() else "cpu"
IMPORTS = (
    "import torch\nimport triton\nimport triton.language as tl\nfrom triton.experimental import gluon\n"
    "from triton.experimental.gluon import language as gl\n"
)
KERNEL = """
@gluon.jit
def scale_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < N
    gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
"""
WRAPPER = """
def scale(x, out):
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out
"""


def parse(code: str, imports: str = IMPORTS) -> static.Source:
    return static.parse([("imports", imports, False), ("ex1", code, True)])


def problems(code: str, name: str = "scale", imports: str = IMPORTS) -> list[str]:
    return static.own_kernel_problems(parse(code, imports), name)


# ------------------------------------------------------------------------------------------------------------------
# Static: which names are kernels, and what a wrapper does with them

KERNEL_FORMS = {  # the Gluon decorator, as a learner may spell it: (extra imports, the kernel's definition)
    "@gluon.jit": ("", KERNEL),
    "@gluon.jit(...)": ("", KERNEL.replace("@gluon.jit", "@gluon.jit(do_not_specialize=['N'])")),
    "imported under another name": (
        "from triton.experimental.gluon import jit as gjit\n",
        KERNEL.replace("@gluon.jit", "@gjit"),
    ),
    "the module under another name": (
        "import triton.experimental.gluon as tg\n",
        KERNEL.replace("@gluon.jit", "@tg.jit"),
    ),
    "its full path": (
        "import triton.experimental.gluon\n",
        KERNEL.replace("@gluon.jit", "@triton.experimental.gluon.jit"),
    ),
    "gluon.jit(body)": (
        "",
        KERNEL.replace("@gluon.jit\ndef scale_kernel(", "def _body(") + "\nscale_kernel = gluon.jit(_body)\n",
    ),
    "imported where Gluon may be missing": (
        "try:\n    from triton.experimental import gluon\nexcept ImportError:\n    gluon = None\n",
        KERNEL,
    ),
}


@pytest.mark.parametrize("form", KERNEL_FORMS)
def test_a_gluon_kernel_is_a_kernel_of_your_own(form):
    imports, kernel = KERNEL_FORMS[form]
    src = parse(kernel + WRAPPER, IMPORTS + imports)
    assert "scale_kernel" in src.jit
    assert static.own_kernel_problems(src, "scale") == []


def test_a_gluon_kernel_launched_through_a_helper_is_a_launch():
    helper = "\ndef _launch(kernel, grid, *args, **meta):\n    kernel[grid](*args, **meta)\n"
    wrapper = "\ndef scale(x, out):\n    _launch(scale_kernel, (1,), x, out, x.numel(), BLOCK=128)\n    return out\n"
    assert problems(KERNEL + helper + wrapper) == []


LOOK_ALIKES = {  # decorators named like Gluon's that make no kernel: read through the imports, they are not triton's
    "a jit of its own": "def jit(f):\n    return f\n\n" + KERNEL.replace("@gluon.jit", "@jit"),
    "a gluon of its own": ("class gluon:\n    @staticmethod\n    def jit(f):\n        return f\n\n" + KERNEL),
    "a gluon assigned": "gluon = type('G', (), {'jit': staticmethod(lambda f: f)})\n" + KERNEL,
    "a constexpr_function": KERNEL.replace("@gluon.jit", "@gluon.constexpr_function"),
    "triton's name for something else": KERNEL.replace("@gluon.jit", "@tj"),
}
LOOK_ALIKE_IMPORTS = {
    "triton's name for something else": "from triton.experimental.gluon import constexpr_function as tj\n"
}


@pytest.mark.parametrize("how", LOOK_ALIKES)
def test_what_only_looks_like_gluons_decorator_makes_no_kernel(how):
    src = parse(LOOK_ALIKES[how] + WRAPPER, IMPORTS + LOOK_ALIKE_IMPORTS.get(how, ""))
    assert "scale_kernel" not in src.jit
    got = static.own_kernel_problems(src, "scale")
    assert got and got[0] == f"scale {NO_KERNEL}", got
    assert "@gluon.jit" in NO_KERNEL and "@triton.jit" in NO_KERNEL


HOST_WORK = {  # (a) the Gluon kernel is launched, the answer computed by PyTorch on the host
    "@": ("    out.copy_(x @ w.T)\n", "`@`"),
    "torch.matmul": ("    out.copy_(torch.matmul(x, w.T))\n", "(.matmul)"),
    "F.linear": ("    out.copy_(torch.nn.functional.linear(x, w))\n", "(.linear)"),
}


@pytest.mark.parametrize("how", HOST_WORK)
def test_a_gluon_launch_beside_host_arithmetic_earns_nothing(how):
    line, said = HOST_WORK[how]
    wrapper = (
        "\ndef scale(x, w, out):\n    scale_kernel[(1,)](x, out, x.numel(), BLOCK=128)\n"
        + line
        + "    return out\n"
    )
    got = problems(KERNEL + wrapper)
    assert got and all("launches no" not in p for p in got), got  # it launches its kernel ...
    assert any("on the host" in p and said in p for p in got), got  # ... and computes on the host


def _every_chapters_given() -> dict:
    """What the course's chapters give, all of them together, the Gluon chapter's (qmatmul/layouts.py, being
    written) among them where it is there: none gives a module of qmatmul.kernels, or mma_decode's or mma_repack's
    decode and repacking under any name."""
    import importlib

    from qmatmul import capstone, fp8, mxfp4, nvfp4, roofline, w8a16

    chapters = [w8a16, w4a16, fp8, mxfp4, nvfp4, roofline, capstone]
    try:
        chapters.append(importlib.import_module("qmatmul.layouts"))
    except ImportError:
        pass
    given = static.given({m.__name__: m for m in chapters})
    assert given and not any(module.startswith("qmatmul.kernels") for module in given), given
    answers = {
        "repack",
        "w4a16_decode",
        "decode",
        "unpack_like_kernel",
        "mma_decode",
        "mma_repack",
        "kernels",
    }
    assert not any(names & answers for module, names in given.items() if module != "qmatmul.capstone"), given
    return given


EXPERT = {  # (b) the course's expert Gluon kernel, called or launched instead of one's own
    "imported and called": (
        "from qmatmul.kernels.mma_decode import w4a16_decode\n\n"
        "def f(x, packed, s, z, G, out=None):\n    return w4a16_decode(x, packed, s, z, G, out)\n"
    ),
    "its decode, through the module": (
        "from qmatmul.kernels import mma_decode\n\n"
        "def f(x, words, s, z, G, N):\n    return mma_decode.decode(x, words, s, z, G, N)\n"
    ),
    "its kernel launched": (
        "from qmatmul.kernels import mma_decode\n\n"
        "def f(x, words, s, z, y):\n    mma_decode._w4_mma_kernel[(1, 1)](x, words, s, z, y)\n    return y\n"
    ),
    "the package's path": (
        "import qmatmul\n\ndef f(x, packed, s, z, G):\n"
        "    return qmatmul.kernels.mma_decode.w4a16_decode(x, packed, s, z, G)\n"
    ),
    "beside a launch of one's own": (
        KERNEL + "\nfrom qmatmul.kernels.mma_decode import decode\n\n"
        "def f(x, words, s, z, G, N, out):\n    scale_kernel[(1,)](x, out, 0, BLOCK=128)\n"
        "    return decode(x, words, s, z, G, N, out=out)\n"
    ),
}


@pytest.mark.parametrize("how", EXPERT)
def test_the_courses_expert_gluon_kernel_is_not_the_learners(how):
    """course_problems (the course package beyond the chapter's GIVEN) refuses every route; own_kernel_problems also
    says so wherever the wrapper launches nothing of its own."""
    src = parse(EXPERT[how])
    got = static.course_problems(src, "f", _every_chapters_given(), {"torch", "triton", "tl", "gluon", "gl"})
    assert got and all(
        "qmatmul.kernels.mma_decode" in p and "the chapter does not give you" in p for p in got
    ), got
    own = static.own_kernel_problems(src, "f")
    if how == "beside a launch of one's own":
        assert own == []  # it launches a kernel of its own: the course use is what refuses it
    else:
        assert own and own[0] == f"f {NO_KERNEL}", own


REPACK = {  # (c) the weights' repacking into the MMA's fragments, which the Gluon chapter's first exercise writes
    "from mma_repack": "from qmatmul.kernels.mma_repack import repack\n\ndef f(packed):\n    return repack(packed)\n",
    "re-exported by mma_decode": (
        "from qmatmul.kernels.mma_decode import repack as r\n\ndef f(packed):\n    return r(packed)\n"
    ),
    "the module": "from qmatmul.kernels import mma_repack\n\ndef f(packed):\n    return mma_repack.repack(packed)\n",
    "its CPU model": (
        "from qmatmul.kernels.mma_repack import unpack_like_kernel\n\ndef f(words, n):\n"
        "    return unpack_like_kernel(words, n)\n"
    ),
    "a default argument": (
        "from qmatmul.kernels import mma_repack\n\ndef f(packed, _r=mma_repack.repack):\n    return _r(packed)\n"
    ),
}


@pytest.mark.parametrize("how", REPACK)
def test_the_courses_repack_does_not_do_the_learners_repack(how):
    src = parse(REPACK[how])
    got = static.course_problems(src, "f", _every_chapters_given(), {"torch", "triton", "tl", "gluon", "gl"})
    assert got and all("qmatmul.kernels.mma_" in p and "the chapter does not give you" in p for p in got), got


def test_the_courses_repack_reached_by_a_string_is_seen_when_it_runs():
    """The route a reading of the source cannot see (importlib by name): the worker observes the course's code
    running during the call (qmatmul/grader/reach.py) and the call earns nothing: the import's own code when the
    module is new to the process, else the function called."""
    cell = (
        "import importlib\n\ndef f(packed):\n"
        "    return importlib.import_module('qmatmul.kernels.' + 'mma_repack').repack(packed)\n"
    )
    packed = torch.randint(0, 256, (16, 32), dtype=torch.uint8)
    for imported, seen in (("", r"qmatmul\.kernels\.mma_repack\.<module>"),
                           ("import qmatmul.kernels.mma_repack\n", r"qmatmul\.kernels\.mma_repack\.repack`")):  # fmt: skip
        program = [("setup", notebook.QUIET_START), ("imports", "import torch\n" + imported), ("ex1", cell)]
        w = Worker(program, timeout=60)
        try:
            with pytest.raises(CheckFailed, match=r"ran the course's own .*" + seen):
                RemoteFunction(w, "f")(packed)
        finally:
            w.close()


# ------------------------------------------------------------------------------------------------------------------
# Launches and compiles

CELLS = (
    KERNEL
    + """
@gluon.jit
def atomic_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.atomic_add(out_ptr + offs, gl.load(x_ptr + offs, mask=offs < N), mask=offs < N)

def _copy(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([2], [32], [4], [0]))
    gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=offs < N), mask=offs < N)

copy_kernel = gluon.jit(_copy)

@gluon.jit
def layout_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr, layout: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=offs < N), mask=offs < N)

@gluon.jit
def nothing_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    smem = gl.allocate_shared_memory(gl.float32, [BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    smem.store(gl.load(x_ptr + offs, mask=offs < N))  # shared memory: gone when the kernel ends

def twice(v):
    return v * 2

@gluon.jit
def python_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(out_ptr + offs, twice(gl.load(x_ptr + offs, mask=offs < N)), mask=offs < N)

@gluon.jit
def torch_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(out_ptr + offs, torch.relu(gl.load(x_ptr + offs, mask=offs < N)), mask=offs < N)

@gluon.jit
def warps_kernel(x_ptr, out_ptr, N, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [8], [0]))
    gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=offs < N), mask=offs < N)
"""
)
PROGRAM = [
    ("setup", notebook.QUIET_START),
    ("imports", IMPORTS),
    ("ex1", CELLS + WRAPPER),
    ("course", "from qmatmul.kernels.mma_decode import _w4_mma_kernel\n"),  # to compile the expert kernel too
]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """The cells' kernels as a module of this process (Triton reads a kernel's source from its file), to launch here."""
    path = tmp_path_factory.mktemp("gluon") / "gluon_cells.py"
    path.write_text(IMPORTS + CELLS)
    spec = importlib.util.spec_from_file_location("gluon_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gluon_cells", None)


@pytest.fixture(scope="module")
def grader():
    """The trusted side's Worker of PROGRAM: its compile worker (started by the first proof) compiles the launches.
    The worker itself never starts: nothing here runs."""
    w = Worker(PROGRAM, timeout=120)
    yield w
    w.close()


def record(kernel, grid, *args, **kwargs) -> dict:
    """The launch the worker records (kernels.observe_launches). Without a GPU the launch then fails: Gluon has no
    interpreter, and there is no driver."""
    with kernels.observe_launches() as launches:
        try:
            kernel[grid](*args, **kwargs)
        except Exception:  # noqa: BLE001 - recorded before Triton looks for a GPU
            pass
    assert len(launches) == 1, launches
    return launches[0]


def compiled(grader: Worker, launch: dict) -> dict:
    """The compile worker's reply to one launch (kernels.compile_kernel, in a process without TRITON_INTERPRET)."""
    if grader.compiler is None:
        grader._compile(launch, "starting the compile worker")  # as the first proof starts it
    reply = grader.compiler._exchange({"op": "compile", "launch": launch}, "compile")
    return {k: v for k, v in reply.items() if k != "nonce"}


def operands(n: int = 100):
    return torch.ones(n, device=DEV), torch.zeros(n, device=DEV)


def test_a_gluon_launch_is_recorded_where_tritons_are(cells):
    """GluonJITFunction keeps JITFunction.run, through which `kernel[grid](...)` goes (triton 3.6 and 3.9): the
    wrapper kernels.install puts there sees a Gluon launch as it sees a Triton one."""
    from triton.experimental.gluon._runtime import GluonJITFunction
    from triton.runtime.jit import JITFunction

    assert isinstance(cells.scale_kernel, GluonJITFunction) and cells.scale_kernel.is_gluon()
    assert GluonJITFunction.run is JITFunction.run  # the wrapped run
    launch = record(cells.scale_kernel, (1,), *operands(), 100, BLOCK=128, num_warps=4)
    assert launch["name"] == "scale_kernel" and launch["file"].endswith("gluon_cells.py")
    assert launch["args"] == {"x_ptr": {"tensor": "float32"}, "out_ptr": {"tensor": "float32"},
                              "N": {"value": 100}, "BLOCK": {"value": 128}}  # fmt: skip
    assert launch["options"] == {"num_warps": 4} and launch["course"] == []


def test_an_honest_gluon_kernel_compiles_and_stores(grader, cells):
    """(e) Through Gluon's front end for sm_90 (GluonASTSource: Triton's would refuse every layout), with a layout
    handed in as a constexpr rebuilt on the compile side, and `kernel = gluon.jit(body)`; a store, an atomic each
    write memory."""
    x, out = operands()
    layout = cells.gl.BlockedLayout([1, 1], [32, 1], [4, 1], [0, 1])
    for launch in (
        record(cells.scale_kernel, (1,), x, out, 100, BLOCK=128),
        record(cells.atomic_kernel, (1,), x, out, 100, BLOCK=128),
        record(cells.copy_kernel, (1,), x, out, 100, BLOCK=256),  # launched as `_copy`: found by its function
        record(cells.layout_kernel, (1,), x, out, 100, BLOCK=128, layout=layout),
    ):
        assert compiled(grader, launch) == {"status": "ok", "stores": True}, launch
        grader.prove_kernels([launch], launch["name"])  # the grader's verdict: nothing to say


def test_a_gluon_kernel_that_stores_nothing_computed_nothing(grader, cells):
    """(e) Loads and a shared-memory store: nothing reaches global memory."""
    launch = record(cells.nothing_kernel, (1,), *operands(), 100, BLOCK=128)
    assert compiled(grader, launch) == {"status": "ok", "stores": False}
    with pytest.raises(CheckFailed, match="your kernel `nothing_kernel` stores nothing"):
        grader.prove_kernels([launch], "nothing")


@pytest.mark.parametrize(
    "name, said",
    [
        ("python_kernel", "Unsupported function referenced: <function twice"),  # a plain Python function
        # torch: triton's frontend refuses the call, or (seen in some orders of the suite under -n 2, the compile
        # worker's state differing) calls it with a triton tensor, which torch refuses; rejected with the reason
        (
            "torch_kernel",
            (
                "Unsupported function referenced: <built-in method relu",
                "relu(): argument 'input' (position 1) must be Tensor, not tensor",
            ),
        ),
        (
            "warps_kernel",
            "Layout has 8 warps per CTA, but the context requires 4",
        ),  # MLIR's verifier, from stderr
    ],
)
def test_what_gluon_cannot_compile_is_rejected_with_the_compilers_reason(grader, cells, name, said):
    """(d) The compile worker says why (for the verifier's refusals, what it wrote to stderr: the exception says only
    "error encountered during parsing"); the grader refuses the kernel with it."""
    launch = record(getattr(cells, name), (1,), *operands(), 100, BLOCK=128)
    reply = compiled(grader, launch)
    saids = (said,) if isinstance(said, str) else said
    assert reply["status"] == "rejected" and any(one in reply["message"] for one in saids), reply
    with pytest.raises(CheckFailed, match=f"your kernel `{name}` is not one Triton's compiler accepts"):
        grader.prove_kernels([launch], name)


def test_a_forged_constexpr_is_no_object_of_triton(grader):
    """A layout's class is looked up only in triton's modules: a launch record naming another is rejected."""
    launch = {"name": "layout_kernel", "file": "", "course": [], "options": {},
              "args": {"x_ptr": {"tensor": "float32"}, "out_ptr": {"tensor": "float32"}, "N": {"value": 1},
                       "BLOCK": {"value": 128},
                       "layout": {"triton_object": {"module": "os", "class": "system", "fields": {}}}}}  # fmt: skip
    reply = compiled(grader, launch)
    assert reply["status"] == "rejected" and "none of triton's" in reply["message"], reply


def _expert_launch() -> dict:
    x = torch.randn(1, 128, dtype=torch.bfloat16, device=DEV)
    packed = torch.randint(0, 256, (16, 64), dtype=torch.uint8, device=DEV)
    s, z = torch.ones(16, 2, device=DEV), torch.zeros(16, 2, dtype=torch.uint8, device=DEV)
    with kernels.observe_launches() as launches:
        try:
            mma_decode.w4a16_decode(x, packed, s, z, 64)
        except Exception:  # noqa: BLE001 - recorded before Triton looks for a GPU
            pass
    assert [launch["name"] for launch in launches] == ["_w4_mma_kernel"], launches
    return launches[0]


def test_the_courses_expert_gluon_kernel_launched_is_the_courses(grader):
    """(b) at run time: a launch of the expert kernel (however the learner's code reached it) lives in the course
    package, which no chapter's GIVEN hands out: refused before any compile. Compiled, it is a Gluon kernel like any
    (Gluon's front end takes the course's own most intricate one)."""
    launch = _expert_launch()
    assert launch["file"].endswith("qmatmul/kernels/mma_decode.py")
    assert "qmatmul.kernels.mma_decode.w4a16_decode" in launch["course"]
    with pytest.raises(CheckFailed, match="launched the course's own kernel `_w4_mma_kernel`"):
        grader.prove_kernels([launch], "decode")
    given = Worker(PROGRAM, release={"w4a16": w4a16}, timeout=60)  # W4A16 gives its scaffolding, not this
    try:
        with pytest.raises(CheckFailed, match="launched the course's own kernel `_w4_mma_kernel`"):
            given.prove_kernels([launch], "decode")
    finally:
        given.close()
    assert compiled(grader, launch) == {"status": "ok", "stores": True}


IR = """module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc1))) attributes {noinline = false} {
    %0 = tt.load %x_ptr : !tt.ptr<f32> loc(#loc2)
    STORE
    tt.return loc(#loc1)
  } loc(#loc1)
} loc(#loc)
#loc1 = loc("/tmp/tt.store.py":1:1)
"""


@pytest.mark.parametrize(
    "op, writes",
    [
        ("tt.store %x_ptr, %0 : !tt.ptr<f32> loc(#loc3)", True),
        ("%1 = tt.atomic_rmw fadd, acq_rel, gpu, %x_ptr, %0, %true : (!tt.ptr<f32>, f32, i1) -> f32", True),
        ('"ttng.async_tma_copy_local_to_global"(%d, %c, %s) : () -> ()', True),
        ("ttg.local_store %0, %smem : tensor<128xf32> -> !ttg.memdesc<128xf32>", False),  # shared memory
        ('tt.print " tt.store " {hex = false, isSigned = array<i32: 1>} : %0 : f32', False),  # a string
        ("", False),
    ],
)
def test_stores_reads_the_ops_not_the_strings(op, writes):
    """kernels.stores: an op that writes global memory, where the IR states an op; never a file name or message."""
    assert kernels.stores(IR.replace("STORE", op)) is writes


def test_what_the_layouts_chapter_gives_is_read_as_functions_only():
    """reach.given_functions over the layouts chapter's GIVEN, which holds NO_GLUON (what the notebook binds to `gluon`
    without Gluon: an object that answers every attribute with itself). On the H200 it was read as a function whose
    file name was NO_GLUON again, and the grader's TypeError cost the kernel cell its points (2026-12-05); a CPU never
    got there (the kernel cells skip)."""
    from qmatmul import layouts
    from qmatmul.grader import reach

    got = reach.given_functions(layouts.GIVEN)
    assert "qmatmul.scaffold.layouts.prepare" in got
    assert all(name.startswith("qmatmul.") for name in got)
