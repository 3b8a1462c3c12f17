#!/usr/bin/env bash
# The second, unprivileged user of the node that tests/neighbour/ attacks the owner's clusters
# as (tests/harness/neighbour.py): no home, no login shell, no password.
set -euo pipefail
name=dask-hpc-intruder
if ! id -u "$name" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$name"
fi
id "$name"
