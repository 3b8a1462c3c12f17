"""Each site's Spack environment against its site profile and build data: its target and
GPU stack (CUDA, ROCm, SYCL wheels), its includes, the PyPI-only packages it installs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .spack_files import (
    PIN,
    Scopes,
    SpackCheckError,
    externals_of,
    our_repo,
    read_env,
    version_tuple,
)

#: NVIDIA x86_64 sites: dask-cuda from PyPI on top of the Spack environment.
DASK_CUDA_ENVS = ("thetagpu", "sophia", "polaris", "perlmutter", "deepops")

#: dask-cuda 26.10 requires Python >= 3.11 and NumPy 2 (its wheel's metadata).
DASK_CUDA_MIN_PYTHON = (3, 11)

#: PyPI-only packages (not in Spack) each environment must install, by file.
PYPI_EXTRAS: dict[str, dict[str, tuple[str, ...]]] = {
    "aurora": {"pypi.txt": ("dpctl", "dpnp")},
    **{env: {"pypi.txt": ("dask-cuda",)} for env in DASK_CUDA_ENVS},
}

#: Newest CUDA with ppc64le installers.
PPC64LE_MAX_CUDA = (12, 4)


def check_includes(env_dir: Path, root: Path) -> list[str]:
    """An environment includes common.yaml, uses our repository and the stack."""
    problems = []
    manifest = env_dir / "spack.yaml"
    try:
        env, included = read_env(env_dir)
    except SpackCheckError as exc:
        return exc.problems
    common = (root / "spack" / "common.yaml").resolve()
    paths = [p for p, _ in included]
    for path in paths:
        if not path.is_file():
            problems.append(f"{manifest}: included file {path} does not exist")
    if common not in paths:
        problems.append(f"{manifest}: does not include spack/common.yaml (the shared stack)")
    repos = env.get("repos") or []
    repo_paths = repos.values() if isinstance(repos, dict) else repos
    if our_repo(root).resolve() not in {(env_dir / str(p)).resolve() for p in repo_paths}:
        problems.append(
            f"{manifest}: repos: does not list the project repository "
            f"{our_repo(root).relative_to(root)}"
        )
    if "$dask_stack" not in [str(s) for s in env.get("specs") or []]:
        problems.append(f"{manifest}: specs: must contain $dask_stack")
    for path, content in [(manifest, env)] + included:
        if path == common:
            continue
        for name in ("py-dask", "py-distributed", "py-dask-hpc"):
            if name in (content.get("packages") or {}):
                problems.append(
                    f"{path}: sets packages:{name}: the pins live only in spack/common.yaml"
                )
    return problems


def _tag_version(image: str) -> tuple[int, ...]:
    """Version in an image tag: ``nvidia/cuda:12.6.3-devel-ubuntu22.04`` -> (12, 6, 3)."""
    tag = image.rsplit(":", 1)[-1] if ":" in image else ""
    return version_tuple(tag.split("-", 1)[0])


def check_site_env(
    root: Path,
    env_name: str,
    site: dict[str, Any],
    known: set[str],
    py: dict[str, Any] | None = None,
) -> list[str]:
    """Check one spack/envs/<env_name>/spack.yaml against its site profile."""
    env_dir = root / "spack" / "envs" / env_name
    manifest = env_dir / "spack.yaml"
    problems = check_includes(env_dir, root)
    try:
        env, included = read_env(env_dir)
    except SpackCheckError:
        return problems
    scopes = Scopes(env, included)
    build = site.get("build") or {}
    where = f"{manifest} (site {site.get('name')})"

    targets = [
        r.split("=", 1)[1]
        for r in scopes.requires("all")
        for r in r.split()
        if r.startswith("target=")
    ]
    if targets != [build.get("spack_target")]:
        problems.append(
            f"{where}: packages:all:require target {targets}, build data says "
            f"spack_target {build.get('spack_target')!r}"
        )
    if (env.get("concretizer") or {}).get("unify") is not True:
        problems.append(
            f"{where}: concretizer:unify must be true in the environment's own file "
            "(spack containerize reads only that file, not its includes)"
        )
    host_compat = ((env.get("concretizer") or {}).get("targets") or {}).get("host_compatible")
    if host_compat is not False:
        problems.append(
            f"{where}: concretizer:targets:host_compatible must be false "
            "(images are built for the site, not for the build host)"
        )

    cupy = " ".join(scopes.requires("py-cupy"))
    cuda = [
        version_tuple(PIN.search(e).group(1)) for e in scopes.externals("cuda") if PIN.search(e)
    ]
    cuda_arch = build.get("cuda_arch")
    if cuda_arch is not None:
        if "+cuda" not in cupy or f"cuda_arch={cuda_arch}" not in cupy.split():
            problems.append(
                f"{where}: py-cupy must require +cuda cuda_arch={cuda_arch}, has {cupy!r}"
            )
        if len(cuda) != 1:
            problems.append(f"{where}: needs exactly one cuda external, found {len(cuda)}")
        elif cuda[0] != _tag_version(build.get("base_image", "")):
            problems.append(
                f"{where}: cuda external {cuda[0]} differs from the base image "
                f"{build.get('base_image')!r}"
            )
        if build.get("arch") == "ppc64le" and cuda and cuda[0][:2] > PPC64LE_MAX_CUDA:
            problems.append(
                f"{where}: CUDA {cuda[0]} on ppc64le; the last with ppc64le "
                f"installers is {'.'.join(map(str, PPC64LE_MAX_CUDA))}"
            )
    elif cuda or "+cuda" in cupy:
        problems.append(f"{where}: CUDA in an environment for a site without cuda_arch")
    if build.get("arch") == "ppc64le" and build.get("spack_target") != "power9le":
        problems.append(f"{where}: ppc64le site must target power9le")
    if build.get("arch") == "ppc64le" and not scopes.externals("glibc"):
        problems.append(f"{where}: a ppc64le target needs a glibc external to concretize")
    if build.get("arch") not in (None, "x86_64"):
        # A target foreign to the (x86_64) build host is a candidate for the solver
        # only if a root spec names it; externals default to the host's family.
        foreign = f"target={build.get('spack_target')}"
        if not any(foreign in s.split() for s in scopes.specs()):
            problems.append(
                f"{where}: no root spec names {foreign}: Spack then rejects the "
                "foreign target as 'not compatible with this machine'"
            )
        for _pkg, sec in scopes.packages():
            for ext in externals_of(sec):
                if foreign not in ext.split():
                    problems.append(
                        f"{where}: external {ext!r} lacks {foreign} (Spack would give "
                        "it the build host's target)"
                    )

    rocm_arch = build.get("rocm_arch")
    if rocm_arch is not None:
        if "+rocm" not in cupy or f"amdgpu_target={rocm_arch}" not in cupy.split():
            problems.append(f"{where}: py-cupy must require +rocm amdgpu_target={rocm_arch}")
        rocm_version = _tag_version(build.get("base_image", ""))
        for pkg, sec in scopes.packages():
            for ext in externals_of(sec):
                m = PIN.search(ext)
                if m and version_tuple(m.group(1)) != rocm_version:
                    if pkg != "gcc":
                        problems.append(
                            f"{where}: ROCm external {ext!r} differs from the base "
                            f"image {build.get('base_image')!r}"
                        )
                for word in ext.split():
                    if word.startswith("amdgpu_target=") and word != f"amdgpu_target={rocm_arch}":
                        problems.append(f"{where}: external {ext!r} is not built for {rocm_arch}")
        if not scopes.externals("hip"):
            problems.append(f"{where}: ROCm site without a hip external")
    elif "+rocm" in cupy or scopes.externals("hip"):
        problems.append(f"{where}: ROCm in an environment for a site without rocm_arch")

    # Intel GPU sites: one SYCL runtime, the wheels dpnp and dpctl declare (syclcheck.py).
    for fname, needed in PYPI_EXTRAS.get(env_name, {}).items():
        path = env_dir / fname
        reqs: dict[str, str] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                line = line.split("#", 1)[0]
                m = re.match(r"\s*([A-Za-z0-9_.-]+)", line)
                if m:
                    reqs[m.group(1).lower().replace("_", "-")] = re.sub(r"\s+", "", line)
        for name in needed:
            if name not in reqs:
                problems.append(f"{path}: must list {name} (not in Spack, installed from PyPI)")
            elif py is not None and name in py["full"] and reqs[name] != py["full"][name]:
                problems.append(
                    f"{path}: {reqs[name]!r} differs from pyproject.toml's {py['full'][name]!r}"
                )
    for stale in sorted(env_dir.glob("pypi*.txt")):
        if stale.name not in PYPI_EXTRAS.get(env_name, {}):
            problems.append(f"{stale}: not a PyPI file the image build installs")
    if env_name in DASK_CUDA_ENVS:
        floors = [
            version_tuple(m.group(1))
            for r in scopes.requires("python")
            for m in [re.match(r"@=?([0-9][0-9.]*):", r.strip())]
            if m
        ]
        if not floors or max(floors) < DASK_CUDA_MIN_PYTHON:
            problems.append(
                f"{where}: dask-cuda needs python@"
                f"{'.'.join(map(str, DASK_CUDA_MIN_PYTHON))}: (packages:python:require)"
            )
    return problems
