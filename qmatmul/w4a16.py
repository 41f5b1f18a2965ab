"""Chapter W4A16: the names its notebook reaches as `w4a16.<name>`, gathered from the rooms where they live.

qmatmul/formats/w4a16.py        the format: quantizer, packer, dequantizer, reference, the naive path, bytes
                                moved, the tinygemm and GPTQ layouts
qmatmul/scaffold/w4a16.py       what the learner's code may call (prepare, the launch configurations,
                                decode_split, the given helpers); its __all__ is this chapter's GIVEN
qmatmul/checks/w4a16.py         the trusted grading of the exercises: the graded shapes and threshold, test
                                inputs, known mistakes, check_quantizer, check_prefill, check_decode(_bandwidth),
                                the timed problem
qmatmul/checks/w4a16_bonus.py   the trusted grading of the bonuses: check_unpack_magic, check_from_gptq
qmatmul/teaching/w4a16.py       the teaching cells: explain_format, the nibble explorer, the error against the
                                group size, predictions, compare_paths
"""

from __future__ import annotations

from qmatmul.checks.w4a16 import (
    BANDWIDTH_GROUP,
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    check_decode,
    check_decode_bandwidth,
    check_prefill,
    check_quantizer,
    kernel_mistakes,
    random_packed,
    random_problem,
    random_weight,
    rounding_probe,
    timing_inputs,
    timing_weights,
)
from qmatmul.checks.w4a16_bonus import check_from_gptq, check_unpack_magic
from qmatmul.formats.w4a16 import (
    GPTQ_PACK,
    GROUP_SIZES,
    QMAX,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    gptq_dequantize,
    grouped,
    naive,
    pack,
    quantize,
    quantize_codes,
    reference,
    tinygemm_operands,
    to_gptq,
    unpack,
    unpack_int32,
)
from qmatmul.scaffold import w4a16 as scaffold
from qmatmul.scaffold.validation import ACT_DTYPES
from qmatmul.scaffold.w4a16 import (
    decode_config,
    decode_split,
    decoded_gemm,
    gptq_prepare,
    prefill_config,
    prepare,
)
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops
from qmatmul.teaching.w4a16 import (
    H200_RECORDED_US,
    compare_paths,
    error_against_group_size,
    explain_format,
    nibble_code,
    nibble_explorer,
    predictions,
)

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems): what the
# scaffold module exports.
GIVEN = {"qmatmul.w4a16": set(scaffold.__all__)}

__all__ = [
    # the format (qmatmul/formats/w4a16.py) and the roofline model's counts
    "GPTQ_PACK", "GROUP_SIZES", "QMAX", "bytes_moved", "bytes_moved_naive", "bytes_per_weight", "dequantize",
    "gptq_dequantize", "grouped", "naive", "pack", "quantize", "quantize_codes", "reference", "tinygemm_operands",
    "to_gptq", "unpack", "unpack_int32", "bytes_moved_dense", "flops",
    # what the learner's code may call (qmatmul/scaffold/)
    "GIVEN", "ACT_DTYPES", "prepare", "prefill_config", "decode_config", "decode_split", "decoded_gemm",
    "gptq_prepare",
    # the grading (qmatmul/checks/w4a16.py, qmatmul/checks/w4a16_bonus.py)
    "BANDWIDTH_SHAPE", "BANDWIDTH_GROUP", "BANDWIDTH_MS", "BANDWIDTH_THRESHOLD", "random_weight", "random_problem",
    "rounding_probe", "random_packed", "check_quantizer", "kernel_mistakes", "check_prefill", "check_decode",
    "check_decode_bandwidth", "timing_weights", "timing_inputs", "check_unpack_magic", "check_from_gptq",
    # the teaching cells (qmatmul/teaching/w4a16.py)
    "explain_format", "nibble_code", "nibble_explorer", "error_against_group_size", "H200_RECORDED_US",
    "predictions", "compare_paths",
]  # fmt: skip
