"""Reading a job's batch state (``tracking``), with a stand-in batch system: no Slurm."""

from __future__ import annotations

from pathlib import Path

from dask_hpc.elastic import tracking
from dask_hpc.elastic.jobs import Job


class System:
    """Slurm's words, as the batch-system table maps them."""

    @staticmethod
    def category(state: str) -> str:
        return {"PENDING": "queued", "RUNNING": "running"}.get(state, "ended")

    @staticmethod
    def never_starts(reason: str) -> bool:
        return reason == "PartitionTimeLimit"


def make_job(state: str | None = "queued") -> Job:
    return Job("j", "cpu", Path("/nonexistent/j.out"), job_id="1", state=state)  # type: ignore[arg-type]


def test_read_listed_and_never_starts() -> None:
    job = make_job()
    job.missing = 1
    now = job.submitted_at
    assert tracking.read(job, ("RUNNING", "None"), System, now) == ("running", None)
    assert job.missing == 0 and job.batch_state == "RUNNING"
    assert tracking.read(make_job(), ("PENDING", "PartitionTimeLimit"), System, now) == (
        "queued",
        "PartitionTimeLimit",
    )
    assert tracking.read(make_job(), ("PENDING", "Priority"), System, now) == ("queued", None)


def test_read_unlisted_ends_after_two_reads() -> None:
    job = make_job("running")
    job.batch_state = "RUNNING"  # listed before
    now = job.submitted_at
    assert tracking.read(job, None, System, now) == ("running", None)  # a blip
    assert tracking.read(job, None, System, now) == ("ended", None)


def test_a_job_never_listed_yet_is_not_ended_within_the_grace() -> None:
    """Flux's job list catches up with a new job asynchronously: not listed yet is not ended."""
    job = make_job()
    now = job.submitted_at + tracking.NEVER_LISTED_GRACE - 1
    for _ in range(5):
        assert tracking.read(job, None, System, now) == ("queued", None)
    assert tracking.read(job, None, System, now + 1) == ("ended", None)


class Recorded:
    """A batch client that records what it is asked to cancel (no batch system)."""

    system = System

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def cancel(self, ids: list[str]) -> None:
        self.cancelled.extend(ids)


def test_a_job_taken_as_ended_from_its_absence_is_cancelled_all_the_same() -> None:
    """Else a job the listing only lagged on would run on, unwatched, past its cluster's close
    (a job's rank alive after close in a CI run on Flux)."""
    import asyncio

    from dask_hpc.elastic.jobcontrol import JobControl

    batch = Recorded()
    control = JobControl(object(), batch)  # type: ignore[arg-type]
    seen_end, vanished = make_job("running"), make_job("running")
    vanished.job_id, vanished.batch_state = "2", "RUNNING"
    now = seen_end.submitted_at
    assert asyncio.run(control.read(seen_end, ("COMPLETED", ""), now)) == ("ended", None)
    assert asyncio.run(control.read(vanished, None, now)) == ("running", None)  # a blip
    assert batch.cancelled == []
    assert asyncio.run(control.read(vanished, None, now)) == ("ended", None)
    assert batch.cancelled == ["2"]  # not "1": Slurm said it ended


def test_stuck_running_job_without_workers() -> None:
    job = make_job("running")
    job.empty_since = 100.0
    assert tracking.stuck(job, 150.0, start_timeout=60, end_grace=10) is None
    assert tracking.stuck(job, 161.0, start_timeout=60, end_grace=10) == "never"
    job.ever_connected = 4  # its workers came and went (distributed#9102): end it after grace
    assert tracking.stuck(job, 111.0, start_timeout=60, end_grace=10) == "gone"
    job.workers = {"tcp://h:1": "j-0"}
    assert tracking.stuck(job, 1000.0, start_timeout=60, end_grace=10) is None
    job.workers, job.cancelled = {}, True
    assert tracking.stuck(job, 1000.0, start_timeout=60, end_grace=10) is None
