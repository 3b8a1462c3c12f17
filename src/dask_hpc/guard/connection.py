"""How anything finds a cluster: the scheduler file and the credentials beside it.

This is the one place that knows the scheduler file's contents, the environment handed to
COMMAND and JupyterLab (a bare ``Client()`` connects), and :func:`connect` for the owner.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from . import private_files
from .security import TlsFiles, tls_env

KEY = "dask_hpc"
LOOPBACK = "127.0.0.1"  # where the dashboard and JupyterLab listen, in every link


@dataclass(frozen=True)
class SchedulerInfo:
    """What rank 0 publishes: where the scheduler listens and how to talk to it."""

    address: str
    dashboard_port: int | None
    host: str
    launch_id: str
    tls: TlsFiles | None
    roster: str | None = None  # rank 0's roll call, host:port (see roster.py)
    token: str | None = None  # what a rank presents there
    dashboard_token: str | None = None  # what the dashboard asks for (see dashboard.py)
    jupyter_link: str | None = None  # JupyterLab's URL with its token (--jupyter)
    dashboard_host: str = ""  # the address the dashboard listens on ("": every interface)

    def to_json(self) -> dict[str, Any]:
        tls = None
        if self.tls:
            tls = {"ca": str(self.tls.ca), "cert": str(self.tls.cert), "key": str(self.tls.key)}
        return {
            "type": "Scheduler",
            "address": self.address,
            "services": {"dashboard": self.dashboard_port} if self.dashboard_port else {},
            KEY: {
                "host": self.host,
                "launch_id": self.launch_id,
                "tls": tls,
                "roster": self.roster,
                "token": self.token,
                "dashboard_token": self.dashboard_token,
                "jupyter_link": self.jupyter_link,
                "dashboard_host": self.dashboard_host,
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchedulerInfo:
        ours = data.get(KEY) or {}
        tls = ours.get("tls")
        return cls(
            address=data["address"],
            dashboard_port=(data.get("services") or {}).get("dashboard"),
            host=ours.get("host", ""),
            launch_id=ours.get("launch_id", ""),
            tls=TlsFiles(Path(tls["ca"]), Path(tls["cert"]), Path(tls["key"])) if tls else None,
            roster=ours.get("roster"),
            token=ours.get("token"),
            dashboard_token=ours.get("dashboard_token"),
            jupyter_link=ours.get("jupyter_link"),
            dashboard_host=ours.get("dashboard_host") or "",
        )

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard as the owner opens it first (its token included: printed only to a
        terminal and by ``hpc-cluster links``): on the scheduler's node, or through the tunnel.

        The dashboard listens on the node's loopback, so the scheduler's own address (what
        ``client.dashboard_link`` would show by default) has nothing listening. The address is
        written out: ``localhost`` may resolve to ``::1`` first (Debian's, Ubuntu's and RHEL's
        /etc/hosts), where any user of the node can listen on the same port.
        """
        plain = self.plain_dashboard_link
        if plain is None or not self.dashboard_token:
            return plain
        return f"{plain}?token={self.dashboard_token}"

    @property
    def plain_dashboard_link(self) -> str | None:
        """The dashboard's link without its token: what a notebook, a repr or COMMAND's log
        shows (a saved notebook is a file others may read). The browser that opened
        :attr:`dashboard_link` once holds the token as a cookie, so this one opens there."""
        if not self.dashboard_port:
            return None
        return f"http://{link_host(self.dashboard_host)}:{self.dashboard_port}/status"

    def client_env(self) -> dict[str, str]:
        """Environment in which a bare ``distributed.Client()`` connects to this cluster
        (COMMAND's, JupyterLab's kernels'): no token in it (see :attr:`plain_dashboard_link`)."""
        env = {"DASK_SCHEDULER_ADDRESS": config.env_value(self.address)}
        if self.plain_dashboard_link:
            env["DASK_DISTRIBUTED__DASHBOARD__LINK"] = config.env_value(self.plain_dashboard_link)
        if self.tls:
            env.update(tls_env(self.tls))
        return env


def reached_at(host: str) -> str:
    """Where a server listening on ``host`` is reached: that address, or loopback's where it
    listens on every interface (IPv4's ``""``/``0.0.0.0``, IPv6's ``::``, which tornado binds
    alone)."""
    return {"": LOOPBACK, "0.0.0.0": LOOPBACK, "::": "::1"}.get(host, host)


def link_host(host: str) -> str:
    """``host`` as the host part of a URL (an IPv6 address in brackets)."""
    reached = reached_at(host)
    return f"[{reached}]" if ":" in reached else reached


def write_scheduler_file(path: Path, info: SchedulerInfo) -> None:
    """Publish ``info`` atomically (readers see the whole file or none), owner-only: it holds
    the dashboard's and the roll call's tokens."""
    private_files.write_file(path, json.dumps(info.to_json(), indent=2).encode())


def read_scheduler_file(path: Path, launch_id: str | None = None) -> SchedulerInfo | None:
    """The published info, or None if absent, unreadable or from another launch.

    Only a file the reader could have written is read, and its certificates likewise
    (``private_files.read_trusted``): a scheduler file of another user's (its address, its CA)
    would connect our workers to a scheduler that runs its code as us. Anything else is an
    :class:`~dask_hpc.guard.private.UnsafePath`.
    """
    try:
        text = private_files.read_trusted(path, "scheduler file")
        info = SchedulerInfo.from_json(json.loads(text))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if launch_id is not None and info.launch_id != launch_id:
        return None
    if info.tls:
        try:
            for file in info.tls.files():
                private_files.read_trusted(file, "the cluster's TLS file")
        except OSError:
            return None  # not (yet) there
    return info


def poll_delays(first: float, cap: float) -> Iterator[float]:
    """Delays between reads of the scheduler file: jittered, growing by half up to ``cap``."""
    interval = first
    while True:
        yield interval * random.uniform(0.5, 1.5)
        interval = min(interval * 1.5, cap)


def connect(scheduler_file: str | os.PathLike[str], **kwargs: Any) -> Any:
    """A ``distributed.Client`` connected to the cluster of ``scheduler_file``."""
    import ssl

    from distributed.security import Security

    info = read_scheduler_file(Path(scheduler_file))
    if info is None:
        raise FileNotFoundError(f"no usable scheduler file at {scheduler_file}")
    if info.tls:
        kwargs.setdefault(
            "security",
            Security(
                tls_ca_file=str(info.tls.ca),
                tls_client_cert=str(info.tls.cert),
                tls_client_key=str(info.tls.key),
                tls_min_version=ssl.TLSVersion.TLSv1_3,  # as the cluster (security.tls_env)
                require_encryption=True,
            ),
        )
    client = _cluster_client_class()(info.address, **kwargs)
    client.cluster_dashboard_link = info.plain_dashboard_link  # its repr lands in notebooks
    return client


@functools.cache
def _cluster_client_class() -> type:
    """Dask's ``Client``, whose ``dashboard_link`` is its own cluster's (without the token).

    Not through ``distributed.dashboard.link``: that setting is the whole process's, and a
    second cluster (another ``connect``, an ``HPCCluster``) showed the first one's link.
    """
    from distributed import Client

    class ClusterClient(Client):
        cluster_dashboard_link: str | None = None

        @property
        def dashboard_link(self) -> str:
            return self.cluster_dashboard_link or super().dashboard_link

    return ClusterClient
