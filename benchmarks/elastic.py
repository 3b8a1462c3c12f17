"""Elastic clusters side by side: dask-hpc's HPCCluster and dask-jobqueue 0.9's SLURMCluster on
the same private Slurm (tests/harness: 3 emulated nodes of 16 CPUs), and HPCCluster on a real
Flux (``dask-hpc-flux``: flux-core 0.88, ``flux start --test-size=3``, 3 brokers as 3 nodes of
this host's cores), all with TLS and the scheduler in this process, 2 workers per job
(jobqueue: ``processes=2``). Prints a table:

- scale(jobs=N): seconds from the call until every worker is connected, and the part of it
  after the batch system started the last job (what the cluster itself costs);
- scale down to one job: seconds until the other job's workers are gone, and how many of 400
  results held by the client were computed again (or lost);
- adapt (0 to 3 jobs) under a burst of 120 one-second tasks: seconds to the first new worker,
  to the end of the burst, and from idle back to 0 jobs;
- dask-jobqueue#498: with Dask's #7019 settings (interval 100 ms, wait_count 1, 2 workers per
  job) and 25 one-second tasks (a target of 3 workers), how many jobs were cancelled before any
  of their workers connected, how long the tasks took, and how many failed (KilledWorker);
- walltime (``--walltime``, 3.5 more minutes per cluster): one-minute jobs, 2 jobs kept, a
  computation on persisted data for 3 min 15 s; jobqueue with its documented
  ``--lifetime 40s --lifetime-stagger 5s`` and ``adapt(minimum_jobs=2, maximum_jobs=2)``.

    python benchmarks/elastic.py [--jobs 2] [--repeat 1] [--walltime] [--only dask-hpc ...]

Needs the test infrastructure (tests/setup/install.sh) and ``pip install '.[bench]'``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from batch_views import JobStarts, View, flux_view, killed, slurm_view  # noqa: E402
from harness.flux import FluxInstance  # noqa: E402
from harness.slurm import SlurmCluster  # noqa: E402

WORKERS_PER_JOB = 2
LOOP_TIMEOUT = 180
FLAVORS = ("dask-hpc", "dask-jobqueue", "dask-hpc-flux")
GOALS = {
    "scale_total": "-",
    "scale_after_start": "<= jobqueue's",
    "down": "-",
    "down_recomputed": "0",
    "adapt_first": "<= jobqueue's",
    "adapt_burst": "-",
    "adapt_idle": "-",
    "loop_cancelled": "no loop",
    "wall_done": "yes",
    "wall_fewest": "2",
    "wall_recomputed": "0",
    "wall_killed": "0",
}
LABELS = {
    "scale_total": "scale(jobs=N): all workers connected (s)",
    "scale_after_start": "  of which after the last job started (s)",
    "down": "scale down to 1 job: its workers gone (s)",
    "down_recomputed": "  of 400 held results, computed again / lost",
    "adapt_first": "adapt: burst to the first new worker (s)",
    "adapt_burst": "adapt: 120 one-second tasks done (s)",
    "adapt_idle": "adapt: idle back to 0 jobs (s)",
    "loop_cancelled": "#498: jobs cancelled before connecting / submitted",
    "wall_done": "walltime: 3 min 15 s on 1-minute jobs finished",
    "wall_fewest": "  fewest workers between rounds (of 2)",
    "wall_recomputed": "  keys computed again / lost",
    "wall_killed": "  jobs killed at the walltime / ended",
}


def make(
    flavor: str,
    tmp: Path,
    walltime: str = "00:10:00",
    lifetime: bool = False,
    per_job: int = WORKERS_PER_JOB,
) -> Any:
    """A cluster of ``per_job``-worker jobs, TLS on, the scheduler in this process."""
    if flavor in ("dask-hpc", "dask-hpc-flux"):
        from dask_hpc import HPCCluster

        system = "flux" if flavor == "dask-hpc-flux" else "slurm"
        return HPCCluster("cpu", workers_per_node=per_job, walltime=walltime, directory=tmp,
                          batch_system=system, quiet=True)
    from dask_jobqueue import SLURMCluster

    extra = ["--lifetime", "40s", "--lifetime-stagger", "5s"] if lifetime else []
    return SLURMCluster(
        cores=per_job,
        processes=per_job,
        memory="4GB",
        walltime=walltime,
        security=True,
        shared_temp_directory=str(tmp),
        log_directory=str(tmp / "logs"),
        job_directives_skip=["--mem"],  # the emulated nodes advertise 1 GB
        worker_extra_args=extra,
        scheduler_options={"dashboard_address": "127.0.0.1:0"},
    )


def workers(client: Any) -> int:
    return len(client.sync(client.scheduler.identity, n_workers=-1)["workers"])  # not the cache


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return time.monotonic()


def recomputed(scheduler: Any) -> int:
    """Keys the in-process scheduler computed more than once."""
    done: dict[str, int] = {}
    for key, start, finish, *_ in scheduler.transition_log:
        if start == "processing" and finish == "memory":
            done[str(key)] = done.get(str(key), 0) + 1
    return sum(1 for n in done.values() if n > 1)


def scale_and_down(flavor: str, view: View, tmp: Path, jobs: int) -> dict[str, Any]:
    import operator

    from distributed import wait

    starts = JobStarts(view)
    cluster = make(flavor, tmp)
    client = cluster.get_client()
    try:
        t0 = time.monotonic()
        cluster.scale(jobs=jobs)
        t1 = wait_until(lambda: workers(client) >= jobs * WORKERS_PER_JOB, 300, "workers")
        last = starts.last_start_since(t0) or t0
        futures = client.map(operator.add, range(400), [1] * 400)
        wait(futures)
        t2 = time.monotonic()
        cluster.scale(jobs=1)
        t3 = wait_until(lambda: workers(client) <= WORKERS_PER_JOB, 120, "scale down")
        results = client.gather(futures)
        lost = sum(1 for i, r in enumerate(results) if r != i + 1)
        return {
            "scale_total": t1 - t0,
            "scale_after_start": t1 - last,
            "down": t3 - t2,
            "down_recomputed": f"{recomputed(cluster.scheduler)} / {lost}",
        }
    finally:
        client.close()
        cluster.close()
        starts.stop()


class Joins:
    """The names of the workers that connected (a scheduler plugin)."""

    def __init__(self, scheduler: Any) -> None:
        from distributed.diagnostics.plugin import SchedulerPlugin

        names = self.names = set()

        class Plugin(SchedulerPlugin):
            def add_worker(self, scheduler: Any, worker: str) -> None:
                names.add(str(scheduler.workers[worker].name))

        scheduler.add_plugin(Plugin())


class JobqueueJobs:
    """dask-jobqueue's jobs started and closed, by name (its Job.start and Job.close)."""

    def __init__(self) -> None:
        from dask_jobqueue.core import Job

        self.started: list[str] = []
        self.closed: list[str] = []
        start, close = Job.start, Job.close
        record = self

        async def started(job: Any) -> None:
            await start(job)
            record.started.append(job.name)

        async def closed(job: Any) -> None:
            record.closed.append(job.name)
            await close(job)

        Job.start, Job.close = started, closed  # type: ignore[method-assign]


def early_cancels(flavor: str, cluster: Any, joins: Joins, jobs: Any) -> str:
    """Jobs cancelled before any of their workers connected / jobs submitted."""
    if flavor != "dask-jobqueue":
        every = [*cluster.finished, *cluster.jobs.values()]
        early = sum(1 for j in every if j.cancelled and not j.ever_connected)
        return f"{early} / {sum(p.counter for p in cluster.pools.values())}"
    connected = {name.rsplit("-", 1)[0] for name in joins.names}
    early = sum(1 for name in jobs.closed if name not in connected)
    return f"{early} / {len(jobs.started)}"


def adapt_burst(flavor: str, view: View, tmp: Path) -> dict[str, Any]:
    from distributed import wait

    cluster = make(flavor, tmp)
    client = cluster.get_client()
    try:
        cluster.adapt(minimum_jobs=0, maximum_jobs=3)

        def one_second(x: int) -> int:
            time.sleep(1)
            return x

        t0 = time.monotonic()
        futures = client.map(one_second, range(120))
        t1 = wait_until(lambda: workers(client) > 0, 300, "a first worker")
        wait(futures, timeout=600)
        t2 = time.monotonic()
        del futures
        t3 = wait_until(lambda: workers(client) == 0 and not view.live_jobs(), 300, "0 jobs")
        return {"adapt_first": t1 - t0, "adapt_burst": t2 - t0, "adapt_idle": t3 - t2}
    finally:
        client.close()
        cluster.close()


def start_stop_loop(flavor: str, view: View, tmp: Path) -> dict[str, Any]:
    """distributed#7019's settings (adapt every 100 ms, wait_count 1, 2 workers per job) and a
    load whose target is an odd number of workers (25 tasks of 1 s: 3 workers for Dask)."""
    from distributed import wait

    jobs = JobqueueJobs() if flavor == "dask-jobqueue" else None
    cluster = make(flavor, tmp)
    joins = Joins(cluster.scheduler)
    client = cluster.get_client()
    try:
        cluster.adapt(minimum_jobs=0, maximum_jobs=3, interval="100ms", wait_count=1)

        def one_second(x: int) -> int:
            time.sleep(1)
            return x

        futures = client.map(one_second, range(25))
        t0 = time.monotonic()
        finished = True
        try:
            wait(futures, timeout=LOOP_TIMEOUT)
        except TimeoutError:
            finished = False
        took = time.monotonic() - t0
        failed = sum(1 for f in futures if f.status == "error")  # KilledWorker: killed mid-task
        note = f"{took:.0f} s" if finished else f"not done in {LOOP_TIMEOUT} s"
        note += f", {failed} task(s) failed" if failed else ""
        return {"loop_cancelled": f"{early_cancels(flavor, cluster, joins, jobs)} ({note})"}
    finally:
        client.close()
        cluster.close()


def across_walltimes(flavor: str, view: View, tmp: Path) -> dict[str, Any]:
    import dask.array as da
    import numpy as np
    from distributed import wait

    cluster = make(flavor, tmp, walltime="00:01:00", lifetime=True, per_job=1)
    if flavor != "dask-jobqueue":
        cluster.scale(jobs=2)
    else:
        cluster.adapt(minimum_jobs=2, maximum_jobs=2)
    client = cluster.get_client()
    before = set(view.states())
    done = "no"
    fewest = 2
    try:
        client.wait_for_workers(2, timeout=300)
        x = da.arange(4000, chunks=100).persist()
        wait(x)
        start, rounds = time.monotonic(), 0
        with suppress(Exception):
            while time.monotonic() - start < 195:
                future = client.compute((x + rounds).sum())
                value = future.result(timeout=120)
                assert int(value) == int(np.arange(4000).sum()) + rounds * 4000
                rounds += 1
                fewest = min(fewest, len(cluster.scheduler.workers))
            done = f"yes ({rounds} rounds)"
        if done == "no":
            done = f"no: stalled after {rounds} rounds"
        lost = 0 if done.startswith("yes") else "?"
        return {"wall_done": done, "wall_fewest": fewest,
                "wall_recomputed": f"{recomputed(cluster.scheduler)} / {lost}",
                **killed(view, before)}
    finally:
        client.close()
        cluster.close()


def fmt(values: list[Any]) -> str:
    if not values:
        return "-"
    if all(isinstance(v, float) for v in values):
        if len(values) == 1:
            return f"{values[0]:.1f}"
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
    return ", ".join(str(v) for v in values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="jobs for scale(jobs=N)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--walltime", action="store_true", help="also the 3.5-minute runs")
    parser.add_argument("--only", choices=FLAVORS, nargs="+", help="some of them")
    parser.add_argument("--steps", default="scale,adapt,loop",
                        help="of scale,adapt,loop,walltime (default: all but walltime)")
    args = parser.parse_args()
    flavors = list(args.only or FLAVORS)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p
    )
    results: dict[str, dict[str, list[Any]]] = {f: {} for f in flavors}
    with tempfile.TemporaryDirectory(prefix="dask-hpc-elastic-bench-") as tmpdir:
        slurm = SlurmCluster(Path(tmpdir) / "slurm", nodes=3, cpus=16)
        slurm.start()
        os.environ.update(slurm.env)
        flux = None
        if "dask-hpc-flux" in flavors:
            flux = FluxInstance(Path(tmpdir) / "flux", size=3).start()
            os.environ.update(flux.env)  # FLUX_URI, flux on PATH (the Slurm flavors name theirs)
        views = {f: flux_view(flux) if f == "dask-hpc-flux" else slurm_view(slurm)
                 for f in flavors}
        load = os.getloadavg()[0]
        try:
            chosen = set(args.steps.split(",")) | ({"walltime"} if args.walltime else set())
            every = {
                "scale": lambda f, t: scale_and_down(f, views[f], t, args.jobs),
                "adapt": lambda f, t: adapt_burst(f, views[f], t),
                "loop": lambda f, t: start_stop_loop(f, views[f], t),
                "walltime": lambda f, t: across_walltimes(f, views[f], t),
            }
            steps = [step for name, step in every.items() if name in chosen]
            for _ in range(args.repeat):
                for step in steps:
                    for flavor in flavors:
                        tmp = Path(tempfile.mkdtemp(dir=tmpdir))
                        for key, value in step(flavor, tmp).items():
                            results[flavor].setdefault(key, []).append(value)
                        views[flavor].cancel_all()
        finally:
            slurm.stop()
            if flux:
                flux.stop()
    load = max(load, os.getloadavg()[0])
    print(f"\nElastic clusters on a private Slurm and a real Flux (3 nodes each), {args.jobs} "
          f"jobs of {WORKERS_PER_JOB} workers, TLS on; {args.repeat} run(s), median (min-max); "
          f"load average up to {load:.1f} on {os.cpu_count()} CPUs\n")
    header = ["measure", "goal", *flavors]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key, label in LABELS.items():
        if not any(key in results[f] for f in flavors):
            continue
        cells = [fmt(results[f].get(key, [])) for f in flavors]
        print(f"| {label} | {GOALS[key]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    with suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
