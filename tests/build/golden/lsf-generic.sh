#!/bin/bash
#BSUB -J dask-hpc
#BSUB -n 8
#BSUB -R "span[ptile=4]"
#BSUB -R "affinity[core(8)]"
#BSUB -R "rusage[mem=15259MB]"
#BSUB -W 1:00
#BSUB -o dask-hpc.%J.out
# dask-hpc on generic: 2 node(s) x 4 cpu worker(s), this Python environment on every rank.
set -euo pipefail
cd "${LS_SUBCWD:-.}"

export DASK_HPC__EXIT_STATUS_FILE="$(mktemp "$PWD/.dask-hpc-exit-status_XXXXXX")"
trap 'rm -f "$DASK_HPC__EXIT_STATUS_FILE"' EXIT
# The MPI of this job's mpiexec, told apart by its path and version:
mpi="$(command -v mpiexec || true) $(mpiexec --version 2>&1 | head -n 1 || true)"
case "$mpi" in
  *Open\ MPI*|*OpenRTE*) mpirun -n 8 --map-by ppr:4:node:pe=8 --enable-recovery --hostfile "$LSB_DJOB_HOSTFILE" start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py ;;
  *HYDRA*|*MPICH*|*Intel\(R\)\ MPI*) mpiexec -n 8 -ppn 4 -f "$LSB_DJOB_HOSTFILE" -bind-to core:8 start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py ;;
  *) echo "dask-hpc: mpiexec is none of openmpi, mpich ($mpi); load the site's MPI module, or name the launcher (--launcher)" >&2; exit 2 ;;
esac
status=$(cat "$DASK_HPC__EXIT_STATUS_FILE" 2>/dev/null || true)
exit "${status:-1}"
