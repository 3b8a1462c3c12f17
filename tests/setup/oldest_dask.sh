#!/usr/bin/env bash
# A virtual environment with the oldest Dask that pyproject.toml declares (the lower bound of
# its distributed requirement; DASK_VERSION=X for another release), for tests/test_oldest_dask.py,
# which runs the Dask-facing tests in it. dask-hpc is installed editable from this checkout with
# its dependencies resolved against that Dask, so the declared range is what pip checks.
# A second run with the same version and checkout only checks (well under a second).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
PYTHON=${PYTHON:-python3}
version=${DASK_VERSION:-$("$PYTHON" "$repo/tests/oldest_dask.py")}
VENV=$CACHE/dask-$version-venv
STAMP=$VENV/.dask-hpc-oldest-dask
# the suite's own runner as the main environment's (pyproject.toml's addopts name xdist's options)
TOOLS=("pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.5")
want="$version | $repo | ${TOOLS[*]}"

mkdir -p "$CACHE"
exec 9>"$CACHE/.oldest-dask-setup.lock"  # one setup at a time
flock 9

if [ -x "$VENV/bin/start-cluster" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# numpy and pandas: the tests' jobs use them (examples/pi.py, the forkserver preload test)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$repo" \
  "dask[distributed]==$version" "distributed==$version" numpy pandas "${TOOLS[@]}"
echo "$want" >"$STAMP"
