#!/bin/sh
# Drop-in for the ALCF guide's start_dask_aurora.sh (same arguments):
#   mpiexec -n $((NNODES * 6)) --ppn 6 ./start_dask_aurora.sh gpu 6 [-- python job.py]
[ $# -ge 2 ] || { echo "usage: start_dask_aurora.sh cpu|gpu WORKERS_PER_NODE [options] [-- COMMAND]" >&2; exit 2; }
type=$1 count=$2
shift 2
exec "$(dirname "$0")/start-cluster" "$type" "$count" --site aurora "$@"
