"""Chapter MXFP4: the names its notebook, the tests, the tools and the autograder call as `mxfp4.<name>`; the code
lives in the rooms by role:

    qmatmul/formats/mxfp4.py    the format (shared exponent, quantizer, dequantizer, reference, naive path, bytes
                                moved); its element codecs are qmatmul/formats/fp4.py
    qmatmul/scaffold/mxfp4.py   what the learner's code may call (GIVEN): prepare, the launch configurations of the
                                tiled, decode and tl.dot_scaled kernels, divisible_k, decoded_gemm, BLOCK
    qmatmul/checks/mxfp4.py     the trusted grading: the timed shape and bandwidth bar, the test inputs, the known
                                mistakes, the checks of each exercise and of the tl.dot_scaled bonus, the timed weights
    qmatmul/teaching/mxfp4.py   the teaching cells: explain_format, the block explorer, the scale-rule figure, the
                                predictions and the cell that compares the paths
"""

from __future__ import annotations

from qmatmul.checks.mxfp4 import (
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    adversarial_weight,
    check_decode,
    check_decode_bandwidth,
    check_dot_scaled,
    check_prefill,
    check_quantizer,
    decode_shapes,
    dot_scaled_status,
    hidden_weights,
    kernel_mistakes,
    log2_weight,
    prefill_shapes,
    random_problem,
    random_weight,
    timing_inputs,
    timing_weights,
)
from qmatmul.formats.mxfp4 import (
    BLOCK,
    EMAX_E2M1,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    naive,
    quantize,
    quantize_codes,
    reference,
    shared_exponent,
)
from qmatmul.scaffold import mxfp4 as mxfp4_scaffold
from qmatmul.scaffold.mxfp4 import (
    decode_config,
    decoded_gemm,
    divisible_k,
    dot_scaled_config,
    prefill_config,
    prepare,
)
from qmatmul.scaffold.validation import ACT_DTYPES
from qmatmul.teaching.mxfp4 import (
    H200_RECORDED_US,
    block_explorer,
    block_table,
    block_text,
    compare_paths,
    compare_rules_figure,
    error_table,
    explain_format,
    int4_groupwise,
    predictions,
    realistic_weights,
)
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems): what the
# scaffold gives.
GIVEN = {"qmatmul.mxfp4": set(mxfp4_scaffold.__all__)}

__all__ = [
    "GIVEN",
    # the format (qmatmul/formats/mxfp4.py) and the shared counts
    "BLOCK",
    "EMAX_E2M1",
    "bytes_moved",
    "bytes_moved_naive",
    "bytes_per_weight",
    "dequantize",
    "naive",
    "quantize",
    "quantize_codes",
    "reference",
    "shared_exponent",
    "bytes_moved_dense",
    "flops",
    "ACT_DTYPES",
    # the scaffold (qmatmul/scaffold/mxfp4.py)
    "prepare",
    "prefill_config",
    "decode_config",
    "divisible_k",
    "dot_scaled_config",
    "decoded_gemm",
    # the checks (qmatmul/checks/mxfp4.py)
    "BANDWIDTH_MS",
    "BANDWIDTH_SHAPE",
    "BANDWIDTH_THRESHOLD",
    "adversarial_weight",
    "check_decode",
    "check_decode_bandwidth",
    "check_dot_scaled",
    "check_prefill",
    "check_quantizer",
    "decode_shapes",
    "dot_scaled_status",
    "hidden_weights",
    "kernel_mistakes",
    "log2_weight",
    "prefill_shapes",
    "random_problem",
    "random_weight",
    "timing_inputs",
    "timing_weights",
    # the teaching cells (qmatmul/teaching/mxfp4.py)
    "H200_RECORDED_US",
    "block_explorer",
    "block_table",
    "block_text",
    "compare_paths",
    "compare_rules_figure",
    "error_table",
    "explain_format",
    "int4_groupwise",
    "predictions",
    "realistic_weights",
]
