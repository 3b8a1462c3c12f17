#!/usr/bin/env bash
# The package itself (editable) with its test extras, and the build tooling (deploy/, editable).
set -euo pipefail
cd "$(dirname "$0")/../.."
# A distribution's own Python (Debian 12, Ubuntu 24.04) refuses pip: say so in one line.
if python3 -c 'import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(marker) else 1)'; then
  echo "tests/setup/python.sh: $(command -v python3) is the distribution's own Python, which pip may not change: run with a Python of your own on PATH (a virtual environment, or pyenv as in CI)" >&2
  exit 2
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]' -e ./deploy
