#!/bin/bash -l
#PBS -N dask-hpc
#PBS -l select=2:mpiprocs=4:ncpus=32:mem=61036mb
#PBS -l walltime=01:00:00
#PBS -o dask-hpc.out
#PBS -j oe
# dask-hpc on generic: 2 node(s) x 4 cpu worker(s), this Python environment on every rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"

export DASK_HPC__EXIT_STATUS_FILE="$(mktemp "$PWD/.dask-hpc-exit-status_XXXXXX")"
trap 'rm -f "$DASK_HPC__EXIT_STATUS_FILE"' EXIT
# The MPI of this job's mpiexec, told apart by its path and version:
mpi="$(command -v mpiexec || true) $(mpiexec --version 2>&1 | head -n 1 || true)"
case "$mpi" in
  *Open\ MPI*|*OpenRTE*) mpiexec -n 8 --map-by ppr:4:node:pe=8 --enable-recovery --hostfile "$PBS_NODEFILE" start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py ;;
  *HYDRA*|*MPICH*|*Intel\(R\)\ MPI*) mpiexec -n 8 -ppn 4 -f "$PBS_NODEFILE" -bind-to core:8 start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py ;;
  */pals/*|*PALS*) mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth start-cluster cpu 4 --nthreads 8 --memory-limit 16GB -- python job.py ;;
  *) echo "dask-hpc: mpiexec is none of openmpi, mpich, pals ($mpi); load the site's MPI module, or name the launcher (--launcher)" >&2; exit 2 ;;
esac
status=$(cat "$DASK_HPC__EXIT_STATUS_FILE" 2>/dev/null || true)
exit "${status:-1}"
