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
# you, root or the members of hpc.image-group (the one group you chose to trust) can change
# (each rank opens it again by path), then checked: its recorded sha256 (required where only
# that group's trust let it through) and its signature. DASK_HPC__IMAGE_VERIFY=false skips the
# signature and the sha256 of an image of your own, not the place.
dask_hpc_refuse() { echo "dask-hpc: $*" >&2; exit 2; }
dask_hpc_group=''
dask_hpc_gid=
dask_hpc_member() {  # is uid $1 in group $dask_hpc_gid (as the user database says)
  [ -n "$dask_hpc_gid" ] || return 1
  case " $(id -G -- "$1" 2>/dev/null) " in *" $dask_hpc_gid "*) return 0 ;; esac
  return 1
}
dask_hpc_others() {  # why another user could change $1 (written to, unless a sticky parent),
  local owner gid mode via=  # or "group": only the members of $dask_hpc_group could
  owner=$(stat -c %u -- "$1") && gid=$(stat -c %g -- "$1") && mode=$(stat -c %a -- "$1") ||
    { echo "$1 is unreadable"; return; }
  if [ "$owner" != 0 ] && [ "$owner" != "$(id -u)" ]; then
    dask_hpc_member "$owner" || { echo "$1 belongs to uid $owner"; return; }
    via=group
  fi
  if [ "${2:-}" != last ] && [ $((0$mode & 01000)) != 0 ]; then
    :  # sticky: nobody else can rename what is in it
  elif [ $((0$mode & 02)) != 0 ] || { [ $((0$mode & 020)) != 0 ] && [ -z "$dask_hpc_gid" ]; }; then
    echo "$1 can be written by other users (mode $mode)"; return
  elif [ $((0$mode & 020)) != 0 ] && [ "$gid" != "$dask_hpc_gid" ]; then
    echo "$1 can be written by group $(stat -c %G -- "$1") (mode $mode)"; return
  elif [ $((0$mode & 020)) != 0 ]; then
    case $(ls -ld -- "$1") in
      ??????????+*) echo "$1 has an access control list (ls -l shows +; getfacl lists it)"
        return ;;
    esac
    via=group
  fi
  echo $via
}
if [ -n "$dask_hpc_group" ]; then
  dask_hpc_gid=$(getent group "$dask_hpc_group") || dask_hpc_refuse "hpc.image-group:" \
    "no group $dask_hpc_group on $(hostname); name your project's group (id -Gn lists yours)"
  dask_hpc_gid=${dask_hpc_gid#*:*:} && dask_hpc_gid=${dask_hpc_gid%%:*}
  dask_hpc_member "$(id -u)" || dask_hpc_refuse "hpc.image-group: you ($(id -un)) are not in" \
    "group $dask_hpc_group; name your project's group (id -Gn lists yours)"
fi
dask_hpc_image=$(readlink -e -- dask-hpc-summit.sif) ||
  dask_hpc_refuse "image "dask-hpc-summit.sif" does not exist (in $PWD); give its path"
dask_hpc_at=$dask_hpc_image
dask_hpc_how=last
dask_hpc_by_group=
while :; do
  dask_hpc_why=$(dask_hpc_others "$dask_hpc_at" $dask_hpc_how)
  if [ "$dask_hpc_why" = group ]; then dask_hpc_by_group=1 dask_hpc_why=; fi
  if [ -n "$dask_hpc_why" ] || [ "$dask_hpc_at" = / ]; then break; fi
  dask_hpc_at=$(dirname -- "$dask_hpc_at") dask_hpc_how=
done
dask_hpc_copy="or copy it to a directory only you can write (cp -- $dask_hpc_image"
dask_hpc_copy="$dask_hpc_copy $dask_hpc_image.sha256 ~/) and give that path"
if [ -n "$dask_hpc_why" ] && [ -n "$dask_hpc_group" ]; then
  dask_hpc_refuse "image $dask_hpc_image can be changed by users outside group" \
    "$dask_hpc_group: $dask_hpc_why; make it writable by that group only, $dask_hpc_copy"
elif [ -n "$dask_hpc_why" ]; then
  dask_hpc_fix=${dask_hpc_copy#or }  # open to all users: no group to trust
  if read -r dask_hpc_mode dask_hpc_trust < <(stat -c '%a %G' -- "$dask_hpc_at" 2>/dev/null) &&
    [ $((0$dask_hpc_mode & 02)) = 0 ]; then
    dask_hpc_fix="set hpc.image-group=$dask_hpc_trust (DASK_HPC__IMAGE_GROUP=$dask_hpc_trust)"
    dask_hpc_fix="$dask_hpc_fix to trust your project's members, $dask_hpc_copy"
  fi
  dask_hpc_refuse "image $dask_hpc_image can be changed by other users: $dask_hpc_why;" \
    "$dask_hpc_fix"
fi
if [ -n "$dask_hpc_by_group" ] || [ "${DASK_HPC__IMAGE_VERIFY:-true}" != false ]; then
  dask_hpc_digest=$dask_hpc_image.sha256
  if [ -L "$dask_hpc_digest" ]; then
    dask_hpc_refuse "$dask_hpc_digest is a symbolic link; remove it, or record the digest again"
  elif [ -e "$dask_hpc_digest" ]; then
    dask_hpc_why=$(dask_hpc_others "$dask_hpc_digest" last)
    [ "$dask_hpc_why" != group ] || dask_hpc_why=
    [ -z "$dask_hpc_why" ] || dask_hpc_refuse "the recorded sha256 of $dask_hpc_image can be" \
      "changed by other users: $dask_hpc_why; record it again (invoke pull)"
    dask_hpc_want=$(cut -d " " -f 1 -- "$dask_hpc_digest")
    dask_hpc_have=$(sha256sum < "$dask_hpc_image" | cut -d " " -f 1)
    [ "$dask_hpc_have" = "$dask_hpc_want" ] || dask_hpc_refuse "image $dask_hpc_image has" \
      "sha256 $dask_hpc_have, not $dask_hpc_want as recorded in $dask_hpc_digest; fetch the" \
      "image again, or record its digest (invoke pull)"
  elif [ -n "$dask_hpc_by_group" ]; then
    dask_hpc_refuse "image $dask_hpc_image is trusted through group $dask_hpc_group only with" \
      "its sha256 recorded, and $dask_hpc_digest is missing; record it (invoke pull, or" \
      "sha256sum -- $dask_hpc_image > $dask_hpc_digest)"
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
