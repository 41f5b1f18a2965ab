"""The demo students' files: every patch applies to today's solution, and one that does not fails by name."""

import ast

import pytest
from conftest import ROOT

from autograder import demo
from qmatmul.course import assignments

SOLUTION = {"ex1": "def f(x):\n    y = x + 1\n    return y\n", "ex2": "def g(x):\n    return x\n"}


def student(text: str) -> demo.DemoStudent:
    return demo.parse(text, "someone", "chapter")


@pytest.mark.parametrize("assignment", assignments())
def test_every_demo_student_applies_to_the_solution(assignment):
    students = demo.students(assignment)
    assert {"correct", "blank"} <= {s.name for s in students}
    solution = demo.solution(assignment)
    for st in students:
        cells = st.changed_cells()  # raises PatchError, naming the student, if a patch no longer applies
        if st.name == "correct" or st.blank:
            assert not cells and not st.patches, f"{st.where} should submit the solution or the release as is"
            continue
        assert st.expects, f"{st.where} expects nothing"
        assert any(cells[g] != solution[g] for g in cells), f"{st.where} submits the solution unchanged"
        for gid, src in cells.items():
            ast.parse(src, f"{st.name}:{gid}")


def test_the_demo_class_is_only_student_files():
    stray = [p for p in (ROOT / "autograder" / "demo_class").rglob("*") if p.is_file() and p.suffix != ".txt"]
    assert not stray, f"not read as demo students: {stray}"


def test_a_patch_replaces_one_snippet_and_a_section_a_whole_cell():
    st = student(
        "Adds two.\n\nexpect test_f: 0 / off by one\n\n"
        "# %% ex1: replace\n    y = x + 1\n# %% with\n    y = x + 2  # wrong\n\n"
        "# %% ex2\ndef g(x):\n    return -x\n\n\n"
    )
    assert st.expects == [("any", "test_f", 0.0, "off by one")]
    assert st.cells(SOLUTION) == {
        "ex1": "def f(x):\n    y = x + 2  # wrong\n    return y\n",
        "ex2": "def g(x):\n    return -x\n",
    }


def test_patches_apply_in_order_and_may_delete():
    st = student(
        "# %% ex1: replace\n    y = x + 1\n# %% with\n    y = x\n"
        "# %% ex1: replace\n    y = x\n    return y\n# %% with\n    return x\n"
    )
    assert st.cells(SOLUTION) == {"ex1": "def f(x):\n    return x\n"}


@pytest.mark.parametrize(
    "snippet, why",
    [("    y = x + 3", "does not occur"), ("x", "occurs 2 times")],
)
def test_a_patch_that_no_longer_applies_names_the_student_the_cell_and_the_snippet(snippet, why):
    st = student(f"# %% ex1: replace\n{snippet}\n# %% with\n    y = 0\n")
    with pytest.raises(demo.PatchError) as exc:
        st.cells(SOLUTION)
    msg = str(exc.value)
    assert "chapter/someone" in msg and "'ex1'" in msg and why in msg and snippet in msg


@pytest.mark.parametrize(
    "text, why",
    [
        ("# %% ex1: replace\n    y = x + 1\n", "must be followed by '# %% with'"),
        ("# %% with\n    y = 0\n", "without a '# %% <cell>: replace'"),
        ("# %% ex1: replace\n\n# %% with\n    y = 0\n", "an empty snippet"),
        ("# %% ex1\npass\n# %% ex1: replace\npass\n# %% with\n", "given whole must be given once"),
        ("# %% ex1\npass\n# %% ex1\npass\n", "given whole must be given once"),
    ],
)
def test_a_malformed_student_file_is_refused(text, why):
    with pytest.raises(demo.PatchError, match="chapter/someone") as exc:
        student(text)
    assert why in str(exc.value)


def test_a_patch_of_an_unknown_cell_is_refused():
    with pytest.raises(demo.PatchError, match="no solution cell named 'ex9'"):
        student("# %% ex9\npass\n").cells(SOLUTION)


def test_the_docs_count_the_demo_students_there_are():
    import re

    n = sum(len(demo.students(a)) for a in assignments())
    for doc in ("README.md", "course.md"):
        counts = [int(c) for c in re.findall(r"\b(\d+) demo students\b", (ROOT / doc).read_text())]
        assert counts, f"{doc} no longer says how many demo students there are: drop this test's {doc}"
        assert set(counts) == {n}, f"{doc} says {counts} demo students; autograder/demo_class/ holds {n}"
