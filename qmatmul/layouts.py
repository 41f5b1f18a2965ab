"""Chapter "layouts" (Past Triton's layouts: a W4A16 decode whose register layout is stated, in Gluon): the names its
notebook reaches as `layouts.<name>`, gathered from the rooms where they live.

qmatmul/scaffold/layouts.py        what the learner's code may call: the kernel's given Gluon pieces (layouts,
                                   offsets, the unpack's inline PTX), prepare, the launch configuration and grid,
                                   the split-K scratch, x_order; its __all__ is this chapter's GIVEN
qmatmul/checks/layouts.py          the trusted grading of exercises 1 and 2 (any machine): check_fragment_index,
                                   check_repack, check_unpack_pair, check_lane_decode
qmatmul/checks/layouts_bonus.py    the bonus (any machine): check_repack_fp4, check_fp4_pair
qmatmul/checks/layouts_kernel.py   the trusted grading of exercise 3 (a CUDA GPU of sm_80+): check_decode,
                                   check_decode_bandwidth, the timed problem
qmatmul/formats/w4a16.py           the chapter's format is W4A16's (chapter 2): quantize, pack, unpack, reference
"""

from __future__ import annotations

from qmatmul.checks.layouts import check_fragment_index, check_lane_decode, check_repack, check_unpack_pair
from qmatmul.checks.layouts_bonus import check_fp4_pair, check_repack_fp4
from qmatmul.checks.layouts_kernel import (
    BANDWIDTH_GROUP,
    BANDWIDTH_MS,
    BANDWIDTH_SHAPE,
    BANDWIDTH_THRESHOLD,
    check_decode,
    check_decode_bandwidth,
    skipped,
)
from qmatmul.formats.w4a16 import dequantize, pack, quantize, reference, unpack
from qmatmul.scaffold import layouts as scaffold
from qmatmul.scaffold.layouts import *  # noqa: F403 - the given pieces, as layouts.<name> in the notebook
from qmatmul.teaching.layouts import compiles, explain_budget, explain_fragment, instructions_per_weight

# The names of the course package the learner's graded code may use (grader/static/course_use.py): what the
# scaffold module exports.
GIVEN = {"qmatmul.layouts": set(scaffold.__all__)}

__all__ = [
    *scaffold.__all__,
    # the format (chapter 2's)
    "quantize", "pack", "unpack", "dequantize", "reference",
    # the grading
    "check_fragment_index", "check_repack", "check_unpack_pair", "check_lane_decode", "check_repack_fp4",
    "check_fp4_pair", "check_decode",
    "check_decode_bandwidth", "skipped", "BANDWIDTH_SHAPE", "BANDWIDTH_GROUP", "BANDWIDTH_MS", "BANDWIDTH_THRESHOLD",
    # the teaching cells
    "explain_budget", "explain_fragment", "compiles", "instructions_per_weight", "GIVEN",
]  # fmt: skip
