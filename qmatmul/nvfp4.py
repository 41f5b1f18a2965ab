"""Chapter NVFP4: the names its notebook, the tests, the tools and the autograder call as `nvfp4.<name>`; the code
lives in the rooms by role (NVFP4 reuses MXFP4's tiles, hidden inputs and figures from their rooms):

    qmatmul/formats/nvfp4.py    the format (global and block scales, quantizer, dequantizer, reference, naive path,
                                bytes moved); its element codecs are qmatmul/formats/fp4.py
    qmatmul/scaffold/nvfp4.py   what the learner's code may call (GIVEN): prepare, the launch configurations,
                                divisible_k, decoded_gemm, BLOCK
    qmatmul/checks/nvfp4.py     the trusted grading: the timed shape and bandwidth bar, the test inputs, the known
                                mistakes, the checks of each exercise, the timed weights
    qmatmul/teaching/nvfp4.py   the teaching cells: explain_format, the block explorer, the comparison with MXFP4,
                                what this machine can run of the native path, the predictions

Here, as in the notebook, `g` is the global (per-tensor) scale and `gen` a torch.Generator.
"""

from __future__ import annotations

from qmatmul.checks.nvfp4 import (
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    adversarial_weight,
    check_decode,
    check_decode_bandwidth,
    check_prefill,
    check_quantizer,
    kernel_mistakes,
    random_problem,
    random_weight,
    rounding_probe,
    tie_weight,
    timing_inputs,
    timing_weights,
)
from qmatmul.formats.nvfp4 import (
    BLOCK,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    naive,
    quantize,
    quantize_codes,
    reference,
    tensor_scale,
)
from qmatmul.scaffold import nvfp4 as nvfp4_scaffold
from qmatmul.scaffold.nvfp4 import decode_config, decoded_gemm, divisible_k, prefill_config, prepare
from qmatmul.scaffold.validation import ACT_DTYPES
from qmatmul.teaching.nvfp4 import (
    blackwell_status,
    block_explorer,
    block_text,
    compare_figure,
    explain_format,
    predictions,
)

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems): what the
# scaffold gives, and two codecs.
GIVEN = {
    "qmatmul.nvfp4": set(nvfp4_scaffold.__all__),
    "qmatmul.fp4": {"e2m1_encode", "pack_nibbles"},  # MXFP4's quantizer taught them
}

__all__ = [
    "GIVEN",
    # the format (qmatmul/formats/nvfp4.py)
    "BLOCK",
    "bytes_moved",
    "bytes_moved_naive",
    "bytes_per_weight",
    "dequantize",
    "naive",
    "quantize",
    "quantize_codes",
    "reference",
    "tensor_scale",
    "ACT_DTYPES",
    # the scaffold (qmatmul/scaffold/nvfp4.py)
    "prepare",
    "prefill_config",
    "decode_config",
    "divisible_k",
    "decoded_gemm",
    # the checks (qmatmul/checks/nvfp4.py)
    "BANDWIDTH_MS",
    "BANDWIDTH_SHAPE",
    "BANDWIDTH_THRESHOLD",
    "adversarial_weight",
    "check_decode",
    "check_decode_bandwidth",
    "check_prefill",
    "check_quantizer",
    "kernel_mistakes",
    "random_problem",
    "random_weight",
    "rounding_probe",
    "tie_weight",
    "timing_inputs",
    "timing_weights",
    # the teaching cells (qmatmul/teaching/nvfp4.py)
    "blackwell_status",
    "block_explorer",
    "block_text",
    "compare_figure",
    "explain_format",
    "predictions",
]
