"""Plans without running anything: layouts, resources per worker, GPU pinning per site."""

from __future__ import annotations

from pathlib import Path

import pytest

from dask_hpc.cli import parse
from dask_hpc.errors import UsageError
from dask_hpc.planning.plan import Plan, make_plan
from dask_hpc.planning.resources import NodeResources

GiB = 2**30
NODE = NodeResources(online_cpus=208, usable_cpus=208, memory=1024 * GiB)


def plan(
    argv: str,
    env: dict[str, str],
    tmp_path: Path,
    node: NodeResources = NODE,
    gpu_root: Path | None = None,
) -> Plan:
    full = {"DASK_HPC_TEST": "1", **env}
    settings = parse(
        [
            *argv.split(),
            "--local-directory",
            str(tmp_path / "local"),
            "--scheduler-file",
            str(tmp_path / "s.json"),
        ]
    )
    return make_plan(settings, env=full, node=node, gpu_root=gpu_root or tmp_path / "nogpu")


def pals(rank: int, local_rank: int, size: int, ppn: int) -> dict[str, str]:
    return {
        "PBS_JOBID": "1.pbs",
        "PALS_APID": "ap",
        "PALS_RANKID": str(rank),
        "PALS_LOCAL_RANKID": str(local_rank),
        "PMI_RANK": str(rank),
        "PMI_SIZE": str(size),
        "PMI_LOCAL_RANK": str(local_rank),
        "PMI_LOCAL_SIZE": str(ppn),
    }


def workers(p: Plan) -> list[dict]:
    return [proc for proc in p.describe()["processes"] if proc["role"] == "worker"]


def test_local_mode_starts_scheduler_and_all_workers(tmp_path: Path) -> None:
    p = plan("cpu 4", {}, tmp_path)
    d = p.describe()
    assert (d["launcher"], d["layout"], d["nodes"], d["total_workers"]) == ("none", "local", 1, 4)
    assert [x["role"] for x in d["processes"]] == ["scheduler"] + ["worker"] * 4
    assert {w["options"]["nthreads"] for w in workers(p)} == {52}
    assert {w["options"]["memory_limit"] for w in workers(p)} == {256 * GiB}
    assert d["processes"][0]["options"]["host"] == "127.0.0.1"  # local mode: loopback only


def test_aurora_twelve_workers_one_per_tile_flat(tmp_path: Path) -> None:
    for local in range(12):
        p = plan("gpu 12 --site aurora", pals(12 + local, local, 24, 12), tmp_path)
        (w,) = workers(p)
        assert w["env"]["ZE_AFFINITY_MASK"] == str(local)
        assert w["env"]["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"
        assert w["env"]["ZE_ENABLE_PCI_ID_DEVICE_ORDER"] == "1"
        assert w["options"]["resources"] == {"GPU": 1}
        assert w["options"]["nthreads"] == 208 // 12
        assert "--resources" in w["argv"] and "GPU=1" in w["argv"]
    assert p.nodes == 2 and p.total_workers == 24 and not p.runs_scheduler


def test_aurora_six_workers_one_per_gpu_composite_and_no_spilling(tmp_path: Path) -> None:
    p = plan("gpu 6 --site aurora", pals(0, 0, 12, 6), tmp_path)
    assert p.runs_scheduler
    (w,) = workers(p)
    assert w["env"]["ZE_AFFINITY_MASK"] == "0"
    assert w["env"]["ZE_FLAT_DEVICE_HIERARCHY"] == "COMPOSITE"
    assert "ZE_ENABLE_PCI_ID_DEVICE_ORDER" not in w["env"]
    assert w["env"]["DASK_DISTRIBUTED__WORKER__MEMORY__SPILL"] == "False"
    assert w["env"]["DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE"] == "0.95"


def test_aurora_cpu_mode_104_workers_per_node(tmp_path: Path) -> None:
    p = plan("cpu 104 --site aurora", pals(5, 5, 208, 104), tmp_path)
    (w,) = workers(p)
    assert w["options"]["nthreads"] == 2 and "ZE_AFFINITY_MASK" not in w["env"]


def test_aurora_thirteen_gpu_workers_is_too_many(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError,
        match=r"13 gpu workers per node need 13 intel devices, but "
        r"this node has 6 GPUs \(site profile\); start at most 6 gpu workers per "
        r"node \(one per GPU\), or exactly 12 \(one per tile\)",
    ):
        plan("gpu 13 --site aurora", pals(0, 0, 13, 13), tmp_path)


def test_summit_jsrun_g1_keeps_the_launchers_device(tmp_path: Path) -> None:
    env = {
        "LSB_JOBID": "9",
        "JSM_NAMESPACE_RANK": "7",
        "JSM_NAMESPACE_LOCAL_RANK": "1",
        "JSM_NAMESPACE_SIZE": "12",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "6",
        "CUDA_VISIBLE_DEVICES": "3",
    }
    p = plan("gpu 6 --site summit", env, tmp_path)
    (w,) = workers(p)
    assert "CUDA_VISIBLE_DEVICES" not in w["env"]  # kept as jsrun set it: 3
    assert w["env"]["OMP_PROC_BIND"] == "FALSE"


def test_one_rank_per_node_pins_every_worker(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    }
    p = plan("gpu 4 --site perlmutter", env, tmp_path)
    assert p.layout == "workers-per-node" and p.total_workers == 8
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in workers(p)] == ["0", "1", "2", "3"]
    assert [w["name"] for w in workers(p)] == ["1-0", "1-1", "1-2", "1-3"]


def test_slurm_gpus_per_node_visible_list_is_respected(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_STEP_NUM_TASKS": "1",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "CUDA_VISIBLE_DEVICES": "4,5",
    }
    p = plan("gpu 2 --site deepops", env, tmp_path)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in workers(p)] == ["4", "5"]


def test_frontier_pins_gcds_with_rocr(tmp_path: Path) -> None:
    p = plan("gpu 8 --site frontier", {}, tmp_path)
    assert [w["env"]["ROCR_VISIBLE_DEVICES"] for w in workers(p)] == [str(i) for i in range(8)]


def test_gpu_count_probed_from_the_kernel(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for i in range(2):
        (root / f"proc/driver/nvidia/gpus/0000:0{i}:00.0").mkdir(parents=True)
    p = plan("gpu 2", {}, tmp_path, gpu_root=root)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in workers(p)] == ["0", "1"]
    with pytest.raises(
        UsageError,
        match="3 gpu workers per node need 3 nvidia devices, but "
        r"this node has 2 GPUs \(hardware\)",
    ):
        plan("gpu 3", {}, tmp_path, gpu_root=root)


def test_gpu_without_any_gpu_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no GPU was found on this node"):
        plan("gpu 1", {}, tmp_path)


def test_bound_rank_keeps_its_own_cpus(tmp_path: Path) -> None:
    bound = NodeResources(online_cpus=64, usable_cpus=16, memory=256 * GiB)
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "OMPI_MCA_ess_base_jobid": "7",
    }
    (w,) = workers(plan("cpu 4", env, tmp_path, node=bound))
    assert w["options"]["nthreads"] == 16 and w["options"]["memory_limit"] == 64 * GiB


def test_overrides_for_threads_and_memory(tmp_path: Path) -> None:
    p = plan("cpu 2 --nthreads 3 --memory-limit 10GB", {}, tmp_path)
    assert {(w["options"]["nthreads"], w["options"]["memory_limit"]) for w in workers(p)} == {
        (3, 10 * 10**9)
    }
    p = plan("cpu 2 --memory-limit 0.25", {}, tmp_path)
    assert {w["options"]["memory_limit"] for w in workers(p)} == {256 * GiB}


@pytest.mark.parametrize("value", ["lots", "-5GB", "0", "1.5x"])
def test_bad_memory_limit(tmp_path: Path, value: str) -> None:
    with pytest.raises(UsageError, match=f"--memory-limit '{value}' is not a memory size"):
        plan(f"cpu 2 --memory-limit={value}", {}, tmp_path)


def test_layout_mismatch_names_both_numbers(tmp_path: Path) -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
        "OMPI_MCA_ess_base_jobid": "7",
    }
    with pytest.raises(UsageError, match="this node runs 3 ranks but WORKERS_PER_NODE is 2"):
        plan("cpu 2", env, tmp_path)


def test_site_detected_from_environment(tmp_path: Path) -> None:
    assert plan("cpu 1", {"NERSC_HOST": "perlmutter"}, tmp_path).site.name == "perlmutter"
    assert plan("cpu 1", {}, tmp_path).site.name == "generic"


def test_job_scoped_scheduler_file_by_default(tmp_path: Path) -> None:
    env = {**pals(0, 0, 6, 6), "DASK_HPC_TEST": "1"}
    settings = parse(["cpu", "6", "--local-directory", str(tmp_path)])
    import dask.config

    with dask.config.set({"hpc.scheduler-directory": str(tmp_path / "shared")}):
        p = make_plan(settings, env=env, node=NODE)
    assert p.scheduler_file == tmp_path / "shared" / "dask-hpc-1.pbs-ap" / "scheduler.json"


def test_site_from_dask_config_wins_over_detection(tmp_path: Path) -> None:
    """An admin's /etc/dask file (``hpc: {site: deepops}``) names the site; --site still wins."""
    import dask.config

    with dask.config.set({"hpc.site": "deepops"}):
        assert plan("cpu 1", {"NERSC_HOST": "perlmutter"}, tmp_path).site.name == "deepops"
        assert plan("cpu 1 --site generic", {}, tmp_path).site.name == "generic"


def test_timeouts_grow_with_the_expected_worker_count(tmp_path: Path) -> None:
    small = plan("cpu 4", {}, tmp_path)
    large = plan("cpu 104 --site aurora", pals(0, 0, 10_000, 1), tmp_path)  # 1,040,000 workers
    mid = plan("cpu 1", pals(0, 0, 10_000, 1), tmp_path)  # 10,000 ranks of 1 worker
    # Small clusters keep the configured and Dask's defaults.
    assert small.timeout == 300
    assert workers(small)[0]["options"]["death_timeout"] == 60
    assert workers(small)[0]["env"]["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == "30s"
    assert small.processes[0].env["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] == "300s"
    # Every one of them grows with W, for the scheduler and the workers alike.
    for p in (mid, large):
        w = workers(p)[0]
        sched = p.processes[0].env
        assert p.timeout > small.timeout
        assert w["options"]["death_timeout"] > 60
        connect = float(w["env"]["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"].rstrip("s"))
        assert connect > 30
        assert sched["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] == f"{connect:.0f}s"
        assert float(sched["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"].rstrip("s")) > 300
    assert large.timeout > mid.timeout
    # 10,000 workers: rank 0 needs a file descriptor per rank and a few per worker.
    assert mid.open_files >= 10_000 * 4 + 10_000
    assert small.open_files < 2048


def test_explicit_timeouts_and_dask_settings_win(tmp_path: Path) -> None:
    env = {**pals(0, 0, 10_000, 1), "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "7s"}
    p = plan("cpu 1 --timeout 42 --death-timeout 9", env, tmp_path)
    assert p.timeout == 42
    assert workers(p)[0]["options"]["death_timeout"] == 9
    # The user's own Dask setting, in the environment, is left alone.
    assert "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT" not in workers(p)[0]["env"]
    assert "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT" not in p.processes[0].env


def test_oversubscribed_node_slows_idle_workers_profilers(tmp_path: Path) -> None:
    two_cpus = NodeResources(online_cpus=2, usable_cpus=2, memory=24 * GiB)
    w = workers(plan("cpu 104", {}, tmp_path, node=two_cpus))[0]
    assert w["env"]["DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL"] == "520ms"
    assert w["env"]["DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL"] == "10s"
    assert w["env"]["DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL"] == "1000ms"
    assert w["env"]["DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL"] == "1000ms"
    # One worker per CPU or fewer (Aurora: 104 on 208): Dask's own.
    assert (
        "DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL"
        not in workers(plan("cpu 104", {}, tmp_path))[0]["env"]
    )
