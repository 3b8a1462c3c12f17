"""A job for the tests: connect with a bare Client(), compute, report the cluster as JSON."""

import json
import os
import sys

from distributed import Client

PINNING = (
    "CUDA_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "ZE_FLAT_DEVICE_HIERARCHY",
    "ZE_ENABLE_PCI_ID_DEVICE_ORDER",
    "ROCR_VISIBLE_DEVICES",
    "OMP_PROC_BIND",
)


def worker_view(dask_worker):
    import dask

    worker = dask_worker
    return {
        "env": {k: os.environ[k] for k in PINNING if k in os.environ},
        "pid": os.getpid(),
        "nthreads": worker.state.nthreads,
        "memory_limit": worker.memory_manager.memory_limit,
        "resources": worker.state.total_resources,
        "spill": dask.config.get("distributed.worker.memory.spill"),
        "cpus": sorted(os.sched_getaffinity(0)),
        "local_directory": worker.local_directory,
    }


def _http_address(dask_worker):
    """Where the worker's HTTP routes (/health, /metrics, ...) listen."""
    return dask_worker.http_server.address


def main() -> int:
    client = Client(timeout=30)
    # from the scheduler, not the client's cache (listed.py says why; this file runs alone)
    info = client.sync(client.scheduler.identity, n_workers=-1)["workers"]
    views = client.run(worker_view)
    squares = client.gather(client.map(lambda x: x * x, range(100)))
    result = {
        "address": client.scheduler.address,
        "n_workers": len(info),
        "names": sorted(str(w["name"]) for w in info.values()),
        "workers": {str(info[a]["name"]): v for a, v in views.items()},
        "sum_squares": sum(squares),
        "env_address": os.environ.get("DASK_SCHEDULER_ADDRESS"),
        "dashboard_link": client.dashboard_link,
        "worker_addresses": sorted(info),
        "worker_http": sorted(client.run(_http_address).values()),
        "command_cpus": sorted(os.sched_getaffinity(0)),
        "scheduler_cpus": client.run_on_scheduler(lambda: sorted(os.sched_getaffinity(0))),
    }
    print("PROBE " + json.dumps(result), flush=True)
    client.close()
    return int(sys.argv[1]) if len(sys.argv) > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
