#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (run as root).
# Each part lives in its own script beside this one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# A distribution's own Python (Debian 12, Ubuntu 24.04) refuses pip: say so in one line.
if python3 -c 'import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(marker) else 1)'; then
  echo "tests/setup/install.sh: $(command -v python3) is the distribution's own Python, which pip may not change: run with a Python of your own on PATH (a virtual environment, or pyenv as in CI)" >&2
  exit 2
fi
for part in packages users python dpnp oldest_dask slurm apptainer ansible; do
  if [ -f "$here/$part.sh" ]; then
    echo "== tests/setup/$part.sh"
    bash "$here/$part.sh"
  fi
done
