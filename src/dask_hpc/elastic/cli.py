"""``hpc-cluster``'s commands: ``up`` runs an ``HPCCluster`` in this process, the others
reach it through its scheduler file. Its usage and arguments: ``cli_args``."""

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

from ..batch.rules import check_executable, retired_warning
from ..errors import UsageError
from ..guard import private_files
from ..guard.connection import read_scheduler_file
from ..guard.images import ImageError
from ..guard.links import hint, links, private_stream, shown
from .cli_args import PROG, build_parser, cluster_kwargs, split_command


def say(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


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
    cluster = HPCCluster(**cluster_kwargs(args))
    warning = retired_warning(cluster.site)
    if warning:
        say(warning)
    try:
        cluster.remote_control = True
        if link is not None:
            private_files.link(link, cluster.scheduler_file)
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
    settings = cluster_kwargs(args)
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
