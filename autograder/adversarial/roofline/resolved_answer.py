"""The byte count handed to the course's own model by a name in a string (pkgutil.resolve_name), which the source
rule cannot follow (before: full marks on the byte cells, and on naive_bytes, which builds on them). The model's code runs from a file of the course
package: the worker sees it run, whatever the route (qmatmul/grader/reach.py).

expect test_linear_bytes: 0 / ran the course's own `qmatmul.teaching.roofline_model.model_bytes`
expect test_floor: 2 /
expect test_naive: 0 / ran the course's own `qmatmul.teaching.roofline_model.model_bytes`
"""

# %% ex1_linear_bytes
import pkgutil

_model = pkgutil.resolve_name("qmatmul.teaching.roofline_model:model_bytes")


def linear_bytes(fmt: str, M: int, N: int, K: int, group_size: int = 128) -> int:
    return _model(fmt, M, N, K, group_size)
