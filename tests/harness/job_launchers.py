"""EMULATED launchers inside an emulated batch job: HPE PALS ``mpiexec`` (PBS Pro, Aurora) and
IBM ``jsrun`` (LSF, Summit), over ``emulate``'s ranks on real MPICH and Open MPI.

``bin/pals/mpiexec`` and ``bin/lsf/jsrun`` run them through ``batch_emulation.py``, in the job
environment its ``run-job`` made (``PBS_NODEFILE``, ``LSB_DJOB_HOSTFILE``,
``DASK_HPC_EMU_JOBDIR``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.emulate import jsrun_ranks, pals_ranks


def refuse(message: str) -> int:
    """The launcher's one line on stderr, and its exit status 1."""
    sys.stderr.write(message + "\n")
    return 1


def pals_mpiexec(args: Sequence[str]) -> int:
    """EMULATED PALS ``mpiexec -n N --ppn P [--depth D] [--cpu-bind X] CMD...``."""
    items = list(args)
    n = ppn = None
    depth = 1
    cpu_bind = None
    while items and items[0].startswith("-"):
        arg = items.pop(0)
        key, _, value = arg.partition("=")
        if key in ("-n", "--np", "-np", "--ppn", "-ppn", "--depth", "-d", "--cpu-bind", "--env"):
            value = value or items.pop(0)
        if key in ("-n", "--np", "-np"):
            n = int(value)
        elif key in ("--ppn", "-ppn"):
            ppn = int(value)
        elif key in ("--depth", "-d"):
            depth = int(value)
        elif key == "--cpu-bind" and value.startswith("list:"):
            cpu_bind = value
    hosts = unique_lines(os.environ["PBS_NODEFILE"])
    n = n or len(hosts)
    ppn = ppn or -(-n // len(hosts))
    if cpu_bind:
        lists = cpu_bind.removeprefix("list:").split(":")
        if len(lists) < ppn:  # PALS: a list for each rank of a node
            return refuse(f"mpiexec: --cpu-bind list: has {len(lists)} lists for {ppn} ranks")
        cpu_bind = "list:" + ":".join(fold_cpus(c) for c in lists)
    short = [h.split(".")[0] for h in hosts]
    jobdir = Path(os.environ["DASK_HPC_EMU_JOBDIR"])
    env, launcher = pals_ranks(jobdir, short, n, ppn, depth=depth, cpu_bind=cpu_bind)
    os.environ.update(env)
    os.execvp(launcher[0], [*launcher, *items])
    return 1


def fold_cpus(text: str) -> str:
    """A rank's CPU list (``1-8,105-112``) on this host: each CPU modulo the CPUs here (an
    Aurora node has 208, this host a few: EMULATED binding, the same lists' shape)."""
    here = os.cpu_count() or 1
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(c % here for c in range(int(low), int(high or low) + 1))
    return ",".join(str(c) for c in sorted(cpus))


def jsrun(args: Sequence[str]) -> int:
    """EMULATED IBM ``jsrun --nrs N --rs_per_host P --tasks_per_rs 1 --cpu_per_rs C
    --gpu_per_rs G --bind rs CMD...`` (also the short forms -n -r -a -c -g -b)."""
    names = {"-n": "nrs", "--nrs": "nrs", "-r": "rs_per_host", "--rs_per_host": "rs_per_host",
             "-a": "tasks_per_rs", "--tasks_per_rs": "tasks_per_rs", "-c": "cpu_per_rs",
             "--cpu_per_rs": "cpu_per_rs", "-g": "gpu_per_rs", "--gpu_per_rs": "gpu_per_rs",
             "-b": "bind", "--bind": "bind"}  # fmt: skip
    items = list(args)
    got: dict[str, str] = {}
    while items and items[0].startswith("-"):
        arg = items.pop(0)
        if arg == "--":
            break
        key, _, value = arg.partition("=")
        if key not in names:
            return refuse(f"jsrun: unknown option {arg}")
        got[names[key]] = value or items.pop(0)
    hosts = unique_lines(os.environ["LSB_DJOB_HOSTFILE"])[1:]  # the launch node first
    ppn = int(got.get("rs_per_host", 1))
    n = int(got.get("nrs", len(hosts) * ppn))
    env, launcher = jsrun_ranks(
        Path(os.environ["DASK_HPC_EMU_JOBDIR"]),
        hosts,
        n,
        ppn,
        jobid=os.environ["LSB_JOBID"],
        gpus_per_task=int(got.get("gpu_per_rs", 0)),
    )
    os.environ.update(env)
    os.execvp(launcher[0], [*launcher, *items])
    return 1


def unique_lines(path: str) -> list[str]:
    seen: dict[str, None] = {}
    for line in Path(path).read_text().split():
        seen.setdefault(line, None)
    return list(seen)
