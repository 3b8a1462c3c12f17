"""Scheduler side: how many workers each pool of an elastic cluster wants.

One pool: Dask's own ``Scheduler.adaptive_target``. Several pools (CPU and GPU workers in one
cluster): Dask has no per-resource target (distributed#2118), so this applies its formula per
pool: the occupancy of the pool's workers plus the tasks waiting for it, over the target
duration, in workers of the pool's thread count; twice the workers when they hold more than
60% of their memory. A waiting task is for the first pool whose workers have the resources it
asks for (``resources={"GPU": 1}``); a task that asks for none is for the first pool without
resources (else the first pool).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dask.utils import parse_timedelta
from tlz import concat, take

from .naming import pool_of

HANDLER = "dask_hpc_targets"
SAMPLE = 100  # waiting tasks whose durations are looked up (as Dask does: then scaled)


def install(scheduler: Any) -> None:
    """Register the handler on ``scheduler`` (in-process, or in a scheduler job)."""
    scheduler.handlers[HANDLER] = lambda pools, target_duration: pool_targets(
        scheduler, pools, target_duration
    )


def pool_for(restrictions: Mapping[str, float] | None, pools: Mapping[str, Mapping]) -> str | None:
    """The pool whose workers run a task with these resource restrictions (None: no pool)."""
    if not restrictions:
        plain = [name for name, res in pools.items() if not res["resources"]]
        return plain[0] if plain else next(iter(pools), None)
    for name, spec in pools.items():
        offered = spec["resources"]
        if all(offered.get(k, 0) >= v for k, v in restrictions.items()):
            return name
    return None


def pool_targets(scheduler: Any, pools: dict[str, dict], target_duration: Any) -> dict[str, int]:
    """Workers wanted per pool. ``pools``: name -> {"resources": {...}, "threads": guess}."""
    duration = parse_timedelta(target_duration)
    if len(pools) == 1:
        return {next(iter(pools)): scheduler.adaptive_target(target_duration=duration)}
    workers: dict[str, list] = {name: [] for name in pools}
    for ws in scheduler.workers.values():
        pool = pool_of(ws.name)
        if pool in workers:
            workers[pool].append(ws)
    waiting_time = dict.fromkeys(pools, 0.0)
    waiting_count = dict.fromkeys(pools, 0)
    sample = list(take(SAMPLE, concat([scheduler.queued, scheduler.unrunnable.keys()])))
    total_waiting = len(scheduler.queued) + len(scheduler.unrunnable)
    scale = total_waiting / len(sample) if sample else 0.0
    for ts in sample:
        pool = pool_for(ts.resource_restrictions, pools)
        if pool is not None:
            waiting_time[pool] += scheduler._get_prefix_duration(ts.prefix) * scale
            waiting_count[pool] += 1
    out = {}
    for name, spec in pools.items():
        ws_list = workers[name]
        waiting = round(waiting_count[name] * scale)
        occupancy = sum(ws.occupancy for ws in ws_list)
        cpu = math.ceil((occupancy + waiting_time[name]) / duration)
        ready = waiting + sum(len(ws.processing) for ws in ws_list)
        cpu = min(cpu, ready)  # a few long tasks do not ask for many threads
        threads = (
            sum(ws.nthreads for ws in ws_list) / len(ws_list) if ws_list else spec["threads"]
        )
        cpu = math.ceil(cpu / max(1, threads))
        if waiting and not ws_list:
            cpu = max(1, cpu)
        limit = sum(ws.memory_limit for ws in ws_list)
        used = sum(ws.nbytes for ws in ws_list)
        memory = 2 * len(ws_list) if limit > 0 and used > 0.6 * limit else 0
        out[name] = max(cpu, memory)
    return out
