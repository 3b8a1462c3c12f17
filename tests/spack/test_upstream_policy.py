"""Policy: every CuPy pairing (NumPy, CUDA, ROCm) is one that CuPy itself declares.

spack/upstream.yaml holds what each CuPy release's own metadata says (Requires-Dist of its
wheels, the platform each wheel is built for); Spack's builtin recipe is not the authority
(it states no NumPy ceiling for CuPy 13.3, which declares numpy<2.3).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dask_hpc_deploy.spack_upstream import check_upstream

ROOT = Path(__file__).resolve().parents[2]
GPU_ENVS = ["deepops", "frontier", "perlmutter", "polaris", "sophia", "summit", "thetagpu"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "spack", tmp_path / "spack")
    return tmp_path


def test_repository_pairs_are_declared_by_cupy() -> None:
    assert check_upstream(ROOT) == []


def test_table_matches_what_cupy_declares() -> None:
    """The figures read from CuPy's wheels (cupy-cuda12x, cupy-rocm-7-0) on the package index."""
    table = yaml.safe_load((ROOT / "spack" / "upstream.yaml").read_text())["cupy"]
    assert table["13.3.0"]["numpy"] == ">=1.22,<2.3"
    assert table["13.6.0"]["numpy"] == ">=1.22,<2.6"
    assert table["14.0.1"]["numpy"] == ">=2.0,<2.6" and table["14.0.1"]["rocm"] == ["7.0"]


@pytest.mark.parametrize("env", GPU_ENVS)
def test_every_gpu_environment_pins_cupy_and_numpy(env: str) -> None:
    text = (ROOT / "spack" / "envs" / env / "spack.yaml").read_text()
    text += (ROOT / "spack" / "include" / "nvidia-x86_64.yaml").read_text()
    assert "py-numpy:" in text


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    "file,old,new,message",
    [
        # The pairing shipped before: CuPy 13.3.0 with NumPy 2.4.
        (
            "include/nvidia-x86_64.yaml",
            "@13.6.0 +cuda",
            "@13.3.0 +cuda",
            "py-numpy 2:2.5 is outside CuPy 13.3.0's numpy>=1.22,<2.3",
        ),
        ("include/nvidia-x86_64.yaml", "'@2:2.5'", "'@2:'", "py-numpy needs a range inside"),
        ("include/nvidia-x86_64.yaml", "'@2:2.5'", "'@2:2.6'", "py-numpy 2:2.6 is outside"),
        ("include/nvidia-x86_64.yaml", "@13.6.0 +cuda", "@13.6 +cuda", "must pin one release"),
        ("include/nvidia-x86_64.yaml", "@13.6.0 +cuda", "@13.4.1 +cuda", "must pin one release"),
        # CuPy 14 with ROCm 6.2 (before): CuPy 14's ROCm wheels are for ROCm 7.0.
        (
            "envs/frontier/spack.yaml",
            "hip@7.0.2",
            "hip@6.2.4",
            "hip@6.2.4 is not a ROCM CuPy 14.0.1 declares (7.0)",
        ),
        ("envs/summit/spack.yaml", "'@1.22:2.2'", "'@1.22:2.3'", "py-numpy 1.22:2.3 is outside"),
        (
            "envs/summit/spack.yaml",
            "cuda@12.4.1",
            "cuda@11.8.0",
            "cuda@11.8.0 is not a CUDA CuPy 13.2.0 declares (12)",
        ),
    ],
)
def test_undeclared_pairing_is_rejected(repo: Path, file, old, new, message) -> None:
    _edit(repo / "spack" / file, old, new)
    problems = "\n".join(check_upstream(repo))
    assert message in problems, problems


def test_spack_containerize_finds_unify_in_every_environment() -> None:
    """`spack containerize` reads concretizer:unify from the environment's own spack.yaml only
    (it crashed with KeyError 'unify' when that lived only in the included common.yaml)."""
    for path in sorted((ROOT / "spack" / "envs").glob("*/spack.yaml")):
        env = yaml.safe_load(path.read_text())["spack"]
        assert env["concretizer"]["unify"] is True, path
