#!/bin/bash
#SBATCH --job-name=dask-hpc
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --gpus-per-node=4
#SBATCH --no-kill
#SBATCH --time=01:00:00
#SBATCH --account=m0000
#SBATCH --qos=regular
#SBATCH --output=dask-hpc-%j.out
#SBATCH --constraint=gpu
# dask-hpc on perlmutter: 2 node(s) x 4 gpu worker(s), this Python environment on every rank.
set -euo pipefail

srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=32 --no-kill --kill-on-bad-exit=0 start-cluster gpu 4 --site perlmutter -- python job.py
