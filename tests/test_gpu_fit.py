"""The graded kernels on every GPU class a learner may have, from a CPU: docs/gpu-fit.json (tools/sass.py --fit)
records each launch compiled for each compute capability; these tests keep it true and current."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools import sass

ROOT = Path(__file__).resolve().parent.parent

DATA = json.loads(sass.FIT_JSON.read_text())


def test_every_graded_launch_compiles_and_fits_every_gpu_class():
    bad = [sass.describe(r) for r in DATA["rows"] if "error" in r or not (r.get("skipped") or r["fits"])]
    assert not bad, "\n".join(bad)
    assert {r["arch"] for r in DATA["rows"]} == set(sass.GPUS)


def test_decode_kernels_keep_their_registers():
    """The graded bandwidth cells time the decode kernels: a spill there is a slower kernel on that GPU class.
    W4A16's step is one whole group (BLOCK_K = G, which the notebook teaches), so on a T4 it keeps its spills."""
    spilled = [sass.describe(r) for r in DATA["rows"] if "decode" in r["label"] and r.get("spills")
               and not (r["label"] == "w4a16 decode" and r["arch"] < 80)]  # fmt: skip
    assert not spilled, "\n".join(spilled)


def test_the_tma_gemm_transposed_loads_two_group_scales_a_step():
    """qmatmul.kernels.gemm's TMA kernel compiled for sm_90 (tools/sass.py --tma): the group-scaled mode as shipped
    (accumulator transposed) loads each thread's two group scales a K step where the untransposed loop loads 32 with
    their addresses (docs/perf-notes.md, sixth round: 47 -> 72 % of cuBLAS on the H200); every shipped mode fits
    Hopper's shared memory without spills."""
    env = {
        k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"
    }  # compiled for the GPU, in a new process
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    script = "import json\nfrom tools import sass\nprint(json.dumps(sass.tma_report()))\n"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.splitlines()[-1])
    group, plain = report["tma-group"], report["tma-group-plain"]
    assert (group["ldg"], plain["ldg"]) == (2, 32)
    assert group["loop"] < plain["loop"] and group["ffma"] == plain["ffma"] == 64
    shipped = {k: v for k, v in report.items() if k != "tma-group-plain"}
    assert all(v["spills"] == 0 and v["shared"] <= sass.GPUS[90][1] for v in shipped.values()), shipped


def test_dot_scaled_multiplies_in_bf16_everywhere_as_the_chapter_says(monkeypatch):
    """mxfp4.dot_scaled_status tells a learner that Triton upcasts e2m1 to bf16 before the MMA, on Blackwell too;
    the compiled MMAs are what says so."""
    import triton.language  # noqa: F401 - imported under the interpreter first: triton reads the variable then

    from qmatmul import mxfp4

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the status of a compiled run
    rows = [r for r in DATA["rows"] if "dot_scaled" in r["label"]]
    assert {r["arch"] for r in rows if r.get("skipped")} == {a for a in sass.GPUS if a < 80}
    for r in rows:
        if not r.get("skipped"):
            # tcgen05's kind::f16 is its 16-bit float kind
            assert r["mma"].split()[-1] in ("bf16", "f16"), sass.describe(r)
            monkeypatch.setattr(
                torch.cuda, "get_device_capability", lambda *a, arch=r["arch"]: divmod(arch, 10)
            )
            assert "upcasts e2m1 to bf16" in mxfp4.dot_scaled_status()[1]


def test_the_record_is_current():
    """Each row's tiles are what the chapter's config function chooses today (a changed config must be compiled
    again: `python -m tools.sass --fit --write`), and docs/gpu-fit.md renders the JSON."""
    launches = {label: cfg for label, _, _, cfg in sass.launches()}
    assert {r["label"] for r in DATA["rows"]} == set(launches)
    for r in DATA["rows"]:
        with sass.capability(r["arch"]):
            assert json.loads(json.dumps(launches[r["label"]]())) == r["config"], (r["arch"], r["label"])
    assert sass.FIT_MD.read_text() == sass.render_fit(DATA)


def test_a_compile_reproduces_the_record_and_catches_a_tile_too_big():
    """One row compiled again here, and the H200's W8A16 decode tile on a T4 (128 KB of shared memory against
    64 KB), which the check must call a misfit."""
    script = (
        "import json\nfrom tools import sass\n"
        "rows = {l: (c, k, f) for l, c, k, f in sass.launches()}\n"
        "c, k, f = rows['w8a16 decode']\n"
        "now = sass.fit(75, 'w8a16 decode', c, k, f)\n"
        "h200 = sass.fit(75, 'w8a16 decode', c, k, lambda: dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, num_warps=4,"
        " num_stages=3, SPLIT_K=1))\n"
        "print(json.dumps([now, h200], default=str))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    now, h200 = json.loads(out.stdout.splitlines()[-1])
    recorded = next(r for r in DATA["rows"] if r["arch"] == 75 and r["label"] == "w8a16 decode")
    assert (now["shared"], now["spills"], now["fits"]) == (recorded["shared"], recorded["spills"], True)
    assert not h200["fits"] and h200["shared"] > h200["limit"]


@pytest.mark.parametrize(
    "listing, loop",
    [
        ([(0, "MOV R1, R2"), (16, "IADD3 R1, R1, 1"), (32, "@!P0 BRA 0x10"), (48, "EXIT")], 2),
        ([(0, "MOV R1, R2"), (16, "FFMA R1, R1, R2"), (32, "BRA.U !UP0, 0x0"), (48, "EXIT")], 3),
    ],
)
def test_the_main_loop_is_read_from_the_backward_branch(listing, loop):
    assert len(sass.main_loop(listing)) == loop


def test_a_kernel_without_a_loop_is_an_error():
    with pytest.raises(ValueError, match="no loop"):
        sass.main_loop([(0, "MOV R1, R2"), (16, "EXIT")])


# chapter -> (config function the wrapper calls, visible check, the solution's wrapper) for every kernel whose tiles
# a T4 changes. W4A16's decode keeps its tiles there (BLOCK_K = G).
T4_CELLS = {
    "w8a16": [("decode_config", "check_decode", "w8a16_decode"), ("prefill_config", "check_prefill", "w8a16_matmul")],
    "w4a16": [("prefill_config", "check_prefill", "w4a16_matmul")],
    "mxfp4": [("decode_config", "check_decode", "mxfp4_decode"), ("prefill_config", "check_prefill", "mxfp4_matmul")],
    "nvfp4": [("decode_config", "check_decode", "nvfp4_decode"), ("prefill_config", "check_prefill", "nvfp4_matmul")],
    "fp8": [("decode_config", "check_decode", "fp8_decode"), ("prefill_config", "check_matmul", "fp8_matmul"),
            ("block_config", "check_block_matmul", "fp8_block_matmul"),
            ("decode_config", "check_decode_fused", "fp8_decode_fused")],
}  # fmt: skip


@pytest.mark.parametrize("name", T4_CELLS)
def test_the_t4_tiles_run_the_solutions_correctly(name, monkeypatch):
    """The tiles a T4 takes (each config function answering for sm_75), run by the solution's own wrappers in the
    interpreter through the visible checks: the kernels are right with them (BLOCK_K = 32, narrow strips)."""
    import importlib

    from qmatmul import course
    from qmatmul.kernels import configs, gemm

    mod = importlib.import_module(f"qmatmul.{name}")
    sol = course.load_notebook_code(name, name=f"t4_{name}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    used = []
    for config, check, wrapper in T4_CELLS[name]:
        real = getattr(mod, config)

        def as_on_a_t4(*args, real=real):  # the wrappers pass the device last
            cfg = real(*args[:-1], "cuda")
            used.append(cfg)
            return cfg

        monkeypatch.setattr(mod, config, as_on_a_t4)
        getattr(mod, check)(getattr(sol, wrapper))
    if name == "w4a16":  # the decoded-weight GEMM of the three 4-bit chapters, with the tiles a T4 takes
        assert configs.gemm_config("cuda") == configs.gemm_config("cpu") == configs.FMA_TILED
        g = torch.Generator().manual_seed(0)
        x, w = (torch.randn(s, generator=g).to(torch.float16) for s in ((70, 96), (50, 96)))
        y = gemm.decoded_gemm(x, w, torch.empty(70, 50, dtype=torch.float16))
        torch.testing.assert_close(y.float(), x.float() @ w.float().T, rtol=1e-2, atol=1e-2)
    tiles = {(c["BLOCK_N"], c["num_warps"]) for c in used}
    assert used and tiles <= {
        (configs.FMA_DECODE["BLOCK_N"], 4),
        (configs.FMA_TILED["BLOCK_N"], 4),
        (32, 4),
    }, used
