#!/bin/bash
#PBS -N dask-hpc
#PBS -l select=2
#PBS -l walltime=01:00:00
#PBS -A datascience
#PBS -q by-node
#PBS -o dask-hpc.out
#PBS -l filesystems=home:eagle:grand
# dask-hpc on sophia: 2 node(s) x 8 gpu worker(s), one container per rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"

export DASK_HPC__EXIT_STATUS_FILE="$(mktemp "$PWD/.dask-hpc-exit-status.XXXXXX")"
trap 'rm -f "$DASK_HPC__EXIT_STATUS_FILE"' EXIT
mpiexec -n 16 --map-by ppr:8:node:pe=16 --enable-recovery --hostfile "$PBS_NODEFILE" apptainer exec --nv dask-hpc-sophia.sif start-cluster gpu 8 --site sophia -- python job.py
status=$(cat "$DASK_HPC__EXIT_STATUS_FILE" 2>/dev/null || true)
exit "${status:-1}"
