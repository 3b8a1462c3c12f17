"""``PoolOptions``: what a pool's jobs look like, as given to ``HPCCluster``, ``add_pool`` or
``hpc-cluster``; the one place a pool's option is written (its name, type, and its default
in dask's config, ``hpc.cluster.<name with dashes>``).

``HPCCluster``'s own keyword arguments spell them again, as its public signature; a test
(tests/elastic/test_pool_options.py) keeps the two the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import config


@dataclass(frozen=True)
class PoolOptions:
    """A pool's options; None: not given, so ``hpc.cluster.*``, then the site profile."""

    workers_per_node: int | None = None
    nodes_per_job: int | None = None
    walltime: str | None = None
    account: str | None = None
    queue: str | None = None
    image: str | None = None
    runtime: str | None = None
    launcher: str | None = None
    job_directives: Sequence[str] | None = None
    job_setup: Sequence[str] | None = None
    job_env: Mapping[str, str] | None = None
    worker_args: Sequence[str] | str | None = None
    lifetime_margin: float | None = None
    cpus_per_worker: int | None = None
    memory_per_worker: str | int | None = None
    gpus_per_node: int | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name (a keyword argument of ``HPCCluster`` and ``add_pool``)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def given(cls, options: Mapping[str, Any], caller: str) -> PoolOptions:
        """The options of keyword arguments ``options``; one that is not a pool's option is
        a TypeError, as Python's own for ``caller``."""
        for name in options:
            if name not in cls.names():
                raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
        return cls(**options)

    @staticmethod
    def config_key(name: str) -> str:
        """The option's key in dask's config (``hpc.cluster.workers-per-node``)."""
        return f"cluster.{name.replace('_', '-')}"

    def setting(self, name: str) -> Any:
        """The option as given, else its default in dask's config (None: the site's)."""
        value = getattr(self, name)
        return config.get(self.config_key(name)) if value is None else value

    def with_config(self) -> PoolOptions:
        """Every option not given taken from dask's config."""
        return dataclasses.replace(self, **{name: self.setting(name) for name in self.names()})
