"""The cell that compares the paths at decode: each path's time beside what its bytes would take at the copy
bandwidth, measured on a GPU or recorded on the H200."""

from __future__ import annotations

from collections.abc import Callable

from qmatmul import environment, timing
from qmatmul.teaching import plots
from qmatmul.teaching.roofline_model import bytes_moved_dense


def compare_paths(env, rows, fns: Callable, recorded: dict, *, M: int, shape, where_known: bool = False):
    """Bytes and time of each path (rows: label, bytes moved) at one M; plotted and printed.

    On a GPU fns() builds one zero-argument function per row, each timed with the L2 flushed (a path that fails
    shows as "not measured"); without one, the H200's recorded µs by label, where known. Not under the autograder.
    """
    if environment.autograding():
        return None
    N, K = shape
    if not env.has_gpu:
        times = [recorded.get(label) for label, _ in rows]
        rows = [(plots.recorded_label(label), nbytes) for label, nbytes in rows]
        note = plots.recorded_note(where_known=where_known)
    else:
        times = timing.time_paths(fns())
        rows = [(plots.measured_label(label), nbytes) for label, nbytes in rows]
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    return plots.paths_report(rows, times, f"M={M}, N x K = {N} x {K}: {note}")


def decode_rows(M: int, N: int, K: int, bytes_moved, bytes_moved_naive, *paths: str) -> list[tuple[str, int]]:
    """The rows every chapter's decode comparison holds: the dense matmul, the naive path, then each of `paths`
    (the chapter's kernels and peers), which move the format's bytes."""
    return [
        ("dense bf16 (cuBLAS)", bytes_moved_dense(M, N, K)),
        ("naive: dequantize, then matmul", bytes_moved_naive(M, N, K)),
        *((path, bytes_moved(M, N, K)) for path in paths),
    ]
