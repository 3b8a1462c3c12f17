"""Explicit CPU lists, one per rank of a node, for a launcher's ``--cpu-bind list:``.

A site that keeps cores for its own services (ALCF Aurora: the first core of each socket,
0 and 52, and their hyperthreads 104 and 156) cannot be shared out with ``--depth``: depth
counts from CPU 0 and lets a rank straddle the two sockets. The lists here do what ALCF's
``get_cpu_bind_aurora`` (argonne-lcf/pbs_utils) does: the ranks are spread evenly over the
sockets, each gets the same number of consecutive usable physical cores of its socket; with
more ranks on a socket than it has usable cores, the extra ranks go to the hyperthreads of
its first cores (hyperthread of core ``c``: CPU ``c + cores``); an odd count is worked out
for the next even one and the last list dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UsageError


def _ranges(cpus: Sequence[int]) -> str:
    """``1-8,105-112``: ``cpus`` as comma-separated ranges."""
    parts: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def cpu_lists(
    ranks: int, cores: int, sockets: int, reserved: Sequence[int], site: str = "this site"
) -> str:
    """``A:B:...``: the CPUs of each of ``ranks`` ranks of a node of ``cores`` physical cores
    over ``sockets`` sockets, ``reserved`` cores left out; a UsageError where they do not fit."""
    per_socket = cores // sockets
    usable = [
        [c for c in range(s * per_socket, (s + 1) * per_socket) if c not in reserved]
        for s in range(sockets)
    ]
    if ranks == 1:
        return _ranges([c for socket in usable for c in socket])
    even = ranks + (-ranks % sockets)
    per_rank_socket = even // sockets
    fit = min(len(u) for u in usable) * 2  # one hardware thread each, on both of a core's
    if per_rank_socket > fit:
        raise UsageError(
            f"{ranks} ranks per node do not fit the {fit * sockets} usable hardware threads "
            f"of a {site} node (cores {', '.join(map(str, reserved))} are the system's)",
            f"start at most {fit * sockets} workers per node",
        )
    lists: list[str] = []
    for socket in usable:
        if per_rank_socket <= len(socket):
            width = len(socket) // per_rank_socket
            groups = [socket[i * width : (i + 1) * width] for i in range(per_rank_socket)]
        else:  # a core each, then the hyperthreads of the first cores
            spill = per_rank_socket - len(socket)
            groups = [[c] for c in socket] + [[c + cores] for c in socket[:spill]]
        lists += [_ranges(g) for g in groups]
    return ":".join(lists[:ranks])
