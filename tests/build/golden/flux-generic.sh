#!/bin/bash
#FLUX: --job-name=dask-hpc
#FLUX: --nodes=2
#FLUX: --nslots=8
#FLUX: --cores-per-slot=8
#FLUX: --time-limit=60m
#FLUX: --output=dask-hpc-{{id}}.out
# dask-hpc on generic: 2 node(s) x 4 cpu worker(s), this Python environment on every rank.
set -euo pipefail

flux run --nodes=2 --ntasks=8 --cores-per-task=8 --gpus-per-task=0 -o cpu-affinity=per-task -o gpu-affinity=per-task -o exit-timeout=none start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py
