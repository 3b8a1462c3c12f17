"""DeepOps GPU jobs see their GPUs: the job script asks Slurm for them (``--gres=gpu:N``, the
count read from ``sinfo``), and a job that does not ask gets none and stops in one line.

On the elastic tests' Slurm, whose nodes have 2 EMULATED GRES GPUs each (32 CPUs): Slurm hands
the job's tasks ``CUDA_VISIBLE_DEVICES`` only when the job asked, as DeepOps' ``Gres=gpu:N``
with ``ConstrainDevices=yes`` does (there the devices themselves are hidden too).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import PROBE, REPO, probe_result

pytestmark = pytest.mark.slurm


def invoke_job(run_cmd, env: dict[str, str], *args: str) -> str:
    argv = [sys.executable, "-m", "invoke", "job", "--site", "deepops", "--nodes", "1", *args]
    argv += ["--python", sys.executable, "--", sys.executable, str(PROBE)]
    result = run_cmd(argv, env=env, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_script_asks_slurm_how_many_gpus_a_node_has(run_cmd, shell_env) -> None:
    """`hpc-cluster script gpu --site deepops`: sinfo says 2 GPUs and 32 CPUs per node."""
    argv = [sys.executable, "-m", "dask_hpc.elastic", "script", "gpu", "--site", "deepops"]
    result = run_cmd(argv, env=shell_env, timeout=120)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=16\n#SBATCH --gres=gpu:2\n" in text
    assert "--cpus-per-task=16 --no-kill" in text and " gpu 2 --join " in text
    one = run_cmd([*argv, "--workers-per-node", "1"], env=shell_env, timeout=120)
    assert "--cpus-per-task=16\n#SBATCH --gres=gpu:1\n" in one.stdout, one.stderr
    three = run_cmd([*argv, "--workers-per-node", "3"], env=shell_env, timeout=120)
    assert three.returncode == 2 and three.stdout == ""
    assert three.stderr.strip() == (
        "hpc-cluster: error: 3 GPUs per node asked, but a deepops node has 2 (sinfo); "
        "ask for fewer workers per node"
    )


@pytest.mark.timeout(400)
def test_a_deepops_gpu_job_gets_one_gpu_per_worker_and_without_gres_none(
    run_cmd, elastic_slurm, cluster_env, tmp_path: Path
) -> None:
    env = {**cluster_env, **elastic_slurm.env}
    script = invoke_job(run_cmd, env, "--walltime", "5")
    assert "#SBATCH --gres=gpu:2\n" in script and "--cpus-per-task=16" in script
    job = elastic_slurm.sbatch(script, env=env, cwd=tmp_path)
    state, code = elastic_slurm.wait_job(job, timeout=240)
    output = elastic_slurm.job_output(job)
    assert (state, code) == ("COMPLETED", 0), output
    workers = probe_result(output)["workers"].values()
    assert sorted(w["env"]["CUDA_VISIBLE_DEVICES"] for w in workers) == ["0", "1"]
    assert all(w["resources"] == {"GPU": 1} for w in workers)

    # The script as it was before (no GPU asked): Slurm gives the tasks no GPU.
    bare = script.replace("#SBATCH --gres=gpu:2\n", "")
    job = elastic_slurm.sbatch(bare, env=env, cwd=tmp_path)
    state, code = elastic_slurm.wait_job(job, timeout=240)
    output = elastic_slurm.job_output(job)
    assert state == "FAILED" and code == 2, output
    assert "gpu workers asked for, but no nvidia GPU was found on this node" in output
