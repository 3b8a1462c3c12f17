"""Pure decisions of the elastic cluster: which jobs count toward a pool's size, which jobs to
give up when it shrinks, and scale/adapt targets in whole jobs. No I/O, no clock reads (the
caller passes ``now``), so that tests drive them without a batch system."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import UsageError
from .jobs import Job
from .pools import Pool


def counts(job: Job, pool: Pool, now: float) -> bool:
    """Whether ``job`` counts toward ``pool``'s size (may mark it ``expiring``, for good)."""
    if job.ended or job.cancelled or job.retiring:
        return False
    if job.state == "running" and not job.workers and job.ever_connected:
        # Its workers are gone (retired at its walltime, or died) while the batch system
        # still lists it: it provides no workers, so it is replaced (distributed#9102).
        return False
    if job.expiring:
        return False
    if job.connected_at is not None:
        duration, stagger = pool.lifetime()
        first_retirement = job.connected_at + duration - stagger
        if now >= first_retirement - pool.retire_lead():
            # Its replacement must be connected before it goes. Once, for good: a lead
            # that shrinks later (a faster start) must not count it again.
            job.expiring = True
            return False
    return True


def past_retirement(job: Job, pool: Pool, now: float) -> bool:
    """Whether a running job's workers should all have retired by now, counting from the
    job's start (Dask's lifetime counts from each worker's start, later when a loaded node
    is slow to start them): 60% of the margin before the walltime. ``job.started_at`` is the
    earliest moment it can have started (``started_between``)."""
    if job.started_at is None:
        return False
    return now >= job.started_at + pool.walltime_seconds - 0.6 * pool.lifetime_margin


def started_between(job: Job, last_asked: float | None, listing_lag: float = 0.0) -> float:
    """When a job first seen running started, at the earliest: after it was submitted and
    after the last reading of the batch states that did not list it running (``last_asked``:
    when that reading was asked for), less the batch system's ``listing_lag`` (its listing may
    show a job's start that late). Not when it is seen: the readings are further apart than
    the poll interval when submissions or a loaded batch system hold up a round."""
    if last_asked is None:
        return job.submitted_at
    return max(job.submitted_at, last_asked - listing_lag)


def shrink_choice(jobs: Sequence[Job], n: int) -> list[Job]:
    """The ``n`` of ``jobs`` to give up: queued ones first (newest first), then running ones
    with no worker yet, then those whose walltime ends first (they end soonest anyway)."""

    def order(job: Job) -> tuple[int, float]:
        if job.state != "running":
            return (0, -job.submitted_at)
        if not job.workers:
            return (1, -job.submitted_at)
        return (2, job.connected_at or 0.0)

    return sorted(jobs, key=order)[:n]


def scale_jobs(pool: Pool, n: int | None, jobs: int | None) -> int:
    """Jobs for ``scale(n)`` (workers, rounded up to whole jobs) or ``scale(jobs=)``."""
    if jobs is None:
        workers = 0 if n is None else n
        if not _whole(workers):
            raise UsageError(f"scale(n): n is a number of workers (0 or more), not {n!r}")
        return pool.jobs_for_workers(workers)
    if not _whole(jobs):
        raise UsageError(f"scale(jobs=): jobs is a number of jobs (0 or more), not {jobs!r}")
    return jobs


def _whole(value: object) -> bool:
    """A count: an int of 0 or more (``True`` is an int to Python, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def adapt_bounds(
    pool: Pool,
    minimum_jobs: int | None,
    maximum_jobs: int | None,
    minimum: int | None,
    maximum: int | float | None,
) -> tuple[int, float]:
    """(minimum, maximum) jobs of ``adapt``: workers round up for the minimum, down for the
    maximum (never more workers than asked for)."""
    lo = minimum_jobs if minimum_jobs is not None else pool.jobs_for_workers(minimum or 0)
    hi: float
    if maximum_jobs is not None:
        hi = maximum_jobs
    elif maximum is not None and not math.isinf(maximum):
        hi = math.floor(maximum / pool.workers_per_job)
    else:
        hi = math.inf
    if lo < 0 or hi < lo:
        raise UsageError(f"adapt between {lo} and {hi} jobs is not a range")
    return lo, hi


def adapt_target(pool: Pool, wanted_workers: int) -> int:
    """Jobs an adaptive pool wants for ``wanted_workers``: rounded up, within its bounds."""
    assert pool.bounds is not None
    lo, hi = pool.bounds
    return int(min(hi, max(lo, pool.jobs_for_workers(wanted_workers))))


def give_up(have: Sequence[Job], idle: Sequence[Job], jobs: int) -> list[Job]:
    """Jobs an adaptive pool gives up to go from ``have`` down to ``jobs``: those with no
    worker yet, then ``idle`` ones (every worker idle); never a job with busy workers, so a
    pool may stay above ``jobs`` (dask-jobqueue#498)."""
    waiting = [j for j in have if j.state != "running" or not j.workers]
    return (waiting + list(idle))[: max(0, len(have) - jobs)]  # idle: running, with workers
