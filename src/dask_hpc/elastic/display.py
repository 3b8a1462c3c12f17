"""What a person sees of an HPCCluster: its dashboard link (without its token; behind JupyterHub,
through jupyter-server-proxy), a status table per pool, the Jupyter repr built on Dask's, and
the one-line messages it prints (kept in the cluster's logs too)."""

from __future__ import annotations

import datetime
import os
import sys
from typing import Any

import dask.config
from distributed.utils import format_dashboard_link

from ..guard.connection import link_host

DEFAULT_LINK = "{scheme}://{host}:{port}/status"  # distributed.dashboard.link's default
# Through jupyter-server-proxy, host and port written out (its /proxy/PORT/ is `localhost`).
HUB_LINK = "{JUPYTERHUB_SERVICE_PREFIX}proxy/{port}/status"


class Display:
    """Mixed into HPCCluster, before Dask's Cluster (whose repr it extends)."""

    # What it reads of the cluster. Also its site, batch_system, scheduler, jobs and quiet, not
    # annotated here: autodoc gives a class annotation's type to the constructor's argument of
    # the same name (the API page said ``site (Any)``, ``jobs (dict[str, Any])``).
    info: Any
    pools: dict[str, Any]
    scheduler_mode: str
    cluster_id: str
    _cluster_manager_logs: Any

    def _say(self, message: str) -> None:
        """One line for the user (kept in the cluster's logs too)."""
        self._log(f"HPCCluster {self.cluster_id}: {message}")

    def _log(self, log: str) -> None:  # Dask's Cluster._log, on stderr
        self._cluster_manager_logs.append((datetime.datetime.now(), log))
        if not self.quiet:
            print(log, file=sys.stderr, flush=True)

    @property
    def dashboard_link(self) -> str:
        """The dashboard without its token, as the widget and the repr show it (they land in
        notebooks, files others may read); open :attr:`dashboard_login` once and the browser
        holds the token."""
        return self._dashboard(with_token=False)

    @property
    def dashboard_login(self) -> str:
        """The dashboard with its token, for a terminal or the owner's own eyes only."""
        return self._dashboard(with_token=True)

    def _dashboard(self, with_token: bool) -> str:
        """Behind JupyterHub, through jupyter-server-proxy."""
        if self.info is None or not self.info.dashboard_port:
            return ""
        port = self.info.dashboard_port
        host = link_host(self.info.dashboard_host)  # where it listens, never a name
        template = dask.config.get("distributed.dashboard.link")
        if os.environ.get("JUPYTERHUB_SERVICE_PREFIX") and template == DEFAULT_LINK:
            with dask.config.set({"distributed.dashboard.link": HUB_LINK}):
                link = format_dashboard_link(host, f"{host}:{port}")
        else:
            link = format_dashboard_link(host, port)
        token = self.info.dashboard_token if with_token else None
        return f"{link}{'&' if '?' in link else '?'}token={token}" if token else link

    def status_table(self) -> list[dict[str, Any]]:
        """One row per pool: its shape, what it is asked for, its jobs and workers now."""
        rows = []
        for pool in list(self.pools.values()):
            mine = [j for j in list(self.jobs.values()) if j.pool == pool.name]
            rows.append(
                {
                    "pool": pool.name,
                    "kind": pool.kind,
                    "workers_per_job": pool.workers_per_job,
                    "walltime": pool.walltime,
                    "target_jobs": pool.target,
                    "adapt": None if pool.bounds is None else list(pool.bounds),
                    "queued": sum(1 for j in mine if j.state in (None, "queued")),
                    "running": sum(1 for j in mine if j.state == "running"),
                    "workers": sum(len(j.workers) for j in mine),
                    "broken": pool.broken,
                }
            )
        return rows

    def _repr_html_(self, cluster_status: str | None = None) -> str:
        head = "".join(
            f"<th style='text-align: left'>{h}</th>"
            for h in ("Pool", "Kind", "Workers/job", "Walltime", "Jobs asked", "Queued",
                      "Running", "Workers")
        )
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td style='text-align: left'>{row[k]}</td>"
                for k in ("pool", "kind", "workers_per_job", "walltime", "target_jobs",
                          "queued", "running", "workers")
            )
            + "</tr>"
            for row in self.status_table()
        )
        table = (
            f"<p>Batch system: {self.batch_system}, site: {self.site.name}, scheduler: "
            f"{self.scheduler_mode}</p><table><tr>{head}</tr>{rows}</table>"
        )
        return super()._repr_html_(cluster_status=table + (cluster_status or ""))

    def __repr__(self) -> str:
        text = super().__repr__()
        jobs = sum(1 for j in list(self.jobs.values()) if not j.ended)
        return f"{text[:-1]}, jobs={jobs})"
