"""``ConfiguredCluster``: an elastic cluster's settings, checked before anything starts or is
submitted, and its pools: each argument defaults to ``hpc.cluster.*`` in Dask's configuration,
then to the site profile; ``add_pool`` adds a pool; ``job_script`` renders a pool's next job.
``HPCCluster`` (``cluster.py``) is the facade over it; ``hpc-cluster script`` renders a job
script from the same settings without a batch system (``check_commands=False``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import config
from ..batch import binds as batch_binds
from ..batch import commands, script
from ..errors import UsageError
from ..planning.network import parse_dashboard
from ..planning.sites import Site, detect_site, load_site
from . import locations, naming
from .jobcluster import JobCluster
from .jobs import BatchClient
from .pool_options import PoolOptions
from .pools import Pool, pool_from
from .scheduler import SCHEDULER_FILE, listen_host

SCHEDULERS = ("local", "job")
BIND_OPTION = "binds= (--bind)"  # HPCCluster's, hpc-cluster's, as messages name them


class ConfiguredCluster(JobCluster):
    """The settings and pools of ``HPCCluster``."""

    def _settle(
        self,
        kind: str | None = None,
        *,
        site: str | None = None,
        batch_system: str | None = None,
        scheduler: str | None = None,
        scheduler_walltime: str | None = None,
        pool: str | None = None,
        interface: str | None = None,
        dashboard_address: str = "127.0.0.1:0",
        directory: str | os.PathLike[str] | None = None,
        log_directory: str | os.PathLike[str] | None = None,
        binds: Sequence[str] | str | None = None,
        check_commands: bool = True,
        existing: tuple[str, Path, dict[str, Pool]] | None = None,
        **options: Any,
    ) -> None:
        """Every setting, checked (a UsageError) before anything starts or is submitted; also
        what ``hpc-cluster script`` renders a job script from (batch commands not needed).
        ``options``: the first pool's (``PoolOptions``)."""
        given = PoolOptions.given(options, "HPCCluster")
        # the user's binds, every pool's (batch.binds): each checked here, and in each job
        self.binds = tuple(b.spec() for b in batch_binds.parse_all(binds, BIND_OPTION))
        site_name = site or config.get("site")
        self.site: Site = load_site(site_name) if site_name else detect_site()
        self.batch_system = locations.batch_system(self.site, batch_system)
        system = commands.BatchSystem.named(self.batch_system)
        missing = system.missing_commands()
        if missing and check_commands:
            raise UsageError(
                f"{missing[0]} not found (the {self.batch_system} command the cluster needs)",
                "load the batch system's module, or fix PATH",
            )
        mode = scheduler or config.get("cluster.scheduler")
        if mode not in SCHEDULERS:
            raise UsageError(f"scheduler={mode!r} is not one of {SCHEDULERS}", "use local or job")
        self.scheduler_mode = mode
        self.interface = interface or locations.site_interface(self.site)
        if interface:
            listen_host(interface)  # an interface this node does not have: one line now
        parse_dashboard(dashboard_address)  # an address, not a name: one line now
        self._dashboard_address = dashboard_address
        self.cluster_id = existing[0] if existing else naming.new_cluster_id()
        self.pools: dict[str, Pool] = dict(existing[2]) if existing else {}
        first_kind = kind or config.get("cluster.kind")
        if not existing:
            self._add_pool(pool or first_kind, first_kind, given, self.batch_system)
        first = next(iter(self.pools.values()))
        self._scheduler_walltime = (
            scheduler_walltime or config.get("cluster.scheduler-walltime") or first.walltime
        )
        script.parse_walltime(self._scheduler_walltime)
        self.directory = (
            existing[1]
            if existing
            else locations.cluster_directory(self.site, self.cluster_id, directory)
        )
        self.scheduler_file = self.directory / SCHEDULER_FILE
        self.log_directory = locations.log_directory(self.directory, log_directory)
        self.poll_interval = float(config.get("cluster.poll-interval"))
        self.start_timeout = float(config.get("cluster.start-timeout"))
        self.end_grace = float(config.get("cluster.end-grace"))
        self.max_failures = int(config.get("cluster.max-failures"))
        self._batch = BatchClient(system, self.directory / "jobs")
        self.settings = {  # what another process needs to take this cluster over (attach)
            "site": self.site.name,
            "batch_system": self.batch_system,
            "scheduler": self.scheduler_mode,
            "scheduler_walltime": self._scheduler_walltime,
            "interface": self.interface,
            "dashboard_address": self._dashboard_address,
            "log_directory": str(self.log_directory),
            "binds": list(self.binds),
        }
        for each in self.pools.values():
            self._check_script(each)

    def _check_script(self, pool: Pool) -> None:
        """Render a job of ``pool`` once: what the script refuses (an image key that is not
        there, a launcher the table lacks) is one line before anything is submitted."""
        script.render(self._request(pool, naming.job_name(self.cluster_id, pool.name, 0)))

    def add_pool(
        self,
        name: str,
        kind: str | None = None,
        *,
        jobs: int = 0,
        **options: Any,
    ) -> Pool:
        """Add a pool: its own kind of worker, job size, queue, walltime (``HPCCluster``'s
        arguments); scale it with ``scale(..., pool=name)``; adapt grows it for the tasks
        that need its workers' resources (``resources={"GPU": 1}`` for a gpu pool)."""
        if name in self.pools:
            raise UsageError(f"the cluster already has a pool {name!r}", "pick another name")
        first = next(iter(self.pools.values()), None)
        if first is not None:  # a new pool inherits where the jobs go, not their shape
            for key in ("account", "queue", "image", "runtime", "launcher", "walltime"):
                options.setdefault(key, getattr(first, key))
        batch_system = options.pop("batch_system", None)  # make_pool's, as before
        new = self._add_pool(name, kind or name, PoolOptions.given(options, "add_pool"),
                             batch_system)  # fmt: skip
        if jobs:
            self.scale(jobs=jobs, pool=name)
        return new

    def _add_pool(
        self, name: str, kind: str, options: PoolOptions, batch_system: str | None
    ) -> Pool:
        """A pool of ``options``, checked (its image, its job script), added."""
        new = pool_from(name, kind, self.site, options, batch_system)
        if new.image and not Path(new.image).is_file():
            raise UsageError(f"image {new.image} not found", "give the path of the image file")
        if hasattr(self, "settings"):  # a running cluster's new pool
            self._check_script(new)
        self.pools[name] = new
        return new

    def _pool(self, name: str | None) -> Pool:
        if name is None:
            return next(iter(self.pools.values()))
        try:
            return self.pools[name]
        except KeyError:
            raise UsageError(
                f"no pool {name!r} in this cluster", f"use one of: {', '.join(self.pools)}"
            ) from None

    # ------------------------------------------------------------------ job scripts
    def _request(self, pool: Pool, job_name: str) -> script.JobRequest:
        request = pool.request(
            self.site,
            self.batch_system,
            job_name,
            self.scheduler_file,
            self.log_directory / f"{job_name}.out",
            binds=[str(self.directory)],
        )
        return batch_binds.with_binds(request, self.binds, BIND_OPTION)

    def job_script(self, pool: str | None = None) -> str:
        """The batch script of this pool's next job."""
        chosen = self._pool(pool)
        name = naming.job_name(self.cluster_id, chosen.name, chosen.counter + 1)
        return script.render(self._request(chosen, name))
