"""Chapter W8A16: the names its notebook reaches as `w8a16.<name>`, gathered from the rooms where they live.

qmatmul/formats/w8a16.py    the format: quantizer, dequantizer, reference, the naive path, bytes moved
qmatmul/scaffold/w8a16.py   what the learner's code may call (prepare, the launch configurations, decode_first,
                            the given helpers); its __all__ is this chapter's GIVEN
qmatmul/checks/w8a16.py     the trusted grading: the graded shapes and threshold, test inputs, known mistakes,
                            every check_*, the timed problem
qmatmul/teaching/w8a16.py   the teaching cells: explain_format, predictions, compare_paths
"""

from __future__ import annotations

from qmatmul.checks.w8a16 import (
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    check_decode,
    check_decode_bandwidth,
    check_prefill,
    check_quantizer,
    kernel_mistakes,
    random_problem,
    random_weight,
    rounding_probe,
    split_mistakes,
    timing_inputs,
    timing_weights,
    traffic_feedback,
)
from qmatmul.formats.w8a16 import (
    QMAX,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    naive,
    quantize,
    reference,
)
from qmatmul.scaffold import w8a16 as scaffold
from qmatmul.scaffold.validation import ACT_DTYPES
from qmatmul.scaffold.w8a16 import (
    as_16bit,
    decode_config,
    decode_first,
    decoded_gemm,
    finish,
    k_slice,
    prefill_config,
    prepare,
    split_scratch,
    use_split,
)
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops
from qmatmul.teaching.w8a16 import H200_RECORDED_US, compare_paths, explain_format, predictions

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems): what the
# scaffold module exports.
GIVEN = {"qmatmul.w8a16": set(scaffold.__all__)}

__all__ = [
    # the format (qmatmul/formats/w8a16.py) and the roofline model's counts
    "QMAX", "bytes_moved", "bytes_moved_naive", "bytes_per_weight", "dequantize", "naive", "quantize", "reference",
    "bytes_moved_dense", "flops",
    # what the learner's code may call (qmatmul/scaffold/)
    "GIVEN", "ACT_DTYPES", "prepare", "prefill_config", "decode_config", "split_scratch", "decode_first", "as_16bit",
    "decoded_gemm", "k_slice", "finish", "use_split",
    # the grading (qmatmul/checks/w8a16.py)
    "BANDWIDTH_SHAPE", "BANDWIDTH_MS", "BANDWIDTH_THRESHOLD", "random_weight", "random_problem", "rounding_probe",
    "check_quantizer", "kernel_mistakes", "split_mistakes", "check_prefill", "check_decode", "check_decode_bandwidth",
    "timing_weights", "timing_inputs", "traffic_feedback",
    # the teaching cells (qmatmul/teaching/w8a16.py)
    "explain_format", "H200_RECORDED_US", "predictions", "compare_paths",
]  # fmt: skip
