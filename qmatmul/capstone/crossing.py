"""What crosses between the worker, where the learner's code runs, and the checks: a driver's answer packed as data
(a JSON string and tensors), read back or refused, and the learner's errors described as data and raised again."""

from __future__ import annotations

import importlib
import json

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, LearnerError

DRIVERS = "qmatmul.capstone.drivers"  # the module of the drive_* functions, resolved by name in the worker


def describe_exception(exc: BaseException, what: str) -> dict:
    from qmatmul.grader import worker

    return {**worker.describe_error(exc), "what": what}


def pack(meta: dict, tensors: dict) -> dict:
    return {"meta": json.dumps(meta), "tensors": {k: v.detach().cpu() for k, v in tensors.items()}}


def drive(fn, driver: str, *args, what: str, **kwargs) -> tuple[dict, dict]:
    """Run drive_<driver>(fn, *args) where fn's code runs; (meta, tensors), or CheckFailed for the learner's error."""
    if checks.is_remote(fn):
        try:
            res = fn.drive(f"{DRIVERS}:drive_{driver}", *args, what=what, **kwargs)
        except LearnerError as exc:
            raise CheckFailed(checks.learner_error_message(exc, what)) from None
    else:
        res = getattr(importlib.import_module(DRIVERS), f"drive_{driver}")(fn, *args, **kwargs)
    try:
        meta, tensors = json.loads(res["meta"]), dict(res["tensors"])
        assert all(isinstance(t, torch.Tensor) for t in tensors.values())
    except Exception:  # noqa: BLE001 - whatever came back, it is not what the driver returns
        raise CheckFailed(
            f"{what}: the grader could not read what your code did (the process running it answered with "
            "something else): flagged for your instructor"
        ) from None
    return meta, tensors


def raise_learner(err: dict, ctx: str = "") -> None:
    exc = LearnerError(err.get("type", "Exception"), err.get("message", ""), unfilled=bool(err.get("unfilled")),
                       where=err.get("where", ""), compile_summary=err.get("compile_summary", ""))  # fmt: skip
    raise CheckFailed(checks.learner_error_message(exc, err.get("what", "your code")) + ctx)


def learner_message(err: dict) -> str:
    exc = LearnerError(err.get("type", "Exception"), err.get("message", ""), unfilled=bool(err.get("unfilled")),
                       where=err.get("where", ""), compile_summary=err.get("compile_summary", ""))  # fmt: skip
    return checks.learner_error_message(exc, err.get("what", "your code"))


def ops_data(ops) -> list:
    return [
        [op.name, [list(s) for s in op.shapes], [str(d).removeprefix("torch.") for d in op.dtypes]]
        for op in ops
    ]


def ops_records(data) -> list:
    from qmatmul.grader.results import torch_dtype

    return [checks.OpRecord(str(n), [tuple(int(i) for i in s) for s in shapes], [torch_dtype(d) for d in dtypes])
            for n, shapes, dtypes in data]  # fmt: skip
