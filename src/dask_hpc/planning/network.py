"""What a rank's processes listen on and speak: the network interface's address, ports that
must be free, the dashboard's address, TLS on or off and the protocol; checked before anything
starts.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import psutil

from .. import config
from ..errors import UsageError
from .settings import Settings
from .sites import Site


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name``, or a UsageError listing the others."""
    addrs = psutil.net_if_addrs()
    for addr in addrs.get(name, []):
        if addr.family == socket.AF_INET:
            return addr.address
    raise UsageError(
        f"network interface {name!r} has no IPv4 address on this node",
        f"use one of: {', '.join(sorted(addrs))}",
    )


def host_address(settings: Settings, site: Site, notes: list[str]) -> str | None:
    """The IP to listen on: an explicit interface must exist, a site's default only if it does."""
    if settings.interface:
        return interface_address(settings.interface)
    if site.network_interface:
        if site.network_interface in psutil.net_if_addrs():
            return interface_address(site.network_interface)
        notes.append(
            f"site interface {site.network_interface} is not on this node: using the default route"
        )
    return None


def check_port_free(host: str, port: int, flag: str) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host or 'all interfaces'} is already in use",
                    f"pass another {flag}, or 0 for a free one",
                ) from None
            raise UsageError(
                f"cannot listen on {host}:{port} ({error.strerror})", f"pass another {flag}"
            ) from None


def parse_dashboard(address: str) -> tuple[str, int]:
    """(host, port) of a dashboard address; the host an address, not a name (``localhost``
    may be ``::1`` first, where any user of the node can listen on the same port), or empty
    for every interface."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise UsageError(
            f"--dashboard-address {address!r} has no port",
            "write it as HOST:PORT, e.g. 127.0.0.1:8787 (':0' for a free port)",
        )
    host = host.strip("[]")
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise UsageError(
                f"--dashboard-address {address!r} names a host: the dashboard's link and tunnel "
                f"must name the address it listens on ({host} may resolve to another)",
                "write the address, e.g. 127.0.0.1:8787",
            ) from None
    return host, int(port)


def tls_and_protocol(settings: Settings, notes: list[str]) -> tuple[bool, str]:
    """(TLS on?, protocol), refusing combinations that would send plain text by accident."""
    tls = bool(config.get("tls") if settings.tls is None else settings.tls)
    if not tls:
        notes.append("TLS is off: anyone who can reach the scheduler can run code as you")
    protocol = settings.protocol or config.get("protocol") or ("tls" if tls else "tcp")
    if tls and protocol != "tls":
        raise UsageError(
            f"--protocol {protocol} sends everything unencrypted while TLS is on",
            "drop --protocol, or add --no-tls",
        )
    if not tls and protocol == "tls":
        raise UsageError("--protocol tls needs TLS", "drop --no-tls")
    return tls, protocol
