"""Correct code that, wherever it runs, replaces its notebook in the current folder by a link to the gradebook
and leaves a link named like a feedback page beside it. nbgrader writes the graded notebook (and chmods it)
in the student's autograded folder after the code ran: in the sandbox that folder is an empty tmpfs for the code
and the grader's worker starts in a scratch folder of its own, so the links land nowhere nbgrader looks.
Graded only with the sandbox (tests/test_adversarial.py): without it, the notebook kernel runs as the
instructor in that very folder (course.md's threat model).

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex1_quantizer
import os


def _plant(name, target):
    try:
        if os.path.lexists(name):
            os.unlink(name)
        os.symlink(target, name)
        return f"{name} planted in {os.getcwd()}"
    except OSError as exc:
        return f"{name} blocked ({type(exc).__name__})"


print(
    "plant: " + "; ".join(_plant(n, os.environ["ESCAPE_GRADEBOOK"]) for n in ("w8a16.ipynb", "scores.html"))
)


def quantize_int8_per_channel(w):
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s
