#!/usr/bin/env bash
# The package itself (editable) with its test extras, and the build tooling (deploy/, editable).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --disable-pip-version-check -e '.[test]' -e ./deploy
