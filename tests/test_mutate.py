"""Mutation testing of the grader, on a small sample (the full run: `make mutate`)."""

import pytest

from autograder import mutate

pytestmark = pytest.mark.slow


def test_mutants_cover_every_operator_kind():
    kinds = {m["kind"] for m in mutate.mutants("w8a16")}
    assert {"constant", "comparison", "operator", "mask", "axis", "offset", "drop line"} <= kinds


def test_equivalent_mutants_still_exist():
    """Each listed equivalent mutant must match a mutant the tool makes (else the list has gone stale)."""
    import json

    made = {}
    for e in json.loads(mutate.EQUIVALENT.read_text()):
        if e["assignment"] not in made:
            made[e["assignment"]] = {
                (m["cell"], m["line"], m["new"]) for m in mutate.mutants(e["assignment"])
            }
        assert (e["cell"], e["line"], e["new"]) in made[e["assignment"]], e
        assert e["reason"]


def test_a_sample_of_mutants_loses_points(capsys):
    status = mutate.run(["w8a16"], sample=6, seed=1, timeout=120, target=1.0)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "killed 6 of 6" in out or "equivalent" in out, out


def test_a_grader_that_cannot_grade_the_solution_stops_the_run(capsys, monkeypatch):
    """A crash of the grading itself (an interface that changed under mutate.py, say) is no mutant result: it had
    read as 'solution scores 0' with every mutant surviving."""
    from autograder import grade_direct

    def broken(*a, **k):
        raise TypeError("cannot unpack")

    monkeypatch.setattr(grade_direct, "grade", broken)
    assert mutate.run(["w8a16"], sample=2, seed=1, timeout=10, target=1.0) == 1
    assert "grading the solution raised TypeError: cannot unpack" in capsys.readouterr().out
