#!/usr/bin/env bash
# The package itself (editable) with its test extras, and the build tooling (deploy/, editable),
# with Dask at the exact release of constraints.txt (pyproject.toml declares a range).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]' -e ./deploy
# pip compiles an installed package's modules; an editable install's stay source. Where
# PYTHONDONTWRITEBYTECODE is set (CI's environment sets it) no process writes their bytecode, so
# each one that imports them compiled them again: compiled once here, and read by every test's
# processes (measured 2026-11-30: importing every dask_hpc module, 0.600 -> 0.541 CPU s a
# process). A module changed later is compiled again in memory, as without this.
python3 -m compileall -q -j 0 src deploy/src tests >/dev/null
