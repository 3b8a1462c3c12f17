"""Every site profile loads, is recognised where it can be, and plans a GPU cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from dask_hpc.cli import parse
from dask_hpc.planning.plan import make_plan
from dask_hpc.planning.resources import NodeResources
from dask_hpc.planning.sites import all_sites, detect_site, load_site

SITES = sorted(all_sites())
DETECTED = {
    "summit": ({"LMOD_SYSTEM_NAME": "summit"}, "a01n05"),
    "thetagpu": ({}, "thetagpu11"),
    "sophia": ({"PBS_O_HOST": "sophia-login-01.hsn.cm.sophia.alcf.anl.gov"}, "sophia-gpu-07"),
    "aurora": ({}, "x4102c3s0b0n0"),
    "polaris": ({}, "x3004c0s7b0n0"),
    "perlmutter": ({"NERSC_HOST": "perlmutter"}, "nid001234"),
    "frontier": ({"LMOD_SYSTEM_NAME": "frontier"}, "frontier01234"),
    "elcapitan": ({}, "elcap1027"),
}


def test_the_expected_profiles_ship() -> None:
    assert set(SITES) >= {
        "summit",
        "thetagpu",
        "sophia",
        "aurora",
        "polaris",
        "perlmutter",
        "frontier",
        "elcapitan",
        "deepops",
        "generic",
    }


@pytest.mark.parametrize("name", sorted(DETECTED))
def test_site_is_detected(name: str) -> None:
    env, hostname = DETECTED[name]
    assert detect_site(env, hostname).name == name


def test_sophia_is_pbs_with_open_mpi_and_eight_a100() -> None:
    """The former ThetaGPU nodes: PBS and Open MPI's mpiexec, no longer Cobalt."""
    site = load_site("sophia")
    assert (site.batch_system, site.launcher) == ("pbs", "openmpi")
    assert (site.gpu_vendor, site.gpu_count) == ("nvidia", 8)
    assert site.ssh_hops == ("sophia.alcf.anl.gov",)
    assert site.retired is None
    assert detect_site({}, "sophia-gpu-01").name == "sophia"


def test_retired_sites_stay_and_say_so() -> None:
    assert {s.name for s in all_sites().values() if s.retired} == {"summit", "thetagpu"}


def test_el_capitans_siblings_are_el_capitan() -> None:
    """Tuolumne and RZAdams: the same node (4 MI300A), the same Flux."""
    assert {detect_site({}, h).name for h in ("tuolumne1002", "rzadams1004")} == {"elcapitan"}
    site = load_site("elcapitan")
    assert (site.batch_system, site.launcher, site.gpu_vendor, site.gpu_count) == (
        "flux", "flux", "amd", 4
    )


def test_unknown_machine_is_generic() -> None:
    assert detect_site({}, "my-laptop").name == "generic"


@pytest.mark.parametrize("name", [s for s in SITES if load_site(s).gpu_count])
def test_site_plans_one_worker_per_gpu(name: str, tmp_path: Path) -> None:
    site = load_site(name)
    settings = parse(
        [
            "gpu",
            str(site.gpu_count),
            "--site",
            name,
            "--local-directory",
            str(tmp_path),
            "--scheduler-file",
            str(tmp_path / "s.json"),
        ]
    )
    node = NodeResources(online_cpus=64, usable_cpus=64, memory=2**38)
    plan = make_plan(settings, env={"HOME": str(tmp_path)}, node=node, gpu_root=tmp_path)
    workers = [p for p in plan.processes if p.role == "worker"]
    assert len(workers) == site.gpu_count
    visible = {
        p.env.get("CUDA_VISIBLE_DEVICES")
        or p.env.get("ZE_AFFINITY_MASK")
        or p.env.get("ROCR_VISIBLE_DEVICES")
        for p in workers
    }
    assert visible == {str(i) for i in range(site.gpu_count)}
    assert all(p.options["resources"] == {"GPU": 1} for p in workers)
    spill = "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL" in workers[0].env
    assert spill == (not site.node_local_storage)


@pytest.mark.parametrize("name", SITES)
def test_profile_facts_are_complete(name: str) -> None:
    site = load_site(name)
    assert site.description and site.scheduler_directory
    # A real login path for real sites; none (the tunnel goes to the node) for the others.
    assert bool(site.ssh_hops) == (name not in ("generic", "deepops"))
    assert "LOGIN_NODE" not in site.ssh_hops
    assert site.gpu_tiles >= 1
    if site.gpu_vendor:
        assert site.gpu_vendor in ("nvidia", "intel", "amd")
