"""Each site's CPU and GPU maps and container binds, as its own guide has them (issue 35).

The expected lists are the sites' published ones: ALCF's get_cpu_bind_aurora (argonne-lcf/
pbs_utils, doc/guide-get_cpu_bind_aurora.md) and "Running Jobs on Aurora" for Aurora; ALCF's
set_affinity_gpu_polaris.sh for Polaris; OLCF's Frontier guide for its srun line. The scripts
run for real in test_site_scripts_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dask_hpc.batch import container
from dask_hpc.batch.cpus import cpu_lists
from dask_hpc.batch.script import JobRequest, render
from dask_hpc.cli import parse
from dask_hpc.errors import UsageError
from dask_hpc.planning.plan import make_plan
from dask_hpc.planning.resources import NodeResources
from dask_hpc.planning.sites import load_site

AURORA = {"cores": 104, "sockets": 2, "reserved": [0, 52]}
# get_cpu_bind_aurora's "Commonly Used Bindings (Physical-Only, Default)"
ALCF_AURORA_LISTS = {
    1: "1-51,53-103",
    6: "1-17:18-34:35-51:53-69:70-86:87-103",
    12: "1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100",
    48: ":".join(
        [f"{c}-{c + 1}" for c in range(1, 49, 2)] + [f"{c}-{c + 1}" for c in range(53, 101, 2)]
    ),
    96: ":".join([str(c) for c in range(1, 49)] + [str(c) for c in range(53, 101)]),
}


@pytest.mark.parametrize("ranks", sorted(ALCF_AURORA_LISTS))
def test_aurora_lists_are_alcfs(ranks: int) -> None:
    assert cpu_lists(ranks, **AURORA) == ALCF_AURORA_LISTS[ranks]


def test_aurora_lists_never_hold_the_reserved_cores_or_cross_a_socket() -> None:
    for ranks in range(1, 205):
        lists = cpu_lists(ranks, **AURORA).split(":")
        assert len(lists) == ranks
        cpus = [[int(c) for c in expand(text)] for text in lists]
        assert not {0, 52, 104, 156} & {c for rank in cpus for c in rank}
        if ranks > 1:  # each rank on one socket: cores 0-51 and threads 104-155 are socket 0
            assert all(len({(c % 104) // 52 for c in rank}) == 1 for rank in cpus), ranks
        flat = [c for rank in cpus for c in rank]
        assert len(flat) == len(set(flat))  # no CPU given twice


def expand(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += range(int(low), int(high or low) + 1)
    return out


def test_the_104_worker_cpu_layout_fits_the_usable_threads() -> None:
    """Before: --depth=2 for 104 ranks asked for 208 threads of the 204 usable. Now 102 ranks
    on a core each, the 51st and 52nd of a socket on the hyperthreads of its first cores."""
    lists = cpu_lists(104, **AURORA).split(":")
    assert lists[50:53] == ["51", "105", "53"] and lists[-1] == "157"
    with pytest.raises(UsageError, match="205 ranks per node do not fit the 204 usable"):
        cpu_lists(205, **AURORA, site="aurora")


def test_aurora_script_binds_its_cpu_workers_with_lists() -> None:
    text = render(
        JobRequest(
            site="aurora",
            nodes=1,
            worker_type="cpu",
            workers_per_node=102,
            account="proj",
            command=["python", "job.py"],
        )
    )
    assert "mpiexec -n 102 --ppn 102 --cpu-bind list:1:2:3:" in text
    assert "--depth" not in text


def test_polaris_ranks_get_their_gpus_in_reverse_order(tmp_path: Path) -> None:
    """set_affinity_gpu_polaris.sh: gpu = num_gpus - 1 - local_rank % num_gpus."""
    node = NodeResources(
        online_cpus=64, usable_cpus=8, memory=2**38, cpus=frozenset(range(8 * 0, 8))
    )
    seen = {}
    for local in range(4):
        env = {
            "PBS_JOBID": "1.pbs",
            "PALS_APID": "ap",
            "PALS_RANKID": str(local),
            "PALS_LOCAL_RANKID": str(local),
            "PALS_NODEID": "0",
            "PMI_SIZE": "4",
            "PMI_LOCAL_SIZE": "4",
            "HOME": str(tmp_path),
        }
        settings = parse(
            [
                "gpu",
                "4",
                "--site",
                "polaris",
                "--local-directory",
                str(tmp_path),
                "--scheduler-file",
                str(tmp_path / "s.json"),
            ]
        )
        plan = make_plan(settings, env=env, node=node, gpu_root=tmp_path)
        (worker,) = [p for p in plan.processes if p.role == "worker"]
        seen[local] = worker.env["CUDA_VISIBLE_DEVICES"]
    assert seen == {0: "3", 1: "2", 2: "1", 3: "0"}


def test_pals_depth_counts_physical_cores() -> None:
    """ALCF's Polaris guide: 4 ranks, --depth=8 (CPUs 0-31 are the cores, 32-63 their
    hyperthreads: a depth of 16 put ranks 2 and 3 on the hyperthreads of ranks 0 and 1)."""
    text = render(JobRequest(site="polaris", nodes=2, account="proj", command=["python", "job.py"]))
    assert "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth apptainer exec --nv " in text


def test_frontier_gpu_ranks_take_the_gcd_of_their_l3_region() -> None:
    gpu = render(JobRequest(site="frontier", nodes=1, command=["python", "job.py"]))
    assert (
        "srun --nodes=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=7 --no-kill "
        "--kill-on-bad-exit=0 --gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm "
    ) in gpu
    cpu = render(
        JobRequest(
            site="frontier",
            nodes=1,
            worker_type="cpu",
            workers_per_node=8,
            command=["python", "job.py"],
        )
    )
    assert "--gpus-per-task" not in cpu and "--gpu-bind" not in cpu


@pytest.mark.parametrize(
    "site, binds",
    [
        ("aurora", []),
        ("polaris", ["/local/scratch"]),
        ("sophia", ["/local/scratch"]),
        ("deepops", ["/sw/dask-hpc"]),
        ("frontier", ["/mnt/bb/$USER"]),
        ("perlmutter", ["$SCRATCH"]),
        ("summit", ["$MEMBERWORK", "/mnt/bb/$USER"]),
        ("thetagpu", ["/local/scratch"]),
        ("generic", []),
    ],
)
def test_each_site_binds_its_directories_outside_apptainers_defaults(site, binds) -> None:
    """$HOME, /tmp and /var/tmp are Apptainer's own binds; the profile's others are bound."""
    assert [path for path, _ in container.site_binds(load_site(site))] == binds


def test_a_site_directory_missing_on_the_node_stops_the_job_in_one_line(
    run_cmd, tmp_path: Path
) -> None:
    """The job checks the site's directories before any rank starts: an unset variable or a
    missing directory is one line and exit status 2, with no apptainer started."""
    image = tmp_path / "dask-hpc-frontier.sif"
    image.write_bytes(b"an image")
    text = render(
        JobRequest(
            site="frontier",
            nodes=1,
            command=["python", "job.py"],
            image=str(image),
            verify_image=False,
        )
    )
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = {"PATH": "/usr/bin:/bin", "USER": "nobody-here", "DASK_HPC__IMAGE_VERIFY": "false"}
    result = run_cmd(["bash", str(script)], env=env, cwd=tmp_path, timeout=30)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.strip() == (
        "dask-hpc: local directory /mnt/bb/$USER of the frontier profile (/mnt/bb/nobody-here)"
        " is not a directory on this node; every rank's container binds it: create it on the "
        "nodes, or run on the site's own nodes"
    )
