"""``start-cluster``: parse the command line, report bad input in one line, run the plan."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence

from . import __version__
from .errors import UsageError, say, stdout_closed
from .planning.settings import Settings

USAGE = "start-cluster {cpu,gpu} WORKERS_PER_NODE [options] [-- COMMAND [ARGS...]]"
EPILOG = """\
Run it on every rank with your launcher (srun, mpiexec, jsrun, mpirun) or once with none.
Rank 0 runs the scheduler; every rank runs its share of the workers. With a COMMAND, rank 0
runs it once every worker is connected, then shuts the whole cluster down and exits with
COMMAND's status. Without one, the cluster runs until client.shutdown(), SIGTERM or Ctrl-C.

examples:
  start-cluster cpu 2 -- python examples/pi.py
  mpiexec -n 12 --ppn 6 --cpu-bind list:1-17:18-34:35-51:53-69:70-86:87-103 \
    start-cluster gpu 6 --site aurora
  srun -N 2 --ntasks-per-node 1 -c 32 --gres=gpu:4 start-cluster gpu 4   # a rank per node
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, "see start-cluster --help")


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def resource_spec(text: str) -> dict[str, float]:
    """``GPU=2,ssdGB=200``: what each worker offers tasks (``dask worker --resources``)."""
    spec = {}
    for item in text.replace(" ", ",").split(","):
        name, eq, amount = item.partition("=")
        try:
            spec[name] = float(amount)
        except ValueError:
            eq = ""
        if item and (not eq or not name):
            raise argparse.ArgumentTypeError(f"{text!r} is not NAME=AMOUNT[,NAME=AMOUNT...]")
    return spec


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="start-cluster",
        usage=USAGE,
        epilog=EPILOG,
        description="Start a Dask cluster under any HPC launcher.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "worker_type",
        metavar="{cpu,gpu}",
        choices=("cpu", "gpu"),
        help="cpu workers, or one GPU (or tile) per worker",
    )
    p.add_argument(
        "workers_per_node",
        metavar="WORKERS_PER_NODE",
        type=positive_int,
        help="workers on each node",
    )
    p.add_argument("--version", action="version", version=f"dask-hpc {__version__}")
    where = p.add_argument_group("where it runs")
    where.add_argument(
        "--site",
        help="site profile (default: hpc.site of dask config, else detected, else generic)",
    )
    where.add_argument(
        "--launcher",
        help="launcher, or none for local mode (default: detected from the environment)",
    )
    where.add_argument(
        "--scheduler-file",
        help="scheduler file (default: job-scoped, in the site's shared directory)",
    )
    where.add_argument(
        "--join",
        metavar="SCHEDULER_FILE",
        help="start only workers, joining the cluster of SCHEDULER_FILE",
    )
    where.add_argument(
        "--name-prefix",
        metavar="PREFIX",
        help="with --join: name the workers PREFIX-RANK[-I] (default join-LAUNCH_ID), so that "
        "whoever submitted this job knows its workers",
    )
    where.add_argument(
        "--abort-on-node-loss",
        action="store_true",
        default=None,
        help="stop the whole cluster when a rank is lost (killed, or its node died); default: "
        "the cluster goes on without that rank's workers, as Dask does (the launcher must "
        "allow it: see the reliability docs)",
    )
    where.add_argument(
        "--timeout",
        type=positive_float,
        help="seconds to wait for the scheduler and every worker (default 300, more for "
        "thousands of workers)",
    )
    res = p.add_argument_group("workers")
    res.add_argument(
        "--nthreads",
        type=positive_int,
        help="threads per worker (default: the usable CPUs / workers per node)",
    )
    res.add_argument(
        "--memory-limit",
        help="memory per worker, e.g. 16GB or 0.5 (of the node); default: the node's memory / "
        "workers per node",
    )
    res.add_argument(
        "--resources",
        type=resource_spec,
        help="what each worker offers tasks, e.g. GPU=2,ssdGB=200 (as dask worker's; gpu "
        "workers have GPU=1 unless it says otherwise)",
    )
    res.add_argument(
        "--local-directory", help="writable node-local directory for workers (default: the site's)"
    )
    res.add_argument(
        "--death-timeout",
        type=positive_float,
        help="seconds a worker may take to start, or waits for a lost scheduler (default 60, "
        "more for thousands of workers or more workers than CPUs)",
    )
    res.add_argument(
        "--nanny",
        dest="nanny",
        action="store_true",
        default=None,
        help="each worker under Dask's Nanny: restarted when it dies; restart, "
        "restart_workers, NannyPlugins (default)",
    )
    res.add_argument(
        "--no-nanny",
        dest="nanny",
        action="store_false",
        help="plain workers in the rank's own processes, never restarted (dask worker --no-nanny)",
    )
    cuda = p.add_argument_group("NVIDIA GPU workers (dask-cuda's options)")
    cuda.add_argument(
        "--device-memory-limit",
        help="spill device memory to host above this (default: dask-cuda's, 80%% of the GPU)",
    )
    cuda.add_argument("--rmm-pool-size", help="RMM memory pool per worker, e.g. 30GB or 0.9")
    cuda.add_argument(
        "--enable-cudf-spill", action="store_true", help="cuDF's own spilling (dask-cuda's)"
    )
    net = p.add_argument_group("network and security")
    net.add_argument(
        "--interface", help="network interface, e.g. ib0 or hsn0 (default: the site's)"
    )
    net.add_argument(
        "--protocol",
        choices=("tcp", "tls", "ucx"),
        help="comm protocol (default: tls, or tcp with --no-tls)",
    )
    net.add_argument(
        "--scheduler-port",
        type=int,
        help="scheduler port (default: a free one, published in the scheduler file)",
    )
    net.add_argument(
        "--dashboard-address",
        help="dashboard address (default 127.0.0.1:8787, another port if taken): reach it "
        "through the printed ssh tunnel",
    )
    net.add_argument(
        "--no-tls",
        dest="tls",
        action="store_false",
        default=None,
        help="plain TCP: anyone who reaches the port can run code as you",
    )
    net.add_argument(
        "--jupyter",
        action="store_true",
        help="also start JupyterLab (with a token) on the scheduler's node",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print, as JSON, what this rank would start, and start nothing",
    )
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Split ``argv`` at the first ``--`` into options and COMMAND."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        command = argv[at + 1 :]
        if not command:
            raise UsageError("'--' is not followed by a command", "write: -- COMMAND [ARGS...]")
        return argv[:at], command
    return argv, None


def parse(argv: Sequence[str]) -> Settings:
    """The command line as typed settings (``planning.settings``); UsageError for bad input."""
    options, command = split_command(argv)
    args, extra = build_parser().parse_known_args(options)
    if extra:
        problem = f"unrecognized arguments: {' '.join(extra)}"
        if extra[0].startswith("-"):
            raise UsageError(problem, "see start-cluster --help")
        # start-cluster cpu 2 python job.py: a COMMAND without its --
        at = len(options) - len(extra) if options[-len(extra) :] == extra else None
        head = options[:at] if at is not None else [a for a in options if a not in extra]
        raise UsageError(
            problem,
            f"a COMMAND goes after --: start-cluster {' '.join([*head, '--', *extra])}",
        )
    args.command = command
    return Settings.from_options(vars(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``start-cluster`` console script."""
    from .guard import import_path, left_behind
    from .planning import resources
    from .planning.plan import make_plan, private_local_directory
    from .running import nanny_host

    argv = sys.argv[1:] if argv is None else argv
    left_out: list[str] = []
    try:
        left_out = import_path.settle()  # before anything else is imported
        try:
            settings = parse(argv)
        except BrokenPipeError:  # --help | head
            return stdout_closed()
        plan = make_plan(settings)
        if plan.rank.is_first:
            plan.notes.extend(left_out)
        if settings.dry_run:
            try:
                print(json.dumps(plan.describe(), indent=2), flush=True)
            except BrokenPipeError:  # --dry-run | head: the reader has what it wanted
                return stdout_closed()
            return 0
        # Forked before this rank imports distributed: on rank 0 the host's import runs beside
        # the scheduler's (see nanny_host).
        problem = resources.raise_open_files(plan.open_files)  # the nanny host inherits it
        if problem:
            plan.notes.append(problem)
        if plan.widen_cpus:  # before anything is forked: every process of the rank inherits it
            os.sched_setaffinity(0, plan.widen_cpus)
        local = private_local_directory(plan)
        left_behind.hold(local)
        for path in left_behind.remove_left_behind(plan.local_base):
            plan.notes.append(f"removed {path}: a rank of yours that was killed left it there")
        # Our processes work where only the user writes: what they start (JupyterLab's
        # helpers, R, Yarn) reads startup files from its working directory. COMMAND runs in
        # plan.user_directory.
        os.chdir(local)
        host = None
        try:
            host = nanny_host.start(plan)
            from .running.runtime import run

            return run(plan, host)
        finally:  # every process of the rank has ended: nothing writes there any more
            shutil.rmtree(local, ignore_errors=True)
            if host is not None:
                shutil.rmtree(host.directory, ignore_errors=True)
    except UsageError as error:
        for line in left_out:  # what was left out of the search paths may be why
            say(line)
        say(f"error: {error}")
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
