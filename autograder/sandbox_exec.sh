#!/usr/bin/env bash
# Run a command of an untrusted submission (its notebook kernel, or the grader's worker) inside bubblewrap:
#   * no capabilities: its own user namespace, uid/gid 65534, every capability dropped, a new session;
#   * its own PID namespace (the host's processes invisible, no /proc/<pid>/root to reach) that dies with
#     the grader: a detached process cannot outlive its grading or write after it;
#   * no network; private /tmp, /var/tmp and /dev/shm; a read-only file system in which the course's private
#     files (QMATMUL_SANDBOX_HIDE: other students' work, the gradebook, the solutions, .git, the GPU locks, a
#     local PostgreSQL's sockets) are empty, and the gradebook's database URL is not in its environment.
# Writable: the working folder (the student's own autograded copy), QMATMUL_SANDBOX_RUNTIME (a kernel's
# connection file and IPC sockets) and QMATMUL_WORKER_DIR (the grader's payloads for its worker).
#   usage: sandbox_exec.sh COMMAND [ARG ...]
set -euo pipefail
here="$PWD"
args=(--ro-bind / / --dev-bind /dev /dev --proc /proc --tmpfs /dev/shm
      --unshare-user --uid 65534 --gid 65534 --cap-drop ALL --unshare-pid --unshare-ipc --unshare-uts
      --unshare-net --unshare-cgroup-try --new-session --die-with-parent
      --tmpfs /tmp --tmpfs /var/tmp --setenv TMPDIR /tmp --setenv MPLCONFIGDIR /tmp/mpl
      --setenv TRITON_CACHE_DIR /tmp/triton --setenv HOME /tmp --unsetenv JPY_PARENT_PID
      --unsetenv QMATMUL_DB_URL --unsetenv QMATMUL_DEMO_DB_URL)
# A private /tmp must not hide the course itself when the checkout (or the python running it) lives there.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exe="$(command -v "$1" || echo "$1")"
venv="$(cd "$(dirname "$exe")/.." && pwd)"                     # a venv's own folder (site-packages)
prefix="$(dirname "$(dirname "$(readlink -f "$exe")")")"        # the interpreter it points to
for keep in "$root" "$venv" "$prefix"; do
  case "$keep" in /tmp/*|/var/tmp/*|/dev/shm/*) args+=(--ro-bind "$keep" "$keep");; esac
done
IFS=: read -r -a hide <<< "${QMATMUL_SANDBOX_HIDE:-}"
for path in "${hide[@]}"; do
  if [ -d "$path" ]; then args+=(--tmpfs "$path"); elif [ -e "$path" ]; then args+=(--ro-bind /dev/null "$path"); fi
done
args+=(--bind "$here" "$here" --chdir "$here")
for dir in "${QMATMUL_SANDBOX_RUNTIME:-}" "${QMATMUL_WORKER_DIR:-}"; do
  if [ -n "$dir" ]; then args+=(--bind "$dir" "$dir"); fi
done
exec bwrap "${args[@]}" -- "$@"
