"""The workers the scheduler lists now, for the tests' jobs and the tests themselves.

Not ``client.scheduler_info()["workers"]``: on a synchronous client it fetches every worker,
then returns the client's cached copy, which the client's own periodic poll (every 2 s, no
workers asked: ``n_workers=0``) may have replaced in between, so the list comes back empty.
Seen in CI at distributed 2026.8.0 (``[]`` just after ``retire_workers``); the same code is in
2026.7.1. Asked of the scheduler directly, the answer is never the cache.
"""

from __future__ import annotations

from typing import Any


def workers(client: Any) -> dict[str, dict]:
    """Address -> Dask's worker info, every worker, from the scheduler itself."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def names(client: Any) -> list[str]:
    """The listed workers' names, sorted."""
    return sorted(str(info["name"]) for info in workers(client).values())
