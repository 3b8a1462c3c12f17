"""Policy: the aurora image carries one SYCL runtime, the one its dpnp and dpctl declare
(deploy/src/dask_hpc_deploy/syclcheck.py): no oneAPI from the base images or Spack, the runtime
wheels pinned inside dpnp's and dpctl's declared ranges, and the same set CI runs dpnp on."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dask_hpc_deploy import syclcheck

ROOT = Path(__file__).resolve().parents[2]
AURORA = "spack/envs/aurora"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of what the check reads, to break on purpose."""
    for rel in ("containers/aurora.yaml", f"{AURORA}/spack.yaml", f"{AURORA}/pypi.txt",
                "spack/upstream.yaml", "tests/setup/dpnp.sh"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_the_aurora_image_has_one_sycl_runtime() -> None:
    assert syclcheck.check(ROOT) == []


def test_table_holds_what_the_wheels_declare() -> None:
    """Read from the wheels' metadata (Requires-Dist): dpnp 0.20.0 and dpctl 0.22.1."""
    table = yaml.safe_load((ROOT / "spack/upstream.yaml").read_text())
    assert table["dpnp"]["0.20.0"]["dpcpp-cpp-rt"] == ">=2026.0,<2027.0a0"
    assert table["dpctl"]["0.22.1"]["intel-sycl-rt"] == ">=2026.0,<2027.0a0"


def test_the_pins_are_pyprojects_aurora_extra() -> None:
    """pypi.txt's dpnp and dpctl are pyproject.toml's aurora extra (which users install)."""
    pins = syclcheck.pins((ROOT / AURORA / "pypi.txt").read_text().splitlines())
    extra = (ROOT / "pyproject.toml").read_text()
    assert f'aurora = ["dpnp=={pins["dpnp"]}", "dpctl=={pins["dpctl"]}"]' in extra


def _oneapi_base(r: Path) -> None:
    edit(r / "containers/aurora.yaml", "base_image: ubuntu:24.04",
         "base_image: intel/oneapi-basekit:2025.2.2-0-devel-ubuntu24.04")  # fmt: skip


def _oneapi_runtime(r: Path) -> None:
    edit(r / "containers/aurora.yaml", "runtime_image: ubuntu:24.04",
         "runtime_image: intel/oneapi-runtime:2025.2.2-0-devel-ubuntu24.04")  # fmt: skip


def _oneapi_in_spack(r: Path) -> None:
    stack = "  - $dask_stack\n"
    edit(r / AURORA / "spack.yaml", stack, stack + "  - intel-oneapi-compilers\n")


def _runtime_too_old(r: Path) -> None:
    edit(r / AURORA / "pypi.txt", "dpcpp-cpp-rt==2026.2.0", "dpcpp-cpp-rt==2025.2.1")
    edit(r / "tests/setup/dpnp.sh", "dpcpp-cpp-rt==2026.2.0", "dpcpp-cpp-rt==2025.2.1")


def _runtime_unpinned(r: Path) -> None:
    edit(r / AURORA / "pypi.txt", "intel-sycl-rt==2026.2.0\n", "")
    edit(r / "tests/setup/dpnp.sh", "intel-sycl-rt==2026.2.0 ", "")


def _dpnp_unrecorded(r: Path) -> None:
    edit(r / AURORA / "pypi.txt", "dpnp==0.20.0", "dpnp==0.19.1")


def _untested_set(r: Path) -> None:
    edit(r / AURORA / "pypi.txt", "mkl==2026.2.0", "mkl==2026.1.0")


@pytest.mark.parametrize(
    ("breaker", "expected"),
    [
        (_oneapi_base, "containers/aurora.yaml: base_image intel/oneapi-basekit:2025.2.2-0-devel-"
                       "ubuntu24.04 carries a oneAPI runtime of its own"),
        (_oneapi_runtime, "runtime_image intel/oneapi-runtime:2025.2.2-0-devel-ubuntu24.04 "
                          "carries a oneAPI runtime"),
        (_oneapi_in_spack, "spack/envs/aurora/spack.yaml: intel-oneapi-compilers would bring a "
                           "second oneAPI runtime"),
        (_runtime_too_old, "pypi.txt: dpcpp-cpp-rt==2025.2.1 is outside dpnp 0.20.0's "
                           "dpcpp-cpp-rt>=2026.0,<2027.0a0"),
        (_runtime_unpinned, "pypi.txt: intel-sycl-rt must be pinned (==): dpctl 0.22.1 requires "
                            "intel-sycl-rt>=2026.0,<2027.0a0"),
        (_dpnp_unrecorded, "pypi.txt: dpnp must be pinned (==) to a release recorded in "
                           "spack/upstream.yaml (0.20.0), not '0.19.1'"),
        (_untested_set, "pypi.txt pins mkl==2026.1.0, tests/setup/dpnp.sh (the set CI runs dpnp "
                        "on) mkl==2026.2.0: pin the same"),
    ],
)  # fmt: skip
def test_a_second_or_mismatched_runtime_is_refused(
    repo: Path, breaker: Callable[[Path], None], expected: str
) -> None:
    breaker(repo)
    problems = syclcheck.check(repo)
    assert any(expected in p for p in problems), problems
