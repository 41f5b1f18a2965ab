"""qmatmul/timing/trace.py: where a captured decode step's time goes, read from a profiler trace. The GPU part runs in
tools.decode_step --trace; here the arithmetic on a trace of known ops."""

import pytest

from qmatmul.timing import trace as step_trace


def chain(replays, blocks, ops, gap, start=1000.0, between=50.0):
    """A trace's GPU ops: `replays` chains of `blocks` blocks of `ops` = [(name, µs)], `gap` µs between ops."""
    out, t = [], start
    for _ in range(replays):
        for _ in range(blocks):
            for name, dur in ops:
                out.append((name, t, dur))
                t += dur + gap
        t += between
    return out


def test_a_step_of_known_ops_reads_back_its_busy_time_and_gaps():
    ops = [("quantize", 2.0), ("decode_kernel", 10.0), ("decode_kernel", 5.0)]
    got = step_trace.summarize(chain(3, 4, ops, gap=1.5), replays=3, blocks=4)
    assert got["ops"] == 3
    assert got["busy_us"] == pytest.approx(17.0)
    # 4 blocks x 3 ops = 12 ops a replay, 11 gaps seen (the first op's is not): 11 x 1.5 / 4 blocks
    assert got["gap_us"] == pytest.approx(11 * 1.5 / 4)
    assert got["span_us"] == pytest.approx((12 * 17.0 / 3 + 11 * 1.5) / 4)
    assert [k["us"] for k in got["kernels"]] == [2.0, 10.0, 5.0]
    assert [k["gap_us"] for k in got["kernels"]] == [1.5, 1.5, 1.5]
    assert [k["name"] for k in got["kernels"]] == ["quantize", "decode_kernel", "decode_kernel"]


def test_ops_that_do_not_split_into_equal_blocks_are_refused():
    ops = chain(2, 2, [("a", 1.0), ("b", 1.0)], gap=0.5)
    with pytest.raises(ValueError, match="do not split"):
        step_trace.summarize(ops[:-1], replays=2, blocks=2)
    swapped = ops[:2] + [ops[3], ops[2]] + ops[4:]
    with pytest.raises(ValueError, match="same ops in the same order"):
        step_trace.summarize(swapped, replays=2, blocks=2)


def test_the_replays_ops_are_those_after_the_marker():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "capture_warmup", "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 2},
        {"ph": "X", "cat": "kernel", "name": "at::cuda::(anonymous namespace)::spin_kernel(long)", "ts": 5, "dur": 9},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 30, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "void cutlass::Kernel2<cutlass_80_tensorop>(Params)", "ts": 20, "dur": 3},
    ]}  # fmt: skip
    ops = step_trace.after_marker(step_trace.gpu_ops(trace))
    assert [name for name, _, _ in ops] == [
        "void cutlass::Kernel2<cutlass_80_tensorop>(Params)",
        "Memset (Device)",
    ]
    assert step_trace.short(ops[0][0]) == "Kernel2"
    with pytest.raises(ValueError, match="no spin_kernel"):
        step_trace.after_marker(step_trace.gpu_ops({"traceEvents": trace["traceEvents"][:2]}))


def test_the_table_shows_each_row_and_its_gap_an_op():
    row = dict(kind=step_trace.TRACE_KIND, layout="7 Linears", M=1, label="bf16", timed_us=100.0,
               **step_trace.summarize(chain(2, 1, [("a", 10.0), ("b", 20.0)], gap=2.0), 2, 1))  # fmt: skip
    bad = dict(kind=step_trace.TRACE_KIND, layout="fused", M=1, label="x", error="RuntimeError: no")
    lines = step_trace.trace_table([row, bad, dict(kind="other")])
    assert lines[2] == "| 7 Linears | 1 | bf16 | 100.0 | 32.0 | 30.0 | 2.0 | 2 | 1.00 |"
    assert "RuntimeError: no" in lines[3] and len(lines) == 4
    assert step_trace.kernel_lines(row) == ["a: 10.0 µs", "b: 20.0 µs (gap 2.0)"]


def test_without_a_gpu_the_capstone_shows_the_recorded_trace(tmp_path, monkeypatch, capsys):
    import json

    from qmatmul import course
    from qmatmul.capstone import speed

    row = dict(kind=step_trace.TRACE_KIND, layout="7 Linears", M=1, label=speed.TRACE_ROWS[1], timed_us=101.0,
               **step_trace.summarize(chain(2, 2, [("_w8_split_kernel", 10.0), ("_w8_split_kernel", 4.0)], 1.0), 2, 2))  # fmt: skip
    other = dict(row, M=16, timed_us=999.0)
    (tmp_path / "docs").mkdir()
    record = dict(
        meta=dict(gpu="NVIDIA H100 80GB HBM3", date="2026-12-07", torch="2.11.0"), traces=[row, other]
    )
    (tmp_path / "docs" / speed.TRACE_RECORD).write_text(json.dumps(record))
    monkeypatch.setattr(course, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(speed.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(speed, "autograding", lambda: False)
    assert speed.trace_llama_block(None) == {}
    out = capsys.readouterr().out
    assert "traced on the course's NVIDIA H100 80GB HBM3 (2026-12-07" in out
    assert "101.0 µs captured; the GPU busy 14.0 µs in 2 kernels" in out and "999" not in out
    assert "_w8_split_kernel: 4.0 µs (gap 1.0)" in out
