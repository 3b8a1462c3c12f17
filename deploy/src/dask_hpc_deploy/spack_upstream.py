"""Each environment's CuPy against what that CuPy release itself declares
(``spack/upstream.yaml``): its NumPy range and the CUDA or ROCm its wheels are built for."""

from __future__ import annotations

import re
from pathlib import Path

from .spack_files import PIN, Scopes, SpackCheckError, load_yaml, read_env, version_tuple


def _pip_range(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``'>=1.22,<2.6'`` -> ((1, 22), (2, 6)): inclusive floor, exclusive ceiling."""
    parts = dict(re.fullmatch(r"(>=|<)\s*([0-9.]+)", p.strip()).groups() for p in text.split(","))
    return version_tuple(parts[">="]), version_tuple(parts["<"])


def _spack_range(text: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``'@2:2.5'`` -> ((2,), (2, 5)), both inclusive (``:2.5`` includes every 2.5.x)."""
    m = re.fullmatch(r"@=?([0-9][0-9.]*):([0-9][0-9.]*)", text.split()[0]) if text else None
    return (version_tuple(m.group(1)), version_tuple(m.group(2))) if m else None


def check_upstream(root: Path) -> list[str]:
    """Each environment's CuPy pairs within what that CuPy release itself declares.

    ``spack/upstream.yaml`` records, per CuPy release, the NumPy range of its own metadata and
    the CUDA/ROCm its wheels are built for. Every environment with py-cupy must pin one of
    those releases exactly, require a NumPy range inside that release's, and have CUDA or
    ROCm externals of a declared version.
    """
    table_path = root / "spack" / "upstream.yaml"
    table = (load_yaml(table_path) or {}).get("cupy") or {}
    table = {str(k): v for k, v in table.items()}
    problems = []
    for env_dir in sorted((root / "spack" / "envs").glob("*/")):
        try:
            env, included = read_env(env_dir)
        except SpackCheckError:
            continue
        scopes = Scopes(env, included)
        cupy = " ".join(scopes.requires("py-cupy"))
        if "py-cupy" not in " ".join(scopes.specs()):
            continue
        where = f"{env_dir / 'spack.yaml'}"
        pins = re.findall(r"@=?(\d+\.\d+\.\d+)\b", cupy)
        if len(pins) != 1 or pins[0] not in table:
            problems.append(
                f"{where}: py-cupy must pin one release recorded in {table_path.name} "
                f"({', '.join(sorted(table))}), has {cupy!r}"
            )
            continue
        declared = table[pins[0]]
        lo, hi = _pip_range(str(declared["numpy"]))
        numpy = [r for r in (_spack_range(q) for q in scopes.requires("py-numpy")) if r]
        if not numpy:
            problems.append(
                f"{where}: py-numpy needs a range inside CuPy {pins[0]}'s numpy{declared['numpy']}"
            )
        for have_lo, have_hi in numpy:
            n = min(len(have_hi), len(hi))  # Spack's :2.5 holds every 2.5.x: compare prefixes
            pad = max(len(have_lo), len(lo))
            floor_ok = have_lo + (0,) * (pad - len(have_lo)) >= lo + (0,) * (pad - len(lo))
            if not floor_ok or not have_hi[:n] < hi[:n]:
                problems.append(
                    f"{where}: py-numpy {'.'.join(map(str, have_lo))}:"
                    f"{'.'.join(map(str, have_hi))} is outside CuPy {pins[0]}'s "
                    f"numpy{declared['numpy']}"
                )
        for kind, package in (("cuda", "cuda"), ("rocm", "hip")):
            for ext in scopes.externals(package):
                m = PIN.search(ext)
                version = m.group(1) if m else ""
                allowed = [str(v) for v in declared.get(kind) or []]
                if not any(version == a or version.startswith(a + ".") for a in allowed):
                    problems.append(
                        f"{where}: {package}@{version} is not a {kind.upper()} CuPy {pins[0]} "
                        f"declares ({', '.join(allowed) or 'none'})"
                    )
    return problems
