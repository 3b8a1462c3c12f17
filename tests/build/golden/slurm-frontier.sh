#!/bin/bash
#SBATCH --job-name=dask-hpc
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=56
#SBATCH --cpus-per-task=1
#SBATCH --no-kill
#SBATCH --time=01:00:00
#SBATCH --account=abc123
#SBATCH --output=dask-hpc-%j.out
#SBATCH -C nvme
# dask-hpc on frontier: 1 node(s) x 56 cpu worker(s), one container per rank.
set -euo pipefail

srun --nodes=1 --ntasks=56 --ntasks-per-node=56 --cpus-per-task=1 --no-kill --kill-on-bad-exit=0 apptainer exec --rocm dask-hpc-frontier.sif start-cluster cpu 56 --site frontier -- python job.py
