"""A correct submission that also tries to look around: the network, other students' notebooks, the gradebook,
the solutions. Without the sandbox it can; with `--sandbox` (bubblewrap) it finds nothing, and is graded all
the same. The line it prints says what it found (tests/test_sandbox.py reads it).

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex1_quantizer
import glob
import os
import socket


def _can_connect():
    port = int(os.environ.get("SNOOP_PORT", "0") or 0)
    if not port:
        return "no port to try"
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "open"
    except OSError as exc:
        return f"blocked ({exc.strerror or type(exc).__name__})"


def _readable(pattern):
    found = 0
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as f:
                found += bool(f.read(1))
        except OSError:
            pass
    return found


_others = (
    _readable("../../../submitted/*/*/*.ipynb") + _readable("../../*/*/*.ipynb") - _readable("./*.ipynb")
)
_gradebook = _readable("../../../gradebook.db")
_solutions = _readable(os.path.join(os.path.dirname(w8a16.__file__), "..", "solutions", "*", "*.ipynb"))
print(
    f"snoop: network {_can_connect()}; other notebooks read {_others}; gradebook read {_gradebook}; "
    f"solutions read {_solutions}"
)


def quantize_int8_per_channel(w):
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s
