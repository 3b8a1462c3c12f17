"""``hpc-job``: print a site's batch script that runs COMMAND on a dask-hpc cluster.

    hpc-job --site aurora --nodes 2 --account MyProject --queue debug -- python pi.py > job.pbs
    qsub job.pbs

A command of the installed package (``pip install dask-hpc``, or inside the site's image):
no checkout and no invoke needed. ``invoke job`` in a checkout is the same command (its
options are these, parsed here). The script comes from ``dask_hpc.batch.script.render``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError, stdout_closed
from ..guard import private_files
from ..guard.images import ImageError

if TYPE_CHECKING:
    from .script import JobRequest

PROG = "hpc-job"

# Each option: (help text, type). The one list invoke's `job` task takes its help from too.
OPTIONS: dict[str, tuple[str, type]] = {
    "site": (
        "the site whose batch system, launcher and image to use (default: detected, "
        "else generic; see the site table in docs/sites.md)",
        str,
    ),
    "nodes": ("number of nodes", str),
    "workers_per_node": ("workers (ranks) per node (default: GPUs per node, else 1)", int),
    "worker_type": ("cpu or gpu (default: gpu where the site has GPUs)", str),
    "walltime": ("HH:MM:SS (default 01:00:00)", str),
    "account": ("project to charge", str),
    "queue": ("queue or partition", str),
    "image": ("path of the image on the site (default: dask-hpc-SITE.sif)", str),
    "job_name": ("job name (default dask-hpc)", str),
    "log": ("job log file (default: the batch system's usual name)", str),
    "output": ("write the script here instead of stdout", str),
    "image_key": (
        "the site's public key (PEM): the job verifies the image with it before any "
        "rank starts (default: dask config hpc.image-key)",
        str,
    ),
    "no_verify": ("do not verify the image (explicit opt-out)", bool),
    "image_group": (
        "the one group (your project's) whose members may change the image and its recorded "
        "sha256, in a group-writable project directory: the job then requires the sha256 "
        "(default: dask config hpc.image-group)",
        str,
    ),
    "runtime": (
        "the container runtime the ranks run the image with, one the site has (default: the "
        "site's: Pyxis on DeepOps, Apptainer elsewhere; a .sif --image where the site has "
        "Apptainer too: apptainer)",
        str,
    ),
    "gpus_per_node": ("GPUs each node of the job asks for (default: one per gpu worker)", int),
    "cpus_per_worker": (
        "CPUs each worker asks for, and its threads (default: the node's CPUs "
        "shared out; where the site profile does not know them, Slurm is "
        "asked)",
        int,
    ),
    "memory_per_worker": (
        "memory each worker asks for, and its limit (e.g. 16GB; default: not asked)",
        str,
    ),
    "batch_system": (
        "slurm, pbs, lsf, flux or cobalt (default: the site's): a plain cluster "
        "is --site generic --batch-system pbs",
        str,
    ),
    "launcher": (
        "flux, jsrun, mpi, mpich, openmpi, pals or slurm, one the batch system runs "
        "(default: the site's, else the batch system's; mpi: the job's own mpiexec, "
        "Open MPI, MPICH or PALS, told apart when it runs)",
        str,
    ),
    "python": (
        "without an image: the Python with dask-hpc that every rank runs (PYTHON -P "
        "-m dask_hpc, never the submit directory on its module path; default: the "
        "start-cluster command on the job's PATH)",
        str,
    ),
}
# Repeatable, so not in OPTIONS (whose values invoke's `job` task passes once each).
BIND_HELP = (
    "a directory of the node the ranks' containers see, as Apptainer's SRC[:DST[:ro]] "
    "(e.g. /lus/flare/projects/MyProject:/data:ro; repeat for more): checked before any "
    "rank starts"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, f"see {PROG} --help")


def choices(name: str) -> list[str] | None:
    """The values ``--name`` takes where they are a list (batch systems, launchers)."""
    from .launch import data
    from .rules import launcher_names

    if name == "batch_system":
        return list(data()["batch_systems"])
    if name == "runtime":
        from ..planning.sites import CONTAINER_RUNTIMES

        return list(CONTAINER_RUNTIMES)
    return launcher_names() if name == "launcher" else None


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    first, rest = __doc__.split("\n\n", 1)
    p = _Parser(
        prog=PROG,
        usage=f"{PROG} --nodes N [options] -- COMMAND [ARGS...]",
        description=first.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=rest.replace("``", ""),
    )
    p.add_argument("--version", action="version", version=f"dask-hpc {__version__}")
    for name, (text, kind) in OPTIONS.items():
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            p.add_argument(flag, action="store_true", help=text)
        else:
            listed = choices(name)
            p.add_argument(
                flag,
                required=name == "nodes",
                help=text,
                choices=listed,
                metavar=name.upper() if listed else None,
            )
    p.add_argument("--bind", action="append", metavar="SRC[:DST[:ro]]", help=BIND_HELP)
    return p


def _count(option: str, value: str | int | None) -> int | None:
    """A whole number given on the command line (None for none), or a UsageError."""
    if value in (None, "", 0):
        return None
    try:
        return int(value)  # type: ignore[arg-type]
    except ValueError:
        raise UsageError(f"--{option} takes a whole number, not {value!r}") from None


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Options, and the COMMAND after ``--``."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def request(args: argparse.Namespace, command: Sequence[str]) -> JobRequest:
    """The job the options describe (``dask_hpc.batch.script.JobRequest``)."""
    from .. import config
    from ..planning.sites import detect_site
    from .binds import with_binds
    from .script import JobRequest

    nodes = _count("nodes", args.nodes)
    job = JobRequest(
        site=args.site or config.get("site") or detect_site().name,
        nodes=nodes if nodes is not None else 0,
        command=list(command),
        workers_per_node=_count("workers-per-node", args.workers_per_node),
        worker_type=args.worker_type or None,
        walltime=args.walltime or "01:00:00",
        account=args.account or None,
        queue=args.queue or None,
        image=args.image or None,
        job_name=args.job_name or "dask-hpc",
        output=args.log or None,
        image_key=args.image_key or None,
        verify_image=not args.no_verify,
        gpus_per_node=_count("gpus-per-node", args.gpus_per_node),
        cpus_per_worker=_count("cpus-per-worker", args.cpus_per_worker),
        memory_per_worker=args.memory_per_worker or None,
        batch_system=args.batch_system or None,
        launcher=args.launcher or None,
        python=args.python or None,
        runtime=args.runtime or None,
        image_group=args.image_group or None,
    )
    return with_binds(job, getattr(args, "bind", None))


def write(args: argparse.Namespace, command: Sequence[str]) -> int:
    """Render the script and write it (to ``--output``, executable, or to stdout)."""
    from ..planning.sites import load_site
    from .rules import check_executable, retired_warning
    from .script import render

    job = request(args, command)
    if command:
        check_executable(command[0])  # rank 0 would say only "not found", once the job runs
    text = render(job)
    warning = retired_warning(load_site(job.site))
    if warning:
        sys.stderr.write(f"{PROG}: {warning}\n")
    if args.output:  # a new file renamed over it: never through a link another user planted
        output = Path(args.output)
        try:
            private_files.write_file(output, text.encode(), mode=0o755)
        except OSError as error:  # no such directory, /proc, a read-only file system
            raise UsageError(
                f"--output {output}: cannot write there ({error.strerror or error})",
                "give a path in a directory of yours, or leave --output out for stdout",
            ) from None
        return 0
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `hpc-job ... | head`: the reader has what it wanted
        return stdout_closed()
    return 0


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` and write the script; a UsageError (or ImageError) for bad input."""
    options, command = split_command(argv)
    try:
        args = build_parser().parse_args(options)
    except BrokenPipeError:  # --help into a closed pipe
        return stdout_closed()
    return write(args, command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hpc-job`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except (UsageError, ImageError) as error:
        sys.stderr.write(f"{PROG}: error: {error}\n")
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
