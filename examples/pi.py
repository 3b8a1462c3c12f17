"""Estimate pi by Monte Carlo on a running dask-hpc cluster (CPU or GPU workers).

Run it as the COMMAND of start-cluster, which tells it where the cluster is (DASK_* variables):

    start-cluster cpu 2 -- python examples/pi.py
    mpiexec -n 12 --ppn 6 apptainer exec dask.sif start-cluster gpu 6 -- python examples/pi.py

Each worker draws its share of points in the unit square with whichever array library it has:
dpnp (Intel GPUs), CuPy (NVIDIA/AMD GPUs) or NumPy. Exits 0 when the estimate is within the
tolerance of pi, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time

from distributed import Client

ARRAY_MODULES = ("dpnp", "cupy", "numpy")


def array_module() -> str:
    """The first importable array library: dpnp, then CuPy, then NumPy."""
    for name in ARRAY_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # a GPU library may import but fail without a device
            continue
        return name
    raise RuntimeError("none of dpnp, cupy, numpy is importable")


def count_inside(n: int, seed: int) -> tuple[int, str]:
    """Points out of ``n`` random ones in [0, 1)^2 that fall inside the unit circle."""
    name = array_module()
    xp = importlib.import_module(name)
    rng = xp.random.RandomState(seed) if name == "dpnp" else None
    inside, chunk = 0, 1_000_000
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        if rng is not None:
            x, y = rng.random_sample(size), rng.random_sample(size)
        else:
            if start == 0:
                xp.random.seed(seed)
            x, y = xp.random.random(size), xp.random.random(size)
        inside += int(((x * x + y * y) < 1.0).sum())
    return inside, name


def estimate(client: Client, samples: int) -> tuple[float, list[str]]:
    """Split ``samples`` over the workers, one task each, and combine their counts."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    share, extra = divmod(samples, len(workers))
    futures = [
        client.submit(count_inside, share + (i < extra), 1000 + i, workers=[w], pure=False)
        for i, w in enumerate(workers)
    ]
    results = client.gather(futures)
    inside = sum(count for count, _ in results)
    return 4.0 * inside / samples, sorted({name for _, name in results})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000, help="points in all")
    parser.add_argument("--tolerance", type=float, default=0.01, help="allowed |estimate - pi|")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be positive")

    with Client() as client:  # start-cluster's DASK_* variables say where and how
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        start = time.perf_counter()
        pi, libraries = estimate(client, args.samples)
        seconds = time.perf_counter() - start
    error = abs(pi - math.pi)
    print(f"pi ~= {pi:.6f} (error {error:.2e}) from {args.samples} samples on {workers} "
          f"worker(s) using {', '.join(libraries)} in {seconds:.2f} s")
    return 0 if error <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
