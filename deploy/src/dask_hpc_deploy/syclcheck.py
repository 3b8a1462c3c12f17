"""Policy: an Intel GPU image carries one SYCL runtime, the one its dpnp and dpctl declare.

dpnp 0.20's wheel requires ``dpcpp-cpp-rt>=2026.0,<2027`` and oneMKL's SYCL wheels of 2026;
Intel's oneAPI images of 2025.2 carry a 2025 runtime of their own, so an image built on one held
two (libsycl.so.8 from the base, libsycl.so.9 from the wheels; LD_LIBRARY_PATH from the base
image's environment decides which libur_loader, libumf, TBB and oneMKL the wheels' libraries
load). So: no oneAPI from the base images or from Spack, and the runtime wheels pinned, each
inside the ranges dpnp and dpctl declare (spack/upstream.yaml, read from their wheels), to the
very set tests/setup/dpnp.sh installs and CI runs dpnp on (tests/test_aurora_dpnp.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

#: The oneAPI runtime wheels, by name: what a second SYCL runtime would come with.
RUNTIME_WHEELS = re.compile(r"^(dpcpp-cpp-rt|intel-|onemkl-|mkl$|tbb$|tcmlib$|umf$)")
#: What carries oneAPI in an image definition or a Spack environment.
ONEAPI_IMAGE = re.compile(r"(^|/)(intel/)?oneapi", re.IGNORECASE)
ONEAPI_SPACK = re.compile(r"\bintel-oneapi-[a-z-]+")


def pins(lines: list[str]) -> dict[str, str]:
    """name -> exact version of every ``name==version`` line (comments and blanks skipped)."""
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "==" and "*" not in s.version]
        found[req.name.lower()] = exact[0] if len(exact) == 1 else ""
    return found


def setup_pins(script: str) -> dict[str, str]:
    """The PINS array of tests/setup/dpnp.sh."""
    body = re.search(r"^PINS=\((.*?)^\)", script, re.M | re.S)
    return pins(body.group(1).split()) if body else {}


def check(root: Path, site: str = "aurora") -> list[str]:
    """One sentence per way the site's image could hold a SYCL runtime other than, or beside,
    the one its dpnp and dpctl declare."""
    problems = []
    build = yaml.safe_load((root / "containers" / f"{site}.yaml").read_text()) or {}
    for key in ("base_image", "runtime_image"):
        image = str(build.get(key, ""))
        if ONEAPI_IMAGE.search(image):
            problems.append(
                f"containers/{site}.yaml: {key} {image} carries a oneAPI runtime of its own: the "
                "image's one SYCL runtime is the wheels dpnp and dpctl declare"
            )
    env = root / "spack" / "envs" / site
    spack = yaml.safe_dump(yaml.safe_load((env / "spack.yaml").read_text()))  # comments out
    for name in sorted(set(ONEAPI_SPACK.findall(spack))):
        problems.append(
            f"spack/envs/{site}/spack.yaml: {name} would bring a second oneAPI runtime into "
            "the view"
        )
    table = yaml.safe_load((root / "spack" / "upstream.yaml").read_text()) or {}
    wanted = pins((env / "pypi.txt").read_text().splitlines())
    declared: dict[str, list[tuple[str, str]]] = {}  # wheel -> [(range, who declares it)]
    for package in ("dpnp", "dpctl"):
        version = wanted.get(package, "")
        releases = {str(k): v for k, v in (table.get(package) or {}).items()}
        if version not in releases:
            problems.append(
                f"spack/envs/{site}/pypi.txt: {package} must be pinned (==) to a release recorded "
                f"in spack/upstream.yaml ({', '.join(sorted(releases)) or 'none'}), not "
                f"{version or 'unpinned'!r}"
            )
            continue
        for wheel, spec in releases[version].items():
            declared.setdefault(wheel, []).append((str(spec), f"{package} {version}"))
    for wheel, ranges in sorted(declared.items()):
        if not RUNTIME_WHEELS.match(wheel):
            continue
        have = wanted.get(wheel, "")
        if not have:
            problems.append(
                f"spack/envs/{site}/pypi.txt: {wheel} must be pinned (==): "
                f"{', '.join(f'{who} requires {wheel}{spec}' for spec, who in ranges)}"
            )
            continue
        for spec, who in ranges:
            if Version(have) not in Requirement(f"{wheel}{spec}").specifier:
                problems.append(
                    f"spack/envs/{site}/pypi.txt: {wheel}=={have} is outside {who}'s {wheel}{spec}"
                )
    tested = setup_pins((root / "tests" / "setup" / "dpnp.sh").read_text())
    for wheel in sorted(set(wanted) | set(tested)):
        if not (RUNTIME_WHEELS.match(wheel) or wheel in ("dpnp", "dpctl")):
            continue
        if wanted.get(wheel) != tested.get(wheel):
            problems.append(
                f"spack/envs/{site}/pypi.txt pins {wheel}=={wanted.get(wheel) or '(nothing)'}, "
                f"tests/setup/dpnp.sh (the set CI runs dpnp on) "
                f"{wheel}=={tested.get(wheel) or '(nothing)'}: pin the same"
            )
    return problems
