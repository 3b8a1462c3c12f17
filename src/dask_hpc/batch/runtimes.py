"""Which container runtime a job's ranks run the image with, and Pyxis's and podman-hpc's
words for it.

A site profile names the runtime its site supports (``container_runtime``: DeepOps Pyxis over
Enroot, Perlmutter podman-hpc, Apptainer elsewhere) and any other it also has; a job may ask
for one of those (``JobRequest.runtime``), never one the site does not have.

Pyxis (``srun --container-image``) binds nothing the job does not name, unlike Apptainer
(``$HOME``, ``/tmp``, the working directory): so the job mounts, checked once before any rank
starts, the working directory (COMMAND's files, rank 0's exit status), the scheduler directory
and the profile's local directory, each a directory on the node with no comma or colon (the
separators of ``--container-mounts``). Each rank runs as the user (never remapped to root),
without the user's home, in the working directory, with the image's entrypoint left out.

podman-hpc (``podman_lines``) mounts the same directories, checked the same way (``-v``), and
passes no environment but what is named: the launcher's rank variables, Dask's and ours.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..errors import UsageError
from ..planning.sites import Site
from .binds import parse as parse_bind
from .container import SCHEDULER_ENV, _shell_text

MOUNTS_VARIABLE = "dask_hpc_mounts"  # what every Pyxis rank mounts: SRC:DST[,SRC:DST...]
IMAGE_SUFFIX = {"apptainer": ".sif", "pyxis": ".sqsh", "podman-hpc": ".oci.tar"}
IMAGE_KIND = {".sif": "a SIF", ".sqsh": "a squashfs", ".oci.tar": "an OCI archive"}

# What srun gives Pyxis, whatever the site's pyxis.conf or enroot.conf defaults are.
PYXIS_OPTIONS = (
    "--no-container-remap-root",  # the user, not root, inside: files made are the user's
    "--no-container-mount-home",  # the home is not the image's to read
    "--no-container-entrypoint",  # start-cluster, not what the image would run first
    "--container-readonly",  # as a SIF: nothing a rank writes outlives it but in its mounts
    '--container-workdir="$PWD"',
)

MOUNT_FUNCTION = """\
# The directories every rank's container mounts (Pyxis mounts nothing unasked): the working
# directory, the scheduler and local directories the ranks use
dask_hpc_mount() {  # DIRECTORY WHAT: checked, and added to the mounts
  case "$1" in
    *,*|*:*) dask_hpc_refuse "$2 $1 has a comma or a colon, which --container-mounts cannot take" ;;
  esac
  [ -n "$1" ] && [ "${1#/}" != "$1" ] || return 0  # unset, or relative: in the working directory
  [ -d "$1" ] || dask_hpc_refuse "$2 ($1) is not a directory on this node;" \\
    "every rank's container mounts it: create it on the nodes, or run on the site's own nodes"
  case ",${dask_hpc_mounts}," in *",$1:$1,"*) return 0 ;; esac
  dask_hpc_mounts=${dask_hpc_mounts:+$dask_hpc_mounts,}$1:$1
}
dask_hpc_mounts="""


def runtimes(site: Site) -> tuple[str, ...]:
    """The runtimes ``site`` has: its own first, then any other its profile names."""
    return (site.container_runtime, *site.container_runtimes_also)


def implied(site: Site, asked: str | None, image: str | None) -> str:
    """The runtime a job means: ``asked``; else Apptainer for a SIF it names where the site
    has Apptainer too (DeepOps clusters that keep it); else the site's own."""
    if asked:
        return asked
    if image and image.endswith(".sif") and "apptainer" in runtimes(site):
        return "apptainer"
    return site.container_runtime


def choose(site: Site, asked: str | None, launcher: str) -> str:
    """The runtime of a job on ``site``: ``asked``, else the site's own; one line (exit 2) for
    one the site does not have, or Pyxis under a launcher other than ``srun``."""
    runtime = check_has(site, asked or site.container_runtime)
    if runtime == "pyxis" and launcher != "slurm":
        raise UsageError(
            f"Pyxis runs containers under srun, not under launcher {launcher}",
            "use --launcher slurm, or another runtime",
        )
    return runtime


def check_has(site: Site, runtime: str) -> str:
    """``runtime``, if ``site`` has it; else one line (exit 2) naming those it has."""
    have = runtimes(site)
    if runtime not in have:
        where = f" ({site.container_runtime_source})" if site.container_runtime_source else ""
        raise UsageError(
            f"site {site.name} has no container runtime {runtime!r}{where}",
            f"use {' or '.join(have)}",
        )
    return runtime


def pyxis_gpu_lines(gpus: bool) -> list[str]:
    """What a Pyxis job tells Enroot's NVIDIA hook (98-nvidia.sh), which reads
    ``NVIDIA_VISIBLE_DEVICES`` from the job's environment before the image's.

    The site image takes its CUDA base image's ``NVIDIA_VISIBLE_DEVICES=all`` and
    ``NVIDIA_DRIVER_CAPABILITIES=compute,utility`` (``images_enroot``): a GPU job's containers
    get the driver and every GPU device (Slurm's device cgroup and ``CUDA_VISIBLE_DEVICES``
    give each rank its own). A CPU job's containers get none (``void``), so that they start on
    nodes without NVIDIA's container tools too. A value the user exported is kept."""
    if gpus:
        return []
    return [
        "# CPU workers: no GPU or NVIDIA driver in the containers (Enroot's NVIDIA hook)",
        'export NVIDIA_VISIBLE_DEVICES="${NVIDIA_VISIBLE_DEVICES:-void}"',
    ]


def default_image(site_image: str | None, runtime: str) -> str | None:
    """The site's image file for ``runtime``: ``dask-hpc-SITE.sqsh`` for Pyxis,
    ``dask-hpc-SITE.oci.tar`` for podman-hpc."""
    if site_image and site_image.endswith(".sif") and runtime != "apptainer":
        return site_image.removesuffix(".sif") + IMAGE_SUFFIX[runtime]
    return site_image


def check_image(image: str, runtime: str, site: Site | None = None) -> None:
    """Refuse at once an image of another runtime's kind (a SIF given to Pyxis: Enroot runs
    the squashfs ``invoke build`` makes; podman-hpc its OCI archive); the fix names Apptainer
    where ``site`` has it."""
    want = IMAGE_SUFFIX[runtime]
    apptainer = site is None or "apptainer" in runtimes(site)
    other = ", or --runtime apptainer" if apptainer else ""
    for suffix, kind in IMAGE_KIND.items():
        if runtime != "apptainer" and suffix != want and image.endswith(suffix):
            name = "Pyxis" if runtime == "pyxis" else runtime
            what = "squashfs" if runtime == "pyxis" else "OCI archive"
            raise UsageError(
                f"image {image} is {kind}, which {name} cannot run",
                f"give the {what} invoke build makes beside it "
                f"({image.removesuffix(suffix)}{want}){other}",
            )


def mount_lines(site: Site, binds: Sequence[str], runtime: str = "pyxis") -> list[str]:
    """The job's lines that check the ranks' directories and list them in ``$dask_hpc_mounts``:
    the working directory, the scheduler directory, the local directory, ``binds``; in the
    words of ``runtime`` (podman-hpc's ``-v`` takes them from the same list)."""
    scheduler = site.scheduler_directory
    label = f"scheduler directory (${SCHEDULER_ENV}, else {scheduler} of the {site.name} profile)"
    calls = [
        "dask_hpc_mount \"$PWD\" 'working directory'",
        f'dask_hpc_mount "${{{SCHEDULER_ENV}:-{_shell_text(scheduler)}}}" {shlex.quote(label)}',
    ]
    if site.local_directory and runtime != "podman-hpc":  # podman: each rank's own (below)
        label = f"local directory {site.local_directory} of the {site.name} profile"
        calls.append(f'dask_hpc_mount "{_shell_text(site.local_directory)}" {shlex.quote(label)}')
    for spec in binds:  # the cluster's directory, and the user's SRC[:DST[:ro]] (batch.binds)
        bind = parse_bind(spec)
        if bind.target == bind.source and not bind.mode:
            calls.append(f"dask_hpc_mount {shlex.quote(spec)} 'cluster directory'")
        else:  # SRC checked before (binds.job_lines); both runtimes take SRC:DST[:ro] as is
            calls.append(f"{MOUNTS_VARIABLE}=${{{MOUNTS_VARIABLE}:+${MOUNTS_VARIABLE},}}"
                         f"{shlex.quote(bind.spec())}")  # fmt: skip
    function = MOUNT_FUNCTION
    if runtime == "podman-hpc":
        function = function.replace("--container-mounts", "podman-hpc run -v").replace(
            "(Pyxis mounts nothing unasked)", "(podman mounts nothing unasked)"
        )
    return [*function.split("\n"), *calls]


def pyxis_options(image: str) -> str:
    """srun's Pyxis options: ``image`` as shell text (``"$dask_hpc_image"``), the mounts."""
    return " ".join(
        [
            f"--container-image={image}",
            f'--container-mounts="${MOUNTS_VARIABLE}"',
            *PYXIS_OPTIONS,
        ]
    )


# podman-hpc as NERSC runs it on Perlmutter: its source (podman-hpc 1.1.4, its README and
# podman_hpc/siteconfig.py, read 2026-11-29; NERSC's own page was not among the stored copies
# read that day) runs `podman run` with the site's storage, hooks and modules (--gpu: the
# node's NVIDIA libraries and devices), the image from a squashed or additional image store.
# Squashed for many nodes: NERSC and Red Hat, "HPC containers at scale using Podman"
# (opensource.com/article/23/1/hpc-containers-scale-using-podman, read 2026-11-29) pull, make
# "a squashed version of the image using podman-hpc", then run it on 900 nodes.
PODMAN_VARIABLE = "dask_hpc_podman"  # the job's private directory: image store, rank script
# A directory of podman's removed (the job's store, a rank's storage): first what podman left
# mounted in it as root (its overlay driver's own mount of graph/overlay when two podman
# processes ended together, squashfuse's of a migrated layer: seen on scancel), innermost first;
# rootless podman's mounts are in its user namespace's mount table, gone with its pause process;
# then what rootless podman wrote as another id, with `podman-hpc unshare`. Every rootless
# podman command starts a pause process (catatonit -P: it holds the user's namespace) that
# nothing ends, and keeps its pid in its run files (TMPDIR's podman-run-UID): each is given run
# files of its own, never podman's default /tmp/podman-run-UID nor podman-hpc's /tmp/UID_hpc
# (names another user of the node can make first), and its pause process is ended once no
# podman of those run files is left: conmon runs podman's cleanup as a container ends, beside
# `podman run`'s own return (`podman-hpc migrate`'s mksquashfs container too), and a podman that
# finds the pause process gone starts a new one (a second user's job left them on the node
# before, and one in ~6 suites after the pause process was ended as migrate returned).
PODMAN_REMOVE = """\
dask_hpc_podman_end() {  # DIR: wait until no process of the run files in DIR is left (30 s
  # at most), then end its pause processes, until none is left. Podman, conmon and the overlay
  # mounts' helpers name DIR in their arguments, podman's cleanup and the pause process
  # (catatonit) in their environment (TMPDIR); read with bash's builtins, so that nothing this
  # reads with is counted
  local p comm args env pauses waiting
  for _ in $(seq 300); do
    pauses=() waiting=0
    for p in /proc/[1-9]*; do
      [ -O "$p" ] && [ "${p#/proc/}" != "$BASHPID" ] || continue
      { read -r comm <"$p/comm" && mapfile -d '' -t args <"$p/cmdline" &&
        mapfile -d '' -t env <"$p/environ"; } 2>/dev/null || continue
      case $comm in
        catatonit) case "${env[*]}" in *"$1"*) pauses+=("${p#/proc/}") ;; esac ;;
        podman|podman-hpc|conmon) case "${args[*]} ${env[*]}" in *"$1"*) waiting=1 ;; esac ;;
        *) case "${args[*]}" in *"$1"*) waiting=1 ;; esac ;;
      esac
    done
    [ "$waiting" = 1 ] || [ ${#pauses[@]} != 0 ] || return 0
    [ "$waiting" = 1 ] || kill "${pauses[@]}" 2>/dev/null || true
    sleep 0.1
  done
  [ ${#pauses[@]} = 0 ] || kill "${pauses[@]}" 2>/dev/null || true
}
dask_hpc_podman_rm() {  # (none mounted: grep's status 1, under set -e and pipefail)
  local run
  [ "$(id -u)" != 0 ] || grep -F " $1/" /proc/self/mounts | cut -d" " -f2 | sort -r |
    xargs -r umount 2>/dev/null || true
  rm -rf -- "$1" 2>/dev/null && return
  run=$(mktemp -d /tmp/dask-hpc-podman_XXXXXX) || return
  TMPDIR=$run PODMANHPC_RUN_ROOT=$run/run PODMANHPC_GRAPH_ROOT=$run/graph \\
    PODMANHPC_CONFIG_HOME=$run/config SQUASH_DIR=$run/squash podman-hpc unshare rm -rf -- "$1"
  dask_hpc_podman_end "$run"
  rm -rf -- "$run"
}"""
PODMAN_STORE = """\
# podman-hpc: the image checked above, loaded once into this job's own store (a new directory
# of a random name in the working directory, which every node sees, yours alone) and migrated
# there as NERSC squashes an image that many nodes run (`podman-hpc migrate`: its layers squashed,
# one file each, which each node mounts read-only with squashfuse), the loaded copy removed; the
# store removed when the job ends. Each rank runs the image from there (podman's additional
# image store) with podman storage of its own in its node's /tmp (podman takes a run root of 50
# characters at most; a new directory of a random name, never podman-hpc's default /tmp/UID_hpc,
# a name another user of the node can make first), removed after it
@{remove}
command -v podman-hpc >/dev/null || dask_hpc_refuse "podman-hpc not found on $(hostname);" \\
  "load the site's podman-hpc module, or use a runtime of the site's (--runtime)"
dask_hpc_at=$PWD  # where the store is made: nobody else may rename what is in it
while :; do
  dask_hpc_why=$(dask_hpc_others "$dask_hpc_at")
  [ -z "$dask_hpc_why" ] || [ "$dask_hpc_why" = group ] || dask_hpc_refuse "working directory" \\
    "$PWD: $dask_hpc_why; podman-hpc's image store for the job is made in it: submit from a" \\
    "directory only you can write (\\$SCRATCH)"
  [ "$dask_hpc_at" != / ] || break
  dask_hpc_at=$(dirname -- "$dask_hpc_at")
done
dask_hpc_podman=$(mktemp -d "$PWD/.dask-hpc-podman_XXXXXX")
dask_hpc_podman_clean() { dask_hpc_podman_rm "$dask_hpc_podman"; }
trap dask_hpc_podman_clean EXIT  # (and after rank 0's exit status: batch.launch)
# scancel and the walltime's end signal this script too (SIGTERM, then SIGKILL after KillWait):
# bash runs this trap once srun has returned, when the ranks' containers have stopped and let go
# of the store (removed under them, their overlays stayed mounted: measured with scancel)
trap 'exit 143' TERM
export USER="${USER:-$(id -un)}"  # podman-hpc's own name for the user's storage
dask_hpc_podman_run=$(mktemp -d /tmp/dask-hpc-podman_XXXXXX)
dask_hpc_podman_hpc() {  # podman-hpc ARGS... on the job's store, podman's run root on this node
  TMPDIR="$dask_hpc_podman_run" PODMANHPC_GRAPH_ROOT="$dask_hpc_podman/load" \\
    PODMANHPC_RUN_ROOT="$dask_hpc_podman_run" PODMANHPC_CONFIG_HOME="$dask_hpc_podman/config" \\
    SQUASH_DIR="$dask_hpc_podman/squash" podman-hpc "$@"
}
dask_hpc_why=$(dask_hpc_podman_hpc load -q -i "$dask_hpc_image" 2>&1) &&
  dask_hpc_podman_id=${dask_hpc_why##*sha256:} || dask_hpc_podman_id=""
case $dask_hpc_podman_id in
  *[!0-9a-f]*|'') dask_hpc_why="podman-hpc could not load image $dask_hpc_image: $dask_hpc_why" ;;
  *) # podman-hpc 1.1.4's migrate needs the image named, and exits 0 when it fails: the
     # squashed store's list of images says whether it did
    dask_hpc_why=$(dask_hpc_podman_hpc tag "$dask_hpc_podman_id" localhost/dask-hpc-job 2>&1 &&
      dask_hpc_podman_hpc migrate "$dask_hpc_podman_id" 2>&1) || true
    if grep -qsF "$dask_hpc_podman_id" "$dask_hpc_podman/squash/overlay-images/images.json"
    then dask_hpc_why=""
    else dask_hpc_why="podman-hpc could not migrate image $dask_hpc_image: ${dask_hpc_why:-?}"
    fi ;;
esac
dask_hpc_podman_end "$dask_hpc_podman_run"
dask_hpc_podman_rm "$dask_hpc_podman/load"
rm -rf -- "$dask_hpc_podman_run"
[ -z "$dask_hpc_why" ] || dask_hpc_refuse "$(printf %s "$dask_hpc_why" | tr '\\n' ' ')"
cat >"$dask_hpc_podman/rank" <<'DASK_HPC_RANK'
# One rank: IMAGE-ID MOUNTS ARGV... in podman-hpc, its storage private on this node.
set -u
image=$1 mounts=$2 job=$(dirname -- "$0")
shift 2
store=$(mktemp -d /tmp/dask-hpc-podman_XXXXXX) || exit 1
@{remove}
volumes=() && IFS=, read -ra pairs <<<"$mounts"
for pair in "${pairs[@]}"; do volumes+=(-v "$pair"); done
@{local}# Rootless, the user is root in a user namespace of its own (what it writes in the mounts is
# the user's), not the user inside (--userns=keep-id): keep-id on a squashed image fails
# ("creating /etc/mtab symlink: operation not supported", podman 4.3.1 and fuse-overlayfs 1.10
# for a second user with subordinate ids)
# TMPDIR: where rootless podman keeps its runtime directory and pause process's pid, this
# rank's too (podman-hpc drops XDG_RUNTIME_DIR)
export TMPDIR=$store PODMANHPC_GRAPH_ROOT=$store/graph PODMANHPC_RUN_ROOT=$store/run \\
  PODMANHPC_CONFIG_HOME=$store/config SQUASH_DIR=$job/squash
podman-hpc run --name=dask-hpc-rank @{options} "${volumes[@]}" -w "$PWD" \\
  -- "$image" "$@" &  # podman-hpc (click) takes the first --, start-cluster the next
pid=$!
# srun's SIGTERM, to start-cluster in the container, by podman: SIGKILL after its budget to
# stop (20 s, within Slurm's KillWait), as nothing of the container is in srun's step
trap 'podman-hpc stop --time=20 dask-hpc-rank >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null' \\
  TERM INT
status=0
while :; do
  wait "$pid" && status=0 || status=$?
  kill -0 "$pid" 2>/dev/null || break  # a signal ended wait, not podman
done
# the store removed once no podman uses it, or podman's cleanup would make parts of it again
dask_hpc_podman_end "$store"
dask_hpc_podman_rm "$store"
exit "$status"
DASK_HPC_RANK"""

# What every rank's `podman-hpc run` is given: removed when it ends; the image's root read-only
# (as a SIF); the node's network (the scheduler's address is the node's); a process table of
# its own, so that SIGKILL of its first process ends every process of it (nothing of a
# container is in the launcher's step: podman's conmon holds it); the environment
# named, never the host's whole (--env-host: PATH and PYTHONPATH are the image's own): the
# launcher's rank variables, Dask's and dask-hpc's configuration, the GPUs Slurm gave the rank,
# the user's name.
PODMAN_OPTIONS = (
    "--rm",
    "--read-only",
    "--net=host",
    "--init",  # catatonit first: start-cluster never PID 1; all of the container ends with it
    "--env='SLURM_*'",
    "--env='DASK_*'",
    "--env=CUDA_VISIBLE_DEVICES",
    "--env=USER",  # the user's name (the banner's ssh line), which the image's passwd lacks
)


# A rank's local directory (Dask's spill, the workers' own directories): a directory of the
# rank's storage, mounted where the profile's local directory is, never the node's shared one
# (/tmp). Rootless podman maps the user alone: inside, the node's /tmp and every directory of
# root's show the kernel's overflow id (65534), which start-cluster's checks cannot tell from
# another user's and refuse (measured: a rootless job of a second user, "local directory /tmp
# belongs to uid 65534"); the rank's own directory is the user's, inside as outside.
PODMAN_LOCAL = """\
mkdir -m 700 "$store/local" || exit 1
[ -z "@{directory}" ] || volumes+=(-v "$store/local:@{directory}")
"""


def podman_lines(gpu: bool, local_directory: str = "") -> list[str]:
    """The job's lines that load the checked image into its private store and write the rank
    script (``$dask_hpc_podman/rank``); ``gpu``: ``--gpu`` (NERSC's module: the node's NVIDIA
    libraries and devices); ``local_directory``: the profile's, where each rank mounts its
    own."""
    from .templating import Template

    options = " ".join([*PODMAN_OPTIONS, *(["--gpu"] if gpu else [])])
    local = Template(PODMAN_LOCAL).substitute(directory=_shell_text(local_directory))
    text = Template(PODMAN_STORE).substitute(
        options=options, remove=PODMAN_REMOVE, local=local if local_directory else ""
    )
    return text.split("\n")


def podman_command(argv: str) -> str:
    """A rank's command: the rank script on the loaded image, the checked mounts, ``argv``
    (shell text)."""
    return f'bash "${PODMAN_VARIABLE}/rank" "${PODMAN_VARIABLE}_id" "${MOUNTS_VARIABLE}" {argv}'
