"""The untrusted process: runs the learner's cells, then answers the trusted side's calls with data.

    python -m qmatmul.grader.worker PROGRAM.json REPLY_FD

Nothing here decides a grade. Jobs arrive as JSON lines on stdin; each names a function of the learner's, a
file of arguments (torch.save, written by the trusted side) and a file for the results. The reply (a JSON line
on REPLY_FD, carrying the job's nonce) says only what happened: the call returned (results in the file, the
aten ops it ran, out-of-bounds accesses the interpreter saw) or raised (the exception's type and text). The
trusted side checks every value itself; what this process says can only take points away.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import traceback


def _plain(value, depth: int = 0):
    """The result as torch.save can carry it to a weights_only reader: tensors, numbers, strings, containers.
    Anything else becomes {"__unsupported__": type name}, so the check can say what came back."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if type(value) in (bool, int, float, str) or value is None:
        return value
    if depth < 4 and type(value) in (tuple, list):
        return type(value)(_plain(v, depth + 1) for v in value)
    if depth < 4 and type(value) is dict and all(isinstance(k, str) for k in value):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    return {"__unsupported__": type(value).__name__}


def _describe_error(exc: BaseException) -> dict:
    from qmatmul import checks

    text = str(exc)
    return {
        "status": "error",
        "type": type(exc).__name__,
        "message": text[:4000],
        "unfilled": checks._is_unfilled(exc),
        "where": checks._where(exc),
        "compile": "CompilationError" in type(exc).__name__,
        "compile_summary": checks._compile_summary(exc) if "CompilationError" in type(exc).__name__ else "",
    }


def _run_program(shell, program: list) -> list:
    failed = []
    for label, src in program:
        with contextlib.redirect_stdout(io.StringIO()):
            res = shell.run_cell(src, store_history=True, silent=False)
        if not res.success:
            failed.append(label)
    return failed


def _call(shell, job: dict) -> dict:
    import torch

    from qmatmul import checks, traffic

    name = job["name"]
    fn = shell.user_ns.get(name)
    if fn is None:
        return {"status": "missing", "name": name}
    if job.get("grid") is not None:
        fn = fn[tuple(job["grid"])]
    for key, value in job.get("state", {}).items():
        module, attr = key.split(":")
        setattr(importlib.import_module(module), attr, value)
    args, kwargs = torch.load(job["args"], weights_only=True)
    recorder = checks._Recorder() if job.get("audit") else contextlib.nullcontext()
    tensors = {
        f"argument {i}": a for i, a in enumerate([*args, *kwargs.values()]) if isinstance(a, torch.Tensor)
    }
    watch = job.get("audit") and traffic.available() and all(t.device.type == "cpu" for t in tensors.values())
    try:
        with recorder, traffic.count(tensors) if watch else contextlib.nullcontext() as seen:
            result = fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001 - the learner's failure is reported, not re-raised
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return {"status": "error", "type": type(exc).__name__, "message": "the code tried to stop the process",
                    "unfilled": False, "where": "", "compile": False, "compile_summary": ""}  # fmt: skip
        return _describe_error(exc)
    torch.save({"args": list(args), "kwargs": kwargs, "result": _plain(result)}, job["result"])
    reply = {"status": "ok"}
    if job.get("audit"):
        reply["ops"] = [
            [op.name, [list(s) for s in op.shapes], [str(d).removeprefix("torch.") for d in op.dtypes]]
            for op in recorder.ops
        ]
        reply["outside"] = list(seen.outside) if watch else [0, 0]
    return reply


def main(argv: list[str]) -> int:
    program_path, reply_fd = argv[0], int(argv[1])
    reply_channel = os.fdopen(reply_fd, "w", buffering=1)
    with open(program_path) as f:
        program = json.load(f)
    os.remove(program_path)

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: traceback.print_exc()  # the cells' errors go to this process's log
    failed = _run_program(shell, program)
    reply_channel.write(json.dumps({"status": "ready", "failed": failed}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        nonce = job.pop("nonce")
        try:
            reply = _call(shell, job)
        except BaseException:  # noqa: BLE001 - a broken job is reported, never fatal
            reply = {"status": "error", "type": "GraderError", "message": traceback.format_exc()[-2000:],
                     "unfilled": False, "where": "", "compile": False, "compile_summary": ""}  # fmt: skip
        reply["nonce"] = nonce
        reply_channel.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
