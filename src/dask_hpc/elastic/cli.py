"""``hpc-cluster``: an elastic cluster from the shell, for who does not write Python.

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
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..batch.rules import check_executable, launcher_names, retired_warning
from ..errors import UsageError
from ..guard import private
from ..guard.connection import read_scheduler_file
from ..guard.images import ImageError
from ..guard.links import hint, links, private_stream, shown
from ..planning.sites import CONTAINER_RUNTIMES as RUNTIMES

PROG = "hpc-cluster"
# HPCCluster's settings that pass from the options as they are (the others: _cluster_kwargs)
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


def say(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


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


def _cluster_kwargs(args: argparse.Namespace) -> dict[str, Any]:
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


def up(args: argparse.Namespace, command: list[str]) -> int:
    from .cluster import HPCCluster

    if command:
        _check_command(command[0])
        if not args.jobs and not args.adapt:  # it would run on no worker at all
            raise UsageError(
                "COMMAND would run on a cluster of no workers", "give --jobs N or --adapt MIN:MAX"
            )
    link = Path(args.scheduler_file).expanduser() if args.scheduler_file else None
    if link is not None and not link.parent.is_dir():
        raise UsageError(f"--scheduler-file {link}: no directory {link.parent}", "create it first")
    stop: list[int] = []  # the signals received: close the cluster, then exit 128+N
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    cluster = HPCCluster(**_cluster_kwargs(args))
    warning = retired_warning(cluster.site)
    if warning:
        say(warning)
    try:
        cluster.remote_control = True
        if link is not None:
            private.link(link, cluster.scheduler_file)
        if args.adapt:
            cluster.adapt(minimum_jobs=args.adapt[0], maximum_jobs=args.adapt[1])
        elif args.jobs:
            cluster.scale(jobs=args.jobs)
        say(f"cluster {cluster.cluster_id} up: scheduler file {link or cluster.scheduler_file}")
        whole = private_stream()
        say(f"dashboard: {shown(cluster.dashboard_login, whole)}")
        if not whole:
            say(hint(link or cluster.scheduler_file))
        if not command:
            say(f"`{PROG} down {link or cluster.scheduler_file}` or Ctrl-C closes it")
            while not stop and not cluster.close_requested.wait(0.5):
                pass
            return 128 + stop[0] if stop else 0
        wanted = args.wait if args.wait is not None else args.jobs * _workers_per_job(cluster)
        if wanted:
            cluster.wait_for_workers(wanted, timeout=args.timeout)
        assert cluster.info is not None
        env = {**os.environ, **cluster.info.client_env()}
        proc = subprocess.Popen(command, env=env)
        while proc.poll() is None:
            if stop or cluster.close_requested.is_set():
                proc.terminate()
                proc.wait()
                break
            cluster.close_requested.wait(0.5)
        code = proc.returncode
        return 128 - code if code < 0 else code
    except UsageError as error:  # a pool the cluster stopped: it said so, in these words
        if not cluster.quiet and any(str(error) == p.broken for p in cluster.pools.values()):
            error.said = True  # type: ignore[attr-defined]
        raise
    finally:
        cluster.close()
        if link is not None and link.is_symlink():
            link.unlink()
        say(f"cluster {cluster.cluster_id} closed")


def _workers_per_job(cluster: Any) -> int:
    return next(iter(cluster.pools.values())).workers_per_job


def _check_command(name: str) -> None:
    """COMMAND can run here, or a UsageError that says why not and what to do."""
    import shutil

    check_executable(name)
    if shutil.which(name) is None:
        raise UsageError(f"command {name!r} not found", "check the name, or its path")


def script(args: argparse.Namespace) -> int:
    """The job script a cluster of these options would submit (nothing starts)."""
    from ..batch import script as scripts
    from . import naming
    from .cluster import HPCCluster

    # What HPCCluster checks and renders, without a scheduler: its settings alone.
    probe = HPCCluster.__new__(HPCCluster)
    settings = _cluster_kwargs(args)
    del settings["name"]  # the running cluster's, not a job's
    HPCCluster._settle(probe, **settings, check_commands=False)
    warning = retired_warning(probe.site)
    if warning:
        say(warning)
    pool = next(iter(probe.pools.values()))
    name = naming.job_name(probe.cluster_id, pool.name, 1)
    sys.stdout.write(scripts.render(probe._request(pool, name)))
    return 0


def print_links(scheduler_file: Path) -> int:
    """The links of any dask-hpc cluster (start-cluster's too), whole: for its owner, who asked."""
    try:
        found = links(scheduler_file)
    except FileNotFoundError:
        raise UsageError(
            f"no running cluster at {scheduler_file}", "give its scheduler file"
        ) from None
    for name, url in found.items():
        print(f"{name:<11} {url}")
    return 0


def remote(args: argparse.Namespace) -> int:
    from ..guard.connection import connect
    from . import state

    path = Path(args.scheduler_file).expanduser()
    read_scheduler_file(path)  # another user's file is refused (UnsafePath) before anything
    if args.command == "down" and path.resolve().parent.is_dir():
        directory = path.resolve().parent
        if (directory / state.STATE).exists() and not state.managed(directory):
            ids = state.cleanup(directory)  # its manager died: cancel what it left
            if path.is_symlink():
                path.unlink()
            say(f"no process ran the cluster any more: cancelled job(s) {', '.join(ids)}")
            return 0
    try:
        client = connect(path, timeout=30)
    except FileNotFoundError:
        raise UsageError(f"no running cluster at {path}", "give the file `up` printed") from None
    from . import control

    try:
        if args.command == "status":
            status = client.get_metadata([control.KEY, "status"], None)
            if status is None:
                raise UsageError("the cluster has not published its status yet", "try again")
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                dashboard = shown(status["dashboard"], private_stream(sys.stdout))
                print(f"cluster {status['cluster']}  dashboard {dashboard}")
                print("pool  kind  workers/job  jobs  queued  running  workers  adapt")
                for row in status["pools"]:
                    print(
                        f"{row['pool']}  {row['kind']}  {row['workers_per_job']}  "
                        f"{row['target_jobs']}  {row['queued']}  {row['running']}  "
                        f"{row['workers']}  {row['adapt'] or '-'}"
                    )
            return 0
        if args.command == "down":  # answered by the cluster's end: its files go last
            target = path.resolve()
            control.send(client, {"op": "down"})
            client.close()
            deadline = time.monotonic() + args.timeout
            while target.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            if target.exists():
                raise UsageError(f"the cluster is still up after {args.timeout:g} s", "see `up`")
            say("cluster closed")
            return 0
        body: dict[str, Any] = {"op": args.command}
        if args.command in ("scale", "adapt"):
            body.update(pool=args.pool, jobs=args.jobs)
        if args.command == "scale":
            body["workers"] = args.workers
        answer = control.request(client, body)
        if not answer["ok"]:
            raise UsageError(answer["message"])
        say(answer["message"])
        return 0
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hpc-cluster`` console script."""
    from ..guard.import_path import settle

    for line in settle():  # the working directory on sys.path only if nobody else can change it
        say(line)
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, command = split_command(argv)
        args = build_parser().parse_args(options)
        if command and args.command != "up":
            raise UsageError("only `up` runs a COMMAND", f"{PROG} up KIND ... -- COMMAND")
        if args.command == "up":
            return up(args, command)
        if args.command == "script":
            return script(args)
        if args.command == "links":
            return print_links(Path(args.scheduler_file).expanduser())
        return remote(args)
    except (UsageError, ImageError) as error:
        if not getattr(error, "said", False):  # not already said by the cluster itself
            say(f"error: {error}")
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
