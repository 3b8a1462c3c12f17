#!/usr/bin/env bash
# The second, unprivileged user of the node that tests/neighbour/ attacks the owner's clusters
# as (tests/harness/neighbour.py), and who submits a rootless podman-hpc job
# (tests/containers/test_podman_hpc.py): no home, no login shell, no password; subordinate ids
# as a site gives its users for rootless podman (podman-hpc 1.1.4's README: "User namespaces
# and, ideally, subuid/gid support should be enabled for the users").
set -euo pipefail
name=dask-hpc-intruder
if ! id -u "$name" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$name"
fi
grep -qs "^$name:" /etc/subuid || usermod --add-subuids 300000-365535 "$name"
grep -qs "^$name:" /etc/subgid || usermod --add-subgids 300000-365535 "$name"
id "$name"
