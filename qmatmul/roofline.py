"""Chapter 0, the roofline: measure a GPU's two ceilings, count a Linear layer's bytes and FLOPs in every format,
predict its floor time and the naive round trip's, and check each of the learner's answers. The names its notebook
reaches as `roofline.<name>`, gathered from the rooms where they live:

    qmatmul/teaching/roofline_model.py   the model itself (ceilings, byte counts, floor time), which every chapter
                                         predicts with
    qmatmul/teaching/roofline.py         the teaching cells: measure_ceilings, naive_gap
    qmatmul/checks/roofline.py           the trusted grading: each exercise's cases, known mistakes and check_*, and
                                         the naive path measured against the learner's floor

The chapter gives the learner's code nothing of the course package (an empty GIVEN), so it has no scaffold module.
"""

from __future__ import annotations

from qmatmul.checks.roofline import (
    NAIVE_MS,
    bytes_mistakes,
    check_floor,
    check_linear_bytes,
    check_naive,
    check_naive_measured,
    naive_mistakes,
)
from qmatmul.teaching.roofline import measure_ceilings, naive_gap
from qmatmul.teaching.roofline_model import (
    FORMAT_TEXT,
    FORMATS,
    H200,
    LAYER_SHAPE,
    Ceilings,
    byte_parts,
    ceilings,
    floor_seconds,
    layer_numbers,
    model_bytes,
    model_bytes_naive,
    model_flops,
    print_predictions,
    recorded_ceilings,
)

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
GIVEN: dict = {}

__all__ = [
    # the roofline model (qmatmul/teaching/roofline_model.py)
    "FORMAT_TEXT", "FORMATS", "H200", "LAYER_SHAPE", "Ceilings", "byte_parts", "ceilings", "floor_seconds",
    "layer_numbers", "model_bytes", "model_bytes_naive", "model_flops", "print_predictions", "recorded_ceilings",
    "GIVEN",
    # the teaching cells (qmatmul/teaching/roofline.py)
    "measure_ceilings", "naive_gap",
    # the grading (qmatmul/checks/roofline.py)
    "bytes_mistakes", "check_linear_bytes", "check_floor", "naive_mistakes", "check_naive", "NAIVE_MS",
    "check_naive_measured",
]  # fmt: skip
