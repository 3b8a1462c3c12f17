#!/bin/bash
#BSUB -J dask-hpc
#BSUB -nnodes 2
#BSUB -W 2:00
#BSUB -P abc123
#BSUB -o dask-hpc.%J.out
#BSUB -alloc_flags NVME
# dask-hpc on summit: 2 node(s) x 6 gpu worker(s), one container per rank.
set -euo pipefail
cd "${LS_SUBCWD:-.}"
module load apptainer
jsrun --nrs 12 --rs_per_host 6 --tasks_per_rs 1 --cpu_per_rs 7 --gpu_per_rs 1 --bind rs apptainer exec --nv dask-hpc-summit.sif start-cluster gpu 6 --site summit -- python job.py
