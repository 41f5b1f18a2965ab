"""What the trusted side reads in the learner's source, which their code cannot switch off.

Two questions, answered from the submitted cells (never from the learner's process):
  * escapes: constructs that could hide work from the worker's op audit, forge its replies or rewrite the
    grader's view of the process (threads, ctypes, dynamic code, frame introspection, monkeypatching, fd-level
    I/O). None is needed by any exercise; each is flagged with its cell and line for the instructor, and a
    kernel exercise graded while one is present earns nothing.
  * own kernel: does a graded wrapper launch a `@triton.jit` kernel defined in the notebook, and does the host
    code it reaches stay clear of PyTorch/numpy arithmetic (matmuls, `@`, `.tolist()`, `.item()`, numpy)?

syntax        a cell as plain Python; what a statement binds and reads, its scopes, its parents, a source line
escapes       the constructs flagged for the instructor (ESCAPE_*), as Findings
source        the cells parsed (Source, parse) and what a function reaches through the notebook's names
sizes         which host expressions are sizes, never a tensor's values (what host code may hand numpy)
input_checks  a wrapper may validate: its input checks (validates) and the ops they run (without_validation_ops)
own_kernel    does a graded wrapper compute in a Triton kernel of the notebook's own (own_kernel_problems)
course_use    does the learner's code do the work itself, not the course's answers (given, course_problems)

Everything other modules use is re-exported here: `from qmatmul.grader import static; static.parse(...)`.
"""

from __future__ import annotations

from qmatmul.grader.static.course_use import ANSWER_LIBRARIES, course_problems, given
from qmatmul.grader.static.escapes import (
    ESCAPE_ATTRS,
    ESCAPE_CALLS,
    ESCAPE_MODULES,
    NAME_CALLS,
    OS_ATTRS,
    OS_NO_VALUE,
    SYS_ATTRS,
    Finding,
)
from qmatmul.grader.static.input_checks import (
    CHECK_BOOL_OPS,
    CHECK_BUILTINS,
    CHECK_CALLS,
    CHECK_OP_LIMIT,
    CHECK_READ_OPS,
    CHECK_SCALAR_OPS,
    READ_ATTRS,
    READ_BUILTINS,
    TYPE_TESTS,
    validates,
    without_validation_ops,
)
from qmatmul.grader.static.own_kernel import (
    COURSE_PATHS,
    HOST_ARITHMETIC_ATTRS,
    READS_VALUES,
    own_kernel_problems,
)
from qmatmul.grader.static.sizes import (
    COURSE_SIZES,
    DICT_READS,
    HOST_MODULES,
    META_ATTRS,
    META_HOOKS,
    META_METHODS,
    NUMPY_CONSTANTS,
    SCALAR_BUILTINS,
    SIZE_BUILTINS,
    TENSOR_METHODS,
    TRITON_SIZES,
)
from qmatmul.grader.static.source import Source, added_cell_note, parse

__all__ = [
    # the reading
    "Source", "Finding", "parse", "added_cell_note", "own_kernel_problems", "validates", "without_validation_ops",
    "given", "course_problems",
    # its rules
    "ESCAPE_MODULES", "ESCAPE_CALLS", "NAME_CALLS", "ESCAPE_ATTRS", "SYS_ATTRS", "OS_ATTRS", "OS_NO_VALUE",
    "HOST_ARITHMETIC_ATTRS", "COURSE_PATHS", "ANSWER_LIBRARIES", "READS_VALUES", "HOST_MODULES", "META_ATTRS",
    "META_METHODS", "META_HOOKS", "SCALAR_BUILTINS", "SIZE_BUILTINS", "TRITON_SIZES", "NUMPY_CONSTANTS",
    "COURSE_SIZES", "DICT_READS", "TENSOR_METHODS", "CHECK_CALLS", "CHECK_BUILTINS", "READ_ATTRS", "TYPE_TESTS",
    "READ_BUILTINS", "CHECK_BOOL_OPS", "CHECK_SCALAR_OPS", "CHECK_READ_OPS", "CHECK_OP_LIMIT",
]  # fmt: skip
