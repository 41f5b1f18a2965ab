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
import functools
import importlib
import io
import json
import os
import sys
import traceback

__all__ = ["describe_error", "ImportPolicy", "main"]


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


def describe_error(exc: BaseException) -> dict:
    """The reply for an exception the learner's code raised: its type and text, whether the exercise is unfilled,
    where in a cell it was raised, and the compiler's summary of a kernel that did not compile."""
    from qmatmul import checks

    text = str(exc)
    return {
        "status": "error",
        "type": type(exc).__name__,
        "message": text[:4000],
        "unfilled": checks.is_unfilled(exc),
        "where": checks.where_raised(exc),
        "compile": "CompilationError" in type(exc).__name__,
        "compile_summary": checks.compile_summary(exc) if "CompilationError" in type(exc).__name__ else "",
    }


class _Bounded(io.TextIOBase):
    """Where the learner's prints go in the worker: kept up to a limit (for the log), the rest dropped."""

    def __init__(self, stream, limit: int = 1 << 20):
        self.stream, self.left = stream, limit

    def write(self, text):
        if self.left > 0:
            self.stream.write(text[: self.left])
            self.left -= len(text)
        return len(text)

    def flush(self):
        self.stream.flush()


def _run_program(shell, program: list) -> list:
    failed = []
    for label, src in program:
        with contextlib.redirect_stdout(_Bounded(io.StringIO(), 1 << 16)):
            res = shell.run_cell(src, store_history=True, silent=False)
        if not res.success:
            failed.append(label)
    return failed


def _call(shell, job: dict) -> dict:
    import torch

    from qmatmul import checks
    from qmatmul.checks import traffic
    from qmatmul.grader import kernels, reach

    name = job["name"]
    fn = shell.user_ns.get(name)
    if fn is None:
        return {"status": "missing", "name": name}
    if job.get("grid") is not None:
        fn = fn[tuple(job["grid"])]
    if job.get("driver"):  # a course function that exercises the learner's object here and returns data
        module, attr = job["driver"].split(":")
        if not module.startswith("qmatmul."):
            return {"status": "error", "type": "GraderError", "message": f"no driver {job['driver']}",
                    "unfilled": False, "where": "", "compile": False, "compile_summary": ""}  # fmt: skip
        fn = functools.partial(getattr(importlib.import_module(module), attr), fn)
    args, kwargs = torch.load(job["args"], weights_only=True)
    recorder = checks.OpRecorder() if job.get("audit") else contextlib.nullcontext()
    launches = kernels.observe_launches() if job.get("audit") else contextlib.nullcontext([])
    reads = reach.host_reads() if job.get("audit") else contextlib.nullcontext([])
    tensors = {
        f"argument {i}": a for i, a in enumerate([*args, *kwargs.values()]) if isinstance(a, torch.Tensor)
    }
    watch = job.get("audit") and traffic.available() and all(t.device.type == "cpu" for t in tensors.values())
    try:
        with contextlib.ExitStack() as stack:
            entered = []
            for spec in job.get("contexts", []):
                module, name = spec.split(":")
                entered.append(stack.enter_context(getattr(importlib.import_module(module), name)()))
            # a plain call (a quantizer, a byte count): which course functions it ran, outside what is given (and
            # outside the course's own contexts the trusted side asked for, e.g. FP8's emulated GPU cast)
            course = (
                reach.observe(job["given"], exempt=entered)
                if job.get("given") is not None
                else contextlib.nullcontext([])
            )
            with (
                recorder,
                launches as launched,
                reads as read,
                traffic.count(tensors) if watch else contextlib.nullcontext() as seen,
                course as ran,
            ):
                result = fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001 - the learner's failure is reported, not re-raised
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return {"status": "error", "type": type(exc).__name__, "message": "the code tried to stop the process",
                    "unfilled": False, "where": "", "compile": False, "compile_summary": ""}  # fmt: skip
        return describe_error(exc)
    torch.save({"args": list(args), "kwargs": kwargs, "result": _plain(result)}, job["result"])
    reply = {"status": "ok", "course": ran}
    if job.get("audit"):
        reply["ops"] = [
            [
                op.name,
                [list(s) for s in op.shapes],
                [str(d).removeprefix("torch.") for d in op.dtypes],
                [str(d).removeprefix("torch.") for d in op.inputs],
            ]  # fmt: skip
            for op in recorder.ops
        ]
        reply["outside"] = list(seen.outside) if watch else [0, 0]
        reply["launches"] = launched
        reply["host_reads"] = read
    return reply


_BENCH: dict = {}


def _bench_prepare(shell, job: dict) -> dict:
    """Build the timed problem: weight copies from the trusted side's seed, per-call buffers, maybe a graph."""
    import torch

    from qmatmul import timing
    from qmatmul.checks import harness

    fn = shell.user_ns.get(job["name"])
    if fn is None:
        return {"status": "missing", "name": job["name"]}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    M, N, K, calls, copies = job["M"], job["N"], job["K"], job["calls"], job["copies"]
    weights = harness.weight_copies(job["module"], N, K, job["seed"], copies, device)
    inputs = tuple(t.clone() for t in harness.inputs_for(job["module"], M, K, 0, calls, device))
    outs = torch.empty((calls, M, N), dtype=getattr(torch, job["out_dtype"]), device=device)

    def run(i):
        return fn(*(t[i] for t in inputs), *weights[i % copies], out=outs[i])

    _BENCH.clear()
    try:
        run(0)
        timing.sync(device)
    except BaseException as exc:  # noqa: BLE001
        return describe_error(exc)
    graph = None
    if device == "cuda":
        try:
            graph, _ = timing.capture(lambda: [run(i) for i in range(calls)], warm=lambda: run(1 % calls))
        except BaseException:  # noqa: BLE001 - not capturable: eager only
            graph = None
            timing.sync(device)
    _BENCH.update(run=run, inputs=inputs, outs=outs, graph=graph, job=job, device=device)
    # One untimed round of everything a timed one does: the first use of the generator, the fill, the graph
    # and the checksum allocate memory and load code, which must not land inside the trusted side's window.
    for mode in ("graph", "eager") if graph is not None else ("eager",):
        warm = _bench_go({"mode": mode, "seed": 1})
        if warm.get("status") != "ok":
            return warm
    outs.fill_(float("nan"))
    return {"status": "ok", "graph": graph is not None}


def _bench_go(job: dict) -> dict:
    """The timed batch: fresh inputs from the seed just received, the calls, the whole device synchronized."""
    from qmatmul import timing
    from qmatmul.checks import harness

    b, prep = _BENCH, _BENCH["job"]
    harness.inputs_for(
        prep["module"], prep["M"], prep["K"], job["seed"], prep["calls"], b["device"], out=b["inputs"]
    )
    try:
        if job["mode"] == "graph":
            b["graph"].replay()
        else:
            for i in range(prep["calls"]):
                b["run"](i)
        timing.sync(b["device"])
    except BaseException as exc:  # noqa: BLE001
        return describe_error(exc)
    return {"status": "ok", "checksum": str(harness.outputs_checksum(b["outs"]))}


def _apply_state(job: dict) -> None:
    """The module state the trusted side's checks set (checks.WORKER_STATE), before any op that runs the learner's
    code: a timed batch too. Applied to calls alone, FP8's timing ran with the path test_matmul had forced last
    (the portable decode-to-fp16 one): 5-6x slower on the H200, and the correct student lost both speed cells."""
    for key, value in job.get("state", {}).items():
        module, attr = key.split(":")
        setattr(importlib.import_module(module), attr, value)


def _serve(shell, job: dict) -> dict:
    import torch

    op = job.get("op", "call")
    _apply_state(job)
    if op == "ping":
        return {"status": "ok"}
    if (
        op == "compile"
    ):  # one recorded launch through the front end (the compile worker; the worker itself on a GPU)
        from qmatmul.grader import kernels

        return kernels.compile_kernel(shell.user_ns, job["launch"])
    if op == "bench_prepare":
        return _bench_prepare(shell, job)
    if op == "bench_go":
        return _bench_go(job)
    if op == "bench_fetch":
        # raw bytes (files.read_tensor): the trusted side knows the batch's shape and dtype
        _BENCH["outs"].contiguous().view(torch.uint8).cpu().numpy().tofile(job["result"])
        _BENCH["outs"].fill_(float("nan"))  # an output the next batch leaves unwritten reads as one, untimed
        return {"status": "ok"}
    return _call(shell, job)


class ImportPolicy:
    """A finder, first on sys.meta_path, that keeps the worker's imports to its stated path (the folders
    qmatmul.grader.remote.import_path gave it at start): a module found anywhere else (a folder the learner's code
    put on sys.path, a copy of a course file written to the scratch folder) is refused, and so are the libraries
    that compute the course formats' answers in one call (static.ANSWER_LIBRARIES: the tests' own oracles,
    torchao and ml_dtypes). The policy holds by whatever route an import is asked for: an import statement,
    importlib, pickle, pkgutil.resolve_name."""

    def __init__(self, roots: list[str]):
        self.roots = [os.path.join(os.path.realpath(r), "") for r in roots if r]

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery

        from qmatmul.grader import static

        if name.partition(".")[0] in static.ANSWER_LIBRARIES:
            raise ImportError(
                f"{name} is not importable where the grader runs your code: it computes the answers"
            )
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None)
        if origin and origin not in ("built-in", "frozen") and os.path.isabs(origin):
            if not any(os.path.realpath(origin).startswith(r) for r in self.roots):
                raise ImportError(
                    f"{name} is not importable where the grader runs your code: it lies outside the course's "
                    f"environment ({origin})"
                )
        return None  # the usual finders import it


def main(argv: list[str]) -> int:
    program_path, reply_fd = argv[0], int(argv[1])
    reply_channel = os.fdopen(reply_fd, "w", buffering=1)
    with open(program_path) as f:
        program = json.load(f)
    os.remove(program_path)

    from IPython.core.interactiveshell import InteractiveShell

    from qmatmul.grader import static

    sys.stdout, sys.stderr = _Bounded(sys.__stdout__), _Bounded(sys.__stderr__)
    sys.meta_path.insert(0, ImportPolicy(list(sys.path)))  # the stated path, as the bootstrap set it
    from qmatmul.grader import kernels, reach

    kernels.install()  # before the learner's cells: their code never holds an unwrapped launch or read
    reach.install_host_reads()
    for name in [m for m in sys.modules if m.partition(".")[0] in static.ANSWER_LIBRARIES]:
        del sys.modules[name]  # none is imported by the course's own modules; if one were, it is gone now
    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: traceback.print_exc()  # the cells' errors go to this process's log
    failed = _run_program(shell, program)
    reply_channel.write(json.dumps({"status": "ready", "failed": failed}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        nonce = job.pop("nonce")
        try:
            reply = _serve(shell, job)
        except BaseException:  # noqa: BLE001 - a broken job is reported, never fatal
            reply = {"status": "error", "type": "GraderError", "message": traceback.format_exc()[-2000:],
                     "unfilled": False, "where": "", "compile": False, "compile_summary": ""}  # fmt: skip
        reply["nonce"] = nonce
        reply_channel.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
