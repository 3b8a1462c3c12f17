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
    assert tracking.read(job, ("RUNNING", "None"), System) == ("running", None)
    assert job.missing == 0 and job.batch_state == "RUNNING"
    assert tracking.read(make_job(), ("PENDING", "PartitionTimeLimit"), System) == (
        "queued",
        "PartitionTimeLimit",
    )
    assert tracking.read(make_job(), ("PENDING", "Priority"), System) == ("queued", None)


def test_read_unlisted_ends_after_two_reads() -> None:
    job = make_job("running")
    assert tracking.read(job, None, System) == ("running", None)  # just submitted, or a blip
    assert tracking.read(job, None, System) == ("ended", None)


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
