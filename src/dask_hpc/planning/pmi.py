"""Ask the launcher's PMI-1 server, over the socket it hands each rank (``PMI_FD``), what the
environment does not say: the name of this launch (MPICH's hydra) and how its tasks sit on
the nodes (Flux's ``flux.taskmap``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence


def _exchange(sock: socket.socket, command: str) -> dict[str, str]:
    sock.sendall(command.encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return dict(item.split("=", 1) for item in data.decode().split() if "=" in item)


def query(env: Mapping[str, str], keys: Sequence[str] = ()) -> dict[str, str] | None:
    """The key-value-space name (``kvsname``, unique per launch) and each of ``keys`` the
    server holds, or None when there is no PMI socket (or ``env`` is not this process's)."""
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
        if name is None:
            return None
        found = {"kvsname": name}
        for key in keys:
            answer = _exchange(sock, f"cmd=get kvsname={name} key={key}\n")
            if answer.get("rc") == "0" and "value" in answer:
                found[key] = answer["value"]
        _exchange(sock, "cmd=finalize\n")
        return found
    except OSError:
        return None
    finally:
        sock.detach()


def kvsname(env: Mapping[str, str]) -> str | None:
    """Hydra's key-value-space name (unique per mpiexec), or None when there is no PMI socket."""
    return (query(env) or {}).get("kvsname")
