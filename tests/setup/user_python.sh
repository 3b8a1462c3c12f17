#!/usr/bin/env bash
# A Python the node's second user (tests/setup/users.sh) runs in its rootless container jobs
# (tests/containers: podman-hpc, Pyxis): the tests' own Python lives under /root, which no
# other user enters. Debian's python3 with the Dask of constraints.txt and this checkout's
# dask-hpc (its console scripts; the tests' images put the checkout's src/ first on
# PYTHONPATH), in $CACHE/user-python, readable by every user; made again when constraints.txt
# or pyproject.toml change. Its time is printed.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
USER_PYTHON=$CACHE/user-python
t=$SECONDS
mkdir -p "$CACHE"
# What runs from the cache must be ours alone: /var/tmp is everyone's.
for path in "$CACHE" "$USER_PYTHON" "$USER_PYTHON/bin"; do
  if [ -e "$path" ] && { [ -L "$path" ] || [ "$(stat -c %u "$path")" != "$(id -u)" ] ||
       [ $(( 0$(stat -c %a "$path") & 022 )) -ne 0 ]; }; then
    echo "user_python: $path is not yours alone (another user may change it): remove it" >&2
    exit 1
  fi
done
exec 9>"$CACHE/.user-python-setup.lock"  # one install at a time
flock 9
want="$(cat "$repo/constraints.txt" "$repo/pyproject.toml" | sha256sum | cut -d" " -f1)"
if [ "$(cat "$USER_PYTHON/.dask-hpc-stamp" 2>/dev/null)" = "$want" ]; then
  echo "user_python: ok ($USER_PYTHON, cached)"
  exit 0
fi
rm -rf "$USER_PYTHON"
log="$CACHE/.user-python.log"
# shellcheck source=uv_install.sh
. "$repo/tests/setup/uv_install.sh"
(umask 022 && /usr/bin/python3 -m venv "$USER_PYTHON" &&
  uv_install "$USER_PYTHON/bin/python" -q -c "$repo/constraints.txt" "$repo") >"$log" 2>&1 \
  || { tail -n 30 "$log" >&2; echo "user_python: $USER_PYTHON did not install" >&2; exit 1; }
echo "$want" >"$USER_PYTHON/.dask-hpc-stamp"
echo "user_python: $USER_PYTHON: $((SECONDS - t)) s"
