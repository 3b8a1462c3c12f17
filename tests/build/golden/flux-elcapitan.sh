#!/bin/bash
#FLUX: --job-name=dask-hpc
#FLUX: --nodes=2
#FLUX: --nslots=8
#FLUX: --cores-per-slot=24
#FLUX: --gpus-per-slot=1
#FLUX: --time-limit=120m
#FLUX: --bank=mybank
#FLUX: --queue=pbatch
#FLUX: --output=dask-hpc-{{id}}.out
#FLUX: --exclusive
# dask-hpc on elcapitan: 2 node(s) x 4 gpu worker(s), this Python environment on every rank.
set -euo pipefail

flux run --nodes=2 --ntasks=8 --cores-per-task=24 --gpus-per-task=1 -o cpu-affinity=per-task -o gpu-affinity=per-task -o exit-timeout=none start-cluster gpu 4 --site elcapitan -- python job.py
