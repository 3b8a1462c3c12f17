"""Estimate pi by Monte Carlo on a running dask-hpc cluster (CPU or GPU workers).

Run it as the COMMAND of start-cluster, which tells it where the cluster is (DASK_* variables):

    start-cluster cpu 2 -- python examples/pi.py
    mpiexec -n 12 --ppn 6 apptainer exec dask.sif start-cluster gpu 6 -- python examples/pi.py

Each worker draws its share of points in the unit square with whichever array library works
there: dpnp (Intel GPUs, or any SYCL device), CuPy (NVIDIA/AMD GPUs) or NumPy; ``--library``
insists on one. ``--show-workers`` prints, per worker, the library, the device it computed on and
the device-pinning variables it saw (``ZE_AFFINITY_MASK`` on Aurora). Exits 0 when the estimate
is within the tolerance of pi, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
from types import ModuleType
from typing import Any

from distributed import Client

ARRAY_MODULES = ("dpnp", "cupy", "numpy")
DEVICE_VARIABLES = (
    "ZE_AFFINITY_MASK",
    "ZE_FLAT_DEVICE_HIERARCHY",
    "ONEAPI_DEVICE_SELECTOR",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


def array_module(choice: str = "auto") -> ModuleType:
    """``choice``, or the first of dpnp, CuPy, NumPy that imports and computes on a device.

    dpnp and CuPy import without a device and fail only when used, hence the small sum.
    """
    for name in ARRAY_MODULES if choice == "auto" else (choice,):
        try:
            xp = importlib.import_module(name)
            int(xp.asarray([1, 2]).sum())
        except Exception:
            if choice != "auto":
                raise  # the one asked for must work: say why it does not
            continue
        return xp
    raise RuntimeError("none of dpnp, cupy, numpy can compute here")


def device_of(xp: ModuleType, array: Any) -> str:
    """Where ``array`` lives: a SYCL filter string and name, a CUDA device, or the host."""
    if xp.__name__ == "dpnp":
        device = array.sycl_device
        return f"{device.filter_string} ({device.name})"
    if xp.__name__ == "cupy":
        return f"cuda:{xp.cuda.Device().id}"
    return "host"


def count_inside(n: int, seed: int, library: str = "auto") -> dict[str, Any]:
    """Points out of ``n`` random ones in [0, 1)^2 inside the unit circle, and where drawn."""
    xp = array_module(library)
    name = xp.__name__
    rng = xp.random.RandomState(seed) if name == "dpnp" else None
    inside, chunk, device = 0, 1_000_000, ""
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        if rng is not None:
            x, y = rng.random_sample(size), rng.random_sample(size)
        else:
            if start == 0:
                xp.random.seed(seed)
            x, y = xp.random.random(size), xp.random.random(size)
        inside += int(((x * x + y * y) < 1.0).sum())
        device = device or device_of(xp, x)
    env = {k: os.environ[k] for k in DEVICE_VARIABLES if k in os.environ}
    return {"inside": inside, "library": name, "device": device, "env": env}


def estimate(client: Client, samples: int, library: str = "auto") -> tuple[float, dict[str, dict]]:
    """Split ``samples`` over the workers, one task each; pi and each worker's report by name."""
    # From the scheduler itself: on a synchronous client scheduler_info() returns a cache that
    # the client's own periodic poll (no workers asked) may have emptied in between.
    workers = client.sync(client.scheduler.identity, n_workers=-1)["workers"]
    addresses = sorted(workers)
    share, extra = divmod(samples, len(addresses))
    futures = [
        client.submit(count_inside, share + (i < extra), 1000 + i, library, workers=[w], pure=False)
        for i, w in enumerate(addresses)
    ]
    results = client.gather(futures)
    inside = sum(r["inside"] for r in results)
    reports = {str(workers[w]["name"]): r for w, r in zip(addresses, results, strict=True)}
    return 4.0 * inside / samples, reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000, help="points in all")
    parser.add_argument("--tolerance", type=float, default=0.01, help="allowed |estimate - pi|")
    parser.add_argument("--library", choices=("auto", *ARRAY_MODULES), default="auto",
                        help="array library every worker must use (default: the first that works)")
    parser.add_argument("--runs", type=int, default=1,
                        help="estimate this many times (the first run includes warm-up)")
    parser.add_argument("--show-workers", action="store_true",
                        help="print each worker's library, device and device variables")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be positive")
    if args.runs < 1:
        parser.error("--runs must be positive")

    worst = 0.0
    with Client() as client:  # start-cluster's DASK_* variables say where and how
        for run in range(args.runs):
            start = time.perf_counter()
            pi, reports = estimate(client, args.samples, args.library)
            seconds = time.perf_counter() - start
            if args.show_workers and run == 0:
                for name in sorted(reports):
                    r = reports[name]
                    env = " ".join(f"{k}={v}" for k, v in sorted(r["env"].items()))
                    print(f"worker {name}: {r['library']} on {r['device']}, "
                          f"{env or 'no device variables'}")
            error = abs(pi - math.pi)
            worst = max(worst, error)
            used = sorted({f"{r['library']} on {r['device']}" for r in reports.values()})
            print(f"pi ~= {pi:.6f} (error {error:.2e}) from {args.samples} samples on "
                  f"{len(reports)} worker(s) using {', '.join(used)} in {seconds:.2f} s",
                  flush=True)
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
