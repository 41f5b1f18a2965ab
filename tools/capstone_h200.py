"""The capstone's figures on a CUDA GPU, most important first, each saved as soon as it is measured: a Llama-3-8B
block through the solution's QuantLinear and kernels against the naive path, the solution graded by the trusted
grader (the stack-speed cell included), the quality table through the kernels, the model's time, the figure.
Writes capstone.json, capstone-quality.png and the printed tables into --out (docs/capstone-h200.md records one
run on the course's H200).

    QMATMUL_MINILM=<a model folder with model.safetensors, or a .pt state dict> python -m tools.capstone_h200 --out build/capstone
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="build/capstone")
    parser.add_argument(
        "--skip", default="", help="comma-separated steps to leave out (stack,trace,grade,quality,model)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))

    from qmatmul import environment

    env = environment.start("the capstone")
    import torch

    from qmatmul import capstone, course

    t0 = time.time()
    report = {"env": env.describe(), "torch": torch.__version__, "steps_s": {}}

    def save(step):
        report["steps_s"][step] = round(time.time() - t0, 1)
        (out / "capstone.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"({step} done at {time.time() - t0:.0f} s)", flush=True)

    sol = course.load_notebook_code("capstone")
    capstone.use_kernels(capstone.load_kernels(ROOT / "solutions"))  # the course's solutions as a learner's
    capstone.kernel_table()
    save("kernels")
    if "stack" not in skip:
        print("\n# A Llama-3-8B block", flush=True)
        report["step_us"] = {
            f"{k[0]} M={k[1]}": list(v) for k, v in capstone.time_llama_stack(sol.QuantLinear).items()
        }
        save("stack")
    if "trace" not in skip:
        print("\n# Where a captured block's time goes", flush=True)
        report["trace"] = capstone.trace_llama_block(sol.QuantLinear)
        save("trace")
    if "grade" not in skip:
        from autograder import grade_direct

        print("\n# The solution through the trusted grader", flush=True)
        report["grading"] = grade_direct.grade("capstone", {})
        for cell, r in report["grading"].items():
            print(f"{cell}: {r.points:g} ({r.seconds:.1f} s) {(r.message or r.said)[:300]}")
        save("grade")
    if "quality" not in skip:
        print("\n# Quality through the kernels", flush=True)
        report["quality"] = capstone.measure(sol.quantize_model, sol.spearman)
        save("quality")
        capstone.quality_figure(report["quality"]).savefig(out / "capstone-quality.png", dpi=110)
    if "model" not in skip:
        print("\n# The model's time", flush=True)
        report["model_us"] = {
            f"{k[0]} batch {k[1]}": v for k, v in capstone.time_model(sol.quantize_model).items()
        }
        save("model")
    print(f"\ndone in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
