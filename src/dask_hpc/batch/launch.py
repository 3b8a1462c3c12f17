"""A job's launch line: the launcher's words for one rank per worker, each rank running
start-cluster, inside the image where the job has one: ``apptainer exec IMAGE``, under Pyxis
srun's own ``--container-image`` options, under podman-hpc the job's rank script, which runs
``podman-hpc run`` (``batch.runtimes``).

The launchers' lines are data (``systems.yaml``); a site profile adds to them what its guide
asks (``batch.gpu_bind``, ``batch.cpu_bind: list``: ``batch.cpus``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import UsageError
from ..guard import import_path

BINDS_VARIABLE = "dask_hpc_binds"  # the directories every container binds (batch.container)


@cache
def data() -> dict[str, Any]:
    """``systems.yaml``: batch systems, launchers, Apptainer's GPU flags."""
    text = resources.files(__package__).joinpath("systems.yaml").read_text()
    return yaml.safe_load(text)


def apptainer_gpu_flag(vendor: str | None) -> str:
    """``--nv``, ``--rocm`` or nothing: what ``apptainer exec`` needs for this vendor's GPUs."""
    return str(data()["apptainer_gpu_flags"].get(vendor) or "") if vendor else ""


# A Pyxis rank's first words: the image's /etc/environment exported, then the rank's argv.
PYXIS_ENTRY = 'set -a && . /etc/environment && set +a && exec "$@"'


def launch_command(
    *,
    launcher: str,
    batch_system: str | None,
    nodes: int,
    workers_per_node: int,
    worker_type: str,
    argv: Sequence[str],
    image: str | None = None,
    gpu_flag: str = "",
    binds: Sequence[str] = (),
    cores: int | None = None,
    threads: int | None = None,
    fields: Mapping[str, int | str] | None = None,
    options: str = "",
    site_binds: bool = False,
    runtime: str = "apptainer",
) -> str:
    """``LAUNCHER [OPTIONS] [apptainer exec [--nv|--rocm] [--bind ...] IMAGE] ARGV``: one rank
    per worker. ``fields``: the job's shape (``requests.Shape.fields``), else from
    ``cores``/``threads``; ``options``: more of the launcher's (a site's GPU binding);
    ``site_binds``: bind ``$dask_hpc_binds`` where it names any (``batch.container``);
    ``runtime`` ``pyxis``: the image and ``$dask_hpc_mounts`` in srun's Pyxis options;
    ``podman-hpc``: the job's rank script with the loaded image and those mounts.
    Launcher ``mpi``: a ``case`` on the job's own mpiexec, one line per MPI it may be."""
    fields = fields or {
        "nodes": nodes,
        "per_node": workers_per_node,
        "ranks": nodes * workers_per_node,
        **per_rank(workers_per_node, cores, threads),
        "gpus_per_rank": 1 if worker_type == "gpu" else 0,
    }
    if image and runtime == "pyxis":  # srun itself runs the container (batch.runtimes)
        from . import runtimes  # here: runtimes reads container, which reads this module

        options = " ".join(p for p in (options, runtimes.pyxis_options(image)) if p)
        image = None
        # The ranks run with the node's PATH, not the image's: srun resolves the program in
        # the submitting shell's PATH ("execve(): start-cluster: No such file or directory"
        # with a venv on it) and the task's PATH inside was Enroot's default, not the image's
        # /etc/environment (measured, Pyxis 0.11.1, Enroot 4.1.2, Slurm 22.05). So each rank
        # takes the image's environment itself (images_enroot writes it for sh) and then
        # looks start-cluster up in the image's PATH.
        argv = ["/bin/sh", "-c", PYXIS_ENTRY, "dask-hpc", *argv]
    if image and runtime == "podman-hpc":  # the rank script runs podman-hpc (batch.runtimes)
        from . import runtimes

        command = runtimes.podman_command(shlex.join(argv))
    else:
        command = _exec_argv(argv, image, gpu_flag, binds, site_binds)
    if launcher == "mpi":
        return mpi_case(batch_system, fields, command)
    return " ".join(p for p in (_prefix(launcher, batch_system, fields), options, command) if p)


def _prefix(launcher: str, batch_system: str | None, fields: Mapping[str, int | str]) -> str:
    """The launcher's own words: LAUNCHER-BATCHSYSTEM's line where there is one."""
    launchers = data()["launchers"]
    return str(launchers.get(f"{launcher}-{batch_system}", launchers[launcher])).format(**fields)


def mpi_case(batch_system: str | None, fields: Mapping[str, int | str], command: str) -> str:
    """A shell ``case`` that runs the launch line of the MPI the job's mpiexec is (its path
    and ``--version``), or stops with one line when it is none of the batch system's."""
    flavours = data()["mpi_flavours"]
    names = data()["mpi_candidates"].get(batch_system or "")
    if not names:
        raise UsageError(f"no MPI is known under batch system {batch_system}", "pick --launcher")
    lines = [
        "# The MPI of this job's mpiexec, told apart by its path and version:",
        'mpi="$(command -v mpiexec || true) $(mpiexec --version 2>&1 | head -n 1 || true)"',
        'case "$mpi" in',
    ]
    for name in names:
        patterns = "|".join(re.sub(r"([ ()])", r"\\\1", p) for p in flavours[name])
        lines.append(f"  {patterns}) {_prefix(name, batch_system, fields)} {command} ;;")
    problem = f"mpiexec is none of {', '.join(names)} ($mpi)"
    fix = "load the site's MPI module, or name the launcher (--launcher)"
    lines += [
        f'  *) echo "dask-hpc: {problem}; {fix}" >&2; exit 2 ;;',
        "esac",
    ]
    return "\n".join(lines)


def _exec_argv(
    argv: Sequence[str],
    image: str | None,
    gpu_flag: str,
    binds: Sequence[str],
    site_binds: bool = False,
) -> str:
    """ARGV, run inside ``image`` with ``apptainer exec`` when there is one: ``image`` as the
    line names it, shell text (a job names the path it settled: ``"$dask_hpc_image"``)."""
    if not image:
        return shlex.join(argv)
    exec_ = ["apptainer", "exec", *gpu_flag.split()]
    for path in binds:
        exec_ += ["--bind", path]
    shell = f' ${{{BINDS_VARIABLE}:+--bind "${BINDS_VARIABLE}"}}' if site_binds else ""
    return f"{shlex.join(exec_)}{shell} {image} {shlex.join(argv)}"


def per_rank(ranks_per_node: int, cores: int | None, threads: int | None) -> dict[str, int]:
    """A rank's share of its node: ``cores_per_rank`` (physical cores: Open MPI's pe=, jsrun's
    --cpu_per_rs) and ``cpus_per_rank`` (logical CPUs, hardware threads: Slurm's
    --cpus-per-task, PALS's --depth). Unknown node: one each."""
    cores = cores or ranks_per_node
    return {
        "cores_per_rank": max(1, cores // ranks_per_node),
        "cpus_per_rank": max(1, (threads or cores) // ranks_per_node),
    }


def start_cluster_argv(python: str | None) -> list[str]:
    """How a rank starts start-cluster: the console script (in the image, or on the job's
    PATH), or ``python`` running the package; never with the job's working directory (the
    submit directory, which others may write) first on ``sys.path`` (``import_path``)."""
    return import_path.python_argv("dask_hpc", python) if python else ["start-cluster"]


def status_from_rank0(launch: str, on_exit: str = "") -> str:
    """``launch``, then exit with the status rank 0 wrote (its launcher does not report it);
    ``on_exit``: a command the job's EXIT trap ran before this one replaced it."""
    status = '"$DASK_HPC__EXIT_STATUS_FILE"'
    also = f"; {on_exit}" if on_exit else ""
    return "\n".join(
        [
            # mktemp: a new file of a random name, the user's alone (a fixed or $$-named one is
            # one another user of a shared directory can plant first, as a symlink). After "_",
            # the random part is never read by Dask as a number ('.1in...': a SyntaxWarning
            # at every `import dask` in the job; config.env_value)
            'export DASK_HPC__EXIT_STATUS_FILE="$(mktemp "$PWD/.dask-hpc-exit-status_XXXXXX")"',
            f"trap 'rm -f {status}{also}' EXIT",  # also when the launcher fails (set -e)
            launch,
            f"status=$(cat {status} 2>/dev/null || true)",  # empty: rank 0 wrote nothing
            'exit "${status:-1}"',
        ]
    )
