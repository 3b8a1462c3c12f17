#!/bin/bash
#SBATCH --job-name=dask-hpc
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=61036M
#SBATCH --no-kill
#SBATCH --time=01:00:00
#SBATCH --partition=batch
#SBATCH --output=dask-hpc-%j.out
# dask-hpc on generic: 2 node(s) x 4 cpu worker(s), this Python environment on every rank.
set -euo pipefail

srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=8 --no-kill --kill-on-bad-exit=0 start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py
