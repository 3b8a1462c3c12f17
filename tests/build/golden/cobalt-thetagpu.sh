#!/bin/bash
#COBALT --jobname dask-hpc
#COBALT -n 1
#COBALT -t 45
#COBALT -A proj
#COBALT -q full-node
#COBALT -O dask-hpc
# dask-hpc on thetagpu: 1 node(s) x 8 gpu worker(s), one container per rank.
set -euo pipefail

mpirun -np 8 -npernode 8 --hostfile "$COBALT_NODEFILE" apptainer exec --nv dask-hpc-thetagpu.sif start-cluster gpu 8 -- python job.py
