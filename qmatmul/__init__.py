"""qmatmul: the support package of the quantized-matmul Triton workbook.

Importing this package imports neither torch nor triton: `qmatmul.environment.start()` must be able to
choose the Triton interpreter before triton is imported.

The rooms (README.md, "What is here", draws the map):
    environment, course     set-up: the machine a notebook runs on; the repository's notebooks and solutions
    roofline, w8a16, ...    the chapters: thin facades holding the names each notebook calls
    formats/                the number formats, bit for bit (constants, quantizers, references, byte counts)
    kernels/                the course's own Triton and Gluon kernels and every launch configuration
    scaffold/               what the learner's code may call, run in the learner's process (each chapter's GIVEN)
    checks/                 the trusted grading: the checks, the test cases, the timing harness, per chapter
    grader/                 the grading processes: the worker, the trusted side, the source reading, nbgrader hooks
    teaching/               the roofline model, explorers, plots, widgets and the recorded H200 figures
    timing/                 the timing protocol (graph replay, copy bandwidth) and the GPU lock
    capstone/               the MiniLM capstone
"""

import importlib

__version__ = "0.1.0"

# Names a notebook imports from the package (`from qmatmul import bench, plots`) whose modules live in a room.
_NOTEBOOK_NAMES = {
    "bench": "qmatmul.timing",
    "plots": "qmatmul.teaching.plots",
    "widgets": "qmatmul.teaching.widgets",
}


def __getattr__(name: str):
    if name in _NOTEBOOK_NAMES:
        return importlib.import_module(_NOTEBOOK_NAMES[name])
    raise AttributeError(f"module 'qmatmul' has no attribute {name!r}")
