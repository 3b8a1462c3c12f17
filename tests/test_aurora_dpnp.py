"""examples/pi.py on dpnp on a real SYCL device, through start-cluster: locally, and under an
EMULATED PALS mpiexec (Aurora) whose workers each get their own ZE_AFFINITY_MASK.

The SYCL device is Intel's OpenCL CPU runtime (the intel-opencl-rt wheel) on this machine's CPU:
there is no Intel GPU here, so the Level Zero mask pins nothing; what is checked is that every
worker sees its rank's mask and computes with dpnp on the SYCL device. tests/setup/dpnp.sh
installs dpnp, dpctl and the runtime wheels into a venv of their own (``DPNP_VENV``).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from harness.emulate import emulated_pals
from support import REPO

CACHE = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
DPNP_VENV = CACHE / "dpnp-venv"
PI = REPO / "examples" / "pi.py"
DEVICE = "opencl:cpu:0"  # the one SYCL device here: Intel's OpenCL runtime on the host CPU
WORKER_LINE = re.compile(r"^worker (\S+): (\w+) on (\S+) \((.*)\), (.*)$", re.M)
PI_LINE = re.compile(r"^pi ~= ([0-9.]+) \(error .*\) from (\d+) samples on (\d+) worker", re.M)


@pytest.fixture
def dpnp_env(cluster_env: dict[str, str]) -> dict[str, str]:
    """``cluster_env`` with the dpnp venv first on PATH and its OpenCL CPU runtime as the ICD."""
    assert (DPNP_VENV / "bin" / "start-cluster").exists(), (
        f"{DPNP_VENV} has no dpnp/start-cluster: run tests/setup/dpnp.sh"
    )
    env = dict(cluster_env)
    env["PATH"] = f"{DPNP_VENV / 'bin'}{os.pathsep}{env['PATH']}"
    # The wheel's .icd file names conda's placeholder prefix: name the runtime directly.
    env["OCL_ICD_FILENAMES"] = str(DPNP_VENV / "lib" / "libintelocl.so")
    # ONEAPI_DEVICE_SELECTOR=opencl:* fails with these wheels (libOpenCL.so.1 cannot find
    # libsvml.so, see docs/sites.md); the default selector finds the one device.
    env.pop("ONEAPI_DEVICE_SELECTOR", None)
    return env


def pi_run(stdout: str) -> tuple[float, dict[str, tuple[str, str, str, dict[str, str]]]]:
    """pi and, per worker name, (library, device, device name, device variables) from pi.py."""
    match = PI_LINE.search(stdout)
    assert match, f"no pi line in:\n{stdout}"
    workers = {}
    for name, library, device, device_name, env in WORKER_LINE.findall(stdout):
        variables = dict(kv.split("=", 1) for kv in env.split()) if "=" in env else {}
        workers[name] = (library, device, device_name, variables)
    assert len(workers) == int(match.group(3)), stdout
    return float(match.group(1)), workers


def test_setup_pins_what_the_aurora_extra_pins() -> None:
    extra = re.search(r"^aurora = (\[.*\])$", (REPO / "pyproject.toml").read_text(), re.M)
    assert extra, "pyproject.toml has no aurora extra"
    pins = json.loads(extra.group(1))
    script = (REPO / "tests" / "setup" / "dpnp.sh").read_text()
    assert pins == ["dpnp==0.20.0", "dpctl==0.22.1"]
    assert all(re.search(rf"(^|\s){re.escape(p)}(\s|$)", script, re.M) for p in pins), script


def test_dpctl_finds_the_opencl_cpu_device(run_cmd, dpnp_env) -> None:
    code = (
        "import json, dpctl, dpnp\n"
        "d = dpnp.ones(4).sycl_device\n"
        "print(json.dumps({'devices': [x.filter_string for x in dpctl.get_devices()],\n"
        "  'dpnp': [d.filter_string, d.backend.name, d.device_type.name, d.name],\n"
        "  'versions': [dpnp.__version__, dpctl.__version__]}))"
    )
    result = run_cmd([str(DPNP_VENV / "bin" / "python"), "-c", code], env=dpnp_env, timeout=60)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["devices"] == [DEVICE]
    assert out["dpnp"][:3] == [DEVICE, "opencl", "cpu"]
    assert out["versions"] == ["0.20.0", "0.22.1"]


def test_start_cluster_cpu_2_runs_pi_with_dpnp(run_cmd, dpnp_env, tmp_path: Path) -> None:
    """start-cluster cpu 2 -- python examples/pi.py: both workers compute with dpnp on SYCL."""
    result = run_cmd(
        ["start-cluster", "cpu", "2", "--local-directory", str(tmp_path / "local"),
         "--", "python", str(PI), "--library", "dpnp", "--show-workers"],
        env=dpnp_env,
        timeout=180,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "Dask cluster ready: 2 cpu workers on 1 node(s)" in result.stderr
    pi, workers = pi_run(result.stdout)
    assert abs(pi - math.pi) < 0.01
    assert set(workers) == {"0-0", "0-1"}
    assert {w[:2] for w in workers.values()} == {("dpnp", DEVICE)}
    assert all("ZE_AFFINITY_MASK" not in w[3] for w in workers.values())  # cpu workers


@pytest.mark.mpi
def test_emulated_pals_aurora_dpnp_affinity_mask_per_rank(
    run_cmd, dpnp_env, tmp_path: Path
) -> None:
    """EMULATED PALS mpiexec -n 4 --ppn 2 on two Aurora nodes, start-cluster gpu 2: one worker
    per rank, ZE_AFFINITY_MASK = PALS_LOCAL_RANKID, dpnp on the SYCL device in every worker."""
    launcher = emulated_pals(tmp_path, nodes=2, ppn=2)
    result = run_cmd(
        [*launcher, str(DPNP_VENV / "bin" / "start-cluster"), "gpu", "2", "--site", "aurora",
         "--interface", "lo", "--local-directory", str(tmp_path / "local"),
         "--", "python", str(PI), "--library", "dpnp", "--show-workers"],
        env=dpnp_env,
        timeout=240,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert result.stderr.count("Dask cluster ready") == 1  # rank 0 only
    pi, workers = pi_run(result.stdout)
    assert abs(pi - math.pi) < 0.01
    masks = {name: w[3].get("ZE_AFFINITY_MASK") for name, w in workers.items()}
    assert masks == {"0": "0", "1": "1", "2": "0", "3": "1"}
    assert {w[3].get("ZE_FLAT_DEVICE_HIERARCHY") for w in workers.values()} == {"COMPOSITE"}
    assert {w[:2] for w in workers.values()} == {("dpnp", DEVICE)}
