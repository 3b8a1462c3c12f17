#!/usr/bin/env bash
# Debian packages: real launchers (Open MPI, MPICH, Slurm), mmdebstrap for test root filesystems
# (debootstrap: what `invoke build` runs, and its scripts name Ubuntu's mirror),
# sshfs and an OCI registry.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# chromium: the dashboard test opens the status page in a real browser (Playwright drives it).
# sshfs, openssh-server: a network file system between the Ansible tests' nodes (no NFS in the
# CI kernel); docker-registry: the OCI registry the image tests push to and pull from; gpg,
# gpgv, xz-utils: ansible.sh's root filesystems (here, so that no later part, run side by side
# with others, needs apt-get). r-base-core: a real Rscript, which jupyter-lsp's language-server
# detection runs (and R reads ./.Rprofile): tests/neighbour/test_jupyter_private.py.
# python3-venv: the suite's own virtual environment (python.sh).
need=(openmpi-bin mpich slurm-wlm slurm-client munge debootstrap mmdebstrap squashfs-tools uidmap procps
      iproute2 curl chromium fonts-dejavu-core sshfs openssh-server docker-registry openssl
      gpg gpgv xz-utils r-base-core python3-venv)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  # The ssh and docker-registry services must not start on this machine (the tests run their
  # own on loopback): without a policy-rc.d of the machine's own, one that refuses every
  # service start is in place during the install.
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    guard=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$guard"
    chmod 755 "$guard"
    trap 'rm -f "$guard"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
