#!/usr/bin/env bash
# Start a Jupyter kernel for an untrusted submission inside bubblewrap: no network, a read-only file system,
# and none of the course's private files (other students' work, the gradebook, the solutions).
#   usage (from a kernelspec): sandbox_kernel.sh PYTHON -m ipykernel_launcher -f CONNECTION_FILE
# QMATMUL_SANDBOX_HIDE: colon-separated paths to hide; QMATMUL_SANDBOX_RUNTIME: the folder of the kernel's
# connection file and IPC sockets (shared with the grader). The kernel's working folder (the student's own
# autograded copy) stays visible and writable.
set -euo pipefail
here="$PWD"
args=(--ro-bind / / --dev-bind /dev /dev --proc /proc --unshare-net --die-with-parent
      --tmpfs /var/tmp --setenv TMPDIR /var/tmp --setenv MPLCONFIGDIR /var/tmp/mpl
      --setenv TRITON_CACHE_DIR /var/tmp/triton --setenv HOME /var/tmp)
IFS=: read -r -a hide <<< "${QMATMUL_SANDBOX_HIDE:-}"
for path in "${hide[@]}"; do
  if [ -d "$path" ]; then args+=(--tmpfs "$path"); elif [ -e "$path" ]; then args+=(--ro-bind /dev/null "$path"); fi
done
args+=(--bind "$here" "$here" --chdir "$here")
if [ -n "${QMATMUL_SANDBOX_RUNTIME:-}" ]; then args+=(--bind "$QMATMUL_SANDBOX_RUNTIME" "$QMATMUL_SANDBOX_RUNTIME"); fi
exec bwrap "${args[@]}" -- "$@"
