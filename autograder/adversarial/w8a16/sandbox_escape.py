"""Correct code that tries every way out of the sandbox it knows and prints what it reached: another process's
root through /proc/<pid>/root, chroot, the repository's .git and solutions, the course package (a write), the
gradebook (a write). Graded only with the sandbox (tests/test_adversarial.py): without it, this submission
would really write into the package.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex1_quantizer
import glob
import os


def _try(what, fn):
    try:
        fn()
        return f"{what} REACHED"
    except Exception as exc:  # noqa: BLE001
        return f"{what} blocked ({type(exc).__name__})"


def _proc_root():
    others = [p for p in glob.glob("/proc/[0-9]*") if os.path.basename(p) not in ("1", str(os.getpid()))]
    roots = [p for p in others if os.listdir(os.path.join(p, "root"))]
    if not roots:
        raise PermissionError("no other process visible")


_repo = os.path.dirname(os.path.dirname(w8a16.__file__))


def _read(path):
    with open(path, "rb") as f:
        if not f.read(1):
            raise FileNotFoundError(path)


def _append(path):
    with open(path, "a") as f:
        f.write("")


_report = [
    _try("proc-root", _proc_root),
    _try("chroot", lambda: os.chroot("/")),
    _try("git", lambda: _read(os.path.join(_repo, ".git", "HEAD"))),
    _try("solutions", lambda: _read(glob.glob(os.path.join(_repo, "solutions", "*", "*.ipynb"))[0])),
    _try("package-write", lambda: _append(os.path.join(_repo, "qmatmul", "__init__.py"))),
    _try("gradebook-write", lambda: _append(os.environ["ESCAPE_GRADEBOOK"])),
]
print("escape: " + "; ".join(_report))


def quantize_int8_per_channel(w):
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s
