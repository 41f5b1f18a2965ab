"""Every H200 figure the docs and notebooks quote agrees with docs/bench-h200.json (tools/figures.py)."""

import pytest

from qmatmul.teaching import recorded
from tools import figures

W8 = "<!-- h200: w8a16 decode | solution w8a16_decode | 1,16x28672x8192 | copy -->"  # 93 / 92 in FIXED


# The rule tests below read fixed figures, so that a new `make bench` does not change what they assert.
FIXED = {
    ("w8a16 decode", "solution w8a16_decode", 1): {"copy_frac": 0.93},
    ("w8a16 decode", "solution w8a16_decode", 16): {"copy_frac": 0.92},
    ("nvfp4 decode", "solution nvfp4_decode", 1): {"copy_frac": 0.15, "copy_frac_eager": 0.15},
    ("nvfp4 decode", "solution nvfp4_decode", 16): {"copy_frac": 0.16, "copy_frac_eager": 0.15},
}


@pytest.fixture
def fixed_data(monkeypatch):
    real = recorded.data()
    rows = []
    for r in real["rows"]:
        key = (r["kind"], r["label"], r["M"])
        rows.append({**r, **FIXED[key]} if key in FIXED and (r["N"], r["K"]) == (28672, 8192) else r)
    monkeypatch.setattr(recorded, "data", lambda: {**real, "rows": rows})


def test_every_quoted_figure_agrees_with_the_data():
    found = [e for p in figures.pages() for e in figures.problems(p)]
    assert not found, "run `python -m tools.figures --write`, or fix the reference:\n" + "\n".join(found)


def test_no_h200_figure_is_quoted_without_a_reference():
    found = [e for p in figures.pages() for e in figures.unreferenced(p)]
    assert not found, "give each a reference (tools/figures.py says how):\n" + "\n".join(found)


def page(tmp_path, text):
    p = tmp_path / "page.md"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "quoted, ok",
    [("93 % / 92 %", True), ("92 % / 93 %", False), ("92–93 %", True), ("92–94 %", False), ("93 %", False),
     ("93.0 % / 92.5 %", False)],
)  # fmt: skip
def test_a_quoted_figure_is_checked_at_its_precision(tmp_path, quoted, ok, fixed_data):
    found = figures.problems(
        page(tmp_path, f"On the H200 the solution reaches {quoted}{W8} of the copy bandwidth.\n")
    )
    assert (not found) == ok, found


def test_a_single_figure_must_match_every_value_it_stands_for(tmp_path, fixed_data):
    ref = "<!-- h200: nvfp4 decode | solution nvfp4_decode | 1,16x28672x8192 | copy_eager -->"  # 15 and 15
    assert not figures.problems(page(tmp_path, f"the solution reaches 15 %{ref} at M = 1 and 16\n"))
    ref = ref.replace("copy_eager", "copy")  # 15 and 16
    assert figures.problems(page(tmp_path, f"the solution reaches 15 %{ref} at M = 1 and 16\n"))


def test_a_range_from_a_figure_to_itself_is_written_as_one_figure(tmp_path, fixed_data):
    """Values 15 and 15 quoted as `15–15 %` (what --write used to leave) are an error; --write makes them `15 %`."""
    ref = "<!-- h200: nvfp4 decode | solution nvfp4_decode | 1,16x28672x8192 | copy_eager -->"
    p = page(tmp_path, f"the solution reaches 15–15 %{ref} at M = 1 and 16\n")
    assert figures.problems(p)
    figures.write(p)
    assert not figures.problems(p) and f"reaches 15 %{ref}" in p.read_text()


def test_a_reference_to_nothing_in_the_data_is_an_error(tmp_path):
    for ref in ["w8a16 decode | solution w8a16_decode | 2x28672x8192 | copy", "w8a16 decode | nobody | 1x1x1 | copy",
                "w8a16 decode | solution w8a16_decode | 1x28672x8192 | speed", "w8a16 decode | 1x28672x8192"]:  # fmt: skip
        assert figures.problems(page(tmp_path, f"reaches 93 %<!-- h200: {ref} -->\n")), ref


def test_meta_and_ratio_references(tmp_path, monkeypatch):
    """A ratio `A ÷ B` over three shapes gives its lowest–highest, here on rows fixed by the test (64, 66, 69 %)."""
    real = recorded.data()
    fixed = {("solution fp8_matmul", M): tf for M, tf in ((2048, 640.0), (4096, 660.0), (8192, 690.0))}
    fixed |= {("torch._scaled_mm rowwise", M): 1000.0 for M in (2048, 4096, 8192)}
    rows = [{**r, "TFLOPs": fixed[(r["label"], r["M"])]} if r["kind"] == "fp8 prefill" and (r["label"], r["M"]) in fixed
            else r for r in real["rows"]]  # fmt: skip
    monkeypatch.setattr(recorded, "data", lambda: {**real, "rows": rows})
    meta = recorded.meta()
    text = (f"copy {meta['copy_TBps']:.2f} TB/s<!-- h200: meta | copy_TBps --> and "
            "64–69 %<!-- h200: fp8 prefill | solution fp8_matmul ÷ torch._scaled_mm rowwise | "
            "2048,4096,8192x8192x8192 | TFLOPs -->\n")  # fmt: skip
    assert not figures.problems(page(tmp_path, text))
    assert figures.problems(page(tmp_path, text.replace("64–69", "60–69")))


def test_an_h200_figure_without_a_reference_is_caught_unless_a_bar_or_from_elsewhere(tmp_path):
    assert figures.unreferenced(
        page(tmp_path, "On the H200 the solution reaches 93 % of the copy bandwidth.\n")
    )
    for fine in ["On the H200 the bar is **50 %** of the copy bandwidth.",
                 "On the H200 it must reach ≥ 50 % of the copy bandwidth.",
                 "On the H200 the grader measured 85 %<!-- h200: from docs/grading-h200.md -->.",
                 f"On the H200 the solution reaches 93 % / 92 %{W8}.",
                 "The solution reaches 93 % (no GPU named in this paragraph)."]:  # fmt: skip
        assert not figures.unreferenced(page(tmp_path, fine + "\n")), fine
    own = "# A record\n<!-- h200 figures: the runs this page records -->\n\nOn the H200: 12 %.\n"
    assert not figures.unreferenced(page(tmp_path, own))


def test_write_rewrites_figures_and_tables_from_the_data(tmp_path, fixed_data):
    p = page(tmp_path, f"reaches 90 % / 90 %{W8} of copy.\n\n<!-- begin h200 table: prefill -->\nstale\n"
                       "<!-- end h200 table -->\n")  # fmt: skip
    assert len(figures.problems(p)) == 2
    figures.write(p)
    assert not figures.problems(p)
    assert "reaches 93 % / 92 %<!--" in p.read_text()


def test_a_run_merged_into_the_data_file_replaces_its_rows_and_refuses_another_gpu(tmp_path):
    """tools.bench --merge (and decode_step's): a run's rows replace those of the same path and shape, other rows
    stay, the run's meta is kept; a run of another GPU (an H100's, say) is refused, so that no H100 figure is
    quoted as the H200's."""
    import json

    from tools import bench

    row = dict(kind="layouts decode", label="solution", M=1, N=8, K=8, us=2.0)
    other = dict(row, kind="w8a16 decode", us=5.0)
    data = tmp_path / "bench.json"
    data.write_text(json.dumps(dict(meta=dict(gpu="NVIDIA H200"), rows=[row, other])))
    meta = dict(gpu="NVIDIA H200", date="2026-12-05")
    bench.merge_run(data, [dict(row, us=1.0), dict(row, M=4, us=3.0)], meta, {"layouts decode"})
    merged = json.loads(data.read_text())
    assert sorted((r["kind"], r["M"], r["us"]) for r in merged["rows"]) == [
        ("layouts decode", 1, 1.0), ("layouts decode", 4, 3.0), ("w8a16 decode", 1, 5.0)]  # fmt: skip
    assert merged["meta"]["bench runs"] == [meta]
    with pytest.raises(SystemExit, match="holds NVIDIA H200 rows; this run is of NVIDIA H100"):
        bench.merge_run(data, [row], dict(meta, gpu="NVIDIA H100 80GB HBM3"), {"layouts decode"})
