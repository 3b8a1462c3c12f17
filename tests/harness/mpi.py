"""Command builders for the real MPI launchers on loopback (Open MPI 4.1, MPICH 4.0 hydra).

Each builder returns an argv prefix; append the program: ``mpich(4) + ["env"]``.
Several "nodes" are emulated on this one host: MPICH with ``-launcher fork -hosts a,b -ppn K``;
Open MPI with a hostfile of made-up names and ``bin/fake-rsh`` as ``plm_rsh_agent`` (one
``orted`` per made-up host, all local), which gives per-node local ranks.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"
FAKE_RSH = BIN / "fake-rsh"

OPENMPI = "mpiexec.openmpi"
MPICH = "mpiexec.mpich"

# Loopback, root, oversubscription: on the command line too, so the env need not carry them.
OPENMPI_BASE = [
    OPENMPI,
    "--allow-run-as-root",
    "--oversubscribe",
    "--mca", "oob_tcp_if_include", "lo",
    "--mca", "btl_tcp_if_include", "lo",
]


def node_names(nodes: int, prefix: str = "node") -> list[str]:
    """Made-up host names ``node1..nodeN`` (they need not resolve)."""
    return [f"{prefix}{i + 1}" for i in range(nodes)]


@functools.cache
def _hostfile_dir() -> tempfile.TemporaryDirectory:
    """A directory of this process's own for made-up hostfiles, removed when it exits."""
    return tempfile.TemporaryDirectory(prefix="dask-hpc-hostfiles-")


def write_hostfile(
    hosts: Sequence[str],
    path: str | os.PathLike[str] | None = None,
    slots: int | None = None,
) -> Path:
    """Write one line per host (``host slots=N`` when ``slots``); return the path."""
    if path is None:
        fd, name = tempfile.mkstemp(prefix="hostfile-", dir=_hostfile_dir().name)
        os.close(fd)
        path = name
    lines = [f"{h} slots={slots}" if slots else h for h in hosts]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def openmpi(
    n: int,
    *,
    hosts: Sequence[str] | None = None,
    ppn: int | None = None,
    hostfile: str | os.PathLike[str] | None = None,
    ignore_slurm: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """``mpiexec.openmpi -n N`` on this host, or over made-up ``hosts`` (``ppn`` per host).

    ``ignore_slurm`` keeps Open MPI from using a Slurm allocation it sees in the environment
    (for emulated sbatch environments where no Slurm runs).

    With ``hosts`` (or a ``hostfile`` of made-up names) each host gets its own ``orted``
    started through ``fake-rsh``, so ``OMPI_COMM_WORLD_LOCAL_RANK`` restarts per host.
    """
    argv = [*OPENMPI_BASE, "-n", str(n)]
    if ignore_slurm:
        argv += ["--mca", "ras", "^slurm", "--mca", "plm", "^slurm", "--mca", "ess", "^slurm"]
    if hosts is not None and hostfile is None:
        hostfile = write_hostfile(hosts, slots=ppn or n)
    if hostfile is not None:
        argv += [
            "--hostfile", str(hostfile),
            "--mca", "plm_rsh_agent", str(FAKE_RSH),
            "--mca", "plm_rsh_no_tree_spawn", "1",
        ]
    if ppn is not None:
        argv += ["--npernode", str(ppn)]
    return [*argv, *extra]


def openmpi_nodes(
    nodes: int, ppn: int, hostfile: str | os.PathLike[str] | None = None
) -> list[str]:
    """Open MPI over ``nodes`` made-up hosts with ``ppn`` ranks each."""
    return openmpi(nodes * ppn, hosts=node_names(nodes), ppn=ppn, hostfile=hostfile)


def mpich(
    n: int,
    *,
    hosts: Sequence[str] | None = None,
    ppn: int | None = None,
    launcher: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``mpiexec.mpich -n N`` on this host, or over made-up ``hosts`` with ``-launcher fork``.

    ``launcher="fork"`` without hosts stops hydra from starting its proxies through ``srun``
    when it sees Slurm variables (it does inside an sbatch script).
    """
    argv = [MPICH]
    if hosts is not None:
        launcher = launcher or "fork"
    if launcher is not None:
        argv += ["-launcher", launcher]
    if hosts is not None:
        argv += ["-hosts", ",".join(hosts)]
    argv += ["-n", str(n)]
    if ppn is not None:
        argv += ["-ppn", str(ppn)]
    return [*argv, *extra]


def mpich_nodes(nodes: int, ppn: int) -> list[str]:
    """MPICH hydra over ``nodes`` made-up hosts with ``ppn`` ranks each (fork launcher)."""
    return mpich(nodes * ppn, hosts=node_names(nodes), ppn=ppn)
