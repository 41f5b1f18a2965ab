"""A throwaway PostgreSQL server for tests and measurements (Debian's postgresql package: `make system-deps`).

    python -m autograder.pgscratch DIR     start one in DIR, print its URL (QMATMUL_DB_URL=...); Ctrl-C stops it

PostgreSQL refuses to run as root, so under root (CI) the cluster belongs to the unprivileged user `nobody`.
It listens on 127.0.0.1 only, on a free port, trusting local connections: a scratch server, never a class's.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

USER = "nobody"  # the cluster's owner when we are root


def binaries() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, Debian's /usr/lib/postgresql/<version>/bin, or the server that
    the `pgserver` wheel bundles (a machine without Debian's package: the lent GPU, docs/grading-h200.md)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if versions:
        return Path(versions[-1]).parent
    spec = importlib.util.find_spec("pgserver")
    bundled = Path(spec.origin).parent / "pginstall" / "bin" if spec and spec.origin else None
    return bundled if bundled and (bundled / "initdb").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", USER, "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def server(folder: Path | None = None, database: str = "qmatmul"):
    """Start a cluster in `folder` (default: a new folder under /tmp, which `nobody` can reach), create
    `database`, yield its SQLAlchemy URL; then stop the cluster and remove its data. pg_ctl runs the server in
    the background, so a SIGTERM (a `kill`, a timeout) is turned into SystemExit while it runs: the cleanup runs
    then too, where the default handler would leave the server behind."""
    import signal
    import tempfile

    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL is not installed: `make system-deps` installs Debian's postgresql (or `pip install pgserver`)"
        )
    owned = folder is None
    folder = Path(tempfile.mkdtemp(prefix="qmatmul-pg-")) if owned else Path(folder)
    data = folder / "pgdata"
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, USER)
        folder.chmod(0o700)
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True}
    subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader",
                              "--no-sync", "-E", "UTF8"]), **run)  # fmt: skip
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={folder} -c fsync=off"
    log = folder / "server.log"
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w",
                                  "start"]), **run)  # fmt: skip
        createdb = bin_dir / "createdb"
        for _ in range(50):
            res = subprocess.run(_as_owner([str(createdb), "-h", "127.0.0.1", "-p", str(port), "-U", "grader",
                                            database]), capture_output=True, text=True)  # fmt: skip
            if res.returncode == 0:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"createdb failed: {res.stderr}")
        yield f"postgresql+psycopg://grader@127.0.0.1:{port}/{database}"
    finally:
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)  # fmt: skip
        shutil.rmtree(folder if owned else data, ignore_errors=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the server too, not only Ctrl-C
    with server(Path(argv[0]).resolve()) as url:
        print(f"QMATMUL_DB_URL={url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
