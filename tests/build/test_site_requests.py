"""Every site's job scripts ask the batch system for what their workers use: GPUs, CPUs and
memory per worker, from the profile and the pool's settings, overridable; a GPU count that
nothing says is a one-line error, never a silent one (issue 27)."""

from __future__ import annotations

import re
import subprocess

import dask.config
import pytest

from dask_hpc.batch import requests
from dask_hpc.batch.script import JobRequest, render, system_table
from dask_hpc.errors import UsageError
from dask_hpc.planning.sites import all_sites, load_site

# What each site's default job asks per node (2 nodes), gpu workers where it has GPUs.
EXPECTED = {
    "aurora": [
        "#PBS -l select=2",
        "mpiexec -n 12 --ppn 6 --cpu-bind list:1-17:18-34:35-51:53-69:70-86:87-103 ",
    ],
    "polaris": ["#PBS -l select=2", "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth "],
    "sophia": ["#PBS -l select=2", "--map-by ppr:8:node:pe=16"],
    "perlmutter": ["--ntasks-per-node=4", "--cpus-per-task=32", "--gpus-per-node=4"],
    "frontier": [
        "--ntasks-per-node=8",
        "--cpus-per-task=7",
        "--gpus-per-node=8",
        " --gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm ",
    ],
    "summit": ["#BSUB -nnodes 2", "--cpu_per_rs 7 --gpu_per_rs 1"],
    "thetagpu": ["#COBALT -n 2", "--map-by ppr:8:node:pe=16"],
    # Flux: a slot per rank; each task its own cores (one MI300A's 21 of 24) and GPU
    "elcapitan": [
        "#FLUX: --nodes=2",
        "#FLUX: --nslots=8",
        "#FLUX: --cores-per-slot=21",
        "#FLUX: --gpus-per-slot=1",
        "#FLUX: --exclusive",
        "flux run --nodes=2 --ntasks=8 --cores-per-task=21 --gpus-per-task=1 "
        "-o cpu-affinity=per-task -o gpu-affinity=per-task -o exit-timeout=none",
    ],
}


def script(site: str, **kw: object) -> str:
    kw.setdefault("nodes", 2)
    profile = load_site(site)
    if profile.account_required:  # ALCF's: a job without one is refused (test_site_rules.py)
        kw.setdefault("account", "proj")
    if profile.default_queue:  # NERSC's debug QOS holds no 1-hour job
        kw.setdefault("queue", "regular")
    return render(JobRequest(site=site, command=["python", "job.py"], **kw))  # type: ignore[arg-type]


def header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#") and " " in line[:8]]


@pytest.mark.parametrize("site", sorted(EXPECTED))
def test_each_site_asks_for_what_its_gpu_workers_use(site: str) -> None:
    text = script(site)
    for piece in EXPECTED[site]:
        assert piece in text, text
    assert "--cpus-per-task=1 " not in text  # a GPU worker gets its GPU's share of the CPUs


@pytest.mark.parametrize("site", ["aurora", "polaris", "sophia", "summit"])
def test_whole_node_sites_ask_for_nodes_only(site: str) -> None:
    """Where a node is always the job's whole, no per-node resource is asked (the launcher
    still binds each rank to its share)."""
    lines = header(script(site, memory_per_worker="8GB"))
    assert not any(re.search(r"ncpus|ngpus|mpiprocs|mem=|-gpu |span\[", line) for line in lines)


def test_cpu_jobs_ask_for_no_gpu() -> None:
    for site in ("perlmutter", "frontier", "deepops"):
        text = script(site, worker_type="cpu", workers_per_node=4)
        assert "gpu" not in " ".join(header(text)).replace("--constraint=gpu", ""), text


def test_deepops_gpu_job_asks_for_its_gpus_and_their_cpus() -> None:
    """The issue's case: 8 GPU workers per node on 8-GPU, 128-CPU DeepOps nodes."""
    with dask.config.set({"hpc.node-gpus": 8, "hpc.node-cpus": 128}):
        text = script("deepops", workers_per_node=8)
    assert "#SBATCH --gres=gpu:8" in text and "#SBATCH --cpus-per-task=16" in text
    assert "srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=16 " in text
    with dask.config.set({"hpc.node-gpus": 8, "hpc.node-cpus": 128}):
        half = script("deepops", workers_per_node=4)  # half the GPUs: half the CPUs
    assert "--gres=gpu:4" in half and "--cpus-per-task=16" in half


def test_deepops_gpu_count_unknown_is_one_line_naming_the_fix(monkeypatch) -> None:
    which = requests.shutil.which  # sinfo missing, not PATH: the leak check runs squeue after
    monkeypatch.setattr(requests.shutil, "which", lambda n: None if n == "sinfo" else which(n))
    with pytest.raises(UsageError) as error:
        script("deepops")
    text = str(error.value)
    assert "\n" not in text
    assert "how many GPUs and CPUs a deepops node has is not known (sinfo not found" in text
    assert (
        "give --gpus-per-node and --cpus-per-worker (gpus_per_node=, cpus_per_worker=), "
        "or set hpc.node-gpus" in text
    )


def test_deepops_gpus_and_cpus_given_ask_nobody(monkeypatch) -> None:
    """What the one-line error says to give is enough: one worker per GPU asked, no sinfo."""
    which = requests.shutil.which
    monkeypatch.setattr(requests.shutil, "which", lambda n: None if n == "sinfo" else which(n))
    text = script("deepops", gpus_per_node=4, cpus_per_worker=8)
    assert "--gres=gpu:4" in text and "--ntasks-per-node=4" in text
    assert "--cpus-per-task=8" in text


def test_more_gpus_than_a_node_has_is_refused() -> None:
    with pytest.raises(UsageError, match="8 GPUs per node asked, but a perlmutter node has 4"):
        script("perlmutter", gpus_per_node=8)


def test_threads_and_memory_of_the_workers_become_the_request() -> None:
    """`--worker-arg=--nthreads --worker-arg=4` asks for 4 CPUs per worker (it wrote 1)."""
    text = script(
        "generic",
        batch_system="slurm",
        workers_per_node=2,
        cluster_args=["--nthreads", "4", "--memory-limit", "6GB"],
    )
    assert "--cpus-per-task=4" in text and "--mem=11445M" in text
    req = script(
        "generic",
        batch_system="slurm",
        workers_per_node=2,
        cpus_per_worker=3,
        memory_per_worker="2GiB",
    )
    assert "--cpus-per-task=3" in req and "--mem=4096M" in req
    assert "cpu 2 --nthreads 3 --memory-limit 2GiB -- python job.py" in req


def test_settings_that_disagree_with_the_worker_args_are_refused() -> None:
    with pytest.raises(UsageError, match="4 CPUs per worker, but the workers' --nthreads says 2"):
        script("generic", batch_system="slurm", cpus_per_worker=4, cluster_args=["--nthreads=2"])
    with pytest.raises(UsageError, match="--memory-limit says 1GB"):
        script(
            "generic",
            batch_system="pbs",
            memory_per_worker="2GB",
            cluster_args=["--memory-limit", "1GB"],
        )
    with pytest.raises(UsageError, match="--nthreads '0' is not a positive integer"):
        script("generic", batch_system="slurm", cluster_args=["--nthreads", "0"])
    with pytest.raises(UsageError, match="'lots' is not a memory size"):
        script("generic", batch_system="pbs", memory_per_worker="lots")


@pytest.mark.parametrize(
    "system, expected",
    [
        (
            "slurm",
            [
                "--nodes=2",
                "--ntasks-per-node=4",
                "--cpus-per-task=8",
                "--gres=gpu:4",
                "--mem=61036M",
            ],
        ),
        ("pbs", ["-l select=2:mpiprocs=4:ncpus=32:ngpus=4:mem=61036mb"]),
        (
            "lsf",
            [
                "-n 8",
                '-R "span[ptile=4]"',
                '-R "affinity[core(8)]"',
                '-gpu "num=4"',
                '-R "rusage[mem=15259MB]"',
            ],
        ),
    ],
)
def test_a_plain_cluster_asks_for_everything(system: str, expected: list[str]) -> None:
    text = script(
        "generic",
        batch_system=system,
        worker_type="gpu",
        workers_per_node=4,
        cpus_per_worker=8,
        memory_per_worker="16GB",
    )
    lines = header(text)
    for piece in expected:
        assert any(piece in line for line in lines), (piece, lines)
    assert "start-cluster gpu 4 --nthreads 8 --memory-limit 16GB" in text


@pytest.mark.parametrize("site", sorted(all_sites()))
def test_every_site_renders_both_kinds_with_valid_requests(site: str) -> None:
    profile = load_site(site)
    system = profile.batch_system if profile.batch_system != "none" else "slurm"
    with dask.config.set({"hpc.node-gpus": 4, "hpc.node-cpus": 64}):
        for kind in ("cpu", "gpu") if profile.gpu_vendor else ("cpu",):
            text = script(site, batch_system=system, worker_type=kind)
            ok = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
            assert ok.returncode == 0, ok.stderr
            assert re.search(r"(--nodes=2|select=2|-nnodes 2|-n 2\b|-n \d+)", text), text


# ---------------------------------------------------------------- asking Slurm (sinfo)
def fake_sinfo(stdout: str, code: int = 0):
    def run(argv):
        run.argv = list(argv)  # type: ignore[attr-defined]
        return subprocess.CompletedProcess(argv, code, stdout, "sinfo: error: boom\n")

    return run


def test_sinfo_gres_is_read_for_the_default_partition() -> None:
    row = system_table("slurm")
    out = "batch* 128 gpu:a100:8(S:0-1)\nbatch* 64 (null)\nbig 256 gpu:4,mps:400\n"
    run = fake_sinfo(out)
    assert requests.query_nodes(row, None, run) == [(128, 8), (64, 0)]
    assert requests.query_nodes(row, "big", fake_sinfo("big 256 gpu:4,mps:400\n")) == [(256, 4)]
    facts = requests.node_facts(load_site("deepops"), row, None, None, run)
    assert (facts.cpus, facts.gpus, facts.source) == (128, 8, "sinfo")


def test_nodes_with_different_gpu_counts_are_not_guessed() -> None:
    row = system_table("slurm")
    run = fake_sinfo("gpu* 64 gpu:4\ngpu* 128 gpu:8\n")
    with pytest.raises(UsageError, match="nodes of the default partition have 4 or 8 GPUs; say"):
        requests.node_facts(load_site("deepops"), row, None, None, run)
    facts = requests.node_facts(load_site("deepops"), row, None, 8, run)  # asked: 8-GPU nodes
    assert (facts.cpus, facts.gpus) == (128, 8)
    with pytest.raises(UsageError, match="sinfo failed: sinfo: error: boom"):
        requests.node_facts(load_site("deepops"), row, "gpu", None, fake_sinfo("", 1))
