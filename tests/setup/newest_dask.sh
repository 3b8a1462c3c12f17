#!/usr/bin/env bash
# A virtual environment with the newest Dask inside the range pyproject.toml declares (pip picks
# it from the range; DASK_VERSION=X for release X), for tests/test_newest_dask.py, which runs the
# Dask-facing tests in it: the main run covers the range's low end (constraints.txt's pin).
# dask-hpc is installed editable from this checkout with its dependencies resolved against that
# Dask, so the declared range is what pip checks. A second run with the same range, version and
# checkout only checks (well under a second); a Dask released since is taken on the next setup.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
PYTHON=${PYTHON:-python3}
range=$("$PYTHON" "$repo/tests/dask_range.py")
wanted=${DASK_VERSION:+==$DASK_VERSION}
wanted=${wanted:-$range}
VENV=$CACHE/dask-newest-venv
STAMP=$VENV/.dask-hpc-newest-dask
# the suite's own runner as the main environment's (pyproject.toml's addopts name xdist's options)
TOOLS=("pytest>=8,<9.1" "pytest-timeout>=2.3" "pytest-xdist>=3.5")
want="$wanted | $repo | ${TOOLS[*]}"

mkdir -p "$CACHE"
exec 9>"$CACHE/.newest-dask-setup.lock"  # one setup at a time
flock 9

# made from the suite's base Python (tests/setup/python.sh), or made again
base_home=$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys._base_executable))')
if [ -f "$VENV/pyvenv.cfg" ] && ! grep -qx "home = $base_home" "$VENV/pyvenv.cfg"; then
  rm -rf "$VENV"
fi
if [ -x "$VENV/bin/start-cluster" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# numpy and pandas: the tests' jobs use them (examples/pi.py, the forkserver preload test)
# shellcheck source=uv_install.sh
. "$repo/tests/setup/uv_install.sh"
uv_install "$VENV/bin/python" -q --upgrade -e "$repo" \
  "dask[distributed]$wanted" "distributed$wanted" numpy pandas "${TOOLS[@]}"
echo "$want" >"$STAMP"
"$VENV/bin/python" -c 'import distributed; print("newest_dask.sh: distributed", distributed.__version__)'
