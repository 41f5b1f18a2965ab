"""The GPU sweep's candidate kernels (tools/sweep_decode.py) stay correct: each new W4A16 candidate passes the
sweep's own check in the interpreter, so a GPU session spends its minutes timing, not debugging."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("name", ["sub", "magic", "fold", "words", "lanes", "lanes-swap"])
def test_w4a16_candidates_pass_the_sweeps_check(name):
    from qmatmul import w4a16
    from tools import sweep_decode

    mods = {"w4a16": w4a16}
    cfg = dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1)
    fn = sweep_decode.make_fn("w4a16", mods, {"w4a16": None}, name, cfg, 2)  # split-K: the atomic path too
    sweep_decode.check("w4a16", mods, fn, 16, torch.float16, 5, device="cpu", N=80, K=512)
    if name in sweep_decode.WORD_KERNELS:  # ragged N against 32 columns, one row, one K slice
        fn = sweep_decode.make_fn("w4a16", mods, {"w4a16": None}, name, cfg, 1)
        sweep_decode.check("w4a16", mods, fn, 1, torch.float16, 6, device="cpu", N=80, K=512)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("name", ["lanes", "lanes-swap", "words", "words32"])
@pytest.mark.parametrize("M, split", [(16, 2), (1, 1)])
def test_fp4_word_candidates_pass_the_sweeps_check(fmt, name, M, split):
    """fp4_words in fp16 (the interpreter has no bf16 bit casts): the same decode with fp16's shift and 2^14."""
    from qmatmul import mxfp4, nvfp4
    from tools import sweep_decode

    mods = {"mxfp4": mxfp4, "nvfp4": nvfp4}
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=1)
    fn = sweep_decode.make_fn(fmt, mods, {fmt: None}, name, cfg, split)
    sweep_decode.check(fmt, mods, fn, M, torch.float16, 5, device="cpu", N=80, K=512)


def test_the_fp8_accumulation_variants_pass_the_visible_check():
    """tools/sweep_prefill.py's fp8acc part: the solution's GEMM as it is and with its partial sums promoted every
    BLOCK_K (max_num_imprecise_acc, which only sm_90 acts on) both compute the product here."""
    from qmatmul import fp8
    from tools import sweep_prefill

    variants = sweep_prefill.fp8acc_variants()
    assert set(variants) == {"imprecise", "promoted", "promoted128"}
    for name, sol in variants.items():
        if name != "promoted128":  # max_num_imprecise_acc must not exceed BLOCK_K, 64 on a CPU
            fp8.check_matmul(sol.fp8_matmul)


def test_the_bf16_e2m1_decode_bit_arithmetic():
    """fp4_words' bf16 decode (the interpreter has no bf16 bit casts, so the GPU alone runs it), emulated with the
    kernel's constants: nibbles NIB and NIB + 4 of a word, each moved to bits 8-6 of a 16-bit half with its sign at
    bit 15, are e2m1 times 2^-126 in bf16 (0.5 a subnormal), and one bf16 multiply by 2^126 gives the value."""
    from qmatmul.formats import fp4

    g = torch.Generator().manual_seed(0)
    words = torch.randint(0, 2**32, (64, 16), generator=g, dtype=torch.int64)  # uint32 values
    for nib in range(4):
        shift = 6 - 4 * nib
        t = (words << shift) if shift >= 0 else (words >> -shift)
        t = (t & ((7 << 6) * 0x10001)) | ((words << (12 - 4 * nib)) & 0x80008000)
        for half, k in ((0, nib), (16, nib + 4)):
            bits = ((t >> half) & 0xFFFF).to(torch.int32).to(torch.int16)  # wraps like the kernel's uint16
            v = bits.view(torch.bfloat16) * torch.tensor(2.0**126, dtype=torch.bfloat16)
            codes = (words >> (4 * k)) & 0xF
            assert torch.equal(v.float(), fp4.e2m1_decode(codes.to(torch.uint8)).float())


def test_the_gemmtma_block_reference_is_the_course_reference():
    """tools/sweep_prefill.py's gemmtma part counts the block-scaled GEMM's wrong outputs against a float32 reference
    on the GPU: it equals fp8.block_reference on a ragged problem."""
    from qmatmul import checks, fp8
    from tools import sweep_prefill

    p = fp8.random_block_problem(40, 200, 320, "cpu", checks.generator(6))
    checks.compare(sweep_prefill.block_reference_fp32(*p), fp8.block_reference(*p), what="fp32 block reference",
                   rtol=1e-5)  # fmt: skip


def test_the_prefill_sweep_counts_wrong_outputs_at_a_shape_no_tile_divides():
    """tools/sweep_prefill.py checks each GEMM candidate at RAGGED too (a sixth-round candidate was right at the
    timed shape and wrong off it): that shape is ragged for every tile the sweep lists, and the count it takes is 0
    for the group-scaled GEMM and not 0 with the scales on the wrong rows (fp16: the interpreter's bf16 dot is wrong)."""
    from qmatmul import checks
    from qmatmul.kernels import gemm
    from tools import sweep_prefill

    Mr, Nr, _ = sweep_prefill.RAGGED
    for tile in sweep_prefill.GROUP_TMA_TILES + sweep_prefill.GEMM_TMA_TILES:
        assert Mr % tile[0] and Nr % tile[1], tile
    x, (q, s), ref = sweep_prefill.group_problem(30, 100, 256, 128, "cpu", checks.generator(3))
    x, w = x.half(), (q.half(), s)
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, num_warps=4, num_stages=1, SWAP=True)

    def fn(x, w, o):
        return gemm.tma_matmul(x, w[0], o, sw=w[1], scales=gemm.GROUP_SCALES, group=128, **cfg)

    assert sweep_prefill.ragged_mismatches(fn, x, w, ref) == 0
    assert sweep_prefill.ragged_mismatches(lambda x, w, o: fn(x, (w[0], w[1].flip(0)), o), x, w, ref) > 0


@pytest.mark.parametrize("chapter", ["w8a16", "w4a16", "fp8", "mxfp4", "nvfp4"])
def test_layer_sweep_launches_reach_the_solution(chapter):
    """tools/sweep_layers.py replaces a chapter's config functions inside `launched_with`: the solution's decode
    then launches the candidate (its tiles reach the kernel, a candidate too large fails), and the chapter's own
    functions are back after the block. Its first and last candidates compute the product in the interpreter."""
    import importlib

    from qmatmul import checks, course
    from tools import decode_step, sweep_layers

    sol = {chapter: course.load_notebook_code(chapter, name=f"sweep_test_{chapter}")}
    path = next(
        p
        for p in decode_step.paths(sol, torch.float16, "cpu")
        if p.label.startswith(f"solution {chapter}_decode")
    )
    facade = importlib.import_module(f"qmatmul.{chapter}")
    before = facade.decode_config
    g = checks.generator(0)
    state = path.make(64, 512, g)
    x = torch.randn(1, 512, generator=g).half()
    want = path.reference(x, state).float()
    cands = sweep_layers.candidates(chapter)
    for cand in (cands[0], cands[-1]):
        cand = dict(cand, BLOCK_K=min(cand["BLOCK_K"], 256), num_stages=1)
        with sweep_layers.launched_with(chapter, cand):
            assert facade.decode_config(1, 64, 512, "cpu")["BLOCK_N"] == cand["BLOCK_N"]
            checks.compare(
                path.call(path.prepared(x), state).float(),
                want,
                what=str(cand),
                rtol=4 * checks.tolerance_for(torch.float16),
            )
    assert facade.decode_config is before


@pytest.mark.parametrize("design", ["swap", "fma", "fp8"])
@pytest.mark.parametrize("M, split", [(1, 1), (1, 4), (5, 2)])
def test_the_gemv_designs_compute_the_product(design, M, split):
    """tools/sweep_gemv.py's kernels (the weight first, split K; the CUDA cores at M = 1; FP8 with the weight first)
    match their format's reference on ragged N and a K its splits do not divide: the GPU's minutes go to timing."""
    from qmatmul import checks, fp8, w8a16
    from tools import sweep_gemv

    if design == "fma" and M > 1:
        pytest.skip("the CUDA-core design takes one row")
    g = checks.generator(0, "cpu")
    N, K = 200, 768
    x = torch.randn(M, K, generator=g).half()
    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    cfg = dict(BLOCK_N=16 if design == "fma" else 64, BLOCK_K=256, SPLIT_K=split)
    if design == "fp8":
        wq, sw = fp8.timing_weights(N, K, g)
        sx = x.float().abs().amax(1).clamp_min(1e-12) / 448
        xq = (x.float() / sx[:, None]).to(fp8.E4M3)
        y, want = sweep_gemv.launch("fp8", xq, wq, sw, out, cfg, sx=sx), fp8.reference(xq, sx, wq, sw)
    else:
        q, s = w8a16.timing_weights(N, K, g)
        y, want = sweep_gemv.launch(design, x, q, s, out, cfg), w8a16.reference(x, q, s)
    checks.compare(y.float(), want, what=design, rtol=4 * checks.tolerance_for(torch.float16))


def test_the_gemv_table_shows_each_designs_best_launch():
    """sweep_gemv's table: one line per design and shape, its fastest launch, in whatever order the rows come."""
    from tools import sweep_gemv

    rows = [dict(design="swap", cand=dict(SPLIT_K=1), us=9.0, copy_frac=0.1),
            dict(design="swap", cand=dict(SPLIT_K=4), us=3.2, copy_frac=0.3),
            dict(design="fma", cand={}, error="out of resources")]  # fmt: skip
    lines = sweep_gemv.table([dict(format="w8a16", N=1024, K=4096, M=1, rows=rows)])
    assert lines[2:] == ["| w8a16 | 1024 × 4096 | 1 | swap | 3.2 | 30 | SPLIT_K=4 |"]
