"""Start-up of the same cluster under bare srun, Apptainer and Pyxis, side by side (issue 45).

One single-host Slurm (tests/harness/slurm.py) with Pyxis 0.11.1 in its plugstack.conf and
Enroot 4.1.2 on slurmd's PATH (both as tests/setup/enroot.sh builds them), and one site image:
the SIF given, and the squashfs ``dask_hpc.images_enroot`` makes of it (the conversion is timed
too). For each number of workers, ``srun -n N`` runs ``start-cluster cpu N`` on every rank
(one worker each):

  srun       the host's start-cluster (this Python environment), no container
  apptainer  ``apptainer exec SIF start-cluster`` (the image's), as Apptainer sites run it
  pyxis      ``srun --container-image=SQSH`` with the job scripts' Pyxis options
             (``batch.runtimes.PYXIS_OPTIONS``, the image's /etc/environment sourced as
             ``batch.launch``): Enroot unpacks the image per step

Measured per run: from srun's start until COMMAND starts (every worker connected: COMMAND
writes the time), and from then until srun exits (the whole cluster stopped). Median of
``--repeat`` runs; the load average seen is printed with the table (a shared machine's
wall-clock figures are upper bounds).

    python -m benchmarks.runtimes --image dask-hpc-local.sif [--workers 1 4]
        [--repeat 3] [--methods srun apptainer pyxis]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from harness.slurm import SlurmCluster  # noqa: E402

from benchmarks.startup import STAMP, timed  # noqa: E402
from dask_hpc import images_enroot  # noqa: E402
from dask_hpc.batch.launch import PYXIS_ENTRY  # noqa: E402
from dask_hpc.batch.runtimes import PYXIS_OPTIONS  # noqa: E402

CACHE = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
ENROOT = CACHE / "enroot-4.1.2"
METHODS = ("srun", "apptainer", "pyxis")


def cluster_argv(n: int, python: str, tmp: Path, stamp: Path) -> list[str]:
    """``start-cluster cpu N`` on each of the node's N ranks (one worker each), COMMAND
    writing the time it started."""
    return [
        "start-cluster", "cpu", str(n), "--nthreads", "1", "--interface", "lo",
        "--dashboard-address", "127.0.0.1:0", "--local-directory", str(tmp / "local"),
        "--", python, "-c", STAMP, str(stamp),
    ]  # fmt: skip


def method_argv(method: str, n: int, image: Path, sqsh: Path, tmp: Path) -> list[str]:
    """The whole srun command line of ``method`` at ``n`` ranks."""
    stamp = tmp / "stamp"
    srun = ["srun", "-n", str(n), "--kill-on-bad-exit=1"]
    if method == "srun":
        return [*srun, *cluster_argv(n, sys.executable, tmp, stamp)]
    if method == "apptainer":
        return [*srun, "apptainer", "exec", str(image), *cluster_argv(n, "python3", tmp, stamp)]
    pyxis = [o for o in PYXIS_OPTIONS if not o.startswith("--container-workdir")]
    return [
        *srun, f"--container-image={sqsh}", f"--container-mounts={tmp}:{tmp}", *pyxis,
        f"--container-workdir={tmp}", "/bin/sh", "-c", PYXIS_ENTRY, "dask-hpc",
        *cluster_argv(n, "python3", tmp, stamp),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", type=Path, required=True, help="a site SIF with dask-hpc")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    opts = parser.parse_args()
    for need in (ENROOT / "bin" / "enroot", ENROOT / "pyxis" / "spank_pyxis.so", opts.image):
        if not need.exists():
            print(f"benchmarks.runtimes: {need} missing (tests/setup/enroot.sh)", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="dask-hpc-runtimes-"))
    start = time.monotonic()
    sqsh = images_enroot.convert(opts.image.resolve(), tmp / "image.sqsh")
    converted = time.monotonic() - start
    xdg = {k: str(tmp / "xdg" / k.lower()) for k in ("XDG_DATA_HOME", "XDG_CACHE_HOME",
                                                       "XDG_RUNTIME_DIR")}  # fmt: skip
    slurm = SlurmCluster(
        tmp / "slurm", nodes=1, cpus=32,
        plugstack=f"required {ENROOT / 'pyxis' / 'spank_pyxis.so'} runtime_path={tmp / 'pyxis'}",
        daemon_env={"PATH": f"{ENROOT / 'bin'}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    slurm.start()
    env = {
        **os.environ, **slurm.env, **xdg, "PYTHONUNBUFFERED": "1",
        "DASK_HPC__SCHEDULER_DIRECTORY": str(tmp / "s"),
    }  # fmt: skip
    (tmp / "s").mkdir(mode=0o700)
    results: dict[tuple[str, int], tuple[float, float]] = {}
    loads: list[float] = []
    try:
        for n in opts.workers:
            for method in opts.methods:
                runs = []
                for _ in range(opts.repeat):
                    loads.append(os.getloadavg()[0])
                    argv = method_argv(method, n, opts.image.resolve(), sqsh, tmp)
                    runs.append(timed(argv, env, tmp / "stamp"))
                results[method, n] = (
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                )
    finally:
        slurm.stop()
    size = opts.image.stat().st_size / 2**20
    print(f"image {opts.image.name} ({size:.0f} MiB); squashfs made from it in {converted:.2f} s")
    print(f"median of {opts.repeat}; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'workers':>7}  {'method':<9}  {'to ready (s)':>12}  {'stop (s)':>8}  {'x srun':>6}")
    for n in opts.workers:
        base = results.get(("srun", n), (None, None))[0]
        for method in opts.methods:
            ready, stop = results[method, n]
            ratio = f"{ready / base:6.2f}" if base else "     -"
            print(f"{n:>7}  {method:<9}  {ready:>12.2f}  {stop:>8.2f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
