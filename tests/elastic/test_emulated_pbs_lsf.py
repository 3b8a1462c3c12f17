"""HPCCluster on EMULATED PBS Pro (Polaris: qsub/qstat/qdel, PALS mpiexec) and LSF (Summit:
bsub/bjobs/bkill, jsrun), over the test Slurm (tests/harness/batch_emulation.py)."""

from __future__ import annotations

import json
import operator
import os
import re
import subprocess
from pathlib import Path

import pytest
from elastic_support import worker_names

from dask_hpc.errors import UsageError

pytestmark = pytest.mark.slurm

CASES = {
    "pbs": ("polaris", r"^mpiexec -n 2 --ppn 2 --depth=16 --cpu-bind depth \S+ -P -m dask_hpc "
                       r"cpu 2 --join "),
    "lsf": ("summit", r"^jsrun --nrs 2 --rs_per_host 2 --tasks_per_rs 1 --cpu_per_rs 21 "
                      r"--gpu_per_rs 0 --bind rs \S+ -P -m dask_hpc cpu 2 --join "),
}


@pytest.fixture
def login_node(emulator_env, monkeypatch) -> None:
    """This process as a login node of the emulated batch system."""
    for key in ("PATH", "DASK_HPC_EMU_SPOOL"):
        monkeypatch.setenv(key, emulator_env[key])


def ended_well(batch: str, job_id: str, env: dict[str, str]) -> bool:
    if batch == "pbs":
        out = subprocess.run(["qstat", "-x", "-f", "-F", "json", job_id], env=env,
                             capture_output=True, text=True, check=True).stdout
        info = json.loads(out)["Jobs"][job_id]
        return info["job_state"] == "F" and info["Exit_status"] == 0
    out = subprocess.run(["bjobs", "-noheader", "-o", "jobid stat", job_id], env=env,
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1] == "DONE"


@pytest.mark.parametrize("batch", sorted(CASES))
def test_scale_up_and_down_on_emulated(
    batch, login_node, emulator_env, make_cluster, elastic_slurm, tmp_path: Path, wait_for
) -> None:
    site, launch = CASES[batch]
    cluster = make_cluster(
        "cpu",
        workers_per_node=2,
        site=site,
        walltime="00:10:00",
        account="proj" if batch == "pbs" else None,  # ALCF's rule (polaris)
        # PBS gives a job no variable of the submitter's without -V: the script sets them.
        job_env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        worker_args=["--local-directory", str(tmp_path / "local")],
    )
    assert cluster.batch_system == batch
    script = cluster.job_script()
    assert re.search(launch, script, re.M), script
    assert ("#PBS -j oe" in script) == (batch == "pbs")
    cluster.scale(jobs=2)
    client = cluster.get_client()
    client.wait_for_workers(4, timeout=120)
    assert len({n.rsplit("-", 1)[0] for n in worker_names(client)}) == 2
    futures = client.map(operator.add, range(200), range(200))
    assert sum(client.gather(futures)) == 2 * sum(range(200))

    cluster.scale(jobs=1)
    (retired,) = [j for j in cluster.jobs.values() if j.retiring]
    wait_for(lambda: len(worker_names(client)) == 2, 60, what="2 workers left")
    assert sum(client.gather(futures)) == 2 * sum(range(200))
    wait_for(lambda: retired.name not in cluster.jobs, 60, what="the retired job to end")
    assert ended_well(batch, retired.job_id, emulator_env)
    client.close()
    cluster.close()
    assert elastic_slurm.jobs() == []


def test_a_walltime_pbs_refuses_is_one_line_emulated(login_node, make_cluster, elastic_slurm):
    cluster = make_cluster("cpu", workers_per_node=1, site="polaris", walltime="02:00:00",
                           queue="debug", account="proj")
    with pytest.raises(UsageError) as error:
        cluster.scale(jobs=2)
    text = str(error.value)
    assert "\n" not in text
    assert "qsub refused job" in text and "violates queue and/or server resource limits" in text
    assert elastic_slurm.jobs() == []
