#!/bin/bash
#BSUB -J dask-hpc
#BSUB -nnodes 2
#BSUB -W 2:00
#BSUB -P abc123
#BSUB -o dask-hpc.%J.out
#BSUB -alloc_flags NVME
# dask-hpc on summit: 2 node(s) x 6 gpu worker(s), one container per rank.
set -euo pipefail
cd "${LS_SUBCWD:-.}"
module load apptainer
# The image every rank runs, settled once before any starts: resolved, in a place nobody but
# you or root can change (each rank opens it again by path), then checked: its recorded sha256
# and its signature. DASK_HPC__IMAGE_VERIFY=false skips the checks, not the place.
dask_hpc_refuse() { echo "dask-hpc: $*" >&2; exit 2; }
dask_hpc_others() {  # why another user could change $1 (written to, unless a sticky parent)
  local owner mode
  owner=$(stat -c %u -- "$1") && mode=$(stat -c %a -- "$1") || { echo "$1 is unreadable"; return; }
  if [ "$owner" != 0 ] && [ "$owner" != "$(id -u)" ]; then
    echo "$1 belongs to uid $owner"
  elif [ $((0$mode & 022)) != 0 ] && { [ "${2:-}" = last ] || [ $((0$mode & 01000)) = 0 ]; }; then
    echo "$1 can be written by other users (mode $mode)"
  fi
}
dask_hpc_image=$(readlink -e -- dask-hpc-summit.sif) ||
  dask_hpc_refuse "image "dask-hpc-summit.sif" does not exist (in $PWD); give its path"
dask_hpc_at=$dask_hpc_image
dask_hpc_why=$(dask_hpc_others "$dask_hpc_at" last)
while [ -z "$dask_hpc_why" ] && [ "$dask_hpc_at" != / ]; do
  dask_hpc_at=$(dirname -- "$dask_hpc_at")
  dask_hpc_why=$(dask_hpc_others "$dask_hpc_at")
done
[ -z "$dask_hpc_why" ] || dask_hpc_refuse "image $dask_hpc_image can be changed by other" \
  "users: $dask_hpc_why; keep images in a directory only you or root can write"
if [ "${DASK_HPC__IMAGE_VERIFY:-true}" != false ]; then
  dask_hpc_digest=$dask_hpc_image.sha256
  if [ -L "$dask_hpc_digest" ]; then
    dask_hpc_refuse "$dask_hpc_digest is a symbolic link; remove it, or record the digest again"
  elif [ -e "$dask_hpc_digest" ]; then
    dask_hpc_why=$(dask_hpc_others "$dask_hpc_digest" last)
    [ -z "$dask_hpc_why" ] || dask_hpc_refuse "the recorded sha256 of $dask_hpc_image can be" \
      "changed by other users: $dask_hpc_why; record it again (invoke pull)"
    dask_hpc_want=$(cut -d " " -f 1 -- "$dask_hpc_digest")
    dask_hpc_have=$(sha256sum < "$dask_hpc_image" | cut -d " " -f 1)
    [ "$dask_hpc_have" = "$dask_hpc_want" ] || dask_hpc_refuse "image $dask_hpc_image has" \
      "sha256 $dask_hpc_have, not $dask_hpc_want as recorded in $dask_hpc_digest; fetch the" \
      "image again, or record its digest (invoke pull)"
  fi
fi
# The scheduler and local directories the ranks use, bound into every rank's container where
# Apptainer does not bind them itself ($HOME, /tmp, /var/tmp, the working directory)
dask_hpc_bind() {  # DIRECTORY WHAT: checked, and added to the binds
  case "$1" in
    "${HOME:-/nonexistent}"|"${HOME:-/nonexistent}"/*|"/tmp"|"/tmp"/*|"/var/tmp"|"/var/tmp"/*) return 0 ;;
    *,*|*:*) dask_hpc_refuse "$2 $1 has a comma or a colon, which apptainer --bind cannot take" ;;
  esac
  # unset (start-cluster falls back to ~/.dask-hpc or /tmp), relative (the working directory)
  [ -n "$1" ] && [ "${1#/}" != "$1" ] || return 0
  [ -d "$1" ] || dask_hpc_refuse "$2 ($1) is not a directory on this node;" \
    "every rank's container binds it: create it on the nodes, or run on the site's own nodes"
  dask_hpc_binds=${dask_hpc_binds:+$dask_hpc_binds,}$1
}
dask_hpc_binds=
dask_hpc_bind "${DASK_HPC__SCHEDULER_DIRECTORY:-${MEMBERWORK:+${MEMBERWORK}}}" 'scheduler directory ($DASK_HPC__SCHEDULER_DIRECTORY, else $MEMBERWORK of the summit profile)'
dask_hpc_bind "${USER:+/mnt/bb/${USER}}" 'local directory /mnt/bb/$USER of the summit profile'
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
jsrun --nrs 12 --rs_per_host 6 --tasks_per_rs 1 --cpu_per_rs 7 --gpu_per_rs 1 --bind rs apptainer exec --nv ${dask_hpc_binds:+--bind "$dask_hpc_binds"} "$dask_hpc_image" start-cluster gpu 6 --site summit -- python job.py
