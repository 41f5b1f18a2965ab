"""Chapter FP8: the names the notebook calls as `fp8.<name>`, gathered from the rooms where they live.

qmatmul/formats/fp8.py      the format: saturating cast, block scales, quantizer, dequantizer, references,
                            bytes moved (with the roofline model's dense bytes and flops)
qmatmul/scaffold/fp8.py     what the learner's code calls, in the learner's process: prepare, prepare_block,
                            prepare_fused, prepare_rows, the launch configurations, the path they choose (use_path forces
                            one), the exact e4m3 encoder e4m3_bits; its __all__ is the chapter's GIVEN
qmatmul/checks/fp8_casts.py the checks of exercises 1 and 2: the saturating cast, the quantizer (graded under
                            NonSaturatingCasts), the e4m3 -> fp16 decoder
qmatmul/checks/fp8.py       the checks of exercises 3 and 4 (the GEMM, the decode kernel): grading shapes and
                            thresholds, test inputs, known mistakes, the timed problem
qmatmul/checks/fp8_block.py the checks of exercise 5 (the block-scaled GEMM): its inputs, mistakes and probes
qmatmul/checks/fp8_fused.py the checks of exercise 6 (the decode that quantizes x itself; its probes in
                            qmatmul/checks/fp8_probes.py): its inputs, mistakes,
                            the probes that read the quantization back bit for bit, the one-launch audit
qmatmul/checks/fp8_rows.py  the check of exercise 7 (the activation quantized once, one program a row): codes and
                            scales bit for bit, exercise 6's probes, mistakes and audit
qmatmul/teaching/fp8.py     the bits explorer, the bytes per weight, the granularity figure, the predictions,
                            the comparison of the paths
"""

from __future__ import annotations

from qmatmul.checks.fp8 import (
    ACCUMULATION_MISTAKE,
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    FOLDED,
    PATH_NAMES,
    PREFILL_SHAPE,
    PREFILL_THRESHOLD,
    accumulation_hint,
    accumulation_problem,
    check_accumulation,
    check_decode,
    check_decode_bandwidth,
    check_matmul,
    check_prefill_speed,
    checked_paths,
    kernel_mistakes,
    name_overflowing,
    random_matrix,
    random_problem,
    recheck,
    rounding_problems,
    skipped_path_note,
    timing_block_problem,
    timing_inputs,
    timing_problem,
    timing_weights,
)
from qmatmul.checks.fp8_block import (
    block_mistakes,
    block_rounding_problems,
    check_block_matmul,
    random_block_problem,
)
from qmatmul.checks.fp8_casts import (
    NonSaturatingCasts,
    check_decoder,
    check_quantizer,
    check_quantizers,
    check_saturate,
    pitfall_matrix,
)
from qmatmul.checks.fp8_fused import (
    check_decode_fused,
    fused_mistakes,
    fused_reference,
    quantization_models,
)
from qmatmul.checks.fp8_fused import random_problem as random_fused_problem
from qmatmul.checks.fp8_probes import PROBE_ROWS, probe_problem
from qmatmul.checks.fp8_rows import check_quantize_rows
from qmatmul.formats.fp8 import (
    E4M3,
    E4M3_MAX,
    E4M3_OVERFLOW,
    FLOAT8_FIELDS,
    SCALE_BLOCK,
    block_amax,
    block_reference,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    cdiv,
    decode_bits,
    dequantize,
    expand_scales,
    naive,
    normalize_block,
    quantize,
    reference,
    saturate,
    scaled_mm,
)
from qmatmul.scaffold import fp8 as scaffold_fp8
from qmatmul.scaffold.fp8 import (
    block_config,
    decode_config,
    decode_split,
    e4m3_bits,
    finish,
    fused_config,
    has_fp8_dot,
    imprecise_fp8_accumulation,
    k_slice,
    out_dtype,
    prefill_config,
    prepare,
    prepare_block,
    prepare_fused,
    prepare_rows,
    rows_config,
    split_scratch,
    use_path,
    use_split,
)
from qmatmul.teaching.fp8 import (
    H200_RECORDED_US,
    bits_explorer,
    compare_paths,
    describe_bits,
    explain_format,
    granularity_figure,
    predictions,
    show_bits,
)
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
GIVEN = {"qmatmul.fp8": set(scaffold_fp8.__all__)}

__all__ = [
    "GIVEN",
    # qmatmul/formats/fp8.py and the roofline model
    "E4M3", "E4M3_MAX", "E4M3_OVERFLOW", "FLOAT8_FIELDS", "SCALE_BLOCK", "block_amax", "block_reference",
    "bytes_moved", "bytes_moved_naive", "bytes_per_weight", "cdiv", "decode_bits", "dequantize", "expand_scales",
    "naive", "normalize_block", "quantize", "reference", "saturate", "scaled_mm", "bytes_moved_dense", "flops",
    # qmatmul/scaffold/fp8.py
    "block_config", "decode_config", "decode_split", "e4m3_bits", "finish", "fused_config", "has_fp8_dot", "imprecise_fp8_accumulation",
    "k_slice", "out_dtype", "prefill_config", "prepare", "prepare_block", "prepare_fused", "prepare_rows",
    "rows_config", "split_scratch", "use_path", "use_split",
    # qmatmul/checks/fp8_casts.py
    "NonSaturatingCasts", "check_decoder", "check_quantizer", "check_quantizers", "check_saturate", "pitfall_matrix",
    # qmatmul/checks/fp8_block.py
    "block_mistakes", "block_rounding_problems", "check_block_matmul", "random_block_problem",
    # qmatmul/checks/fp8_fused.py
    "PROBE_ROWS", "check_decode_fused", "fused_mistakes", "fused_reference", "probe_problem", "quantization_models",
    "random_fused_problem",
    # qmatmul/checks/fp8_rows.py
    "check_quantize_rows",
    # qmatmul/checks/fp8.py
    "ACCUMULATION_MISTAKE", "BANDWIDTH_MS", "BANDWIDTH_SHAPE", "BANDWIDTH_THRESHOLD", "FOLDED", "PATH_NAMES",
    "PREFILL_SHAPE", "PREFILL_THRESHOLD", "accumulation_hint", "accumulation_problem",
    "check_accumulation", "check_decode", "check_decode_bandwidth", "check_matmul",
    "check_prefill_speed", "checked_paths", "kernel_mistakes", "name_overflowing",
    "random_matrix", "random_problem", "recheck", "rounding_problems", "skipped_path_note", "timing_block_problem",
    "timing_inputs", "timing_problem", "timing_weights",
    # qmatmul/teaching/fp8.py
    "H200_RECORDED_US", "bits_explorer", "compare_paths", "describe_bits", "explain_format", "granularity_figure",
    "predictions", "show_bits",
]  # fmt: skip
