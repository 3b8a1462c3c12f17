"""What start-cluster tells the user once the cluster is ready."""

from __future__ import annotations

import getpass
import os
import shlex
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


def _forward(port: int, target: str, last: bool) -> str:
    """One hop's ``-L``: to ``target``'s ``port`` (an address), or, from the node's hop, to
    ``target`` itself (a Unix socket's path; the hops before forward to the next one's
    loopback, where the next ssh listens)."""
    if not target.startswith("/"):
        return f"-L {LOOPBACK}:{port}:{link_host(target)}:{port}"
    return f"-L {LOOPBACK}:{port}:" + (shlex.quote(target) if last else f"{LOOPBACK}:{port}")


def ssh_tunnel(hops: tuple[str, ...], node: str, ports: list[tuple[int, str]]) -> str:
    """The ssh command that forwards ``ports`` from the user's machine to ``node``.

    ``hops``: the site's login path (bastion, login node); none known: ssh to the node itself.
    ``ports``: (port, where it goes on the node: the address it listens on there, or the path
    of a Unix socket, which ``port`` at the user's end is forwarded to: JupyterLab's).
    Each hop listens on, and forwards to, the literal loopback address (sshd would try ``::1``
    first for ``localhost``, where another user of the host may listen on the same port), and
    gives up when it cannot listen (``ExitOnForwardFailure``; a port another user of a login
    node holds would otherwise receive what the hop before sends: with ``-L PORT:...`` ssh
    listens on both loopbacks and is content with either).
    """
    first, *rest = [*hops, node]
    ssh = "ssh -t -o ExitOnForwardFailure=yes"

    def forwards(last: bool) -> str:
        return " ".join(_forward(port, target, last) for port, target in ports)

    parts = [f"{ssh} {forwards(not rest)} {getpass.getuser()}@{first}"]
    parts += [f"{ssh} {forwards(i == len(rest) - 1)} {hop}" for i, hop in enumerate(rest)]
    return " ".join(parts)


def ready_message(
    plan: Plan,
    info: SchedulerInfo,
    jupyter: tuple[int, str] | None = None,
    env: Mapping[str, str] | None = None,
    whole_links: bool = False,
) -> str:
    """The ready block; links with their tokens only if ``whole_links`` (a terminal: links.py).

    ``jupyter``: (the port of JupyterLab's link, its Unix socket). Without a tunnel (the
    user's own machine) the forward to the socket goes through ``ssh localhost``.
    """
    node = socket.gethostname()
    ports = [jupyter] if jupyter else []
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
    elif jupyter:
        lines.append("  jupyterlab serves on a Unix socket only you can open: forward its port")
        lines.append(f"    {ssh_tunnel((), 'localhost', [jupyter])}")
    return "\n".join(lines)
