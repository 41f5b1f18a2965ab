"""The capstone's loader takes the learner's faster decode where it exists and works, the layouts chapter's Gluon
decode for W4A16 on the weight repacked once at load (RepackedDecode), chapter 2's decode taking what that kernel
cannot; FP8's activations quantized by exercise 7's one-launch kernel where it passes; FP8's fp8_decode_fused (x
quantized inside the kernel) only where fp8_decode fails (on the H200 it is the slower); and tools/decode_step.py's
rows of them. On the
CPU: fake chapter folders of small notebooks, the layouts kernel stood in for by the chapter's own PyTorch model of
it (lane_decode), the repack cache with a fake repack."""

import gc
import json
import shutil

import pytest
import torch

from qmatmul import capstone, checks, course
from qmatmul.capstone import loader

pytestmark = pytest.mark.xdist_group("capstone")

ROOT = course.repo_root()


def _cell(source: str, grade_id: str) -> dict:
    meta = {"grade": False, "grade_id": grade_id, "locked": grade_id == "imports", "schema_version": 3,
            "solution": grade_id != "imports", "task": False}  # fmt: skip
    return {"cell_type": "code", "execution_count": None, "id": grade_id, "metadata": {"nbgrader": meta},
            "outputs": [], "source": source}  # fmt: skip


def _with_cells(chapter: str, folder, *cells: tuple[str, str]) -> None:
    """folder/<chapter>/<chapter>.ipynb: the chapter's solution notebook with solution cells (grade_id, source)
    appended (a later definition replaces the solution's)."""
    nb = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())
    nb["cells"] += [_cell(src, gid) for gid, src in cells]
    (folder / chapter).mkdir(parents=True, exist_ok=True)
    (folder / chapter / f"{chapter}.ipynb").write_text(json.dumps(nb))


# ----------------------------------------------------------------------------------------------------------
# FP8: fp8_decode_fused


FUSED_RIGHT = """def fp8_decode_fused(x, wq, sw, out=None):
    return fp8_decode(*quantize_fp8(x, (1, x.shape[1])), wq, sw, out=out)
"""
FUSED_WRONG = """def fp8_decode_fused(x, wq, sw, out=None):  # answers zeros
    out = torch.empty(x.shape[0], wq.shape[0], dtype=x.dtype, device=x.device) if out is None else out
    return out.zero_()
"""
FUSED_UNFINISHED = """def fp8_decode_fused(x, wq, sw, out=None):
    raise NotImplementedError()
"""


DECODE_UNFINISHED = """def fp8_decode(xq, sx, wq, sw, out=None):
    raise NotImplementedError()
"""


def test_a_working_fp8_decode_stays_the_decode_beside_a_working_fused_one(tmp_path, capsys):
    """Measured on the H200 (docs/decode-step-h200.md): the one-launch kernel is slower than x quantized once, then
    fp8_decode, so the capstone keeps the latter and says why."""
    _with_cells("fp8", tmp_path, ("ex6_fused", FUSED_RIGHT))
    ks = capstone.load_kernels(tmp_path, formats=("fp8",), device="cpu")["fp8"]
    assert ks.source["decode"] == "yours (fp8_decode)"
    assert f"FP8: {loader.FUSED_NOT_TAKEN}" in capsys.readouterr().out


def test_fp8_decode_fused_is_the_decode_where_fp8_decode_fails(tmp_path, capsys, monkeypatch):
    _with_cells("fp8", tmp_path, ("ex4_decode", DECODE_UNFINISHED))  # the solution's own fp8_decode_fused
    seen = []
    adapt = loader._adapt

    def spy(fmt, part, fn, quantize_act, **kw):  # which function each adapted part calls
        wrapped = adapt(fmt, part, fn, quantize_act, **kw)
        return lambda *a, **k: (seen.append(fn.__name__), wrapped(*a, **k))[1]

    monkeypatch.setattr(loader, "_adapt", spy)
    ks = capstone.load_kernels(tmp_path, formats=("fp8",), device="cpu")["fp8"]
    text = capsys.readouterr().out
    assert ks.source == {"quantize": "yours (quantize_fp8)", "prefill": "yours (fp8_matmul)",
                         "decode": "yours (fp8_decode_fused)"}  # fmt: skip
    assert "FP8: your quantizer, prefill and decode kernels from" in text
    assert (
        "FP8: the decode kernel is your `fp8_decode_fused` (x quantized inside the kernel), as your `fp8_decode` fails"
        in text
    )
    wq, sw = capstone.reference_quantize("fp8", torch.randn(24, 64))
    x = torch.randn(2, 64).half()
    seen.clear()
    y = ks.decode(x, wq, sw)
    assert seen == ["fp8_decode_fused"]  # one call: x is not quantized outside
    checks.compare(y, capstone.reference_matmul("fp8", x, (wq, sw)), what="fp8 decode", rtol=4e-3)
    capstone.kernel_table({"fp8": ks})
    assert "yours (fp8_decode_fused)" in capsys.readouterr().out


@pytest.mark.parametrize(("source", "why"), [(FUSED_WRONG, "exercise 6 fails a quick self-check: fp8 decode"),
                                             (FUSED_UNFINISHED, "exercise 6 unfinished")])  # fmt: skip
def test_fp8_decode_fused_is_refused_with_the_reason(tmp_path, capsys, source, why):
    _with_cells("fp8", tmp_path, ("ex4_decode", DECODE_UNFINISHED), ("ex6_fused", source))
    ks = capstone.load_kernels(tmp_path, formats=("fp8",), device="cpu")["fp8"]
    text = capsys.readouterr().out
    assert ks.source["decode"] == "reference"
    line = next(ln for ln in text.splitlines() if "`fp8_decode_fused`" in ln)
    assert line.startswith(f"FP8: `fp8_decode_fused` not used either ({why}")
    assert line.endswith("; the decode is the reference path")


ROWS_WRONG = """def quantize_fp8_rows(x, xq=None, sx=None):  # scales right, codes truncated
    M, K, xq, sx = fp8.prepare_rows(x, xq, sx)
    cfg = fp8.rows_config(M, K, x.device.type)
    quantize_rows_kernel[(M,)](x, xq.view(torch.uint8), sx, K, x.stride(0), x.stride(1), **cfg)
    xq.view(torch.uint8).bitwise_and_(0xFE)
    return xq, sx
"""


def test_fp8s_activations_are_quantized_by_the_one_launch_kernel_where_it_passes(
    tmp_path, capsys, monkeypatch
):
    """Exercise 7's quantize_fp8_rows quantizes x for every FP8 kernel call (measured: docs/decode-step-h100.json);
    a wrong one is refused with the reason, and x goes through PyTorch operations as before."""
    shutil.copytree(ROOT / "solutions" / "fp8", tmp_path / "fp8")
    calls = []
    code = loader._import_code

    def spy(source, name):  # count the notebook's quantize_fp8_rows calls
        module = code(source, name)
        rows = module.quantize_fp8_rows
        module.quantize_fp8_rows = lambda *a, **k: (calls.append(1), rows(*a, **k))[1]
        return module

    monkeypatch.setattr(loader, "_import_code", spy)
    ks = capstone.load_kernels(tmp_path, formats=("fp8",), device="cpu")["fp8"]
    assert "FP8: x is quantized by your `quantize_fp8_rows` (one launch a call)" in capsys.readouterr().out
    wq, sw = capstone.reference_quantize("fp8", torch.randn(24, 64))
    x = torch.randn(2, 64).half()
    calls.clear()
    checks.compare(ks.decode(x, wq, sw), capstone.reference_matmul("fp8", x, (wq, sw)), what="fp8", rtol=4e-3)
    assert calls == [1]
    monkeypatch.setattr(loader, "_import_code", code)
    _with_cells("fp8", tmp_path / "wrong", ("ex7_rows", ROWS_WRONG))
    ks = capstone.load_kernels(tmp_path / "wrong", formats=("fp8",), device="cpu")["fp8"]
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "quantize_fp8_rows" in ln)
    assert line == ("FP8: `quantize_fp8_rows` not used (exercise 7 fails a quick self-check: codes or scales not "
                    "bit-exact with the reference quantizer); x is quantized by PyTorch operations")  # fmt: skip
    assert ks.source["decode"] == "yours (fp8_decode)"


def test_a_notebook_without_fp8_decode_fused_says_nothing_of_it(tmp_path, capsys):
    _with_cells(
        "fp8", tmp_path, ("ex6_fused", "del fp8_decode_fused\n" if _solution_has_fused() else "pass\n")
    )
    ks = capstone.load_kernels(tmp_path, formats=("fp8",), device="cpu")["fp8"]
    assert ks.source["decode"] == "yours (fp8_decode)"
    assert "`fp8_decode_fused`" not in capsys.readouterr().out


def _solution_has_fused() -> bool:
    return "def fp8_decode_fused(" in (ROOT / "solutions" / "fp8" / "fp8.ipynb").read_text()


# ----------------------------------------------------------------------------------------------------------
# W4A16 through the layouts chapter's decode


def test_the_layouts_line_on_a_machine_without_a_gpu(tmp_path, capsys):
    """No GPU: one line says why, and W4A16's kernel set is chapter 2's as before (or the reference path)."""
    shutil.copytree(ROOT / "solutions" / "w4a16", tmp_path / "w4a16")
    shutil.copytree(ROOT / "solutions" / "layouts", tmp_path / "layouts")
    ks = capstone.load_kernels(tmp_path, formats=("w4a16",), device="cpu")["w4a16"]
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("layouts")]
    assert lines == ["layouts: needs a CUDA GPU (sm_80+) with Gluon; W4A16 decodes with chapter 2's kernel"]
    assert ks.source["decode"] == "yours (w4a16_decode)" and not isinstance(ks.decode, loader.RepackedDecode)
    ks = capstone.load_kernels(tmp_path / "none", formats=("w4a16",), device="cpu")["w4a16"]
    assert "layouts: needs a CUDA GPU (sm_80+) with Gluon; W4A16 decodes with the reference path" in (
        capsys.readouterr().out
    )


# The kernel stood in for by the chapter's PyTorch model of its program (exercise 2b): what the self-check sees of
# the words is the same, and it runs on the CPU.
LANE_KERNEL = """def w4a16_mma_decode(x, words, scales, zeros, group_size, N, out=None):
    y = lane_decode(x, words, scales, zeros, group_size, N).to(x.dtype)
    return y if out is None else out.copy_(y)
"""
REPACK_WRONG = """_repack = repack

def repack(packed):  # the tiles' rows in the wrong order
    return _repack(packed).flip(2).contiguous()
"""


@pytest.fixture
def gpu_here(monkeypatch):
    """As on a GPU with Gluon: the layouts chapter is loaded and self-checked (on the CPU, with the lane model)."""
    monkeypatch.setattr(loader, "_layouts_why_not", lambda device: "")


def test_the_layouts_decode_replaces_w4a16s_where_it_passes(tmp_path, capsys, gpu_here):
    shutil.copytree(ROOT / "solutions" / "w4a16", tmp_path / "w4a16")
    _with_cells("layouts", tmp_path, ("ex3_lane", LANE_KERNEL))
    ks = capstone.load_kernels(tmp_path, formats=("w4a16",), device="cpu")["w4a16"]
    text = capsys.readouterr().out
    assert ks.source["decode"] == "yours (w4a16_mma_decode, repacked at load)"
    assert (
        isinstance(ks.decode, loader.RepackedDecode) and len(ks.decode.words) == 0
    )  # the check's weights freed
    assert "layouts: your w4a16_mma_decode from" in text and "other x go to chapter 2's kernel" in text
    capstone.kernel_table({"w4a16": ks})
    assert "yours (w4a16_mma_decode, repacked at load)" in capsys.readouterr().out


@pytest.mark.parametrize(("cell", "why"), [
    (("ex1b_wrong", REPACK_WRONG), "`w4a16_mma_decode` not used (exercise 1b fails a quick self-check: your repack's words differ"),
    (("ex3_lane", LANE_KERNEL.replace("lane_decode(x, words, scales, zeros,", "lane_decode(x, words, scales, zeros + 1,")),
     "`w4a16_mma_decode` not used (exercise 3 fails a quick self-check: w4a16 decode"),
    (("ex3_lane", "del w4a16_mma_decode\n"), "no `w4a16_mma_decode` in"),
])  # fmt: skip
def test_the_layouts_decode_is_refused_with_the_reason(tmp_path, capsys, gpu_here, cell, why):
    shutil.copytree(ROOT / "solutions" / "w4a16", tmp_path / "w4a16")
    cells = [cell] if cell[0] != "ex1b_wrong" else [("ex3_lane", LANE_KERNEL), cell]
    _with_cells("layouts", tmp_path, *cells)
    ks = capstone.load_kernels(tmp_path, formats=("w4a16",), device="cpu")["w4a16"]
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("layouts"))
    assert line.startswith(f"layouts: {why}"), line
    assert line.endswith("; W4A16 decodes with chapter 2's kernel")
    assert ks.source["decode"] == "yours (w4a16_decode)"


GLUON_GPU = pytest.mark.skipif(
    not torch.cuda.is_available() or bool(loader._layouts_why_not("cuda")),
    reason="needs a CUDA GPU (sm_80+) with Gluon",
)


@GLUON_GPU
def test_on_a_gpu_the_solutions_layouts_decode_is_w4a16s_and_replays_in_a_graph():
    """The course's solutions as a learner's: W4A16's decode is the layouts kernel, right at 1 and 16 rows, chapter 2's
    for fp16 x, and 17 rows refused as chapter 2's decode refuses them (QuantLinear sends them to the prefill); the
    weight repacked once; a CUDA graph captured after the first call replays it."""
    ks = capstone.load_kernels(ROOT / "solutions", formats=("w4a16",), device="cuda", verbose=False)["w4a16"]
    assert ks.source["decode"] == "yours (w4a16_mma_decode, repacked at load)"
    _right_once_repacked_and_replayed(ks, 17, "w4a16_decode takes at most 16 rows, got M = 17")


def _right_once_repacked_and_replayed(ks, rows_refused: int | None = None, refusal: str = "") -> None:
    """A layouts decode on the GPU: right at 1 and 16 rows of bf16 x and for fp16 x (the chapter's decode), rows_refused
    rows refused with `refusal`, the weight repacked once; a CUDA graph captured after the first call replays it."""
    dec, fmt = ks.decode, ks.fmt
    g = torch.Generator(device="cuda").manual_seed(0)
    stored = ks.quantize(torch.randn(1024, 4096, device="cuda", generator=g) * 0.02)
    for M, dtype in ((1, torch.bfloat16), (16, torch.bfloat16), (3, torch.float16)):
        x = torch.randn(M, 4096, device="cuda", generator=g).to(dtype)
        checks.compare(dec(x, *stored).float(), capstone.reference_matmul(fmt, x, stored), what=f"M = {M} {dtype}",
                       rtol=4 * checks.tolerance_for(dtype))  # fmt: skip
    if rows_refused:
        with pytest.raises(ValueError, match=refusal):
            dec(torch.randn(rows_refused, 4096, device="cuda", generator=g).bfloat16(), *stored)
    assert len(dec.words) == 1
    x = torch.randn(1, 4096, device="cuda", generator=g).bfloat16()
    out = torch.empty(1, 1024, device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dec(x, *stored, out=out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    checks.compare(out.float(), capstone.reference_matmul(fmt, x, stored), what="replayed",
                   rtol=4 * checks.tolerance_for(torch.bfloat16))  # fmt: skip
    assert len(dec.words) == 1


# ----------------------------------------------------------------------------------------------------------
# MXFP4 and NVFP4 through the course's Gluon fp4 decode on the layouts bonus's repack_fp4


def _fp4_kernel_on_the_cpu(x, words, scales, g, N, out=None):
    """mma_decode.decode_fp4 stood in for by the course's torch model of its decoding (decode_like_kernel_fp4): it
    reads the words, so words out of place give a wrong product."""
    from qmatmul.formats import fp4 as fp4_format
    from qmatmul.kernels import mma_repack

    block = 32 if g is None else 16
    values = mma_repack.decode_like_kernel_fp4(words, N, block)
    scale = fp4_format.e8m0_decode(scales) if g is None else fp4_format.e4m3_decode(scales) * g.float()
    y = (x.float() @ (values * scale.repeat_interleave(block, dim=1)).T).to(x.dtype)
    return y if out is None else out.copy_(y)


FP4_FORMATS = ("mxfp4", "nvfp4")


@pytest.fixture
def fp4_kernel_here(monkeypatch, gpu_here):
    monkeypatch.setattr(loader.mma_decode, "decode_fp4", _fp4_kernel_on_the_cpu)


def _fp4_chapters(tmp_path):
    for fmt in FP4_FORMATS:
        shutil.copytree(ROOT / "solutions" / fmt, tmp_path / fmt)


def test_the_fp4_decodes_run_the_course_kernel_on_the_bonus_repack(tmp_path, capsys, fp4_kernel_here):
    """The layouts solution's repack_fp4 is the course's: MXFP4's and NVFP4's decodes become the course's kernel on
    its words, said so, each format's chapter decode kept for the x the kernel does not take."""
    _fp4_chapters(tmp_path)
    shutil.copytree(ROOT / "solutions" / "layouts", tmp_path / "layouts")
    sets = capstone.load_kernels(tmp_path, formats=FP4_FORMATS, device="cpu")
    text = capsys.readouterr().out
    for fmt, label in (("mxfp4", "MXFP4"), ("nvfp4", "NVFP4")):
        ks = sets[fmt]
        assert (
            isinstance(ks.decode, loader.RepackedFp4Decode)
            and ks.source["decode"] == loader.LAYOUTS_FP4_SOURCE
        )
        assert "your repack_fp4 words from" in text and f"is {label}'s decode" in text
        assert (
            ks.decode.block == loader.FP4_BLOCKS[fmt] and len(ks.decode.words) == 0
        )  # the check's weights freed
        stored = capstone.reference_quantize(
            fmt, torch.randn(48, 256, generator=torch.Generator().manual_seed(3))
        )
        x = torch.randn(2, 256).bfloat16()
        checks.compare(ks.decode.mma(x, *stored).float(), capstone.reference_matmul(fmt, x, stored), what=fmt,
                       rtol=4 * checks.tolerance_for(x.dtype))  # fmt: skip
    assert text.count("other x go to its chapter's kernel") == 2


REPACK_FP4_WRONG = """_repack_fp4 = repack_fp4

def repack_fp4(packed, block):  # the lanes in the wrong order
    return _repack_fp4(packed, block).flip(2).contiguous()
"""


@pytest.mark.parametrize(("cell", "why"), [
    (("ex4_wrong", REPACK_FP4_WRONG),
     "`repack_fp4` not used (the bonus fails a quick self-check: your repack_fp4's words differ from the course's"),
    (("ex4_gone", "del repack_fp4\n"), "no `repack_fp4` in"),
])  # fmt: skip
def test_a_wrong_or_missing_repack_fp4_keeps_the_chapters_decode(
    tmp_path, capsys, fp4_kernel_here, cell, why
):
    _fp4_chapters(tmp_path)
    _with_cells("layouts", tmp_path, cell)
    sets = capstone.load_kernels(tmp_path, formats=FP4_FORMATS, device="cpu")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("layouts")]
    assert len(lines) == 2 and all(ln.startswith(f"layouts: {why}") for ln in lines), lines
    assert lines[0].endswith("; MXFP4 decodes with its chapter's kernel") and lines[1].endswith("NVFP4 decodes with "
                                                                                                "its chapter's kernel")  # fmt: skip
    assert {sets[f].source["decode"] for f in FP4_FORMATS} == {"yours (mxfp4_decode)", "yours (nvfp4_decode)"}


def test_without_a_gpu_each_fp4_format_says_why_it_keeps_its_chapters_decode(tmp_path, capsys):
    _fp4_chapters(tmp_path)
    shutil.copytree(ROOT / "solutions" / "layouts", tmp_path / "layouts")
    sets = capstone.load_kernels(tmp_path, formats=("w4a16", *FP4_FORMATS), device="cpu")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("layouts")]
    assert lines == ["layouts: needs a CUDA GPU (sm_80+) with Gluon; W4A16 decodes with the reference path",
                     "layouts: needs a CUDA GPU (sm_80+) with Gluon; MXFP4 decodes with its chapter's kernel",
                     "layouts: needs a CUDA GPU (sm_80+) with Gluon; NVFP4 decodes with its chapter's kernel"]  # fmt: skip
    assert not any(isinstance(sets[f].decode, loader.RepackedDecode) for f in sets)


def test_x_the_fp4_kernel_cannot_take_goes_to_the_chapters_decode():
    """The predicate mirrors mma_decode.decode_fp4's rules: bf16 x of 1 to 16 rows, K a multiple of 64, the uint8
    scale codes of the format's block, NVFP4's float32 global scale, out with unit stride along N."""
    f = _Fakes()
    fallback = lambda x, packed, *stored, out=None: f.ran.append(("fallback", None))  # noqa: E731
    for fmt, block in loader.FP4_BLOCKS.items():
        dec = loader.RepackedFp4Decode(block, lambda p, b: f.repack(p), fallback, device_type="cpu",
                                       decode=lambda x, words, scales, g, N, out=None: f.ran.append(("mma", g)))  # fmt: skip
        w = capstone.reference_quantize(fmt, torch.randn(32, 256))
        x = torch.randn(16, 256).bfloat16()
        assert dec.takes(x, *w) and dec.takes(x[:1], *w)
        dec(x, *w)
        assert f.ran[-1][0] == "mma" and (f.ran[-1][1] is None) == (fmt == "mxfp4")
        other = capstone.reference_quantize("nvfp4" if fmt == "mxfp4" else "mxfp4", torch.randn(32, 256))
        refused = {
            "fp16 x": (x.half(), w, None),
            "17 rows": (torch.randn(17, 256).bfloat16(), w, None),
            "no rows": (x[:0], w, None),
            "K = 160": (
                torch.randn(2, 160).bfloat16(),
                capstone.reference_quantize(fmt, torch.randn(32, 160)),
                None,
            ),
            "the other format's scales": (x, other, None),
            "out strided along N": (x, w, torch.empty(32, 16, dtype=torch.bfloat16).T),
        }
        for what, (xx, ww, out) in refused.items():
            assert not dec.takes(xx, *ww, out=out), (fmt, what)
        for what in ("fp16 x", "17 rows", "K = 160"):
            xx, ww, out = refused[what]
            dec(xx, *ww, out=out)
            assert f.ran[-1] == ("fallback", None), (fmt, what)
        assert not loader.RepackedFp4Decode(block, f.repack, fallback).takes(x, *w)  # the default: CUDA only


@GLUON_GPU
@pytest.mark.parametrize("fmt", FP4_FORMATS)
def test_on_a_gpu_the_solutions_fp4_decode_is_the_course_kernel_and_replays_in_a_graph(fmt):
    """The course's solutions as a learner's: the fp4 decode is the Gluon kernel on repack_fp4's words, right at 1 and
    16 rows, the chapter's decode for fp16 x; repacked once; a CUDA graph captured after the first call replays it."""
    ks = capstone.load_kernels(ROOT / "solutions", formats=(fmt,), device="cuda", verbose=False)[fmt]
    assert ks.source["decode"] == loader.LAYOUTS_FP4_SOURCE
    _right_once_repacked_and_replayed(ks)


# ----------------------------------------------------------------------------------------------------------
# The repack cache


def _w4(N: int, K: int, seed: int = 0):
    return capstone.reference_quantize(
        "w4a16", torch.randn(N, K, generator=torch.Generator().manual_seed(seed))
    )


class _Fakes:
    """A repack that counts its calls, a decode and a fallback that say which ran (and with which words)."""

    def __init__(self):
        self.repacked, self.ran = [], []

    def repack(self, packed):
        assert packed.device.type == "cpu"
        self.repacked.append(packed.clone())
        return packed.to(torch.int32) + 1000 * len(self.repacked)

    def decode(self, x, words, scales, zeros, group_size, N, out=None):
        assert group_size == capstone.GROUP and N == scales.shape[0]
        self.ran.append(("mma", int(words.flatten()[0]) // 1000))
        return torch.zeros(x.shape[0], N, dtype=x.dtype)

    def fallback(self, x, packed, scales, zeros, out=None):
        self.ran.append(("fallback", None))
        return torch.zeros(x.shape[0], packed.shape[0], dtype=x.dtype)


def test_the_repack_cache_repacks_once_per_weight():
    f = _Fakes()
    dec = loader.RepackedDecode(f.repack, f.decode, f.fallback, device_type="cpu")
    a, b = _w4(32, 256, 0), _w4(48, 256, 1)
    x = torch.randn(3, 256).bfloat16()
    for _ in range(3):
        dec(x, *a)
    assert len(f.repacked) == 1 and torch.equal(f.repacked[0], a[0])
    assert f.ran == [("mma", 1)] * 3  # the first repack's words, every call
    dec(x, *b)
    dec(x, *a)
    assert (
        len(f.repacked) == 2 and torch.equal(f.repacked[1], b[0]) and f.ran[-2:] == [("mma", 2), ("mma", 1)]
    )
    assert len(dec.words) == 2
    del b
    gc.collect()
    assert len(dec.words) == 1  # a freed weight frees its words
    a[0].copy_(_w4(32, 256, 2)[0])  # changed in place (load_state_dict): repacked again
    dec(x, *a)
    assert len(f.repacked) == 3 and torch.equal(f.repacked[2], a[0]) and f.ran[-1] == ("mma", 3)
    with torch.inference_mode():  # an inference tensor has no version counter: repacked once all the same
        c = tuple(t.clone() for t in _w4(16, 256, 3))
    dec(x, *c)
    dec(x, *c)
    assert len(f.repacked) == 4


def test_x_the_kernel_cannot_take_goes_to_chapter_2s_decode():
    """The predicate mirrors the layouts chapter's prepare: bf16 x of 1 to 16 rows, K a multiple of the group (and so
    of repack's 64), out with unit stride along N, on the kernel's device type."""
    f = _Fakes()
    dec = loader.RepackedDecode(f.repack, f.decode, f.fallback, device_type="cpu")
    w = _w4(32, 256)
    x = torch.randn(16, 256).bfloat16()
    assert dec.takes(x, *w) and dec.takes(x[:1], *w)
    ragged = (
        torch.zeros(32, 96, dtype=torch.uint8),
        torch.ones(32, 1),
        torch.zeros(32, 1, dtype=torch.uint8),
    )
    refused = {
        "fp16 x": (x.half(), w, None),
        "17 rows": (torch.randn(17, 256).bfloat16(), w, None),
        "no rows": (x[:0], w, None),
        "K = 192, not a multiple of the group": (torch.randn(2, 192).bfloat16(), ragged, None),
        "out strided along N": (x, w, torch.empty(32, 16, dtype=torch.bfloat16).T),
        "another device type": (x.to("meta"), tuple(t.to("meta") for t in w), None),
    }
    for what, (xx, ww, out) in refused.items():
        assert not dec.takes(xx, *ww, out=out), what
    for what, (xx, ww, out) in list(refused.items())[:-1]:
        dec(xx, *ww, out=out)
        assert f.ran[-1] == ("fallback", None), what
    assert f.repacked == []  # nothing repacked for x the kernel does not take
    assert not loader.RepackedDecode(f.repack, f.decode, f.fallback).takes(x, *w)  # the default: CUDA only


# ----------------------------------------------------------------------------------------------------------
# tools/decode_step.py's rows of the two


def test_a_decode_step_prepares_each_activation_once_a_block():
    """FP8's x quantized once per activation: q, k and v share one, gate and up another (4 a block in both layouts),
    and each Linear reads the prepared x of its own activation."""
    from tools import decode_step

    for layout in decode_step.LAYOUTS.values():
        prepared, called = [], []
        path = decode_step.Path_("p", "bf16", lambda N, K, g: (N, K),
                                 lambda xp, w, called=called: called.append((xp, w)),
                                 prepare=lambda x, p=prepared: p.append(x) or ("q", len(p)))  # fmt: skip
        small = {name: (N // 512, K // 512) for name, (N, K) in layout.items()}
        decode_step.step_fn(
            path, small, 2, 1, torch.float16, torch.Generator().manual_seed(0), device="cpu"
        )()
        assert len(prepared) == 2 * 4
        by_input = {}
        for name, (xp, _) in zip([*small] * 2, called, strict=True):
            by_input.setdefault((decode_step.INPUT_OF[name], xp[1] > 4), set()).add(xp)
        assert all(len(v) == 1 for v in by_input.values()) and len(by_input) == 8


def test_decode_step_has_the_faster_decodes_rows(capsys):
    from tools import decode_step

    sol = {"fp8": course.load_notebook_code("fp8", name="step_test_fp8"),
           "layouts": course.load_notebook_code("layouts", name="step_test_layouts")}  # fmt: skip
    rows = {p.label: p for p in decode_step.paths(sol, torch.float16, "cpu", with_skipped=True)}
    fused, mma = rows[decode_step.FP8_FUSED_LABEL], rows[decode_step.MMA_SOLUTION_LABEL]
    assert decode_step.FP8_FUSED_LABEL == "solution fp8_decode_fused (x quantized inside the kernel)"
    assert decode_step.MMA_SOLUTION_LABEL == "solution w4a16_mma_decode (layouts chapter, repacked at load)"
    assert (fused.fmt, mma.fmt) == ("fp8", "w4a16")
    assert (
        mma.skip == "needs a CUDA GPU of sm_80 or newer" or "Gluon" in mma.skip
    )  # the interpreter cannot run it
    runnable = [p.label for p in decode_step.paths(sol, torch.float16, "cpu")]
    assert mma.label not in runnable
    assert fused.skip == "" and fused.label in runnable  # the solution's kernel, in the interpreter
    g = torch.Generator().manual_seed(0)
    state, x = fused.make(48, 256, g), torch.randn(2, 256, generator=g).half()
    checks.compare(fused.call(x, state).float(), fused.reference(x, state).float(), what="fused", rtol=4e-3)
    once = rows[decode_step.ROWS_LABEL]  # exercise 7's kernel, then exercise 4's decode
    assert once.skip == "" and once.label in runnable
    checks.compare(once.call(once.prepared(x), state).float(), once.reference(x, state).float(), what="rows",
                   rtol=4e-3)  # fmt: skip
    missing = {p.label: p.skip for p in decode_step.paths({}, torch.float16, "cpu", with_skipped=True)}
    assert missing[decode_step.FP8_FUSED_LABEL] == "the fp8 solution notebook did not load"
    assert missing[decode_step.MMA_SOLUTION_LABEL] == "the layouts solution notebook did not load"
    chosen = decode_step.runnable_paths(sol, torch.float16, ["mma_decode", "fused"], "cpu")
    assert mma.label not in [p.label for p in chosen]
    assert f"skipped: {mma.label}: {mma.skip}" in capsys.readouterr().out
