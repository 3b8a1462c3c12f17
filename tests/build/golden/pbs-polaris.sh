#!/bin/bash
#PBS -N dask-hpc
#PBS -l select=4
#PBS -l walltime=01:00:00
#PBS -A proj
#PBS -o dask-hpc.out
#PBS -l filesystems=home:eagle
#PBS -l place=scatter
# dask-hpc on polaris: 4 node(s) x 4 gpu worker(s), one container per rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
module use /soft/modulefiles
module load spack-pe-base apptainer
mpiexec -n 16 --ppn 4 --depth=16 --cpu-bind depth apptainer exec --nv /eagle/proj/dask.sif start-cluster gpu 4 --site polaris -- python job.py --size 1e9
