#!/usr/bin/env bash
# Debian packages: real launchers (Open MPI, MPICH, Slurm), debootstrap for test root filesystems.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# chromium: the dashboard test opens the status page in a real browser (Playwright drives it).
need=(openmpi-bin mpich slurm-wlm slurm-client munge debootstrap squashfs-tools uidmap procps iproute2 curl chromium fonts-dejavu-core)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
