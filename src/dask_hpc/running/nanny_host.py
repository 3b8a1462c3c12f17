"""The nanny host: the process that holds a rank's Nannies, forked as soon as the plan is made.

The host imports ``distributed`` (and what a worker imports when it starts), while on rank 0
the scheduler's process imports it too, side by side (a rank imports it only to fork
``--no-nanny`` workers); then it forks multiprocessing's forkserver and resource tracker from
itself (``forked_mp``), so Dask is imported once for the host and every worker of the rank.
It then waits on a pipe for the scheduler's address and runs ``nannies.run``.
"""

from __future__ import annotations

import importlib.util
import multiprocessing.forkserver
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
import yaml

from ..guard import import_path, private
from ..planning.plan import Plan, ProcessSpec, shared_env
from . import forked_mp
from .children import EXIT_CLOSED, fork, read_json, send_json


@dataclass(frozen=True)
class NannyHost:
    """A forked nanny host: its pid, the pipe that will carry the scheduler's address, and its
    forkserver's socket directory (the rank removes it: a host killed mid-way cannot)."""

    pid: int
    pipe: int
    spec: ProcessSpec
    directory: Path


def start(plan: Plan) -> NannyHost | None:
    """Fork this rank's nanny host (None: no workers here, or ``--no-nanny``)."""
    specs = [spec for spec in plan.processes if spec.role == "worker"]
    if not specs or not specs[0].options["nanny"]:
        return None
    # Private (0700), for the forkserver's socket; made and removed by the rank, which outlives
    # the host (a host SIGKILLed after its wait, or by the launcher, left it behind).
    directory = private.socket_directory("dask-hpc-mp-", len(forked_mp.SOCKET_NAME))
    read_fd, write_fd = os.pipe()
    pid = fork(serve, specs, read_fd, write_fd, directory)
    os.close(read_fd)
    spec = ProcessSpec("nannies", f"nannies of rank {plan.rank.rank}", {})
    return NannyHost(pid, write_fd, spec, directory)


def send_start(pipe: int, address: str, env: dict[str, str]) -> None:
    """Give the host (on ``pipe``) the scheduler's address and the cluster's TLS settings."""
    send_json(pipe, {"address": address, "env": env})


def _distributed_defaults() -> dict[str, Any]:
    """distributed.yaml, read without importing distributed (which takes ~0.4 s)."""
    spec = importlib.util.find_spec("distributed")
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "distributed.yaml"
    return yaml.safe_load(path.read_text())


# Dask's optional packages (distributed.versions.optional_packages: not imported here, that
# would import distributed before the forkserver starts), preloaded as Dask preloads them.
SHARED_PRELOAD = ("numpy", "pandas", "lz4")


def prepare_workers_environment() -> None:
    """Set what the worker processes must inherit: Dask's ``pre-spawn-environ``
    (OMP_NUM_THREADS=1, ...), before numpy or a GPU runtime loads, and the forkserver as
    Dask's multiprocessing method (in the environment, so that it holds through every
    ``dask.config.refresh()`` after this)."""
    pre_spawn = dask.config.get("distributed.nanny.pre-spawn-environ", default=None)
    if pre_spawn is None:  # distributed not imported yet: its defaults, as it loads them
        pre_spawn = _distributed_defaults()["distributed"]["nanny"]["pre-spawn-environ"]
        pre_spawn.update(dask.config.get("distributed.nanny.pre-spawn-environ", default={}))
    os.environ.update({k: os.environ.get(k, str(v)) for k, v in pre_spawn.items() if v is not None})
    os.environ["DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"] = "forkserver"
    dask.config.refresh()


def start_forkserver(workers: int, directory: Path) -> None:
    """Start the forkserver every worker of this rank is forked from, and multiprocessing's
    resource tracker.

    This process imports what the forkserver preloads (``dask_hpc.running.zygote``: Dask, what a
    worker imports when it starts; ``gc.freeze``), then forks both (``forked_mp``): Dask is
    imported once per rank, not once here and once in a new Python. Measured on 2 cores, one
    worker per rank: a worker rank's processes 1.97-2.28 -> 0.96-1.40 s of CPU when the cluster
    is ready (3 runs each; docs/performance.md, issue 23).

    Dask's optional packages (pandas, ...) are preloaded only for more than one worker, where
    workers share them: a single worker imports them if its tasks use them. Measured on 2
    cores, one worker per rank: 1 rank 2.76 -> 1.91 s, 16 ranks 13.10 -> 10.57 s to connect.
    """
    prepare_workers_environment()
    shared = SHARED_PRELOAD if workers > 1 else ()
    preload = [*shared, "dask_hpc.running.zygote"]
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:  # as multiprocessing's preload: an optional package is missing
            pass
    if not forked_mp.start(directory):  # another Python: multiprocessing's own, a new Python
        multiprocessing.forkserver.set_forkserver_preload(preload)
        with import_path.new_pythons_without_working_directory():
            multiprocessing.forkserver.ensure_running()


def serve(specs: list[ProcessSpec], pipe: int, rank_end: int, directory: Path) -> int:
    """The nanny host's main: start the forkserver at once, then, given the scheduler's
    address on ``pipe``, this rank's workers; run until every one has closed.

    ``rank_end``: the pipe's write end, inherited through the fork; closed here, or the pipe
    would never report the rank's end of it.
    """
    os.close(rank_end)
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the rank, which closes the workers in order
    env = shared_env(specs)
    if specs[0].options["worker_class"] == "dask_cuda":
        # As `dask cuda worker` sets it: no CUDA context before CUDA_VISIBLE_DEVICES is set.
        env["RAPIDS_NO_INITIALIZE"] = "True"
    os.environ.update(env)
    dask.config.refresh()
    start_forkserver(len(specs), directory)
    from . import nannies

    nannies.skip_preload_imports()
    start = read_json(pipe)  # once the rank knows its scheduler (None: it ended first)
    if start is None:
        return EXIT_CLOSED
    os.environ.update(start["env"])  # the cluster's TLS settings
    dask.config.refresh()
    return nannies.run(specs, start["address"])
