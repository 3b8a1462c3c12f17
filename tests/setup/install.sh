#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (run as root).
# Each part lives in its own script beside this one. The Debian packages, the test user and
# the package itself come first, one after another; then the parts that only add venvs, root
# filesystems and caches of their own run side by side (they wait on downloads and
# debootstrap more than on the CPU), each part's output printed whole when it ends.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
start=$SECONDS
for part in packages users python; do
  echo "== tests/setup/$part.sh"
  t=$SECONDS
  bash "$here/$part.sh"
  echo "== tests/setup/$part.sh: $((SECONDS - t)) s"
done
# python.sh made the suite's virtual environment: every later part's python3 and pip are its.
export PATH="$(cd "$here/../.." && pwd)/.venv-tests/bin:$PATH"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
# ansible.sh's pip needs python.sh's done; flux.sh builds Flux once per machine (cached)
side_by_side=(dpnp newest_dask slurm apptainer ansible flux enroot podman user_python)
declare -A pids
for part in "${side_by_side[@]}"; do
  ( t=$SECONDS; bash "$here/$part.sh"; echo "== tests/setup/$part.sh: $((SECONDS - t)) s" ) \
    >"$logs/$part.log" 2>&1 &
  pids[$part]=$!
done
failed=()
for part in "${side_by_side[@]}"; do
  status=0
  wait "${pids[$part]}" || status=$?
  echo "== tests/setup/$part.sh"
  cat "$logs/$part.log"
  [ "$status" -eq 0 ] || failed+=("$part (exit $status)")
done
echo "== tests/setup/install.sh: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "tests/setup/install.sh: failed: ${failed[*]} (their output is above)" >&2
  exit 1
fi
