"""Structural checks of the Spack environments (no Spack needed; see spack/README.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dask_hpc_deploy import spack_files, spack_sites
from dask_hpc_deploy.spackcheck import SITE_ENVS, SpackCheckError, check

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of everything the checks read, to break on purpose."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "constraints.txt", tmp_path / "constraints.txt")
    shutil.copy(ROOT / "spack.yaml", tmp_path / "spack.yaml")
    shutil.copytree(
        ROOT / "spack",
        tmp_path / "spack",
        ignore=shutil.ignore_patterns("__pycache__", ".spack-env", "spack.lock"),
    )
    shutil.copytree(ROOT / "src" / "dask_hpc" / "sites", tmp_path / "src" / "dask_hpc" / "sites")
    (tmp_path / "containers").mkdir()
    for path in (ROOT / "containers").glob("*.yaml"):
        shutil.copy(path, tmp_path / "containers" / path.name)
    (tmp_path / "tests" / "setup").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "setup" / "dpnp.sh", tmp_path / "tests" / "setup" / "dpnp.sh")
    return tmp_path


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    """Replace text in a file, insisting that it was there."""
    text = path.read_text()
    assert text.count(old) >= count, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def problems(root: Path) -> str:
    """The checker's complaints for a tree that must be rejected."""
    with pytest.raises(SpackCheckError) as info:
        check(root)
    return str(info.value)


def test_repository_passes() -> None:
    check(ROOT)


def test_copy_passes(repo: Path) -> None:
    check(repo)


def test_command_line(repo: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "dask_hpc_deploy.spackcheck", str(repo)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    edit(repo / "spack" / "common.yaml", "py-numpy\n", "py-nummpy\n")
    bad = subprocess.run(
        [sys.executable, "-m", "dask_hpc_deploy.spackcheck", str(repo)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "unknown package 'py-nummpy'" in bad.stderr


def test_every_build_target_has_an_environment() -> None:
    targets = {p.stem for p in (ROOT / "containers").glob("*.yaml")}
    sites = {p.stem for p in (ROOT / "src" / "dask_hpc" / "sites").glob("*.yaml")}
    # generic and El Capitan have no image: their ranks run the job's own dask-hpc
    assert set(SITE_ENVS) == targets == (sites - {"generic", "elcapitan"}) | {"local"}
    for env in SITE_ENVS:
        assert (ROOT / "spack" / "envs" / env / "spack.yaml").is_file()


def test_pins_match_pyproject() -> None:
    """The one pin in common.yaml equals pyproject.toml's dask and distributed pins."""
    py = spack_files.pyproject_info(ROOT)
    common = yaml.safe_load((ROOT / "spack" / "common.yaml").read_text())
    req = common["packages"]["py-dask"]["require"][0]
    assert req.startswith(f"@{py['pins']['dask']} ")
    assert common["packages"]["py-distributed"]["require"] == [f"@{py['pins']['distributed']}"]


def test_summit_is_power9_with_old_cuda() -> None:
    env = yaml.safe_load((ROOT / "spack" / "envs" / "summit" / "spack.yaml").read_text())
    pkgs = env["spack"]["packages"]
    assert pkgs["all"]["require"] == ["target=power9le"]
    (cuda,) = pkgs["cuda"]["externals"]
    major, minor = map(int, re.match(r"cuda@(\d+)\.(\d+)", cuda["spec"]).groups())
    assert (major, minor) <= (12, 4)


def test_recipes_parse_without_spack() -> None:
    info = spack_files.recipe_info(
        spack_files.our_repo(ROOT) / "packages" / "py_dask_hpc" / "package.py"
    )
    assert info["classes"] == {
        "PyDaskHpc": ["spack_repo.builtin.build_systems.python.PythonPackage"]
    }
    assert "0.1.0" in info["versions"]


@pytest.mark.parametrize(
    "spec, names",
    [
        ("py-dask@2026.7.1 +array +dataframe", ["py-dask"]),
        ("py-cupy +cuda cuda_arch=80 ^cuda@12.6 %gcc", ["py-cupy", "cuda", "gcc"]),
        ("%c,cxx=gcc", ["gcc"]),
        ("target=zen3", []),
        ("cuda_arch=70", []),
        ("$dask_stack", []),
    ],
)
def test_spec_names(spec: str, names: list[str]) -> None:
    assert spack_files.spec_names(spec) == names


@pytest.mark.parametrize(
    "pip, spack",
    [
        (">=3.1,<3.10", "3.1:3.9"),
        (">=3.1", "3.1:"),
        (">=1.2,<2.0", "1.2:1"),
        (">=2,<3.0.0", "2:2"),
        ("==3.1", None),
        (">=3.1,!=3.5", None),
    ],
)
def test_spack_range_for(pip: str, spack: str | None) -> None:
    assert spack_files.spack_range_for(pip) == spack


def test_pypi_pins_match_pyproject() -> None:
    """Every NVIDIA site installs exactly pyproject.toml's cuda extra."""
    want = spack_files.pyproject_info(ROOT)["full"]["dask-cuda"]
    assert want == "dask-cuda[cu12]==26.10.*"
    for env in spack_sites.DASK_CUDA_ENVS:
        lines = [
            ln.split("#", 1)[0].strip()
            for ln in (ROOT / ENVS / env / "pypi.txt").read_text().splitlines()
        ]
        assert want in lines, env


Breaker = Callable[[Path], None]
ENVS = Path("spack") / "envs"


def _unpin_distributed(r: Path) -> None:
    edit(r / "spack" / "common.yaml", "require: ['@2026.7.1']", "require: ['@2026.3.0']")


def _drop_include(r: Path) -> None:
    edit(r / ENVS / "polaris" / "spack.yaml", "  - ../../common.yaml\n", "")


def _wrong_include(r: Path) -> None:
    edit(r / ENVS / "perlmutter" / "spack.yaml", "../../common.yaml", "../common.yaml")


def _wrong_target(r: Path) -> None:
    edit(r / ENVS / "thetagpu" / "spack.yaml", "target=zen2", "target=zen3")


def _wrong_cuda_arch(r: Path) -> None:
    edit(r / ENVS / "deepops" / "spack.yaml", "cuda_arch=80", "cuda_arch=90")


def _summit_new_cuda(r: Path) -> None:
    edit(r / ENVS / "summit" / "spack.yaml", "cuda@12.4.1", "cuda@12.6.3")
    edit(r / "containers" / "summit.yaml", "cuda:12.4.1", "cuda:12.6.3")


def _summit_x86(r: Path) -> None:
    edit(r / ENVS / "summit" / "spack.yaml", "target=power9le", "target=x86_64")


def _summit_root_target(r: Path) -> None:
    edit(r / ENVS / "summit" / "spack.yaml", "py-cupy target=power9le", "py-cupy")


def _summit_external_target(r: Path) -> None:
    edit(r / ENVS / "summit" / "spack.yaml", "glibc@2.28 target=power9le", "glibc@2.28")


def _frontier_wrong_gpu(r: Path) -> None:
    edit(
        r / ENVS / "frontier" / "spack.yaml",
        "amdgpu_target=gfx90a",
        "amdgpu_target=gfx942",
        count=2,
    )


def _frontier_rocm_mismatch(r: Path) -> None:
    edit(r / ENVS / "frontier" / "spack.yaml", "hip@7.0.2", "hip@7.0.0")


def _unknown_package(r: Path) -> None:
    edit(
        r / ENVS / "aurora" / "spack.yaml",
        "  - $dask_stack\n",
        "  - $dask_stack\n  - py-dpnp\n",
    )


def _aurora_no_dpnp(r: Path) -> None:
    edit(r / ENVS / "aurora" / "pypi.txt", "dpnp==0.20.0\n", "")


def _pin_in_site(r: Path) -> None:
    edit(
        r / ENVS / "local" / "spack.yaml",
        "  packages:\n",
        "  packages:\n    py-dask:\n      require: ['@2026.3.0']\n",
    )


def _dask_hpc_pinned(r: Path) -> None:
    pinned = "packages:\n  py-dask-hpc:\n    require: ['@0.1.0']\n"
    edit(r / "spack" / "common.yaml", "packages:\n", pinned)


def _recipe_class(r: Path) -> None:
    edit(
        spack_files.our_repo(r) / "packages" / "py_dask_hpc" / "package.py",
        "class PyDaskHpc(",
        "class PyDaskHPC(",
    )


def _recipe_dep_pin(r: Path) -> None:
    edit(
        spack_files.our_repo(r) / "packages" / "py_dask_hpc" / "package.py",
        'depends_on("py-distributed@2026.7.1:2026.8")',
        'depends_on("py-distributed@2024.12.0:2026.8")',
    )


def _recipe_missing_dep(r: Path) -> None:
    edit(
        spack_files.our_repo(r) / "packages" / "py_dask_hpc" / "package.py",
        '        depends_on("py-psutil@5.9:")\n',
        "",
    )


def _overlay_no_sha(r: Path) -> None:
    edit(
        spack_files.our_repo(r) / "packages" / "py_dask" / "package.py",
        'version("2026.7.1", sha256="5727',
        'version("2026.7.2", sha256="5727',
    )


def _bokeh_range(r: Path) -> None:
    edit(r / "spack" / "common.yaml", "require: ['@3.8.2:3.9']", "require: ['@3.8.2:']")


def _recipe_bokeh(r: Path) -> None:
    edit(
        spack_files.our_repo(r) / "packages" / "py_dask_hpc" / "package.py",
        'depends_on("py-bokeh@3.8.2:3.9")',
        'depends_on("py-bokeh@3.8.2:3.10")',
    )


def _dask_cuda_line(r: Path) -> None:
    edit(r / ENVS / "perlmutter" / "pypi.txt", "dask-cuda[cu12]==26.10.*", "dask-cuda==26.10.*")


def _stale_pypi_file(r: Path) -> None:
    (r / ENVS / "polaris" / "pypi-nodeps.txt").write_text("dask-cuda==26.10.*\n")


def _no_python_floor(r: Path) -> None:
    edit(
        r / "spack" / "include" / "nvidia-x86_64.yaml", "require: ['@3.11:']", "require: ['@3.10:']"
    )


def _namespace(r: Path) -> None:
    edit(spack_files.our_repo(r) / "repo.yaml", "namespace: dask_hpc", "namespace: daskhpc")


def _missing_env(r: Path) -> None:
    shutil.rmtree(r / ENVS / "perlmutter")


def _dataframe_dropped(r: Path) -> None:
    edit(r / "spack" / "common.yaml", " +dataframe", "")


def _url(r: Path) -> None:
    edit(r / "spack" / "common.yaml", "packages:\n", "# see https://example.org/x\npackages:\n")


def _no_host_compatible(r: Path) -> None:
    edit(r / ENVS / "aurora" / "spack.yaml", "host_compatible: false", "host_compatible: true")


def _broken_yaml(r: Path) -> None:
    edit(r / ENVS / "polaris" / "spack.yaml", "  specs:\n", "  specs: [\n")


@pytest.mark.parametrize(
    "breaker, message",
    [
        (_unpin_distributed, "py-dask pinned to 2026.7.1 but py-distributed to 2026.3.0"),
        (_drop_include, "polaris/spack.yaml: does not include spack/common.yaml"),
        (_wrong_include, "included file"),
        (_wrong_target, "target ['zen3'], build data says spack_target 'zen2'"),
        (_wrong_cuda_arch, "py-cupy must require +cuda cuda_arch=80"),
        (_summit_new_cuda, "the last with ppc64le installers is 12.4"),
        (_summit_x86, "build data says spack_target 'power9le'"),
        (_summit_root_target, "no root spec names target=power9le"),
        (_summit_external_target, "external 'glibc@2.28' lacks target=power9le"),
        (_frontier_wrong_gpu, "py-cupy must require +rocm amdgpu_target=gfx90a"),
        (_frontier_rocm_mismatch, "ROCm external 'hip@7.0.0' differs from the base image"),
        (_unknown_package, "unknown package 'py-dpnp'"),
        (_aurora_no_dpnp, "must list dpnp"),
        (_pin_in_site, "sets packages:py-dask: the pins live only in spack/common.yaml"),
        (_dask_hpc_pinned, "packages:py-dask-hpc:require: its version comes from git"),
        (_recipe_class, "Spack expects class PyDaskHpc"),
        (
            _recipe_dep_pin,
            "distributed range ['2024.12.0:2026.8'], pyproject.toml's "
            "distributed>=2026.7.1,<2026.9 is @2026.7.1:2026.8",
        ),
        (_recipe_missing_dep, "no depends_on('py-psutil...')"),
        (_overlay_no_sha, "py_dask recipe: no version('2026.7.1'"),
        (_bokeh_range,
         "bokeh range ['3.8.2:'], pyproject.toml's bokeh>=3.8.2,<3.10 is @3.8.2:3.9"),
        (_recipe_bokeh, "depends_on('py-bokeh@3.8.2:3.10'): bokeh range ['3.8.2:3.10']"),
        (_dask_cuda_line, "differs from pyproject.toml's 'dask-cuda[cu12]==26.10.*'"),
        (_stale_pypi_file, "pypi-nodeps.txt: not a PyPI file the image build installs"),
        (_no_python_floor, "dask-cuda needs python@3.11:"),
        (_namespace, "namespace 'daskhpc' must be 'dask_hpc'"),
        (_missing_env, "perlmutter/spack.yaml: missing"),
        (_dataframe_dropped, "py-dask must require +dataframe explicitly"),
        (_url, "contains a URL"),
        (_no_host_compatible, "host_compatible must be false"),
        (_broken_yaml, "cannot read YAML"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_broken_copy_is_rejected(repo: Path, breaker: Breaker, message: str) -> None:
    breaker(repo)
    assert message in problems(repo)


def test_constraints_pin_change_is_caught(repo: Path) -> None:
    """Bumping the images' Dask in constraints.txt alone leaves Spack behind: rejected."""
    edit(repo / "constraints.txt", "==2026.7.1", "==2026.8.0", count=2)
    found = problems(repo)
    assert "py-dask pinned to 2026.7.1, constraints.txt pins dask==2026.8.0" in found


def test_a_pin_outside_the_supported_range_is_caught(repo: Path) -> None:
    edit(repo / "constraints.txt", "==2026.7.1", "==2024.12.0", count=2)
    edit(repo / "spack" / "common.yaml", "@2026.7.1", "@2024.12.0", count=2)
    found = problems(repo)
    assert (
        "constraints.txt: dask==2024.12.0 is outside pyproject.toml's dask>=2026.7.1,<2026.9"
    ) in found


def test_the_recipe_must_declare_pyprojects_dask_range(repo: Path) -> None:
    edit(repo / "pyproject.toml", ">=2026.7.1,<2026.9", ">=2024.12.0,<2026.9", count=2)
    found = problems(repo)
    assert (
        "dask range ['2026.7.1:2026.8'], "
        "pyproject.toml's dask>=2024.12.0,<2026.9 is @2024.12.0:2026.8"
    ) in found
