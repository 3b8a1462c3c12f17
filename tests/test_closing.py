"""The cluster's end (``at_scale.closing``) against a real Dask scheduler and workers."""

from __future__ import annotations

import asyncio

import pytest
from distributed import Scheduler, Worker

from dask_hpc.at_scale import log_summary
from dask_hpc.at_scale.closing import close_workers


@pytest.fixture(autouse=True)
def _no_mute_left_by_close_workers():
    """close_workers mutes a warning for the rest of the scheduler's process: here, the tests'."""
    yield
    for summary in log_summary._SUMMARIES:
        summary.muted.discard("tls-refused")


def test_a_worker_that_registers_after_the_close_began_is_closed_too() -> None:
    """A restart under way when the workers are told to close registers later: it is closed on
    arrival, so nothing waits for it to leave (its rank waited out the leave timeout)."""

    async def main() -> tuple[int, int]:
        async with Scheduler(host="127.0.0.1", dashboard_address=":0") as scheduler:
            async with Worker(scheduler.address, nthreads=1, host="127.0.0.1") as first:
                await close_workers(scheduler)
                await asyncio.wait_for(first.finished(), 30)
            async with Worker(scheduler.address, nthreads=1, host="127.0.0.1") as late:
                await asyncio.wait_for(late.finished(), 30)  # not closed: TimeoutError
            while scheduler.workers:  # its removal follows its close
                await asyncio.sleep(0.01)
            return len(scheduler.workers), len(scheduler.stream_comms)

    assert asyncio.run(asyncio.wait_for(main(), 60)) == (0, 0)
