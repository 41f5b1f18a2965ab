"""The capstone's figures on a CUDA GPU: quality per format through the solution kernels, the model's and a
Llama block's times, and the quality figure. Writes capstone.json, capstone-quality.png and the printed
tables into --out (docs/capstone-h200.md records one run on the course's H200).

    python tools/capstone_h200.py --out build/capstone
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="build/capstone")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from qmatmul import environment

    env = environment.start("the capstone")
    from qmatmul import capstone, course

    t0 = time.time()
    sol = course.load_notebook_code("capstone")
    capstone.use_kernels(capstone.load_kernels(ROOT / "solutions"))  # the course's solutions as a learner's
    capstone.describe_model()
    report = {"env": env.describe(), "backend": type(capstone.load_model()).__name__}
    print("\n# Quality through the kernels")
    report["quality"] = capstone.measure(sol.quantize_model, sol.spearman)
    print("\n# Quality on the reference path (PyTorch: dequantize, then matmul)")
    report["quality_reference_path"] = capstone.measure(
        sol.quantize_model, sol.spearman, kernels_mode="reference"
    )
    fig = capstone.quality_figure(report["quality"])
    fig.savefig(out / "capstone-quality.png", dpi=110)
    print("\n# Kernels against the reference path, every Linear")
    capstone.through_your_kernels(sol.QuantLinear)
    print(f"\n({time.time() - t0:.0f} s so far)\n# The model's time")
    report["model_us"] = {
        f"{k[0]} batch {k[1]}": v for k, v in capstone.time_model(sol.quantize_model).items()
    }
    print(f"\n({time.time() - t0:.0f} s so far)\n# A Llama-3-8B block")
    report["stack_us"] = {
        f"{k[0]} M={k[1]}": v for k, v in capstone.time_llama_stack(sol.QuantLinear).items()
    }
    (out / "capstone.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\ndone in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
