#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (run as root).
# Each part lives in its own script beside this one. The Debian packages and the test user come
# first, one after another; then the parts that only add venvs, root filesystems and caches of
# their own run side by side (they wait on downloads and debootstrap more than on the CPU),
# each part's output printed whole when it ends: those that need the suite's venv once
# python.sh has made it, the others beside python.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
start=$SECONDS
for part in packages users; do
  echo "== tests/setup/$part.sh"
  t=$SECONDS
  bash "$here/$part.sh"
  echo "== tests/setup/$part.sh: $((SECONDS - t)) s"
done

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
declare -A pids
begin() {  # run tests/setup/$1.sh in the background, its output kept for the end
  ( t=$SECONDS; bash "$here/$1.sh"; echo "== tests/setup/$1.sh: $((SECONDS - t)) s" ) \
    >"$logs/$1.log" 2>&1 &
  pids[$1]=$!
}
# Parts that need nothing of the suite's venv start at once, beside python.sh (its downloads
# leave a CPU free); flux.sh builds Flux once per machine (cached).
alone=(slurm apptainer flux enroot podman user_python)
for part in "${alone[@]}"; do begin "$part"; done
echo "== tests/setup/python.sh"
t=$SECONDS
failed=()
side_by_side=("${alone[@]}")
if bash "$here/python.sh"; then
  echo "== tests/setup/python.sh: $((SECONDS - t)) s"
  # python.sh made the suite's virtual environment: the later parts' python3 and pip are its.
  export PATH="$(cd "$here/../.." && pwd)/.venv-tests/bin:$PATH"
  after_python=(dpnp newest_dask ansible)
  for part in "${after_python[@]}"; do begin "$part"; done
  side_by_side=("${after_python[@]}" "${alone[@]}")
else
  failed+=("python (exit $?; dpnp, newest_dask and ansible not run)")
fi
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
