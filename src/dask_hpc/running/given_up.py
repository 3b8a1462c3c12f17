"""A rank given up as hung, at the scheduler: its workers removed, their names refused.

Rank 0 finds a hung rank (``liveness``, ``roll_call``) and writes the names of its workers to
its scheduler's process on a pipe (``tell_scheduler``; rank 0's process never imports Dask).
The scheduler then does what Dask does with a worker that missed its heartbeats for
``worker-ttl``, minus the restart through its Nanny (on a hung node the Nanny hangs too, and
Dask waits 30 s more for it): ``Scheduler.remove_worker``, which sends the worker a ``close``
(read when, if ever, it runs again), drops its state and has its tasks and the results it
held computed again elsewhere (``stimulus_id`` ``dask-hpc-hung-rank-TIME``).

A hung rank may run again (a stopped process group continued, a node back from a Lustre
hang). Its rank then stops everything it started (``worker_rank``), but its workers may reach
the scheduler first: with a connection they still hold (their heartbeat gets Dask's
``missing``, on which a worker closes itself) or a new one. From then on the scheduler
refuses the registration of a worker by any of those names, as Dask refuses a name already
taken, so no worker of a given-up rank rejoins with the state it had when it stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

from ..at_scale import PER_TURN  # (the package alone: no Dask)

logger = logging.getLogger("distributed.scheduler")
REASON = "dask-hpc-hung-rank"
CLOSE_TIMEOUT = 5.0  # s to hand a given-up worker its "close" before its connection is cut
# Removals per turn of the scheduler's event loop (a removal without Dask's loop over the
# others, which at_scale.removals tells together, costs ~1.5 ms at 10,000 workers: docs/scale.md).
REMOVALS_PER_TURN = PER_TURN


def tell_scheduler(pipe: int, names: list[str]) -> None:
    """Rank 0's side: have the scheduler (at the other end of ``pipe``) give up ``names``."""
    data = (json.dumps({"give-up": names}) + "\n").encode()
    try:
        while data:
            data = data[os.write(pipe, data) :]
    except OSError:  # the scheduler has ended (it says why itself)
        pass


class GivenUp:
    """The scheduler's side: read rank 0's requests on ``pipe``; remove the workers named,
    and refuse those names from then on."""

    def __init__(self, scheduler: Any, pipe: int) -> None:
        self.scheduler = scheduler
        self.names: set[str] = set()
        self.pipe = pipe
        self._buffer = b""
        self._tasks: set[asyncio.Task[None]] = set()
        register = scheduler.handlers["register-worker"]

        async def register_unless_given_up(comm: Any, *args: Any, **kwargs: Any) -> Any:
            name = kwargs.get("name")
            if name is not None and str(name) in self.names:
                logger.warning("A worker of a rank given up as hung tried to register: %s", name)
                message = f"name of a worker given up (its rank hung), {name}"
                await comm.write({"status": "error", "message": message, "time": time.time()})
                return None
            return await register(comm, *args, **kwargs)

        scheduler.handlers["register-worker"] = register_unless_given_up
        asyncio.get_running_loop().add_reader(pipe, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.pipe, 65536)
        except BlockingIOError:
            return
        if not data:  # rank 0 closed its end: it ends
            asyncio.get_running_loop().remove_reader(self.pipe)
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            names = [str(name) for name in json.loads(line).get("give-up", [])]
            task = asyncio.ensure_future(self.give_up(names))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def give_up(self, names: list[str]) -> list[str]:
        """Refuse ``names`` from now on and remove the workers that bear them; return the
        addresses removed."""
        self.names.update(names)
        scheduler = self.scheduler
        aliases = scheduler.aliases  # name -> address (a name Dask was given as a number: int)
        found = (aliases.get(name, aliases.get(int(name)) if name.isdigit() else None)
                 for name in names)  # fmt: skip
        addresses = [address for address in found if address is not None]
        stimulus_id = f"{REASON}-{time.time()}"
        streams = []
        for done, address in enumerate(addresses, 1):
            stream = scheduler.stream_comms.get(address)
            await scheduler.remove_worker(address, stimulus_id=stimulus_id, close=True)
            if stream is not None:
                streams.append(stream)
            if done % REMOVALS_PER_TURN == 0:
                await asyncio.sleep(0)  # heartbeats, clients and timers in between
        # Dask leaves a removed worker's connection open for the worker to close when it reads
        # its "close": a hung worker never does, and when the scheduler itself closed, the wait
        # on it ended in a CancelledError traceback. So the "close" goes out first (the hung
        # node's kernel still takes it), then each connection ends; all of them together,
        # after every removal (one after another, 10 hung workers' closes held up their
        # removals for 23 s at 1,000 workers).
        await asyncio.gather(*(self._end(stream) for stream in streams))
        return addresses

    @staticmethod
    async def _end(stream: Any) -> None:
        try:
            await stream.close(timeout=CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001 - not flushed in time: cut it off
            stream.abort()
