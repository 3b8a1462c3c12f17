"""The elastic cluster's pure decisions (``sizing``), with no batch system and no processes:
whole jobs for scale and adapt with several workers per job, which jobs count, which go."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dask_hpc.batch.commands import BatchSystem
from dask_hpc.elastic import sizing
from dask_hpc.elastic.jobs import Job
from dask_hpc.elastic.pools import Pool
from dask_hpc.errors import UsageError

NOW = 10_000.0


def make_pool(workers_per_node: int = 4, nodes_per_job: int = 1, name: str = "cpu") -> Pool:
    return Pool(
        name=name, kind="cpu", workers_per_node=workers_per_node, nodes_per_job=nodes_per_job,
        walltime="01:00:00", walltime_seconds=3600, account=None, queue=None, image=None,
        launcher=None, directives=(), setup=(), env={}, worker_args=(), lifetime_margin=300.0,
        threads_guess=1,
    )


def job(name: str, state: str | None = "running", workers: int = 0, connected: float | None = None,
        submitted: float = 0.0, pool: str = "cpu") -> Job:
    j = Job(name, pool, Path(f"/nonexistent/{name}.out"), job_id=name, state=state,  # type: ignore[arg-type]
            submitted_at=submitted)
    j.workers = {f"tcp://h:{i}": f"{name}-{i}" for i in range(workers)}
    if workers:
        j.ever_connected = workers
        j.connected_at = NOW - 10 if connected is None else connected
        j.started_at = j.connected_at
    return j


@pytest.mark.parametrize(("n", "jobs"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_scale_workers_round_up_to_whole_jobs(n: int, jobs: int) -> None:
    assert sizing.scale_jobs(make_pool(4), n, None) == jobs


def test_scale_jobs_multi_node_and_bad_values() -> None:
    pool = make_pool(workers_per_node=2, nodes_per_job=3)  # 6 workers a job
    assert sizing.scale_jobs(pool, 7, None) == 2
    assert sizing.scale_jobs(pool, 100, 3) == 3  # jobs= wins
    for bad in (-1, 1.5, True):
        with pytest.raises(UsageError, match="jobs is a number of jobs"):
            sizing.scale_jobs(pool, None, bad)  # type: ignore[arg-type]
    for bad in (-5, 2.5, True):
        with pytest.raises(UsageError, match="n is a number of workers"):
            sizing.scale_jobs(pool, bad, None)  # type: ignore[arg-type]


def test_adapt_bounds_in_workers_and_jobs() -> None:
    pool = make_pool(4)
    assert sizing.adapt_bounds(pool, None, None, 5, 10) == (2, 2)  # min up, max down
    assert sizing.adapt_bounds(pool, None, None, None, None) == (0, math.inf)
    assert sizing.adapt_bounds(pool, 1, 3, 100, 0) == (1, 3)  # jobs win over workers
    with pytest.raises(UsageError):
        sizing.adapt_bounds(pool, 3, 1, None, None)
    with pytest.raises(UsageError):
        sizing.adapt_bounds(pool, None, None, 5, 6)  # 2 jobs at least, 1 at most


@pytest.mark.parametrize(("wanted", "jobs"), [(0, 1), (1, 1), (4, 1), (5, 2), (9, 3), (99, 4)])
def test_adapt_target_whole_jobs_within_bounds(wanted: int, jobs: int) -> None:
    pool = make_pool(4)
    pool.bounds = (1, 4)
    assert sizing.adapt_target(pool, wanted) == jobs


def test_adapt_target_is_stable_for_a_partial_job() -> None:
    """dask-jobqueue#498: 6 workers wanted with 4 a job is 2 jobs, the 2 the pool has: no
    cancel-then-resubmit loop, whatever the rounds."""
    pool = make_pool(4)
    pool.bounds = (0, math.inf)
    assert {sizing.adapt_target(pool, w) for w in (5, 6, 7, 8)} == {2}


def test_give_up_never_takes_a_job_with_busy_workers() -> None:
    busy = [job(f"b{i}", workers=4) for i in range(3)]
    queued = job("q", state="queued")
    have = [*busy, queued]
    # Down to 1 job, nothing idle: only the queued job goes; busy jobs stay (dask-jobqueue#498)
    assert sizing.give_up(have, [], 1) == [queued]
    # One busy job's workers all idle: it may go too, after the queued one
    assert sizing.give_up(have, [busy[1]], 1) == [queued, busy[1]]
    assert sizing.give_up(have, [busy[1]], 3) == [queued]
    assert sizing.give_up(have, [], 5) == []


def test_shrink_choice_order() -> None:
    old_q, new_q = job("q1", state="queued", submitted=1), job("q2", state="queued", submitted=2)
    empty = job("e", submitted=3)
    late, early = job("r1", workers=2, connected=NOW - 5), job("r2", workers=2, connected=NOW - 50)
    jobs = [late, early, empty, old_q, new_q]
    assert sizing.shrink_choice(jobs, 5) == [new_q, old_q, empty, early, late]
    assert sizing.shrink_choice(jobs, 2) == [new_q, old_q]


def test_running_job_whose_workers_died_is_not_counted() -> None:
    """distributed#9102: the batch system lists the job RUNNING, its workers are gone: it
    provides no workers, so it does not count, and the pool submits a replacement."""
    pool = make_pool(4)
    dead = job("d", workers=4)
    assert sizing.counts(dead, pool, NOW)
    dead.workers.clear()
    assert not sizing.counts(dead, pool, NOW)
    starting = job("s")  # running, no worker yet, never had one: still coming
    assert sizing.counts(starting, pool, NOW)


def test_counts_skips_cancelled_retiring_ended_and_expiring() -> None:
    pool = make_pool(4)
    for flag in ("cancelled", "retiring"):
        j = job(flag, workers=1)
        setattr(j, flag, True)
        assert not sizing.counts(j, pool, NOW)
    assert not sizing.counts(job("x", state="ended"), pool, NOW)
    duration, stagger = pool.lifetime()
    old = job("old", workers=1, connected=NOW - duration + stagger + pool.retire_lead())
    assert not sizing.counts(old, pool, NOW) and old.expiring
    pool.latencies.append(0.0)  # the lead shrinks later: it stays expiring, for good
    assert not sizing.counts(old, pool, NOW)


def test_past_retirement() -> None:
    pool = make_pool(4)
    j = job("r", workers=1)
    assert not sizing.past_retirement(job("q", state="queued"), pool, NOW)
    j.started_at = NOW - (3600 - 0.6 * 300)
    assert sizing.past_retirement(j, pool, NOW)
    assert not sizing.past_retirement(j, pool, NOW - 1)


def test_a_job_seen_running_started_after_the_last_reading_that_did_not_say_so() -> None:
    """A round held up by slow submissions reads the states 40 s after the last reading:
    the job counts as started right after that reading (and never before its submission),
    not 40 s later when it is seen; its workers retire 40 s sooner for it."""
    j = job("slow-round", submitted=NOW - 100)
    assert sizing.started_between(j, last_asked=NOW - 40) == NOW - 40
    assert sizing.started_between(j, last_asked=NOW - 200) == NOW - 100  # submitted after
    assert sizing.started_between(j, last_asked=None) == NOW - 100  # the first reading


def test_a_lagging_listing_moves_the_start_earlier_by_its_lag() -> None:
    """Flux's listing shows a job running up to its listing_lag after its start (job-list
    follows the job manager): the start counts that much before the last reading, never
    before the submission."""
    j = job("flux", submitted=NOW - 100)
    lag = BatchSystem.named("flux").listing_lag
    assert lag == 2.0
    assert sizing.started_between(j, last_asked=NOW - 40, listing_lag=lag) == NOW - 42
    assert sizing.started_between(j, last_asked=NOW - 101, listing_lag=lag) == NOW - 100
    assert BatchSystem.named("slurm").listing_lag == 0.0  # squeue reads slurmctld's own state
