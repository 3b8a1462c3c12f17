#!/usr/bin/env bash
# The package itself (editable) with its test extras, and the build tooling (deploy/, editable),
# with Dask at the exact release of constraints.txt (pyproject.toml declares a range).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]' -e ./deploy
