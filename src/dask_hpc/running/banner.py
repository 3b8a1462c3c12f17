"""What start-cluster tells the user once the cluster is ready."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping

from ..guard.connection import LOOPBACK, SchedulerInfo, link_host
from ..guard.links import hint, shown
from ..planning.launchers import BATCH_JOB_IDS
from ..planning.plan import Plan

REMOTE_SESSION = ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", *BATCH_JOB_IDS)


def needs_tunnel(plan: Plan, env: Mapping[str, str]) -> bool:
    """Is the user's browser on another machine? Under a launcher, in a batch job or an ssh
    session: yes. Local mode on the user's own machine: no."""
    return plan.rank.launcher != "none" or any(env.get(var) for var in REMOTE_SESSION)


def ssh_tunnel(hops: tuple[str, ...], node: str, ports: list[tuple[int, str]]) -> str:
    """The ssh command that forwards ``ports`` from the user's machine to ``node``.

    ``hops``: the site's login path (bastion, login node); none known: ssh to the node itself.
    ``ports``: (port, the address it listens on at the node).
    Each hop listens on, and forwards to, the literal loopback address (sshd would try ``::1``
    first for ``localhost``, where another user of the host may listen on the same port), and
    gives up when it cannot listen (``ExitOnForwardFailure``; a port another user of a login
    node holds would otherwise receive what the hop before sends: with ``-L PORT:...`` ssh
    listens on both loopbacks and is content with either).
    """
    forwards = " ".join(f"-L {LOOPBACK}:{p}:{link_host(host)}:{p}" for p, host in ports)
    first, *rest = [*hops, node]
    ssh = f"ssh -t -o ExitOnForwardFailure=yes {forwards}"
    parts = [f"{ssh} {getpass.getuser()}@{first}"]
    parts += [f"{ssh} {hop}" for hop in rest]
    return " ".join(parts)


def ready_message(
    plan: Plan,
    info: SchedulerInfo,
    jupyter_port: int | None = None,
    env: Mapping[str, str] | None = None,
    whole_links: bool = False,
) -> str:
    """The ready block; links with their tokens only if ``whole_links`` (a terminal: links.py)."""
    node = socket.gethostname()
    ports = [(jupyter_port, LOOPBACK)] if jupyter_port else []
    ports += [(info.dashboard_port, info.dashboard_host)] if info.dashboard_port else []
    lines = [
        f"Dask cluster ready: {plan.total_workers} {plan.worker_type} workers on {plan.nodes} "
        f"node(s), TLS {'on' if plan.tls else 'OFF'}",
        f"  scheduler       {info.address}  (on {node})",
        f"  scheduler file  {plan.scheduler_file}",
        "  connect         from dask_hpc import connect; "
        f"client = connect('{plan.scheduler_file}')",
    ]
    if not plan.tls:
        lines.append(f"                  or Client(scheduler_file='{plan.scheduler_file}')")
    if info.dashboard_link:
        lines.append(f"  dashboard       {shown(info.dashboard_link, whole_links)}")
    if info.jupyter_link:
        lines.append(f"  jupyterlab      {shown(info.jupyter_link, whole_links)}")
    if (info.dashboard_link or info.jupyter_link) and not whole_links:
        lines.append(f"  {hint(plan.scheduler_file)}")
    if ports and needs_tunnel(plan, os.environ if env is None else env):
        lines.append("  from your own machine, open the tunnel first:")
        lines.append(f"    {ssh_tunnel(plan.site.ssh_hops, node, ports)}")
    return "\n".join(lines)
