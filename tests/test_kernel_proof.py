""" "A kernel of your own" is proven by Triton's compiler: every kernel a graded call launches is observed where it
is launched and compiled for a GPU by Triton's front end, in a process of its own (qmatmul/grader/kernels.py).
Each rejected form below passed the static reading before; each honest form passes."""

import pytest
import torch

from qmatmul.checks import CheckFailed, run_audited
from qmatmul.grader import notebook
from qmatmul.grader.remote import RemoteFunction, Worker

# Off a GPU the worker runs kernels in the interpreter on CPU tensors; on one it compiles them for the GPU.
DEV = "cuda" if torch.cuda.is_available() else "cpu"

CELLS = """
import numpy as np
from qmatmul import w8a16

@triton.jit
def double_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < N) * 2, mask=offs < N)

def honest(x, out):
    double_kernel[(1,)](x, out, x.numel(), BLOCK=64)
    return out

def _launch(kernel, grid, *args, **meta):
    kernel[grid](*args, **meta)

def through_a_helper(x, out):
    _launch(double_kernel, (1,), x, out, x.numel(), BLOCK=64)
    return out

def body(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < N) * 2, mask=offs < N)

functional_kernel = triton.jit(body)

def functional(x, out):
    functional_kernel[(1,)](x, out, x.numel(), BLOCK=64)
    return out

@triton.jit
def numpy_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < N)
    tl.store(out_ptr + offs, np.multiply(v, 2), mask=offs < N)

def numpy_inside(x, out):
    numpy_kernel[(1,)](x, out, x.numel(), BLOCK=64)
    return out

def jit(f):
    return f

@jit
def fake(x, out):
    out.copy_(x * 2)

def fake_kernel(x, out):
    fake(x, out)
    return out

@triton.jit
def store_nothing(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < N)

def stores_nothing(x, out):
    store_nothing[(1,)](x, out, x.numel(), BLOCK=64)
    out.copy_(x)
    return out

def through_a_given_helper(q, out):
    w = w8a16.as_16bit(q, torch.float16)  # W8A16 gives as_16bit, which launches a course kernel
    double_kernel[(1,)](w.reshape(-1), out, out.numel(), BLOCK=64)
    return out

def torch_decodes(codes, out):
    out.copy_(codes.view(torch.float8_e4m3fn).to(torch.float16))
    double_kernel[(1,)](out, out, 0, BLOCK=64)
    return out
"""
PROGRAM = [
    ("setup", notebook.QUIET_START),
    ("imports", "import torch\nimport triton\nimport triton.language as tl\n"),
    ("learner", CELLS),
]


@pytest.fixture(scope="module")
def worker():
    w = Worker(PROGRAM, timeout=60)
    yield w
    w.close()


@pytest.mark.parametrize("name", ["honest", "through_a_helper", "functional"])
def test_a_kernel_launched_any_way_triton_supports_counts(worker, name):
    out, _ = run_audited(
        RemoteFunction(worker, name), torch.ones(10, device=DEV), torch.zeros(10, device=DEV), what=name
    )
    assert torch.equal(out, torch.full((10,), 2.0, device=DEV))


@pytest.mark.parametrize(
    "name, message",
    [
        # on a GPU the worker's own launch compiles the kernel and fails there, naming the call Triton refused
        (
            "numpy_inside",
            "`numpy_kernel` is not one Triton's compiler accepts"
            if DEV == "cpu"
            else "Unsupported function referenced",
        ),
        ("fake_kernel", "launched no Triton kernel"),
        ("stores_nothing", "`store_nothing` stores nothing"),
    ],
)
def test_what_is_not_a_triton_kernel_is_named(worker, name, message):
    with pytest.raises(CheckFailed, match=message):
        RemoteFunction(worker, name).audited(
            torch.ones(10, device=DEV), torch.zeros(10, device=DEV), what=name
        )


def test_torch_decoding_a_format_is_not_the_kernels_work(worker):
    codes = torch.arange(16, dtype=torch.uint8, device=DEV)
    with pytest.raises(CheckFailed, match="let PyTorch decode float8_e4m3fn values"):
        run_audited(RemoteFunction(worker, "torch_decodes"), codes, torch.zeros(16, dtype=torch.float16, device=DEV),
                    what="decode")  # fmt: skip


def test_a_course_kernel_launched_by_what_the_chapter_gives_needs_no_proof(worker):
    """The given helper's kernel lives in qmatmul/kernels/gemm.py: the launch's course frames name where the code
    lives, so the given name is matched by its function, not by the chapter's name for it (before: every launch
    through a given helper failed, W8A16's and the 4-bit chapters' decode-first path on a GPU among them). A worker
    whose release gives nothing still refuses the same launch."""
    from qmatmul import w8a16

    q = torch.arange(-4, 4, dtype=torch.int8, device=DEV)
    given = Worker(PROGRAM, release={"w8a16": w8a16}, timeout=60)
    try:
        fn = RemoteFunction(given, "through_a_given_helper")
        assert torch.equal(run_audited(fn, q, torch.zeros(8, device=DEV), what="given")[0], 2 * q.float())
    finally:
        given.close()
    with pytest.raises(CheckFailed, match="launched the course's own kernel `as_16bit_kernel`"):
        run_audited(
            RemoteFunction(worker, "through_a_given_helper"), q, torch.zeros(8, device=DEV), what="not given"
        )


def test_each_launch_is_compiled_once_in_a_process_of_its_own(worker):
    run_audited(
        RemoteFunction(worker, "honest"),
        torch.ones(10, device=DEV),
        torch.zeros(10, device=DEV),
        what="honest",
    )
    compiler = worker.compiler
    assert compiler is not None and compiler.proc.pid != worker.proc.pid
    proven = len(worker.proven)
    run_audited(
        RemoteFunction(worker, "honest"),
        torch.ones(10, device=DEV),
        torch.zeros(10, device=DEV),
        what="honest",
    )
    assert len(worker.proven) == proven


READS = [
    ("setup", notebook.QUIET_START),
    ("imports", "import torch\nimport triton\nimport triton.language as tl\n"),
    (
        "learner",
        CELLS
        + """
import numpy as np

def _copied(x, out, values):
    out.copy_(torch.as_tensor(values, dtype=out.dtype).reshape(out.shape))
    double_kernel[(1,)](out, out, 0, BLOCK=64)
    return out

def via_numpy(x, out):
    return _copied(x, out, np.asarray(x) * 2)

def via_numpy_method(x, out):
    return _copied(x, out, x.numpy() * 2)

def via_tolist(x, out):
    return _copied(x, out, [v * 2 for v in x.tolist()])

def via_storage(x, out):
    return _copied(x, out, [v * 2 for v in x.storage().tolist()])

class _Capsule:
    def __init__(self, x):
        self.capsule = torch.utils.dlpack.to_dlpack(x)
    def __dlpack__(self, stream=None):
        return self.capsule
    def __dlpack_device__(self):
        return (1, 0)

def via_dlpack(x, out):
    return _copied(x, out, np.from_dlpack(_Capsule(x)) * 2)
""",
    ),
]


@pytest.mark.skipif(
    DEV == "cuda", reason="the cases read a CPU tensor's values into numpy (the interpreter's run)"
)
@pytest.mark.parametrize("name", ["via_numpy", "via_numpy_method", "via_tolist", "via_storage", "via_dlpack"])
def test_values_read_into_numpy_or_python_are_seen(name):
    w = Worker(READS, timeout=60)
    try:
        with pytest.raises(CheckFailed, match="into numpy or Python"):
            RemoteFunction(w, name).audited(torch.ones(100), torch.zeros(100), what=name)
    finally:
        w.close()
