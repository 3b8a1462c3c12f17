#!/bin/bash
#SBATCH --job-name=rapids
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=16
#SBATCH --gres=gpu:8
#SBATCH --no-kill
#SBATCH --time=01:00:00
#SBATCH --output=dask-hpc-%j.out
# dask-hpc on deepops: 2 node(s) x 8 gpu worker(s), one container per rank.
set -euo pipefail

srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=16 --no-kill --kill-on-bad-exit=0 apptainer exec --nv dask-hpc-deepops.sif start-cluster gpu 8 --nthreads 16 --site deepops -- python bench.py --gpus 16
