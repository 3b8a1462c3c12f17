#!/bin/bash
#COBALT --jobname dask-hpc
#COBALT -n 1
#COBALT -t 45
#COBALT -A proj
#COBALT -q full-node
#COBALT -O dask-hpc
# dask-hpc on thetagpu: 1 node(s) x 8 gpu worker(s), one container per rank.
set -euo pipefail

export DASK_HPC__EXIT_STATUS_FILE="$(mktemp "$PWD/.dask-hpc-exit-status.XXXXXX")"
trap 'rm -f "$DASK_HPC__EXIT_STATUS_FILE"' EXIT
mpirun -np 8 --map-by ppr:8:node:pe=16 --enable-recovery --hostfile "$COBALT_NODEFILE" apptainer exec --nv dask-hpc-thetagpu.sif start-cluster gpu 8 --site thetagpu -- python job.py
status=$(cat "$DASK_HPC__EXIT_STATUS_FILE" 2>/dev/null || true)
exit "${status:-1}"
