#!/usr/bin/env bash
# Run a command of an untrusted submission (its notebook kernel, or the grader's worker) inside bubblewrap:
#   * no capabilities: its own user namespace, uid/gid 65534, every capability dropped, a new session;
#   * its own PID namespace (the host's processes invisible, no /proc/<pid>/root to reach) that dies with
#     the grader: a detached process cannot outlive its grading or write after it;
#   * no network; private /tmp, /var/tmp and /dev/shm of bounded size;
#   * a file system built from a list of what may be seen, not of what must be hidden: the system's folders
#     (/usr, /etc, /lib ...) and QMATMUL_SANDBOX_READ (the interpreter, its site-packages and import path, the
#     course package) read-only, and nothing else of the host. The course's checkout, the class's submissions,
#     logs, exports and gradebook, the exchange, /home, /srv, /run are simply not there. QMATMUL_SANDBOX_HIDE
#     empties paths that lie inside what is shown (the GPU locks, say). The gradebook's URL is not in the
#     environment.
#   * the working folder (for the notebook's kernel, the student's autograded folder, where nbgrader writes the
#     graded notebook afterwards) is an empty tmpfs: nothing the code writes there reaches the host, so no link
#     it leaves can be followed by nbgrader. Writable on the host: only QMATMUL_SANDBOX_RUNTIME (a kernel's
#     connection file and IPC sockets) and QMATMUL_WORKER_DIR (the grader's payloads for its worker, which the
#     trusted side reads without following links).
#   usage: sandbox_exec.sh COMMAND [ARG ...]
set -euo pipefail
here="$PWD"
tmp_size="${QMATMUL_SANDBOX_TMP_BYTES:-1073741824}"  # each private tmpfs: 1 GiB
args=(--dev-bind /dev /dev --proc /proc --size "$tmp_size" --tmpfs /dev/shm
      --unshare-user --uid 65534 --gid 65534 --cap-drop ALL --unshare-pid --unshare-ipc --unshare-uts
      --unshare-net --unshare-cgroup-try --new-session --die-with-parent
      --setenv TMPDIR /tmp --setenv MPLCONFIGDIR /tmp/mpl
      --setenv TRITON_CACHE_DIR /tmp/triton --setenv HOME /tmp --unsetenv JPY_PARENT_PID
      --unsetenv QMATMUL_DB_URL --unsetenv QMATMUL_DEMO_DB_URL)
for dir in /usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc /opt /sys; do
  if [ -L "$dir" ]; then args+=(--symlink "$(readlink "$dir")" "$dir")
  elif [ -d "$dir" ]; then args+=(--ro-bind "$dir" "$dir"); fi
done
args+=(--size "$tmp_size" --tmpfs /tmp --size "$tmp_size" --tmpfs /var/tmp)
# Emptied first (the checkout among them), so that what is shown below can sit inside them.
IFS=: read -r -a hide <<< "${QMATMUL_SANDBOX_HIDE:-}"
for path in "${hide[@]}"; do
  if [ -d "$path" ]; then args+=(--tmpfs "$path"); elif [ -e "$path" ]; then args+=(--ro-bind /dev/null "$path"); fi
done
exe="$(command -v "$1" || echo "$1")"
IFS=: read -r -a shown <<< "${QMATMUL_SANDBOX_READ:-}"
shown+=("$(cd "$(dirname "$exe")/.." && pwd)" "$(dirname "$(dirname "$(readlink -f "$exe")")")")
for path in "${shown[@]}"; do
  if [ -n "$path" ] && [ -e "$path" ]; then args+=(--ro-bind "$path" "$path"); fi
done
writable=()
for dir in "${QMATMUL_SANDBOX_RUNTIME:-}" "${QMATMUL_WORKER_DIR:-}"; do
  if [ -n "$dir" ]; then args+=(--bind "$dir" "$dir"); writable+=("$dir"); fi
done
inside=no
for dir in "${writable[@]}"; do
  case "$here/" in "$dir"/*) inside=yes;; esac
done
if [ "$inside" = no ]; then args+=(--size "$tmp_size" --tmpfs "$here"); fi
args+=(--chdir "$here")
exec bwrap "${args[@]}" -- "$@"
