"""A term with nbgrader, from the command line: the exchange, timestamps of hand-copied submissions, feedback.

    python -m autograder.term exchange               create the exchange (QMATMUL_EXCHANGE) and the students' config
    python -m autograder.term stamp [ASSIGNMENT ...]   write timestamp.txt into submissions that have none
    python -m autograder.term feedback [ASSIGNMENT ...]  feedback HTML for every graded chapter, then the export
    python -m autograder.term hand-back ASSIGNMENT     release feedback to the students who submitted by exchange

Run from the repository root. Without ASSIGNMENT every chapter under solutions/ is taken, and a chapter with
nothing submitted (stamp) or nothing graded (feedback) is skipped with a line saying so.

The code lives by what it does: autograder/exchange.py (the exchange, timestamps), autograder/feedback.py
(generate, prune, hand back), autograder/nbgrader_cli.py (nbgrader run on the class's folders) and
autograder/preprocessors.py (the nbgrader plug-ins nbgrader_config.py names: OverwriteCells, StudentFeedback).
"""

from __future__ import annotations

import argparse
import sys

# Also `term.<name>` for the callers that know them so (tests/test_hostile_folder.py: nbgrader, prune_feedback).
from autograder.exchange import make_exchange, stamp_submissions
from autograder.feedback import feedback, hand_back, prune_feedback  # noqa: F401
from autograder.nbgrader_cli import nbgrader  # noqa: F401
from autograder.preprocessors import HIDDEN_NOTE, OverwriteCells, StudentFeedback  # noqa: F401
from qmatmul.course import assignments, selected_assignments  # noqa: F401 - assignments: used by its callers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["exchange", "stamp", "feedback", "hand-back"])
    parser.add_argument("assignments", nargs="*", help="default: every assignment under solutions/")
    args = parser.parse_args(argv)
    selected = selected_assignments(args.assignments, parser.error)
    if args.command == "exchange":
        make_exchange()
        return 0
    if args.command == "stamp":
        for a in selected:
            stamp_submissions(a)
        return 0
    if args.command == "hand-back":
        if not args.assignments:
            parser.error("name the chapter: hand-back ASSIGNMENT")
        return max(hand_back(a) for a in selected)
    return feedback(selected)


if __name__ == "__main__":
    sys.exit(main())
