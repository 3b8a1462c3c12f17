#!/usr/bin/env bash
# Slurm for the test suite: the harness (tests/harness/slurm.py) writes its own private
# slurm.conf, state and logs under a temporary directory and starts its own daemons on free
# ports with auth/none, so nothing here touches a system Slurm.  This script only checks that
# the pieces it needs are installed (by packages.sh) and that the plugins it uses exist.
set -euo pipefail
for prog in slurmctld slurmd srun sbatch squeue scontrol scancel sinfo mpiexec.openmpi mpiexec.mpich; do
  command -v "$prog" >/dev/null || { echo "missing $prog: run tests/setup/packages.sh" >&2; exit 1; }
done
plugdir=""
for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm; do
  [ -d "$d" ] && plugdir="$d" && break
done
[ -n "$plugdir" ] || { echo "Slurm plugin directory not found" >&2; exit 1; }
for plug in auth_none cred_none proctrack_linuxproc select_cons_tres task_none jobacct_gather_none; do
  [ -f "$plugdir/$plug.so" ] || { echo "missing Slurm plugin $plug in $plugdir" >&2; exit 1; }
done
# Scripts in tests/harness/bin must be executable even if a checkout lost the mode bits.
chmod +x "$(dirname "$0")/../harness/bin/"* 2>/dev/null || true
echo "slurm: ok ($(slurmctld -V))"
