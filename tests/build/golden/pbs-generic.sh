#!/bin/bash -l
#PBS -N dask-hpc
#PBS -l select=2:mpiprocs=4:ncpus=32:mem=61036mb
#PBS -l walltime=01:00:00
#PBS -o dask-hpc.out
#PBS -j oe
# dask-hpc on generic: 2 node(s) x 4 cpu worker(s), this Python environment on every rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
# Search paths cleaned before the job starts any program (a planted srun, python or module in
# an empty, relative or shared entry would run as you): dask_hpc.guard.search_paths, in shell.
dask_hpc_shared() {  # why others could change directory $1, or nothing (group 0: root's)
  local at=$1 mode gid deepest=1
  while :; do
    if read -r mode gid < <(stat -L -c '%a %g' -- "$at" 2>/dev/null); then
      if [ $((0$mode & 2)) != 0 -o $((0$mode & 020)) != 0 -a "$gid" != 0 ] &&
        [ -n "$deepest" -o $((0$mode & 01000)) = 0 ]; then
        echo "$at can be written by other users (mode $mode)"; return
      fi
      deepest=
    fi
    [ "$at" != / ] || return 0
    at=$(dirname -- "$at")
  done
}
dask_hpc_clean() {  # drop variable $1's unsafe entries, in one line
  local name=$1 rest entry why kept= said=
  [ -n "${!name+set}" ] || return 0
  rest=${!name}:
  while [ -n "$rest" ]; do
    entry=${rest%%:*} rest=${rest#*:}
    case $entry in
      "") why="an empty entry (the working directory)" ;;
      /*) why=$(dask_hpc_shared "$entry") ;;
      *) why="the relative entry '$entry' (below the working directory)" ;;
    esac
    if [ -n "$why" ]; then said="${said:+$said; }$why"; else kept="${kept:+$kept:}$entry"; fi
  done
  [ -n "$said" ] || return 0
  echo "dask-hpc: $name: left out $said: code there would run as you; name only directories only you or root can write" >&2
  if [ -n "$kept" ]; then export "$name=$kept"; else unset "$name"; fi
}
for dask_hpc_variable in PYTHONPATH PATH LD_LIBRARY_PATH JUPYTER_PATH JUPYTER_CONFIG_PATH R_LIBS R_LIBS_USER R_LIBS_SITE NODE_PATH; do dask_hpc_clean "$dask_hpc_variable"; done
# What every rank runs is here (else each would fail alone: exit 127, not found)
command -v start-cluster >/dev/null 2>&1 || { echo "dask-hpc: start-cluster is not on this job's PATH ($PATH); activate the Python environment with dask-hpc before submitting (sbatch and flux batch pass your shell's environment on; qsub needs -V), or give --python /path/to/env/bin/python" >&2; exit 2; }
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
