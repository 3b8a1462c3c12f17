"""A hung rank and a busy worker, side by side: dask-hpc's hung-rank check against plain Dask's
``worker-ttl`` (its default, 5 minutes, and 30 s, what a user would set for the same promptness).

Three "ranks" of one single-threaded worker each, on this machine: dask-hpc is
``mpiexec.mpich`` over three emulated nodes (``-disable-auto-cleanup``, the option that keeps
the other ranks) running ``start-cluster cpu 1`` with its defaults (TLS, ``hpc.hung-timeout``
30 s); plain Dask is ``dask scheduler`` and three ``dask worker --nthreads 1`` (each with its
Nanny), Dask's defaults but for the TTL. The same client job (``_job`` below) in both:

- **hang**: 120 tasks of 0.4 s (about 16 s on three workers); once 10 are done, every process
  of worker "2"'s rank (plain Dask: its ``dask worker``, Nanny and worker) is stopped with
  SIGSTOP, a node that hangs with its connections open. Measured: hang -> the worker removed,
  hang -> the result, the tasks the scheduler computed again (processing on the removed worker,
  and results it held), other workers removed, the result right. The stopped processes are
  continued once the job has its result; then, whether they ended by themselves.
- **busy**: worker "2" runs a task that holds its GIL for ``--busy`` s (a C call that keeps it:
  the worker's event loop and heartbeats stop), while the others compute. Measured: whether the
  busy worker was removed (and its task run again or failed), and the task's result.

    python benchmarks/hung.py [--only dask-hpc] [--scenarios hang busy] [--busy 90]

Plain Dask with its default TTL takes 5 to 10 minutes per hang (Dask checks once per TTL).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
TAG = "DASK_HPC_BENCH_HUNG"
SYSTEMS = {  # name: (plain Dask?, its worker-ttl)
    "dask-hpc": (False, None),
    "Dask, worker-ttl 5 min (default)": (True, "300s"),
    "Dask, worker-ttl 30 s": (True, "30s"),
}


# ---------------------------------------------------------------------------- the job (client)


def square(x: int) -> int:
    time.sleep(0.4)
    return x * x


def hold_the_gil(seconds: float) -> str:
    ctypes.PyDLL(None).sleep(int(seconds))  # PyDLL: the call keeps the GIL
    from distributed import get_worker

    return str(get_worker().name)


def job(address: str | None, scenario: str, go: str, out: str, busy: float) -> int:
    from distributed import Client

    client = Client(address) if address else Client()
    client.wait_for_workers(3, timeout=120)
    workers = client.sync(client.scheduler.identity, n_workers=-1)["workers"]  # not the cache
    victim = next(a for a, w in workers.items() if str(w["name"]) == "2")
    names = {a: str(w["name"]) for a, w in workers.items()}
    result: dict = {"error": None}
    if scenario == "hang":
        futures = client.map(square, range(120), pure=False)
        while sum(f.done() for f in futures) < 10:
            time.sleep(0.02)
        Path(go).write_text(str(time.time()))
        try:
            result["value_ok"] = sum(client.gather(futures)) == sum(x * x for x in range(120))
        except Exception as error:  # noqa: BLE001 - reported in the table
            result["error"] = repr(error)[:200]
        result["result_at"] = time.time()
    else:
        # (allowed elsewhere: a worker removed and restarted comes back at a new address)
        task = client.submit(hold_the_gil, busy, workers=[victim], allow_other_workers=True,
                             pure=False)  # fmt: skip
        def running(dask_scheduler) -> bool:  # type: ignore[no-untyped-def]
            return bool(dask_scheduler.workers[victim].processing)

        while not client.run_on_scheduler(running):
            time.sleep(0.05)
        Path(go).write_text(str(time.time()))
        others = [a for a in workers if a != victim]
        small = client.map(square, range(60), workers=others, pure=False)
        try:
            result["busy"] = task.result(timeout=4 * busy + 120)
            result["value_ok"] = sum(client.gather(small)) == sum(x * x for x in range(60))
        except Exception as error:  # noqa: BLE001 - KilledWorker, a timeout: in the table
            result["error"] = repr(error)[:200]
        result["result_at"] = time.time()
    removals = [(t, e) for t, e in client.get_events("all") if e.get("action") == "remove-worker"]
    result["removed"] = [
        {"name": names.get(e["worker"], e["worker"]), "why": e["stimulus_id"].rsplit("-", 1)[0],
         "at": t, "recomputed": len(e["processing-tasks"]) + len(e["lost-computed-tasks"])}
        for t, e in removals
    ]  # fmt: skip
    result["restarts"] = sum(1 for _, e in client.get_events("all")
                             if e.get("action") == "worker-ttl-timed-out")  # fmt: skip
    Path(out + ".tmp").write_text(json.dumps(result))
    os.replace(out + ".tmp", out)
    if scenario == "hang":  # stay until the benchmark has woken the rank and seen it go
        deadline = time.monotonic() + 120
        while not Path(out + ".done").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    client.close()
    return 0


# ---------------------------------------------------------------------------- the benchmark


def wait_for(condition, timeout: float, step: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


def rank_processes(tag: str, name: str) -> list[psutil.Process]:
    """Every process of worker ``name``'s rank: dask-hpc's rank 2 (its environment says so)
    and what it started; plain Dask's ``dask worker --name 2`` and its children."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get(TAG) == tag and (env.get("PMI_RANK") == name
                                        or env.get("BENCH_WORKER") == name):  # fmt: skip
                found.append(proc)
        except psutil.Error:
            continue
    return found


def run_once(system: str, scenario: str, opts: argparse.Namespace, tmp: Path) -> dict:
    plain, ttl = SYSTEMS[system]
    work = Path(tempfile.mkdtemp(dir=tmp))
    go, out = work / "go", work / "out.json"
    tag = work.name
    env = {**os.environ, TAG: tag, "PYTHONUNBUFFERED": "1",
           "DASK_HPC__SCHEDULER_DIRECTORY": str(work / "shared")}  # fmt: skip
    jobv = [sys.executable, __file__, "_job", scenario, str(go), str(out), str(opts.busy)]
    procs: list[subprocess.Popen] = []
    log = open(work / "log", "wb")  # noqa: SIM115 - closed below
    if plain:
        env["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] = ttl
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        address = f"tcp://127.0.0.1:{port}"
        procs.append(subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port",
                                       str(port), "--no-dashboard"], env=env, stderr=log))
        for name in ("0", "1", "2"):
            procs.append(subprocess.Popen(
                ["dask", "worker", address, "--name", name, "--nthreads", "1", "--host",
                 "127.0.0.1", "--no-dashboard"], env={**env, "BENCH_WORKER": name}, stderr=log))
        procs.append(subprocess.Popen([*jobv[:3], address, *jobv[3:]], env=env, stderr=log))
    else:
        launcher = ["mpiexec.mpich", "-launcher", "fork", "-hosts", "node1,node2,node3", "-n",
                    "3", "-ppn", "1", "-disable-auto-cleanup"]
        procs.append(subprocess.Popen(
            [*launcher, "start-cluster", "cpu", "1", "--nthreads", "1", "--interface", "lo",
             "--dashboard-address", "127.0.0.1:0", "--", *jobv[:3], "", *jobv[3:]],
            env=env, stderr=log))  # fmt: skip
    result: dict = {"system": system, "scenario": scenario}
    try:
        started = float(wait_for(lambda: go.exists() and go.read_text(), 180) or 0)
        if not started:
            raise RuntimeError(f"{system} {scenario}: the job never got going")
        stopped: list[psutil.Process] = []
        if scenario == "hang":
            stopped = rank_processes(tag, "2")
            for proc in stopped:
                proc.send_signal(signal.SIGSTOP)
            started = time.time()
        timeout = 4 * opts.busy + 240 if scenario == "busy" else 1300
        if not wait_for(out.exists, timeout, 0.2):
            raise RuntimeError(f"{system} {scenario}: no result in {timeout:g} s")
        result.update(json.loads(out.read_text()))
        result["fault_at"] = started
        if stopped:
            woken = time.monotonic()
            for proc in stopped:
                proc.send_signal(signal.SIGCONT)
            gone = wait_for(lambda: not any(p.is_running() and p.status() != "zombie"
                                            for p in stopped), 60)  # fmt: skip
            result["woken_exit_s"] = time.monotonic() - woken if gone else None
        (work / "out.json.done").touch()
        result["job_exit"] = procs[-1].wait(120)
    finally:
        for proc in procs:  # plain Dask's scheduler and workers (and a launcher left over)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    result["log_tail"] = (work / "log").read_text(errors="replace")[-1500:]
    return result


def row(results: list[dict], label: str, show) -> str:  # type: ignore[no-untyped-def]
    return f"| {label} | " + " | ".join(show(r) for r in results) + " |"


def report(results: list[dict], busy: float) -> None:
    print(f"\nA hung rank and a busy worker, {os.cpu_count()} CPUs, 3 workers of 1 thread, "
          f"load avg {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    for scenario in ("hang", "busy"):
        rs = [r for r in results if r["scenario"] == scenario]
        if not rs:
            continue
        print(f"\n**{scenario}**\n\n| | " + " | ".join(r["system"] for r in rs) + " |")
        print("|---" * (len(rs) + 1) + "|")

        def victim(r: dict) -> list[dict]:
            return [e for e in r["removed"] if e["name"] == "2" and e["at"] is not None
                    and e["at"] >= r["fault_at"] - 1]  # fmt: skip

        def others(r: dict) -> str:
            return str(sum(1 for e in r["removed"] if e["name"] != "2"
                           and e["at"] is not None and e["at"] < r["result_at"]))  # fmt: skip

        if scenario == "hang":
            lines = [
                ("hang -> worker 2 removed (s)", lambda r:
                 f"{victim(r)[0]['at'] - r['fault_at']:.1f}" if victim(r) else "never"),
                ("why (Dask's stimulus)", lambda r: victim(r)[0]["why"] if victim(r) else "–"),
                ("hang -> the result (s)", lambda r: f"{r['result_at'] - r['fault_at']:.1f}"),
                ("tasks computed again (processing there, results held there)",
                 lambda r: str(sum(e["recomputed"] for e in victim(r)))),
                ("healthy workers removed", others),
                ("result right", lambda r: "yes" if r.get("value_ok") else f"NO {r['error']}"),
                ("woken (SIGCONT) -> its processes ended by themselves (s)",
                 lambda r: f"{r['woken_exit_s']:.1f}" if r.get("woken_exit_s") is not None
                 else "no (still running after 60 s)"),
            ]  # fmt: skip
        else:
            lines = [
                (f"busy worker (GIL held {busy:g} s) removed", lambda r: (
                    f"yes, {victim(r)[0]['at'] - r['fault_at']:.0f} s after the task started "
                    f"({len(victim(r))} times)" if victim(r) else "no")),
                ("its task", lambda r: f"result after {r['result_at'] - r['fault_at']:.0f} s"
                 if r.get("busy") else f"failed: {r['error']}"),
                ("healthy workers removed", others),
                ("the others' results right", lambda r: "yes" if r.get("value_ok") else "–"),
            ]  # fmt: skip
        for label, show in lines:
            print(row(rs, label, show))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_job":
        address, scenario, go, out, busy = sys.argv[2:7]
        return job(address or None, scenario, go, out, float(busy))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--scenarios", nargs="*", choices=("hang", "busy"),
                        default=["hang", "busy"])  # fmt: skip
    parser.add_argument("--busy", type=float, default=90.0,
                        help="seconds the busy task holds its worker's GIL")  # fmt: skip
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dask-hpc-bench-hung-"))
    results = []
    for scenario in opts.scenarios:
        for system in opts.only:
            results.append(run_once(system, scenario, opts, tmp))
            print(f"  {system} {scenario}: done, load {os.getloadavg()[0]:.1f}", file=sys.stderr,
                  flush=True)  # fmt: skip
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))
    report(results, opts.busy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
