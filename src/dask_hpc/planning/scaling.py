"""What a cluster of a given size needs from each rank: Dask's timeouts raised with the number
of workers, file descriptors, an oversubscribed node's idle costs, how often ranks poll, and how
long a rank may be silent before it is given up (``hpc.hung-timeout``).

Decided in the plan (``plan.make_plan``) before anything starts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import dask.config
from dask.utils import parse_timedelta

from .. import config
from ..errors import UsageError

# What rank 0 holds per worker and per rank (measured with benchmarks.scale: ~2.2 file
# descriptors per worker in the scheduler, a roll-call connection per rank), with headroom for
# the connections a running cluster opens (gathers, clients, the dashboard).
FDS_PER_WORKER = 4
FDS_PER_NANNY = 12  # a nanny host's Nanny: its listener, scheduler comms, pipes to its worker
FDS_BASE = 1024

# Timeouts Dask applies per connection and per start, raised with the cluster's size. W workers
# connecting at once queue their TLS handshakes on the scheduler's single event loop
# (benchmarks.scale, 2 cores: ~10 ms each, and a handshake not done within Dask's first try,
# a fifth of the connect timeout, is dropped and retried, which adds load: at 500 workers with
# the default 30 s, dozens failed); a node's workers start one after another on its CPUs.
# Dask's fixed defaults (connect 30 s, start 60 s, worker TTL 300 s) are what failed first at
# 208 workers on 2 cores, and at 1,300 and 5,500 workers on real machines (dask-mpi#82,
# distributed#3691).
SECONDS_PER_WORKER = 0.02  # scheduler time per worker joining (2x the measured)
CONNECT_PER_WORKER = 5 * SECONDS_PER_WORKER  # Dask's first try gets a fifth of it
SECONDS_PER_LOCAL_WORKER_PER_CPU = 4.0  # a node's worker starts, per worker per usable CPU


@dataclass(frozen=True)
class ScaleNeeds:
    """What a cluster of this size needs from this rank: timeouts and file descriptors."""

    start_timeout: float  # a worker's (and its Nanny's) start: Dask's death_timeout
    connect_timeout: float  # distributed.comm.timeouts.connect (and .tcp)
    worker_ttl: float  # distributed.scheduler.worker-ttl
    timeout: float  # --timeout: the scheduler file, and every worker connected
    leave_timeout: float  # at the end: for the workers to close, then for the ranks to exit
    open_files: int  # this rank's processes
    open_files_first: int  # rank 0's, with the scheduler and the roll call
    env: dict[str, str]  # the Dask settings above, for the scheduler and the workers
    worker_env: dict[str, str]  # the workers' alone (an oversubscribed node's idle costs)


def scale_needs(
    workers: int,
    ranks: int,
    workers_here: int,
    cpus: int,
    env: Mapping[str, str] | None = None,
) -> ScaleNeeds:
    """Timeouts and file-descriptor needs derived from the expected worker count.

    Never below the configured values (hpc.timeout, hpc.death-timeout, Dask's own); a Dask
    setting the user put in the environment is left alone.
    """
    env = os.environ if env is None else env

    def seconds(key: str, default: str) -> float:  # Dask's default, if distributed's
        return float(parse_timedelta(dask.config.get(key, default), "s") or 0)  # not loaded

    joining = SECONDS_PER_WORKER * workers
    local = SECONDS_PER_LOCAL_WORKER_PER_CPU * workers_here / max(1, cpus)
    connect = max(
        seconds("distributed.comm.timeouts.connect", "30s"), CONNECT_PER_WORKER * workers + local
    )
    tcp = max(seconds("distributed.comm.timeouts.tcp", "30s"), joining + local)
    death = float(config.get("death-timeout"))
    start = max(death, 30 + connect)  # a start outlasts a connect's retries
    # Dask's heartbeat interval grows to W/200 + 1 s; TTL: ten missed heartbeats at least.
    ttl = max(seconds("distributed.scheduler.worker-ttl", "5 minutes"), 10 * (workers / 200 + 1))
    timeout = float(config.get("timeout")) + 2 * (start - death)
    dask_env = {
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": f"{connect:.0f}s",
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": f"{tcp:.0f}s",
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": f"{ttl:.0f}s",
    }
    over = workers_here / max(1, cpus)
    idle_env: dict[str, str] = {}
    if over > 1:
        # More workers than CPUs on this node (104 on a 2-core test machine, or a node shared
        # with other jobs): an idle worker's profiler wakes every 10 ms and its system monitor
        # every 0.5 s; measured 208 idle workers on 2 cores: the CPUs were saturated doing
        # nothing. Both slow down by the oversubscription, so the node pays what 1 worker per
        # CPU pays. So do the event loop's tick (every 20 ms) and the memory monitor (every
        # 100 ms, a /proc read): with only the first two slowed, 208 idle workers on 2 cores
        # still used both cores (~1% of a CPU each, py-spy: _measure_tick and memory_monitor).
        interval = min(1000, round(10 * over))
        idle_env["DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL"] = f"{interval}ms"
        idle_env["DASK_DISTRIBUTED__WORKER__PROFILE__CYCLE"] = f"{max(1000, 10 * interval)}ms"
        idle_env["DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL"] = f"{min(10, 0.5 * over):g}s"
        idle_env["DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL"] = f"{min(1000, round(20 * over))}ms"
        idle_env["DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL"] = (
            f"{min(1000, round(100 * over))}ms"
        )
    open_files = FDS_BASE + FDS_PER_NANNY * workers_here
    return ScaleNeeds(
        start_timeout=round(start),
        connect_timeout=round(connect),
        worker_ttl=round(ttl),
        timeout=round(timeout),
        # A node closes its workers one after another on its CPUs (measured: 104 Nannies on 2
        # shared cores needed more than 10 s), and rank 0 sees W removals.
        leave_timeout=round(10 + 0.5 * local + SECONDS_PER_WORKER * workers / 4),
        open_files=open_files,
        open_files_first=open_files + FDS_PER_WORKER * workers + ranks,
        env={k: v for k, v in dask_env.items() if k not in env},
        worker_env={k: v for k, v in idle_env.items() if k not in env},
    )


def poll_max_interval(ranks: int) -> float:
    """The cap of a rank's scheduler-file polling: all ranks together read it ~2000 times a
    second at most (0.1 s for up to 200 ranks, 2 s from 4000)."""
    return min(2.0, max(0.1, ranks / 2000))


# A rank silent this long is given up (how rank 0 finds it: running.liveness).
HUNG_SETTING = "hpc.hung-timeout"
HUNG_ENV = "DASK_HPC__HUNG_TIMEOUT"
MIN_HUNG_TIMEOUT = 5.0  # below it, a rank a busy node keeps off the CPU for seconds is given up


def hung_timeout(value: object = None) -> float | None:
    """``hpc.hung-timeout`` checked: seconds, or None when it is 0 (no check)."""
    value = config.get("hung-timeout") if value is None else value
    fix = (
        f"set {HUNG_SETTING} ({HUNG_ENV}) to seconds, at least {MIN_HUNG_TIMEOUT:g}, "
        "or 0 to turn it off"
    )
    if value is False:
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{HUNG_SETTING} {str(value)!r} is not a number", fix) from None
    if seconds == 0:
        return None
    if not math.isfinite(seconds) or seconds < MIN_HUNG_TIMEOUT:
        raise UsageError(
            f"{HUNG_SETTING} {str(value)!r} is below {MIN_HUNG_TIMEOUT:g} s (a rank on a busy node "
            "would be given up)",
            fix,
        )
    return seconds
