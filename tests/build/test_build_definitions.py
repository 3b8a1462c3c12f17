"""The committed per-site definitions: generated from one template, valid, and right per vendor."""

from __future__ import annotations

import re

import pytest
from build_support import REPO

from dask_hpc_deploy.build import build_args
from dask_hpc_deploy.definitions import render, spack_pins
from dask_hpc_deploy.targets import all_targets, load_target

SITES = ["aurora", "deepops", "frontier", "perlmutter", "polaris", "sophia", "summit", "thetagpu"]


def stages(text: str) -> list[dict[str, str]]:
    """Per stage, its sections (``"files from build"`` -> body). Apptainer checks the grammar
    itself when it builds (tests/build/test_build_image.py builds local.def for real)."""
    result: list[dict[str, str]] = []
    section = None
    for line in text.splitlines():
        if line.startswith("Bootstrap:"):
            result.append({})
            section = None
        elif line.startswith("%"):
            section = line[1:].strip()
            result[-1][section] = ""
        elif section is not None:
            result[-1][section] += line + "\n"
        elif line.startswith("Stage:"):
            result[-1]["stage"] = line.split(":", 1)[1].strip()
    return result


def definition(name: str) -> str:
    return (REPO / "containers" / f"{name}.def").read_text()


def test_every_site_and_local_has_a_definition() -> None:
    assert sorted(all_targets()) == sorted([*SITES, "local"])
    assert sorted(p.stem for p in (REPO / "containers").glob("*.def")) == sorted(all_targets())


@pytest.mark.parametrize("name", [*SITES, "local"])
def test_definition_is_generated_and_has_our_sections(name: str) -> None:
    target = load_target(name)
    text = definition(name)
    assert text == render(target), "run: invoke definitions"
    build, runtime = stages(text)
    assert (build["stage"], runtime["stage"]) == ("build", "runtime")
    assert "files from build" in runtime
    assert 'exec start-cluster "$@"' in runtime["runscript"]
    assert "start-cluster cpu 1" in runtime["test"]
    assert "import dask, distributed, dask_hpc" in runtime["test"]
    assert "export PYTHONNOUSERSITE=1" in runtime["environment"]
    for var in (
        "CUDA_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK",
        "ROCR_VISIBLE_DEVICES",
        "PMI_",
        "PALS_",
        "SLURM_",
        "OMPI_",
    ):
        assert var not in runtime["environment"], f"{var} must never be set in %environment"
    labels = runtime["labels"]
    assert f"org.dask-hpc.site {name}" in labels
    assert "org.dask-hpc.gpu-runtime " in labels and "org.dask-hpc.version " in labels


@pytest.mark.parametrize("name", SITES)
def test_site_images_build_from_their_spack_environment(name: str) -> None:
    text = definition(name)
    assert (REPO / "spack" / "envs" / name / "spack.yaml").is_file()
    assert f"env=/opt/dask-hpc/spack/envs/{name}" in text
    assert "spack /opt/dask-hpc/spack" in text  # the whole tree: includes are relative
    pins = spack_pins()
    assert f"spack_version={pins['spack_version']}" in text
    # the builtin packages at the one commit the environments were checked with
    assert f"spack_packages={pins['spack_packages']}" in text
    assert (
        'fetch --quiet --depth 1 https://github.com/spack/spack-packages "{{ spack_packages }}"'
        in text
    )
    assert "builtin: /opt/spack-packages/repos/spack_repo/builtin" in text


@pytest.mark.parametrize("name", ["deepops", "perlmutter", "polaris", "sophia", "thetagpu"])
def test_nvidia_x86_sites_use_cuda_bases(name: str) -> None:
    text = definition(name)
    assert re.search(r"base_image=nvidia/cuda:12\.\d+\.\d+-devel-ubuntu", text)
    assert re.search(r"runtime_image=nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu", text)
    assert "find_spec('cupy')" in text and "find_spec('dask_cuda')" in text
    assert "apptainer exec --nv IMAGE" in text


def test_summit_is_ppc64le_with_the_last_ppc64le_cuda() -> None:
    text = definition("summit")
    assert "org.dask-hpc.arch ppc64le" in text
    assert "base_image=nvidia/cuda:12.4.1-devel-ubi8" in text
    assert "dnf install -y" in text and "apt-get" not in text
    assert "jsrun --nrs 12 --rs_per_host 6" in text


def test_aurora_has_level_zero_and_dpnp_with_one_sycl_runtime() -> None:
    """No oneAPI image underneath (its SYCL runtime would be a second one, tests/spack/
    test_sycl_runtime.py): Ubuntu 24.04 with the Level Zero loader and Intel's compute runtime,
    dpnp and its runtime wheels from pypi.txt."""
    text = definition("aurora")
    assert "base_image=ubuntu:24.04" in text and "runtime_image=ubuntu:24.04" in text
    assert "oneapi-basekit" not in text and "oneapi-runtime" not in text
    assert "apt-get install -y -q --no-install-recommends libze1 libze-intel-gpu1" in text
    assert "find_spec('dpnp')" in text and "libze_loader.so.1" in text
    assert "--nv" not in text and "--rocm" not in text
    # 51 usable cores a socket, 3 ranks each: blocks of 17, never cores 0 and 52 (ALCF's lists)
    assert (
        "mpiexec -n 12 --ppn 6 --cpu-bind list:1-17:18-34:35-51:53-69:70-86:87-103 apptainer "
        "exec IMAGE start-cluster gpu 6" in text
    )


def test_frontier_is_rocm() -> None:
    text = definition("frontier")
    assert "base_image=rocm/dev-ubuntu-22.04:" in text
    assert "apptainer exec --rocm IMAGE" in text and "find_spec('cupy')" in text


def test_local_builds_offline_from_host_made_pieces() -> None:
    text = definition("local")
    assert "Bootstrap: localimage" in text
    assert "--no-index --find-links /opt/dask-hpc/wheels" in text
    assert "http" not in text.replace("https://github.com", "")  # no mirror written down
    assert set(build_args(load_target("local"), REPO)) == {"base", "wheels", "dask_hpc_version"}


@pytest.mark.parametrize("name", [*SITES, "local"])
def test_the_version_is_a_build_argument_from_git(name: str) -> None:
    """Labels and the dask-hpc inside say the version git gives this tree; none is written
    into the committed definition, which would be stale after every commit."""
    from dask_hpc_deploy.versions import source_version

    text = definition(name)
    assert "org.dask-hpc.version {{ dask_hpc_version }}" in text
    assert "dask_hpc_version=" not in text  # no default: a build without it stops
    assert build_args(load_target(name), REPO)["dask_hpc_version"] == source_version()
    if name != "local":  # the Spack stack installs dask-hpc as that version
        assert '"py-dask-hpc@={{ dask_hpc_version }}"' in text


@pytest.mark.parametrize("name", [*SITES, "local"])
def test_no_package_archive_or_registry_hosts_are_written(name: str) -> None:
    text = definition(name)
    assert not re.search(r"deb\.debian\.org|archive\.ubuntu|pypi\.org", text)
