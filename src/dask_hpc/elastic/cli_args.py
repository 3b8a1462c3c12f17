"""``hpc-cluster``'s arguments: an elastic cluster from the shell, for who does not write Python.

    hpc-cluster up cpu --workers-per-node 2 --jobs 2 -- python job.py   # run, then close
    hpc-cluster up gpu --adapt 0:10 --scheduler-file ~/c.json &        # keep it running
    hpc-cluster scale ~/c.json --jobs 4
    hpc-cluster status ~/c.json
    hpc-cluster down ~/c.json
    hpc-cluster links ~/c.json                                         # dashboard link + token
    hpc-cluster script cpu --workers-per-node 2                        # print a job script

``up`` runs the cluster (an ``HPCCluster``) in its own process until COMMAND ends, or until
``down``, Ctrl-C or SIGTERM; every job is gone when it returns. The other commands reach it
through its scheduler file (TLS, so only its owner can).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..batch.rules import launcher_names
from ..errors import UsageError
from ..planning.sites import CONTAINER_RUNTIMES as RUNTIMES

PROG = "hpc-cluster"
# HPCCluster's settings that pass from the options as they are (the others: cluster_kwargs)
MORE_SETTINGS = (
    "runtime",
    "launcher",
    "pool",
    "scheduler_walltime",
    "lifetime_margin",
    "cpus_per_worker",
    "memory_per_worker",
    "gpus_per_node",
    "interface",
    "dashboard_address",
    "directory",
    "log_directory",
    "name",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, f"see {PROG} --help")


def jobs_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    if not sep or not low.isdigit() or not high.isdigit() or int(high) < int(low):
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX jobs, e.g. 0:10")
    return int(low), int(high)


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return key, value


def _cluster_options(p: argparse.ArgumentParser) -> None:
    def repeated(flag: str, metavar: str, text: str, kind: Any = str) -> None:
        p.add_argument(flag, action="append", type=kind, metavar=metavar, help=f"{text} (repeat)")

    p.add_argument("kind", choices=("cpu", "gpu"), help="the workers of the first pool")
    wpn = "workers (ranks) per node (default: GPUs per node for gpu, else 1)"
    p.add_argument("--workers-per-node", type=count, help=wpn)
    p.add_argument("--nodes-per-job", type=count, help="nodes each job asks for (default 1)")
    p.add_argument("--site", help="site profile (default: detected)")
    p.add_argument("--account", help="project to charge")
    p.add_argument("--queue", help="queue or partition")
    p.add_argument("--walltime", help="each job's, HH:MM:SS")
    p.add_argument("--image", help="the image the workers run in (default: this Python)")
    p.add_argument("--runtime", choices=RUNTIMES, help="what runs --image, one the site has: "
                   f"{', '.join(RUNTIMES)} (default: the site's)")  # fmt: skip
    p.add_argument("--batch-system", help="slurm, pbs, lsf or flux (default: detected)")
    p.add_argument("--scheduler", choices=("local", "job"), help="where the scheduler runs")
    repeated("--job-directive", "LINE", "one more header line of each job, without #SBATCH/#PBS")
    repeated("--job-setup", "SHELL_LINE", "a shell line each job runs before its ranks")
    repeated("--job-env", "NAME=VALUE", "a variable each job exports", key_value)
    repeated("--bind", "SRC[:DST[:ro]]", "a directory the workers' containers (--image) see")
    repeated("--worker-arg", "ARG", "a start-cluster option for the workers: --worker-arg="
             "--nthreads --worker-arg=4")  # fmt: skip
    names = launcher_names()
    p.add_argument("--launcher", choices=names, metavar="LAUNCHER",
                   help=f"the launcher in each job: {', '.join(names)}, one the batch system "
                   "runs (default: the site's)")  # fmt: skip
    p.add_argument("--pool", help="the first pool's name (default: KIND)")
    p.add_argument("--scheduler-walltime", help="the scheduler job's walltime (--scheduler job)")
    margin = "seconds before the walltime by which workers retire"
    p.add_argument("--lifetime-margin", type=float, metavar="SECONDS", help=margin)
    p.add_argument("--cpus-per-worker", type=count, help="CPUs each worker asks for")
    p.add_argument("--memory-per-worker", help="memory each worker asks for, e.g. 16GB")
    p.add_argument("--gpus-per-node", type=count, help="GPUs a gpu job asks for per node")
    p.add_argument("--interface", help="network interface of the scheduler, e.g. ib0")
    p.add_argument("--dashboard-address", default="127.0.0.1:0", help="HOST:PORT")
    p.add_argument("--directory", help="where the cluster's files go (a shared file system)")
    p.add_argument("--log-directory", help="where the jobs' output goes")
    p.add_argument("--name", help="the cluster's name in Dask (default: its id)")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    first, rest = __doc__.split("\n\n", 1)
    p = _Parser(
        prog=PROG,
        description=first.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=rest.replace("``", ""),
    )
    p.add_argument("--version", action="version", version=f"dask-hpc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    up = sub.add_parser("up", help="start a cluster (and run COMMAND on it)")
    _cluster_options(up)
    size = up.add_mutually_exclusive_group()
    size.add_argument("--jobs", type=count, default=0, help="jobs to keep (default 0)")
    size.add_argument("--adapt", type=jobs_range, metavar="MIN:MAX", help="adapt in jobs")
    up.add_argument("--scheduler-file", help="also reachable here (a link), for the others")
    up.add_argument(
        "--wait",
        type=count,
        metavar="WORKERS",
        help="workers to wait for before COMMAND (default: all of --jobs)",
    )
    up.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for them")
    script = sub.add_parser("script", help="print the job script, submit nothing")
    _cluster_options(script)
    for name, text in (
        ("scale", "set a pool's jobs"),
        ("adapt", "adapt a pool in jobs"),
        ("status", "the pools and their jobs"),
        ("down", "close the cluster"),
        ("links", "print the cluster's links, tokens included"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("scheduler_file", metavar="SCHEDULER_FILE")
        if name in ("scale", "adapt"):
            s.add_argument("--pool", help="default: the first pool")
        if name == "scale":
            how = s.add_mutually_exclusive_group(required=True)
            how.add_argument("--jobs", type=count)
            how.add_argument("--workers", type=count)
        if name == "adapt":
            s.add_argument("--jobs", type=jobs_range, required=True, metavar="MIN:MAX")
        if name == "status":
            s.add_argument("--json", action="store_true")
        if name == "down":
            s.add_argument(
                "--timeout", type=float, default=300.0, help="seconds to wait for every job to end"
            )
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        if not argv[at + 1 :]:
            raise UsageError("'--' is not followed by a command", "write: -- COMMAND [ARGS...]")
        return argv[:at], argv[at + 1 :]
    return argv, []


def cluster_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = {
        "workers_per_node": args.workers_per_node,
        "nodes_per_job": args.nodes_per_job,
        "site": args.site,
        "account": args.account,
        "queue": args.queue,
        "walltime": args.walltime,
        "image": args.image,
        "batch_system": args.batch_system,
        "scheduler": args.scheduler,
        "job_directives": args.job_directive,
        "job_setup": args.job_setup,
        "job_env": dict(args.job_env) if args.job_env else None,
        "binds": args.bind,
        "worker_args": args.worker_arg,
        **{key: getattr(args, key) for key in MORE_SETTINGS},
    }
    return {"kind": args.kind, **kwargs}
