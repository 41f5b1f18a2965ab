"""qmatmul.group_gemm, W4A16's group-scaled GEMM in Gluon for Hopper. Gluon has no interpreter: here the kernel is
compiled for sm_90 and its K loop read (each step's scaling must overlap the next step's wgmma: ptxas waits after
every wgmma when a product's registers are read or copied while one is in flight); on a Hopper GPU it is run
against the float64 product on ragged shapes."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from qmatmul import checks, gemm, group_gemm, w4a16


def loop(cfg: dict) -> dict:
    """tools/sass.py's group_gemm_loop(cfg), in a new process without TRITON_INTERPRET (tests/test_mma_decode.py's
    measured() says why)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=f"{ROOT / 'tools'}{os.pathsep}{ROOT}")
    script = f"import json, sass\nprint(json.dumps(sass.group_gemm_loop({cfg!r})))\n"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(group_gemm.gluon is None, reason="needs triton with Gluon")
@pytest.mark.parametrize("cfg", [{}, {"BLOCK_M": 64}])
def test_each_steps_scaling_overlaps_the_next_steps_mma(cfg):
    """Two steps a loop iteration: 16 HGMMAs (8 a 128-wide step) and one wait a step, not one an HGMMA; each thread
    scales its share of the product (64 or 32 FFMAs a step at 8 warps); nothing spilled."""
    r = loop(cfg)
    bm = cfg.get("BLOCK_M", 128)
    assert r["hgmma"] == 16 and r["waits"] == 2, r
    assert r["ffma"] == 2 * 128 * bm // 256 and r["spills"] == 0, r


def test_it_runs_only_where_it_can():
    x = torch.zeros(64, 128, dtype=torch.bfloat16)
    assert "Hopper" in group_gemm.why_not(x, x) or "Gluon" in group_gemm.why_not(x, x)


def _problem(M, N, K, G, dtype, seed):
    x, p, s, z = w4a16.random_problem(M, N, K, G, dtype, "cuda", checks.generator(seed))
    w = (w4a16.unpack(p).int() - z.int().repeat_interleave(G, dim=1)).to(dtype)
    return x, w, s, w4a16.reference(x, p, s, z, G)


HOPPER = (
    torch.cuda.is_available()
    and torch.cuda.get_device_capability() == (9, 0)
    and group_gemm.gluon is not None
)


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize(
    "M, N, K, G", [(520, 1000, 768, 128), (77, 72, 8192, 128), (300, 4000, 1024, 64), (129, 130, 640, 32),
                   (2048, 256, 128, 128), (600, 384, 256, 128)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_group_gemm_equals_the_reference(M, N, K, G, dtype):
    """Ragged M and N, an odd and an even number of steps (one step; two; 64), groups of 32-128, both dtypes; the
    output poisoned first, and a neighbour's columns left alone."""
    x, w, s, ref = _problem(M, N, K, G, dtype, M + N)
    full = torch.full((M, N + 8), float("nan"), dtype=dtype, device="cuda")
    y = group_gemm.group_gemm(x, w, s, G, full[:, :N])
    checks.compare(y, ref, what="group_gemm", rtol=checks.tolerance_for(dtype), poisoned=True)
    assert torch.isnan(full[:, N:].float()).all()
    other = gemm.decoded_gemm(x, w, torch.empty(M, N, dtype=dtype, device="cuda"), s=s, group_size=G)
    checks.compare(other, ref, what="decoded_gemm", rtol=checks.tolerance_for(dtype))
