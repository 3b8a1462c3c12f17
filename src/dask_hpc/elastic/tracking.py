"""Pure reading of a job's batch state: what category it is in now, and whether a running
job with no worker connected should be cancelled. The caller polls the batch system."""

from __future__ import annotations

from typing import Any

from .jobs import Job

MISSING_ROUNDS = 2  # reads in a row that do not list a job before it counts as ended
# s after its submission that a job never listed yet may stay unlisted: Flux's job list (and
# LSF's mbatchd) catch up with a new job asynchronously, later under load. With two reads
# alone (1 s at the tests' poll interval) a just-submitted job could count as ended.
NEVER_LISTED_GRACE = 30.0


def read(
    job: Job, listed: tuple[str, str] | None, system: Any, now: float
) -> tuple[str | None, str | None]:
    """Update ``job`` from one status read at ``now`` (``listed``: (state, reason), None: not
    listed); return its category and, for a queued job the batch system will never start, why.
    An end read from the job's absence is "ended" too: the caller cancels it all the same."""
    if listed is None:
        job.missing += 1  # not listed yet (just submitted), or gone
        seen = bool(job.batch_state) or now - job.submitted_at >= NEVER_LISTED_GRACE
        return ("ended" if seen and job.missing >= MISSING_ROUNDS else job.state), None
    job.missing = 0
    job.batch_state, reason = listed
    job.reason = reason
    category = system.category(job.batch_state)
    if category == "queued" and system.never_starts(reason):
        return category, reason
    return category, None


def stuck(job: Job, now: float, start_timeout: float, end_grace: float) -> str | None:
    """For a running job with no worker connected: "never" (none connected within
    ``start_timeout``), "gone" (its workers left more than ``end_grace`` ago), else None."""
    if job.state != "running" or job.workers or job.cancelled:
        return None
    empty = now - (job.empty_since or now)
    if not job.ever_connected and empty > start_timeout:
        return "never"
    if job.ever_connected and empty > end_grace:
        return "gone"
    return None
