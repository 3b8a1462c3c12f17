#!/usr/bin/env bash
# The suite's own virtual environment, .venv-tests in the checkout, made from the distribution's
# Python (/usr/bin/python3: Debian 12's 3.11, built with profile-guided and link-time
# optimisation), with the package (editable) and its test extras, and the build tooling
# (deploy/, editable), Dask at the exact release of constraints.txt (pyproject.toml declares a
# range). Not whatever python3 comes first on PATH: CI's is a pyenv build without those
# optimisations (--enable-shared, no --enable-optimizations), and the same tests cost 12-14%
# more CPU under it (measured 2026-11-30: tests/test_faults.py and test_local.py 120 against
# 106 CPU s; the 104-worker Aurora layout and test_dask_compat.py 125 against 107). A venv in
# the checkout also keeps one checkout's editable install from pointing into another's.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv-tests
if [ ! -x /usr/bin/python3 ]; then
  echo "tests/setup/python.sh: /usr/bin/python3 missing: install Debian's python3 and python3-venv (tests/setup/packages.sh)" >&2
  exit 1
fi
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
# shellcheck source=uv_install.sh
. tests/setup/uv_install.sh
uv_install "$VENV/bin/python" -q -c constraints.txt -e '.[test]' -e ./deploy
# pip compiles an installed package's modules; an editable install's stay source. Where
# PYTHONDONTWRITEBYTECODE is set (CI's environment sets it) no process writes their bytecode, so
# each one that imports them compiled them again: compiled once here, and read by every test's
# processes (measured 2026-11-30: importing every dask_hpc module, 0.600 -> 0.541 CPU s a
# process). A module changed later is compiled again in memory, as without this.
"$VENV/bin/python" -m compileall -q -j 0 src deploy/src tests >/dev/null
