"""Capstone: the course's MiniLM against what sentence-transformers computed (a committed fixture), the references
against independent oracles, the kernel loader, the grading's drivers and what crosses from the worker, and every
check shown to fail with the message that names the mistake (the demo class holds more, graded by the trusted
grader in tests/test_notebooks.py)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from qmatmul import capstone, checks, formats
from qmatmul.capstone import crossing, stack, text, weights
from qmatmul.checks import CheckFailed

pytestmark = pytest.mark.xdist_group("capstone")


@pytest.fixture(scope="module")
def sol(env):
    from qmatmul import course

    return course.load_notebook_code("capstone")


ORACLE = json.loads((Path(__file__).parent / "data" / "capstone_oracle.json").read_text())


# ----------------------------------------------------------------------------------------------------------
# The model, against what sentence-transformers and safetensors computed (tools/capstone_oracle.py)


def test_the_weight_counts_the_text_quotes_are_the_models():
    """The MiniLM and Llama-block weight counts the capstone prints (bytes, memory floors) are the loaded model's
    Linear weights and the stack's layer shapes."""
    from qmatmul.capstone.model import LINEAR_WEIGHTS, linear_names

    model = capstone.load_model("course", device="cpu")
    modules = dict(model.named_modules())
    assert sum(modules[n].weight.numel() for n in linear_names(model)) == LINEAR_WEIGHTS
    assert stack.BLOCK_WEIGHTS == sum(N * K for N, K in stack.LLAMA_BLOCK) == 218_103_808


def test_course_minilm_gives_sentence_transformers_embeddings():
    """sentence-transformers encoded these sentences from their text (its tokenizer, BERT, pooling): the course's
    MiniLM, given the token ids of the model's own tokenizer (the tokenizers library), must give the same
    embeddings."""
    course = capstone.load_model("course", device="cpu")
    sentences = list(ORACLE["embeddings"])
    theirs = torch.tensor([ORACLE["embeddings"][s] for s in sentences])
    ours = capstone.embed(course, sentences)
    assert (ours - theirs).abs().max() < 1e-5


# What sentence-transformers' tokenizer gave (model.tokenizer(s)["input_ids"]): the table the course shipped before
# it read tokenizer.json with the tokenizers library, which gave the same ids for all 39 sentences of the chapter.
SENTENCE_TRANSFORMERS_IDS = {
    "A man is playing a guitar.": [101, 1037, 2158, 2003, 2652, 1037, 2858, 1012, 102],
    "A woman is slicing an onion.": [101, 1037, 2450, 2003, 26514, 2019, 20949, 1012, 102],
    "The Berlin train departs at 9 o'clock.": [101, 1996, 4068, 3345, 18280, 2015, 2012, 1023, 1051, 1005, 5119,
                                               1012, 102],
}  # fmt: skip


def test_the_tokenizer_gives_the_models_token_ids():
    assert text.token_ids(list(SENTENCE_TRANSFORMERS_IDS)) == list(SENTENCE_TRANSFORMERS_IDS.values())
    assert set(ORACLE["embeddings"]) <= set(capstone.SENTENCES)
    # one sentence fits the decode kernel
    assert max(len(i) for i in text.token_ids(capstone.SENTENCES)) <= capstone.DECODE_MAX_M
    # truncated at the model's max_seq_length, as sentence-transformers truncates
    long = text.token_ids(["word " * 400])[0]
    assert len(long) == 256 and long[0] == 101 and long[-1] == 102
    feats = capstone.features(["A man is playing a guitar.", "Hello."], "cpu")
    assert feats["attention_mask"].tolist() == [[1] * 9, [1] * 4 + [0] * 5]


def test_a_missing_library_says_how_to_install_it(monkeypatch):
    import sys

    for name in ("safetensors", "safetensors.torch", "tokenizers"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as where it is not installed
    with pytest.raises(ImportError, match="safetensors is missing: `pip install safetensors tokenizers`"):
        capstone.read_state_dict(weights.weights_file())
    monkeypatch.setattr(text, "_tokenizer", text._tokenizer.__wrapped__)  # not the one made before
    with pytest.raises(ImportError, match="tokenizers is missing: `pip install safetensors tokenizers`"):
        capstone.features(["A man is playing a guitar."], "cpu")


def test_safetensors_reader_matches_the_library():
    ours = capstone.read_state_dict(weights.weights_file())
    assert sorted(ours) == sorted(ORACLE["safetensors"])
    for name, (dtype, shape, digest) in ORACLE["safetensors"].items():
        t = ours[name]
        assert str(t.dtype).removeprefix("torch.") == dtype and list(t.shape) == shape, name
        assert hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest() == digest, name


# ----------------------------------------------------------------------------------------------------------
# References


def test_spearman_reference_matches_scipy():
    for case in ORACLE["spearman"]:
        a, b = torch.tensor(case["a"]), torch.tensor(case["b"])
        assert len(torch.unique(a)) < len(a)  # ties: the part that is easy to get wrong
        assert abs(capstone.spearman_reference(a, b) - case["rho"]) < 1e-12
    assert capstone.ranks(torch.tensor([0.2, 0.5, 0.2, 0.9])).tolist() == [1.5, 3.0, 1.5, 4.0]


def test_the_format_registry_names_the_known_formats():
    assert capstone.FORMATS == tuple(formats.FORMATS) == ("w8a16", "w4a16", "fp8", "mxfp4", "nvfp4")
    with pytest.raises(ValueError, match="unknown format 'int3': one of w8a16, w4a16, fp8, mxfp4, nvfp4"):
        formats.get("int3")
    with pytest.raises(ValueError, match="unknown format 'int3'"):
        capstone.reference_quantize("int3", torch.zeros(4, 128))


@pytest.mark.parametrize("fmt", capstone.FORMATS)
def test_each_formats_reference_agrees_with_the_capstones(fmt):
    """The registry's reference (the format module's, with the layout's arguments bound) and the capstone's fp32
    reference (the dequantized weight, the activation quantized first for FP8) compute the same product."""
    g = checks.generator(6)
    w, x = torch.randn(48, 256, generator=g) * 0.05, torch.randn(5, 256, generator=g).half()
    stored = capstone.reference_quantize(fmt, w)
    ours = formats.get(fmt).reference(x, *stored)
    assert torch.allclose(ours, capstone.reference_matmul(fmt, x, stored), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", capstone.FORMATS)
def test_reference_path_agrees_with_the_fp32_reference(fmt):
    g = checks.generator(5)
    w = torch.randn(200, 384, generator=g) * 0.05
    w[0] *= 40  # a large row: the 16-bit naive NVFP4 product overflowed before the tensor scale was folded in
    stored = capstone.reference_quantize(fmt, w)
    x = torch.randn(20, 384, generator=g).half()
    y = capstone.naive_path(fmt, x, *stored).float()
    ref = capstone.reference_matmul(fmt, x, stored)
    assert torch.isfinite(y).all()
    assert float((y - ref).norm() / ref.norm()) < 2e-3


def test_bytes_per_weight_of_a_quantized_layer(sol):
    lin = torch.nn.Linear(384, 1536)
    for fmt in capstone.FORMATS:
        with capstone.using({f: capstone.reference_kernels(f) for f in capstone.FORMATS}):
            nbytes, count = capstone.weight_bytes(torch.nn.Sequential(sol.QuantLinear(lin, fmt)))
        assert count == 1536 * 384
        assert abs(nbytes / count - capstone.weight_bytes_per_weight(fmt)) < 1e-3, fmt


def test_the_model_has_the_linears_the_chapter_counts():
    model = capstone.load_model("course", device="cpu")
    names = capstone.linear_names(model)
    assert len(names) == capstone.N_LINEARS and names[-1] == "pooler.dense"
    assert sum(model.get_submodule(n).weight.numel() for n in names) == 10_764_288  # 6 x 1,769,472 + 147,456


# ----------------------------------------------------------------------------------------------------------
# The checks pass the solution and name the known mistakes


def test_solution_passes(sol):
    capstone.check_spearman(sol.spearman, hidden=True, seed=1)
    capstone.check_quant_linear(sol.QuantLinear, hidden=True, seed=2)


def _pearson(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def _no_tie_average(a, b):
    def r(v):
        v = torch.as_tensor(v).double()
        out = torch.empty_like(v)
        out[torch.argsort(v, stable=True)] = torch.arange(1, len(v) + 1, dtype=torch.float64)
        return out

    return _pearson(r(a), r(b))


@pytest.mark.parametrize(
    "fn, message",
    [
        (_pearson, "Pearson instead of Spearman"),
        (_no_tie_average, "ties not averaged"),
        (
            lambda a, b: _pearson(torch.argsort(a).double(), torch.argsort(b).double()),
            "argsort taken for the ranks",
        ),
        (lambda a, b: torch.tensor([0.5, 0.5]), "one number"),
    ],
)
def test_spearman_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        capstone.check_spearman(fn, seed=0)


def _variant(sol, forward=None, init=None):
    class Wrong(sol.QuantLinear):
        pass

    if forward:
        Wrong.forward = forward
    if init:
        Wrong.__init__ = init
    return Wrong


def _stored(self):
    return [self.get_buffer(n) for n in self.names]


def _fwd(kind="auto", bias=1):
    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        ks = capstone.kernels(self.fmt)
        fn = ks.prefill if kind == "prefill" or (kind == "auto" and x2.shape[0] > 16) else ks.decode
        y = fn(x2, *_stored(self))
        if self.bias is not None:
            y = y + bias * self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    return forward


def test_quant_linear_mistakes_are_named(sol):
    """In-process (as in the learner's notebook: the drivers run here); the demo class grades the mistakes it
    holds through the trusted grader."""
    cases = [
        (_variant(sol, _fwd(kind="decode")), "the decode kernel takes at most 16 rows, got M = 26"),
        (_variant(sol, lambda self, x: sol.QuantLinear.forward(self, x).float()), "convert the output back"),
        (_variant(sol, lambda self, x: sol.QuantLinear.forward(self, x).reshape(-1, self.out_features)),
         "keep x's leading dimensions"),
        (_variant(sol, lambda self, x: x[..., :1] * 0 + torch.zeros(self.out_features)), "called no kernel"),
    ]  # fmt: skip

    def keeps_weight(self, linear, fmt):
        sol.QuantLinear.__init__(self, linear, fmt)
        self._spare = {"w": [linear.weight.detach().clone().half()]}

    def scribbles(self, x):
        y = sol.QuantLinear.forward(self, x)
        x.add_(0.5)
        return y

    def plain_attributes(self, linear, fmt):
        torch.nn.Module.__init__(self)
        self.fmt, self.in_features, self.out_features = fmt, linear.in_features, linear.out_features
        self.stored = list(capstone.kernels(fmt).quantize(linear.weight.detach()))
        self.names = []
        self.bias = linear.bias

    def dense_matmul(self, x):
        w = capstone.dequantized(self.fmt, _stored(self)).to(x.device)
        y = torch.nn.functional.linear(x.float(), w)
        return (y + self.bias if self.bias is not None else y).to(x.dtype)

    cases += [
        (
            _variant(sol, init=keeps_weight),
            r"keeps a floating-point copy of the weight \(attribute self._spare",
        ),
        (_variant(sol, init=plain_attributes), "not among the module's buffers"),
        (_variant(sol, dense_matmul), "computed the product with PyTorch"),
        (_variant(sol, scribbles), "modified its input in place"),
    ]
    for cls, message in cases:
        with pytest.raises(CheckFailed, match=message):
            capstone.check_quant_linear(cls, seed=0)


def test_quantize_model_mistakes_are_named(sol):
    def children_only(model, fmt):
        for name, child in model.named_children():
            if isinstance(child, torch.nn.Linear):
                model.register_module(name, sol.QuantLinear(child, fmt))
        return model

    def skips_pooler(model, fmt):
        sol.quantize_model(model, fmt)
        model.pooler.dense = torch.nn.Linear(384, 384)
        return model

    def wrong_format(model, fmt):
        return sol.quantize_model(model, "fp8")

    def dense_matmul(self, x):  # right numbers, no kernel of the format (the demo's torch_matmul did this)
        w = capstone.dequantized(self.fmt, _stored(self)).to(x.device)
        y = torch.nn.functional.linear(x.float(), w)
        return (y + self.bias if self.bias is not None else y).to(x.dtype)

    dense = _variant(sol, dense_matmul)

    def no_kernels(model, fmt):
        for name, m in list(model.named_modules()):
            if isinstance(m, torch.nn.Linear):
                parent, _, child = name.rpartition(".")
                (model.get_submodule(parent) if parent else model).register_module(child, dense(m, fmt))
        return model

    cases = [
        (children_only, "replaced 0 of the model's 37 nn.Linear layers"),
        (no_kernels, "called the format's kernels 0 times"),
        (skips_pooler, "replaced 36 of the model's 37.*still nn.Linear: pooler.dense"),
        (lambda model, fmt: (sol.quantize_model(model, fmt), None)[1], "returned None"),
        (
            wrong_format,
            "quantized as FP8 per-row \\(W8A8\\), not W8A16(.|\n)*does not hold the W8A16 quantized weight",
        ),
    ]
    for fn, message in cases:
        with pytest.raises(CheckFailed, match=message):
            capstone.check_quantize_model(fn, seed=0)


def test_the_course_classes_handed_in_earn_nothing():
    """Adversarial: every number right, none of it the learner's (the demo class holds the other adversaries)."""
    with pytest.raises(CheckFailed, match="the course's own class"):
        capstone.check_quant_linear(capstone.ReferenceQuantLinear, seed=0)
    with pytest.raises(
        CheckFailed, match="quantize_model put a qmatmul.capstone.layers.ReferenceQuantLinear"
    ):
        capstone.check_quantize_model(capstone.reference_quantize_model, seed=0)


# ----------------------------------------------------------------------------------------------------------
# The forwards graded run on a module rebuilt from its buffers: the learner's class built again on a decoy
# nn.Linear (same shape, other weights) with the first one's buffers loaded into it; for a hidden check and the
# stack, in a fresh worker


def _from_weight(sol, keep):
    """A QuantLinear that registers its buffers as it should, but multiplies with the nn.Linear's own weight:
    `keep(self, linear)` hides it and returns a function that gives it back (2-D) at each call."""

    class KeepsWeight(sol.QuantLinear):
        def __init__(self, linear, fmt):
            super().__init__(linear, fmt)
            self.original = keep(self, linear)  # a function: no census of tensors looks inside it

        def forward(self, x):
            ks = capstone.kernels(self.fmt)
            x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
            kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
            y = kernel(x2, *ks.quantize(self.original()))  # quantized afresh: the audit sees one kernel call
            if self.bias is not None:
                y = y + self.bias
            return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    return KeepsWeight


_BY_ID: dict = {}
OTHER_THAN_BUFFERS = "computes with something other than its registered buffers"


def _in_a_closure(self, linear):
    w = linear.weight  # alive before QuantLinear was built: the census of tensors made since skips it
    return lambda: w


def _flat_in_a_closure(self, linear):
    flat, k = linear.weight.detach().flatten().clone(), linear.in_features  # 1-D: no [N, K] tensor kept
    return lambda: torch.stack(flat.split(k))  # stack: not one of the memory ops the audit weighs


def _in_a_global_by_id(self, linear):
    _BY_ID[id(self)] = linear.weight
    return lambda: _BY_ID[id(self)]


@pytest.mark.parametrize("keep", [_in_a_closure, _flat_in_a_closure, _in_a_global_by_id])
def test_a_quant_linear_that_computes_from_a_kept_weight_earns_nothing(sol, keep):
    """Adversarial (the demo class's closure_weight and closure_weight_flat, through the trusted grader): every
    number right, the buffers right, and none of them used. Before the rebuild, each passed."""
    with pytest.raises(CheckFailed, match=OTHER_THAN_BUFFERS) as exc:
        capstone.check_quant_linear(_from_weight(sol, keep), seed=0)
    assert "built again on an nn.Linear of the same shape with other weights" in str(exc.value)
    assert "Keep the quantized weight (and the bias) in register_buffer" in str(exc.value)


def test_a_model_whose_layers_compute_from_a_kept_weight_earns_nothing(sol):
    cls = _from_weight(sol, _in_a_closure)

    def quantize_model(model, fmt):
        for name, m in list(model.named_modules()):
            if isinstance(m, torch.nn.Linear):
                parent, _, child = name.rpartition(".")
                (model.get_submodule(parent) if parent else model).register_module(child, cls(m, fmt))
        return model

    with pytest.raises(CheckFailed, match="computes with something other than its layers' registered") as exc:
        capstone.check_quantize_model(quantize_model, seed=0)
    assert "rebuilt by quantize_model from a copy of the model whose Linears have other" in str(exc.value)


def test_the_rebuild_loads_every_buffer_in_place(sol):
    """No false alarm: non-persistent buffers, a list that aliases the buffers and the bias as a parameter all
    rebuild (the tensors are written in place, as load_state_dict does)."""

    class Aliased(sol.QuantLinear):
        def __init__(self, linear, fmt):
            torch.nn.Module.__init__(self)
            self.fmt, self.in_features, self.out_features = fmt, linear.in_features, linear.out_features
            stored = capstone.kernels(fmt).quantize(linear.weight.detach())
            for i, t in enumerate(stored):
                self.register_buffer(f"q{i}", t.clone(), persistent=False)
            self.stored = [self.get_buffer(f"q{i}") for i in range(len(stored))]  # the same tensors
            self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())

        def forward(self, x):
            ks = capstone.kernels(self.fmt)
            x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
            y = (ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill)(x2, *self.stored)
            y = y if self.bias is None else y + self.bias
            return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    capstone.check_quant_linear(Aliased, hidden=True, seed=4)


def test_buffers_that_do_not_rebuild_the_module_are_named(sol):
    import itertools

    count = itertools.count()

    class Numbered(sol.QuantLinear):  # buffers named by a counter: a second build names them anew
        def __init__(self, linear, fmt):
            torch.nn.Module.__init__(self)
            self.fmt, self.in_features, self.out_features = fmt, linear.in_features, linear.out_features
            stored = capstone.kernels(fmt).quantize(linear.weight.detach())
            self.names = [f"w{next(count)}" for _ in stored]
            for name, t in zip(self.names, stored, strict=True):
                self.register_buffer(name, t.contiguous())
            self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    # The visible cases name w0..w7 (W8A16 two tensors, W4A16 and NVFP4 three each); rebuilt, W8A16 gets w8, w9.
    with pytest.raises(
        CheckFailed, match="buffers do not rebuild it: built again, it lacks w0, w1 and has w8, w9"
    ):
        capstone.check_quant_linear(Numbered, seed=0)


# A learner's class that files the nn.Linear's weight under the bytes of its quantized weight: rebuilt in the same
# process, it finds the real weight again from the buffers it is given; only a fresh process has none to find.
FOUND_AGAIN = """
_SEEN = {}


def _key(t):
    return t.view(torch.uint8).cpu().numpy().tobytes()  # uint8: no float copy the op audit would weigh


class FoundAgain(QuantLinear):
    def __init__(self, linear, fmt):
        super().__init__(linear, fmt)
        _SEEN[_key(self.w0)] = linear.weight

    def forward(self, x):
        ks = capstone.kernels(self.fmt)
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        y = kernel(x2, *ks.quantize(_SEEN[_key(self.w0)]))
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
"""
SKIPS_STEPS = """
class SkipsSteps(QuantLinear):
    # A forward that works every other call and hands back its last output otherwise: what a rebound
    # CUDAGraph.replay that runs the graph only now and then leaves behind.
    def forward(self, x):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls % 2 == 0 and getattr(self, "last", None) is not None and self.last.shape[:-1] == x.shape[:-1]:
            return self.last
        self.last = super().forward(x)
        return self.last
"""
SMALL_STACK = [(96, 128), (64, 128), (128, 64)]
STACK_ON_CPU = f"""
capstone.stack.stack_device = lambda: "cpu"
capstone.stack.LLAMA_BLOCK[:] = {SMALL_STACK!r}
capstone.stack.stack_kernels = lambda: (capstone.reference_kernels("w8a16"), "the reference kernels")
"""


def _capstone_worker(*extra):
    from autograder import demo
    from qmatmul.grader.remote import Worker

    program = [("imports", "import torch\nfrom qmatmul import capstone\n"),
               ("ex2", demo.solution("capstone")["ex2_quant_linear"]), ("found_again", FOUND_AGAIN), *extra]  # fmt: skip
    return Worker(program, timeout=120)


def _pid(worker):
    return None if worker.proc is None else worker.proc.pid


def test_a_hidden_check_rebuilds_in_a_fresh_worker():
    """Through the trusted grader's worker: the hidden check stops the worker after the build and grades QuantLinear
    rebuilt in a new one, where nothing the first build kept exists; a visible check rebuilds in the same worker
    (one fresh worker per graded cell)."""
    from qmatmul.grader.remote import RemoteFunction

    worker = _capstone_worker()
    try:
        with pytest.raises(CheckFailed, match=OTHER_THAN_BUFFERS) as exc:
            capstone.check_quant_linear(RemoteFunction(worker, "FoundAgain"), hidden=True, seed=2)
        assert "in a process of its own, its forward raised" in str(exc.value)
        assert "KeyError" in str(exc.value)
        first = _pid(worker)
        capstone.check_quant_linear(RemoteFunction(worker, "QuantLinear"), seed=1)
        assert _pid(worker) == first  # a visible check: no new worker
        capstone.check_quant_linear(RemoteFunction(worker, "QuantLinear"), hidden=True, seed=1)
        assert _pid(worker) not in (None, first)
    finally:
        worker.close()


def test_the_stack_is_timed_rebuilt_in_a_fresh_worker(sol, monkeypatch):
    """The stack check on a CPU (a small stack, the reference kernels, the speed bound off): it times and checks the
    stack rebuilt from its buffers in a fresh worker, and a layer that finds its weight elsewhere is named."""
    from qmatmul.grader.remote import RemoteFunction

    monkeypatch.setattr(stack, "stack_device", lambda: "cpu")
    monkeypatch.setattr(stack, "LLAMA_BLOCK", SMALL_STACK)
    monkeypatch.setattr(stack, "STACK_SPEEDUP", 0)
    worker = _capstone_worker(("stack_on_cpu", STACK_ON_CPU))
    try:
        worker.start()
        first = _pid(worker)
        capstone.check_stack_speed(RemoteFunction(worker, "QuantLinear"), seed=3)
        assert _pid(worker) not in (None, first)
        with pytest.raises(CheckFailed, match=OTHER_THAN_BUFFERS) as exc:
            capstone.check_stack_speed(RemoteFunction(worker, "FoundAgain"), seed=3)
        assert "(the stack's layer [96, 128], one row)" in str(exc.value)
    finally:
        worker.close()
    # Every timed step has inputs of its own and every step's outputs are checked: work skipped on some steps shows
    # (before, the timed steps repeated one input and one output was checked: this passed).
    worker = _capstone_worker(("stack_on_cpu", STACK_ON_CPU), ("skips", SKIPS_STEPS))
    try:
        with pytest.raises(CheckFailed, match=r"layer \[96, 128\] at each timed step"):
            capstone.check_stack_speed(RemoteFunction(worker, "SkipsSteps"), seed=3)
    finally:
        worker.close()
    monkeypatch.setattr(stack, "stack_kernels", lambda: (capstone.reference_kernels("w8a16"), "ours"))
    with pytest.raises(CheckFailed, match=OTHER_THAN_BUFFERS):
        capstone.check_stack_speed(_from_weight(sol, _in_a_closure), seed=3)  # in-process: on the decoy


def test_what_the_worker_says_is_read_as_data_or_refused():
    class Forged:  # a stand-in whose worker answered with something other than the driver's data
        __qmatmul_remote__ = True

        def drive(self, driver, *args, what=None):
            return {"meta": "not json", "tensors": {}}

    with pytest.raises(CheckFailed, match="could not read what your code did"):
        capstone.check_quantize_model(Forged(), seed=0)
    from qmatmul.grader.remote import RemoteFunction, Worker

    worker = Worker([("setup", "def f(x):\n    return x\n")], timeout=60)
    try:
        with pytest.raises(checks.LearnerError, match="no driver os:system"):
            RemoteFunction(worker, "f").drive("os:system", "true")
        meta, _ = crossing.drive(RemoteFunction(worker, "f"), "stack", "nothing", 0, what="f")
        assert meta == {"error": None}
    finally:
        worker.close()


def test_stack_speed_is_not_measured_without_a_gpu(sol):
    if torch.cuda.is_available():
        pytest.skip("measured on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        capstone.check_stack_speed(sol.QuantLinear)


def test_capture_is_not_graded_without_a_gpu(sol):
    if torch.cuda.is_available():
        pytest.skip("graded on a GPU")
    with pytest.raises(checks.NotMeasured, match="no CUDA GPU"):
        capstone.check_capture(sol.capture)


@pytest.fixture
def small_capture(monkeypatch):
    """The capture check's plumbing on a CPU: a three-Linear block small enough for the interpreter, three timed
    steps, the course's own eager and captured figures given (a CPU cannot capture), the checks as on a GPU."""
    from qmatmul.capstone import capture

    block = [(32, 64), (16, 64), (48, 128)]
    monkeypatch.setattr(capture, "LLAMA_BLOCK", block)
    monkeypatch.setattr(stack, "LLAMA_BLOCK", block)
    monkeypatch.setattr(capture, "CAPTURE_REPS", 3)
    monkeypatch.setattr(capture, "stack_device", lambda: "cpu")
    monkeypatch.setattr(stack, "stack_device", lambda: "cpu")
    figures = {"course": (1e9, 0.0)}
    monkeypatch.setattr(capture, "course_us", lambda layers, M, device: figures["course"])
    return figures


def test_capture_check_passes_a_replay_that_runs_the_step_and_names_the_mistakes(small_capture):
    """Right replays pass; a replay that ignores its inputs (the graph reads the example's tensors), a capture that
    returns no function, and one slower than the course's eager and captured figures allow, each lose the cell with
    a message that names the mistake."""
    capstone.check_capture(lambda step, *example: step, seed=1)
    from qmatmul.capstone import drivers

    # The step owns the weights a graph reads by address: the worker keeps it as long as the replay. (Found on the
    # H200: dropped after the build, its freed memory was taken by the timed run's tensors and every replay read
    # garbage, while the three probes, run before the build returned, were right.)
    assert callable(drivers._CAPTURE["step"]) and callable(drivers._CAPTURE["replay"])
    with pytest.raises(CheckFailed, match="answered the example's outputs for new inputs"):
        capstone.check_capture(lambda step, *example: lambda *inputs: step(*example), seed=1)
    with pytest.raises(CheckFailed, match="must return a function"):
        capstone.check_capture(lambda step, *example: step(*example), seed=1)

    # what a replay that no longer refers to the tensors it was captured on answered on the H100: the same outputs
    def constant(step, *example):
        ys = [torch.ones_like(y) for y in step(*example)]
        return lambda *inputs: ys

    with pytest.raises(
        CheckFailed, match="answered the same outputs for 3 different inputs .* keep those tensors"
    ):
        capstone.check_capture(constant, seed=1)
    with pytest.raises(
        CheckFailed, match=r"(?s)differ from the reference.* copy new inputs into the tensors the graph"
    ):
        capstone.check_capture(lambda step, *example: lambda *inputs: [y + 1 for y in step(*inputs)], seed=1)
    small_capture["course"] = (100.0, 10.0)  # the interpreter's step takes far longer than 32.5 µs
    with pytest.raises(CheckFailed, match=r"a replay may take at most 32 \(it keeps at most 25%"):
        capstone.check_capture(lambda step, *example: step, seed=1)


def test_capture_check_is_not_measured_where_the_gpu_hides_the_launches(small_capture):
    small_capture["course"] = (105.0, 100.0)
    with pytest.raises(checks.NotMeasured, match="a capture gains nothing measurable here"):
        capstone.check_capture(lambda step, *example: step, seed=1)


# ----------------------------------------------------------------------------------------------------------
# Exercise 4, FusedQuantLinear: one quantized weight over the concatenation, one kernel call, one output per Linear


def _fused_variant(sol, forward=None, init=None):
    class Wrong(sol.FusedQuantLinear):
        pass

    if forward:
        Wrong.forward = forward
    if init:
        Wrong.__init__ = init
    return Wrong


def _stored_parts(self, fmt, linears, keep_scale=False):
    """Each Linear quantized on its own, the stored tensors concatenated (the pitfall); keep_scale: the first part's
    tensor scale kept alone, so that the stored tuple has the concatenation's shapes."""
    torch.nn.Module.__init__(self)
    self.fmt, self.in_features = fmt, linears[0].in_features
    self.splits = [lin.out_features for lin in linears]
    self.out_features = sum(self.splits)
    parts = [capstone.kernels(fmt).quantize(lin.weight.detach()) for lin in linears]
    stored = [
        torch.cat(ts) if not keep_scale or ts[0].shape[0] != 1 else ts[0] for ts in zip(*parts, strict=True)
    ]
    self.names = [f"w{i}" for i in range(len(stored))]
    for name, t in zip(self.names, stored, strict=True):
        self.register_buffer(name, t)
    biases = [lin.bias for lin in linears]
    self.register_buffer("bias", None if biases[0] is None else torch.cat([b.detach() for b in biases]))


def test_fused_solution_passes(sol):
    capstone.check_fused_quant_linear(sol.FusedQuantLinear, seed=0)
    capstone.check_fused_quant_linear(sol.FusedQuantLinear, hidden=True, seed=3)


@pytest.mark.parametrize("fmt", capstone.FORMATS)
def test_quantizing_the_parts_apart_differs_only_where_a_scale_is_per_tensor(fmt):
    """The pitfall the exercise names, shown on the visible check's weights: the parts quantized apart and
    concatenated are the concatenation's bits in every format but NVFP4, whose tensor scale is one per tensor."""
    from qmatmul.capstone import fused
    from qmatmul.capstone.formats import same_stored

    g = checks.generator(0)
    ws = fused._weights(fused.VISIBLE_PARTS, 128, g)
    whole = capstone.reference_quantize(fmt, torch.cat(ws))
    apart = fused._per_part(fmt, ws)
    assert same_stored(list(whole), apart) == (fmt != "nvfp4")


@pytest.mark.parametrize("seed", range(4))
def test_fused_parts_quantized_apart_are_named_on_every_visible_run(sol, seed):
    """The visible check draws q, k and v with very different magnitudes: the NVFP4 case names the pitfall whatever
    the seed, whether the three tensor scales are concatenated or the first kept alone."""
    for keep in (False, True):
        cls = _fused_variant(
            sol, init=lambda self, lins, fmt, keep=keep: _stored_parts(self, fmt, lins, keep)
        )
        with pytest.raises(
            CheckFailed, match="each weight quantized on its own and the stored tensors"
        ) as exc:
            capstone.check_fused_quant_linear(cls, seed=seed)
        assert "NVFP4, N = 64 + 16 + 16" in str(exc.value) and "one float32 per tensor" in str(exc.value)


def test_fused_quant_linear_mistakes_are_named(sol):
    class Loop(torch.nn.Module):  # three QuantLinears called in a loop: three launches
        def __init__(self, linears, fmt):
            super().__init__()
            self.parts = torch.nn.ModuleList(sol.QuantLinear(lin, fmt) for lin in linears)

        def forward(self, x):
            return tuple(p(x) for p in self.parts)

    fused = sol.FusedQuantLinear.forward

    def call(self, x, stored=None, kind=None):
        ks = capstone.kernels(self.fmt)
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        kind = kind or ("decode" if x2.shape[0] <= capstone.DECODE_MAX_M else "prefill")
        return getattr(ks, kind)(x2, *(stored or [self.get_buffer(n) for n in self.names]))

    def first_part_only(self, x):  # one call, over q's rows of the stored weight alone
        y = call(self, x, [self.get_buffer(n)[: self.splits[0]] for n in self.names])
        return (y.to(x.dtype).reshape(*x.shape[:-1], -1),)

    def keeps_linears(self, linears, fmt):
        sol.FusedQuantLinear.__init__(self, linears, fmt)
        self.original = lambda: [
            lin.weight for lin in linears
        ]  # alive before: no census of new tensors sees them

    def from_linears(self, x):
        call(self, x)  # the one kernel call, its output unused
        ys = [torch.nn.functional.linear(x.float(), w) for w in self.original()]
        return tuple(y.to(x.dtype) for y in ys)

    def mixed_refused(self, linears, fmt):
        if len({lin.bias is None for lin in linears}) > 1:
            raise ValueError("the Linears must all have a bias or none")
        sol.FusedQuantLinear.__init__(self, linears, fmt)

    cases = [
        (Loop, False, "called the kernels 3 times \\(over N = 64, 16, 16\\): one kernel call per Linear is not fused"),
        (_fused_variant(sol, lambda self, x: torch.cat(fused(self, x), -1)), False, "returned one tensor of shape"),
        (_fused_variant(sol, lambda self, x: tuple(y.float() for y in fused(self, x))), False,
         "convert the output back"),
        (_fused_variant(sol, lambda self, x: tuple(call(self, x, kind="prefill").split(self.splits, -1))), False,
         "ran the prefill kernel for M = 1 rows"),
        (_fused_variant(sol, lambda self, x: tuple(call(self, x).to(x.dtype).split(self.splits, -1))), False,
         "This matches a known mistake: bias forgotten"),
        (_fused_variant(sol, first_part_only), False, "one kernel call computed N = 64 outputs, not all 96"),
        (_fused_variant(sol, from_linears, keeps_linears), False, "computed the product with PyTorch"),
        (_fused_variant(sol, init=mixed_refused), True, "raised ValueError: the Linears must all have a bias"),
    ]  # fmt: skip
    for cls, hidden, message in cases:
        with pytest.raises(CheckFailed, match=message):
            capstone.check_fused_quant_linear(cls, hidden=hidden, seed=1)


def test_a_fused_layer_that_computes_from_the_linears_weights_earns_nothing(sol):
    """Right buffers, one kernel call over all N, right numbers: but from the Linears' own weights, quantized afresh
    at each call. Rebuilt on other weights, it computes with those."""

    class KeepsWeights(sol.FusedQuantLinear):
        def __init__(self, linears, fmt):
            super().__init__(linears, fmt)
            ws = [lin.weight for lin in linears]  # alive before: no census of new tensors sees them
            self.original = lambda: torch.cat(ws)

        def forward(self, x):
            ks = capstone.kernels(self.fmt)
            x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
            kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
            y = kernel(x2, *ks.quantize(self.original()))
            y = y if self.bias is None else y + self.bias
            return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features).split(self.splits, -1)

    with pytest.raises(CheckFailed, match=OTHER_THAN_BUFFERS) as exc:
        capstone.check_fused_quant_linear(KeepsWeights, seed=0)
    assert "built again on nn.Linear layers of the same shapes with other weights" in str(exc.value)


def test_the_fused_check_runs_in_the_worker_and_rebuilds_a_hidden_check_in_a_fresh_one():
    """Through the trusted grader's worker: the cases (lists holding None for a missing bias) cross as data, the
    hidden check grades FusedQuantLinear rebuilt in a new worker, and the loop of QuantLinears is named there too."""
    from autograder import demo
    from qmatmul.grader.remote import RemoteFunction

    loop = ("loop", "class Loop(torch.nn.Module):\n    def __init__(self, linears, fmt):\n        super().__init__()\n"
            "        self.parts = torch.nn.ModuleList(QuantLinear(lin, fmt) for lin in linears)\n\n"
            "    def forward(self, x):\n        return tuple(p(x) for p in self.parts)\n")  # fmt: skip
    worker = _capstone_worker(("ex4", demo.solution("capstone")["ex4_fused_quant_linear"]), loop)
    try:
        capstone.check_fused_quant_linear(RemoteFunction(worker, "FusedQuantLinear"), seed=1)
        first = _pid(worker)
        capstone.check_fused_quant_linear(RemoteFunction(worker, "FusedQuantLinear"), hidden=True, seed=2)
        assert _pid(worker) not in (None, first)
        with pytest.raises(CheckFailed, match="one kernel call per Linear is not fused"):
            capstone.check_fused_quant_linear(RemoteFunction(worker, "Loop"), hidden=True, seed=2)
    finally:
        worker.close()


# ----------------------------------------------------------------------------------------------------------
# The kernel loader


def test_loader_finds_finished_notebooks_and_says_what_is_missing(tmp_path, capsys):
    from qmatmul import course

    root = course.repo_root()
    (tmp_path / "w8a16").mkdir()
    shutil.copy(root / "solutions" / "w8a16" / "w8a16.ipynb", tmp_path / "w8a16")
    (tmp_path / "w4a16").mkdir()
    shutil.copy(root / "notebooks" / "w4a16" / "w4a16.ipynb", tmp_path / "w4a16")  # the untouched release
    nb = json.loads((root / "solutions" / "mxfp4" / "mxfp4.ipynb").read_text())
    for cell in nb["cells"]:  # a decode kernel that forgets the scales
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "ex3_decode":
            cell["source"] = "".join(cell["source"]).replace("def mxfp4_decode(", "def _unused(") + (
                "\n\ndef mxfp4_decode(x, packed, scales, out=None):\n"
                "    return mxfp4_matmul(x, packed, torch.full_like(scales, 127), out=out)\n"
            )
    (tmp_path / "mxfp4").mkdir()
    (tmp_path / "mxfp4" / "mxfp4.ipynb").write_text(json.dumps(nb))
    sets = capstone.load_kernels(tmp_path, formats=("w8a16", "w4a16", "mxfp4", "nvfp4"), device="cpu")
    text = capsys.readouterr().out
    assert sets["w8a16"].source == {"quantize": "yours (quantize_int8_per_channel)",
                                    "prefill": "yours (w8a16_matmul)", "decode": "yours (w8a16_decode)"}  # fmt: skip
    assert "W8A16: your quantizer, prefill and decode kernels from" in text
    assert (
        "W4A16: no decode kernel found in" in text
        and "(exercise 3 unfinished); using the reference path" in text
    )
    assert "W4A16: no quantizer found in" in text and "(exercise 1 unfinished)" in text
    assert set(sets["w4a16"].source.values()) == {"reference"}
    assert "MXFP4: no decode kernel found in" in text and "exercise 3 fails a quick self-check" in text
    assert (
        sets["mxfp4"].source["prefill"] == "yours (mxfp4_matmul)"
        and sets["mxfp4"].source["decode"] == "reference"
    )
    assert "NVFP4: no notebook at" in text and "using the reference path" in text


def test_learner_kernels_run_inside_the_model(sol, capsys):
    from qmatmul import course

    sets = capstone.load_kernels(
        course.repo_root() / "solutions", formats=("w8a16",), device="cpu", verbose=False
    )
    with capstone.using({f: capstone.reference_kernels(f) for f in capstone.FORMATS} | sets):
        capstone.through_your_kernels(sol.QuantLinear, formats=("w8a16",),
                                      layers=["encoder.layer.0.attention.self.query"])  # fmt: skip
    line = [ln for ln in capsys.readouterr().out.splitlines() if "W8A16" in ln][0]
    assert "yours" in line
    assert float(line.split("reference path ")[1].split()[0]) < 2e-3


def test_the_recorded_model_times_show_graph_and_eager(monkeypatch, capsys):
    """Without a GPU the capstone prints the course's H200 figures: a forward's graph / eager µs, "-" where the
    forward could not be captured, and the older eager-only records as they were."""
    from qmatmul.capstone import speed

    two = {"16-bit batch 1": [310.0, 5120.0], "16-bit batch 24": [None, 6194.0]}
    monkeypatch.setattr(speed, "_recorded", lambda: {"env": "H200", "model_us": two})
    speed._show_recorded("model")
    out = capsys.readouterr().out
    assert "graph / eager" in out and "310 / 5120" in out and "- / 6194" in out
    monkeypatch.setattr(speed, "_recorded", lambda: {"env": "H200", "model_us": {"16-bit batch 1": 5120.0}})
    speed._show_recorded("model")
    out = capsys.readouterr().out
    assert "eager median" in out and "5120" in out and "/" not in out.splitlines()[-1]


def test_the_step_figure_draws_each_formats_speedup_against_16_bit(monkeypatch):
    """capstone.speed_figure: each format's speed-up over 16-bit, graph against graph and eager against eager (a
    naive path and a missing figure left out), the bytes' bound beside it; without a step, the recorded run's
    (docs/capstone-h200.json); nothing under the autograder."""
    import matplotlib

    matplotlib.use("Agg")
    from qmatmul.capstone import figures, speed
    from qmatmul.checks import AUTOGRADE_ENV

    step = {("16-bit", 1): (100.0, 200.0), ("w8a16", 1): (50.0, 400.0), ("w8a16 naive", 1): (1000.0, 1000.0),
            ("fp8", 1): (None, 100.0), ("16-bit", 16): (120.0, 240.0), ("w4a16", 16): (40.0, 480.0)}  # fmt: skip
    speedups, where = figures.step_speedups(step)
    assert where == "measured here"
    assert speedups == {("w8a16", 1): (2.0, 0.5), ("fp8", 1): (None, 2.0), ("w4a16", 16): (3.0, 0.5)}
    fig = capstone.speed_figure(step)
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert {"2.00x", "0.50x", "-", "3.00x"} <= set(labels), labels
    assert [ax.get_title() for ax in fig.axes] == ["M = 1", "M = 16"]

    recorded = {"env": "qmatmul 0.1.0\ndevice: NVIDIA H200 (sm_90): kernels", "step_us": {
        "16-bit M=1": [136.0, 242.0], "w8a16 M=1": [104.0, 1064.0], "w8a16 naive M=1": [1250.0, 1562.0]}}  # fmt: skip
    monkeypatch.setattr(speed, "_recorded", lambda: recorded)
    speedups, where = figures.step_speedups({})
    assert where == "recorded on the course's NVIDIA H200"
    assert speedups == {("w8a16", 1): (136.0 / 104.0, 242.0 / 1064.0)}
    assert "NVIDIA H200" in capstone.speed_figure()._suptitle.get_text()
    monkeypatch.setattr(speed, "_recorded", lambda: {})
    assert capstone.speed_figure() is None
    monkeypatch.setenv(AUTOGRADE_ENV, "1")
    assert capstone.speed_figure(step) is None


def test_every_path_shows_the_recorded_step_of_each_path(monkeypatch, capsys):
    """capstone.every_path: the recorded step (docs/bench-h200.json, kind `llama3-8b block decode`) of every path
    in one layout, M = 1 and 16, fastest first: bf16, the solutions, the experts and PyTorch's kernels, each with
    its × bf16 and share of the byte floor; nothing under the autograder."""
    from qmatmul.checks import AUTOGRADE_ENV

    rows = capstone.every_path()
    out = capsys.readouterr().out
    assert rows and {r["layout"] for r in rows} == {"7 Linears"} and {r["M"] for r in rows} == {1, 16}
    for word in (
        "bf16 cuBLAS",
        "solution w8a16_decode",
        "expert w4a16 MMA",
        "tinygemm",
        "_scaled_mm",
        "_weight_int8pack_mm",
    ):
        assert word in out, word
    m1 = out.split("M = 1\n")[1].split("M = 16")[0].splitlines()[1:]
    us = [float(line[68:76]) for line in m1 if line.strip()]
    assert us == sorted(us) and len(us) == sum(r["M"] == 1 for r in rows)
    bf16 = next(r for r in rows if r["M"] == 1 and r["label"].startswith("bf16"))
    assert f"{bf16['us']:.1f}" in out and "1.00x" in out
    assert {r["layout"] for r in capstone.every_path("fused")} == {"fused"}
    monkeypatch.setenv(AUTOGRADE_ENV, "1")
    assert capstone.every_path() == []
