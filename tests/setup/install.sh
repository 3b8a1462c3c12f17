#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (run as root).
# Each part lives in its own script beside this one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for part in packages python dpnp slurm apptainer ansible; do
  if [ -f "$here/$part.sh" ]; then
    echo "== tests/setup/$part.sh"
    bash "$here/$part.sh"
  fi
done
