#!/bin/bash
#PBS -N dask-hpc
#PBS -l select=2
#PBS -l walltime=00:30:00
#PBS -A datascience
#PBS -q debug
#PBS -o dask-hpc.out
#PBS -l filesystems=home:flare
#PBS -l place=scatter
# dask-hpc on aurora: 2 node(s) x 6 gpu worker(s), one container per rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
module load apptainer
mpiexec -n 12 --ppn 6 --depth=34 --cpu-bind depth apptainer exec dask-hpc-aurora.sif start-cluster gpu 6 --site aurora -- python pi.py
