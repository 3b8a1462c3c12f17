"""Ask MPICH's hydra process manager, over its PMI-1 socket, for the name of this launch."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def _exchange(sock: socket.socket, command: str) -> dict[str, str]:
    sock.sendall(command.encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return dict(item.split("=", 1) for item in data.decode().split() if "=" in item)


def kvsname(env: Mapping[str, str]) -> str | None:
    """Hydra's key-value-space name (unique per mpiexec), or None when there is no PMI socket."""
    raw = env.get("PMI_FD", "")
    if not raw.isdigit() or env is not os.environ and raw != os.environ.get("PMI_FD"):
        return None
    try:
        os.fstat(int(raw))
    except OSError:
        return None
    sock = socket.socket(fileno=int(raw))
    try:
        sock.settimeout(10)
        _exchange(sock, "cmd=init pmi_version=1 pmi_subversion=1\n")
        name = _exchange(sock, "cmd=get_my_kvsname\n").get("kvsname")
        _exchange(sock, "cmd=finalize\n")
        return name
    except OSError:
        return None
    finally:
        sock.detach()
