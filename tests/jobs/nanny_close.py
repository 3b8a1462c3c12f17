"""A real Scheduler and Nanny (its worker a real process) brought, in this process, to where a
cancelled job's nanny host was (tests/test_nanny_close.py): the worker closed gracefully, the
Nanny's own close under way, and the rank's end cancelling it. Prints one ``NANNYCLOSE {json}``
line: what the cancelled handling ended with, and the ERROR records of Dask's loggers."""

import asyncio
import json
import logging
import sys
from pathlib import Path

from distributed import Nanny, Scheduler
from distributed.core import Status

from dask_hpc.running.nannies import NannyWatch


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        traceback = "with a traceback" if record.exc_info else "no traceback"
        self.lines.append(f"{record.name}: {record.getMessage()} ({traceback})")


async def cut_short(directory: Path) -> dict:
    async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
        nanny = Nanny(
            scheduler.address, host="127.0.0.1", nthreads=1, dashboard_address=":0",
            local_directory=str(directory),
        )  # fmt: skip
        await nanny
        watch = NannyWatch(nanny, directory / "registered")
        # The close reaches its connection pool's close, its worker process killed, and waits
        # there (as on a loaded node) until the job's end cancels it: where the CI run's did.
        reached, pool_close = asyncio.Event(), nanny.rpc.close

        async def pool_close_held() -> None:
            reached.set()
            await asyncio.Event().wait()

        nanny.rpc.close = pool_close_held
        nanny.status = Status.closing_gracefully  # what the scheduler's "close" asks of it
        exit_handled = asyncio.create_task(watch.on_worker_exit(0))
        await asyncio.wait_for(reached.wait(), 60)
        exit_handled.cancel()
        outcome = (await asyncio.gather(exit_handled, return_exceptions=True))[0]
        await pool_close()
        return {"outcome": repr(outcome), "worker_process": repr(nanny.process)}


if __name__ == "__main__":
    records = Records()
    logging.getLogger("distributed").addHandler(records)
    result = asyncio.run(cut_short(Path(sys.argv[1])))
    print("NANNYCLOSE " + json.dumps({**result, "errors": records.lines}), flush=True)
