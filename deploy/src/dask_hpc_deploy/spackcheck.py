"""Structural checks of dask-hpc's Spack environments, without Spack.

CI has no Spack, so this module reads the environment files, the project's
package recipes (with :mod:`ast`, never importing them), the build data
(``containers/<site>.yaml``) and the site profiles, and reports every policy
inconsistency it finds: a site environment that does not
include the common stack, version pins that disagree with ``pyproject.toml``,
a target or GPU architecture that is not the site's, a package name Spack does
not know, and so on. Real concretization is a developer check:
``spack/check-concretize.sh``.

The checks live by what they check: :mod:`.spack_sites` (each site's environment),
:mod:`.spack_upstream` (CuPy against its own metadata), :mod:`.syclcheck` (Intel's SYCL
wheels), this module (the shared stack, our recipes, package names, no URLs), all reading
the files through :mod:`.spack_files`.

Run ``python -m dask_hpc_deploy.spackcheck [REPO_ROOT]``; it exits 1 on problems.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from . import syclcheck, versions
from .spack_files import (
    PIN,
    RANGE,
    Scopes,
    SpackCheckError,
    class_name,
    known_builtin,
    load_yaml,
    our_repo,
    pyproject_info,
    recipe_info,
    site_data,
    spack_range_for,
    spec_names,
)
from .spack_sites import check_includes, check_site_env
from .spack_upstream import check_upstream

#: The environments: one per build target (``containers/<name>.yaml``), same name.
SITE_ENVS: tuple[str, ...] = (
    "aurora",
    "deepops",
    "frontier",
    "local",
    "perlmutter",
    "polaris",
    "sophia",
    "summit",
    "thetagpu",
)

#: Packages every environment gets from spack/common.yaml's ``dask_stack``.
STACK = ("py-dask-hpc", "py-dask", "py-distributed", "py-bokeh", "py-numpy")

#: pyproject.toml dependencies with a version range (not an == pin) that Spack must
#: express identically: (PyPI name, Spack name).
RANGED = (("bokeh", "py-bokeh"),)
#: Ranged in pyproject.toml and in our py-dask-hpc recipe, pinned exactly in spack/common.yaml
#: (as in constraints.txt): what dask-hpc supports vs what the images run.
RECIPE_RANGED = (*RANGED, ("dask", "py-dask"), ("distributed", "py-distributed"))

#: Spack virtual packages and the ``all`` pseudo-package, valid as ``packages:`` keys.
VIRTUALS = frozenset({"all", "c", "cxx", "fortran", "mpi", "blas", "lapack"})

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def check_repo(root: Path, py: dict[str, Any], pin: str | None) -> tuple[list[str], set[str]]:
    """Check the project's recipes; return problems and the package names they define."""
    problems: list[str] = []
    repo = our_repo(root)
    meta = load_yaml(repo / "repo.yaml") if (repo / "repo.yaml").is_file() else None
    if not isinstance(meta, dict) or not isinstance(meta.get("repo"), dict):
        return [f"{repo}/repo.yaml: missing or without a 'repo:' mapping"], set()
    if meta["repo"].get("namespace") != repo.name:
        problems.append(
            f"{repo}/repo.yaml: namespace {meta['repo'].get('namespace')!r} must be "
            f"{repo.name!r}, the directory name below spack_repo/ (Spack derives it)"
        )
    if not str(meta["repo"].get("api", "")).startswith("v2."):
        problems.append(f"{repo}/repo.yaml: api must be v2.x (Spack 1.x layout)")
    names = set()
    recipes = {}
    for pkg_py in sorted((repo / "packages").glob("*/package.py")):
        pkg_dir = pkg_py.parent.name
        names.add(pkg_dir.lstrip("_").replace("_", "-"))
        try:
            info = recipe_info(pkg_py)
        except SyntaxError as exc:
            problems.append(f"{pkg_py}: does not parse: {exc}")
            continue
        recipes[pkg_dir] = info
        want = class_name(pkg_dir)
        if want not in info["classes"]:
            problems.append(
                f"{pkg_py}: defines {sorted(info['classes'])}, Spack expects class {want}"
            )
    expected = {
        "py_dask_hpc": "spack_repo.builtin.build_systems.python.PythonPackage",
        "py_dask": "spack_repo.builtin.packages.py_dask.package.PyDask",
        "py_distributed": "spack_repo.builtin.packages.py_distributed.package.PyDistributed",
    }
    for pkg_dir, base in expected.items():
        info = recipes.get(pkg_dir)
        if info is None:
            problems.append(f"{repo}/packages/{pkg_dir}/package.py: missing")
            continue
        bases = info["classes"].get(class_name(pkg_dir), [])
        if base not in bases:
            problems.append(
                f"{repo}/packages/{pkg_dir}/package.py: class {class_name(pkg_dir)} "
                f"must derive from {base}, found {bases}"
            )
    hpc = recipes.get("py_dask_hpc")
    if hpc is not None:
        deps = {n: s for s in hpc["depends"] for n in spec_names(s)[:1]}
        for req in py["runtime"]:
            if f"py-{req}" not in deps:
                problems.append(
                    f"py-dask-hpc recipe: no depends_on('py-{req}...') for "
                    f"pyproject.toml's dependency {req!r}"
                )
        for name, spack_name in RECIPE_RANGED:
            if spack_name in deps:
                found = [m.group(1) for m in [RANGE.search(deps[spack_name])] if m]
                problems += _range_problems(
                    f"py-dask-hpc recipe: depends_on({deps[spack_name]!r})", found, name, py
                )
    for pkg_dir in ("py_dask", "py_distributed"):
        info = recipes.get(pkg_dir)
        if info is None or pin is None:
            continue
        sha = info["versions"].get(pin, {}).get("sha256", "")
        if not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
            problems.append(
                f"{pkg_dir} recipe: no version({pin!r}, sha256=<64 hex digits>) "
                "for the pinned release"
            )
    return problems, names


def _range_problems(where: str, found: list[str], name: str, py: dict[str, Any]) -> list[str]:
    """A Spack version range must be exactly pyproject.toml's for ``name``."""
    spec = py["requirements"].get(name)
    if spec is None:
        return []
    want = spack_range_for(spec)
    if want is None:
        return [f"pyproject.toml: cannot translate {name}{spec} into a Spack range"]
    if found != [want]:
        return [f"{where}: {name} range {found}, pyproject.toml's {name}{spec} is @{want}"]
    return []


def check_common(root: Path, py: dict[str, Any]) -> tuple[list[str], str | None]:
    """Check spack/common.yaml (the stack and its pins) and the top-level spack.yaml."""
    problems: list[str] = []
    common_path = root / "spack" / "common.yaml"
    common = load_yaml(common_path) if common_path.is_file() else None
    if not isinstance(common, dict):
        return [f"{common_path}: missing or not a mapping"], None
    scopes = Scopes({}, [(common_path, common)])
    stack = [spec_names(s)[:1] for s in scopes.definitions().get("dask_stack", [])]
    stack_names = {n[0] for n in stack if n}
    for name in STACK:
        if name not in stack_names:
            problems.append(f"{common_path}: definition dask_stack lacks {name}")
    pins = {}
    for name in ("py-dask", "py-distributed"):
        found = [m.group(1) for r in scopes.requires(name) for m in [PIN.search(r)] if m]
        if len(found) != 1:
            problems.append(
                f"{common_path}: packages:{name}:require must pin exactly one "
                f"version, found {found}"
            )
        else:
            pins[name] = found[0]
    pin = pins.get("py-dask")
    if len(pins) == 2 and pins["py-dask"] != pins["py-distributed"]:
        problems.append(
            f"{common_path}: py-dask pinned to {pins['py-dask']} but py-distributed "
            f"to {pins['py-distributed']}: they must be identical"
        )
    for name, spack_name in (("dask", "py-dask"), ("distributed", "py-distributed")):
        want = py["pins"].get(name)
        if spack_name in pins and want != pins[spack_name]:
            problems.append(
                f"{common_path}: {spack_name} pinned to {pins[spack_name]}, "
                f"{versions.CONSTRAINTS} pins {name}=={want}"
            )
    if scopes.requires("py-dask-hpc"):
        problems.append(
            f"{common_path}: packages:py-dask-hpc:require: its version comes from git (the "
            "image build's develop spec, build argument dask_hpc_version), not a pin"
        )
    for name, spack_name in RANGED:
        problems += _range_problems(
            f"{common_path}: packages:{spack_name}:require",
            [m.group(1) for r in scopes.requires(spack_name) for m in [RANGE.search(r)] if m],
            name,
            py,
        )
    dask_req = " ".join(scopes.requires("py-dask"))
    for variant in ("+array", "+dataframe", "+distributed"):
        if variant not in dask_req:
            problems.append(
                f"{common_path}: py-dask must require {variant} explicitly "
                "(the solver may otherwise drop it silently)"
            )
    top = root / "spack.yaml"
    if not top.is_file():
        problems.append(f"{top}: missing")
    else:
        problems += check_includes(top.parent, root)
    return problems, pin


def check_names(root: Path, known: set[str], ours: set[str]) -> list[str]:
    """Every package a Spack file names is a recorded builtin package or one of ours."""
    problems = []
    files = [root / "spack.yaml", root / "spack" / "common.yaml"]
    files += sorted((root / "spack" / "include").glob("*.yaml"))
    files += sorted((root / "spack" / "envs").glob("*/spack.yaml"))
    for path in files:
        if not path.is_file():
            continue
        data = load_yaml(path) or {}
        scope = data.get("spack", data) if isinstance(data, dict) else {}
        scopes = Scopes(scope, [])
        names = {n for s in scopes.all_spec_strings() for n in spec_names(s)}
        names |= {pkg for pkg, _ in scopes.packages()}
        for name in sorted(names - VIRTUALS):
            if name not in known and name not in ours:
                problems.append(
                    f"{path}: unknown package {name!r}: neither in "
                    "spack/builtin-packages.txt nor in spack/repo"
                )
    for pkg_py in sorted((our_repo(root) / "packages").glob("*/package.py")):
        try:
            deps = recipe_info(pkg_py)["depends"]
        except SyntaxError:
            continue
        for name in sorted({n for s in deps for n in spec_names(s)} - VIRTUALS):
            if name not in known and name not in ours:
                problems.append(f"{pkg_py}: depends on unknown package {name!r}")
    return problems


def check_no_urls(root: Path) -> list[str]:
    """No file of ours names a download host (the project's rule)."""
    problems = []
    spack_dir = root / "spack"
    paths = [root / "spack.yaml"] + sorted(
        p
        for p in spack_dir.rglob("*")
        if p.is_file()
        # caches of tools (ruff, Python) are not ours to check
        and not any(
            part.startswith(".") or part == "__pycache__" for part in p.relative_to(spack_dir).parts
        )
    )
    for path in paths:
        if path.suffix in {".pyc"} or not path.is_file():
            continue
        for num, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _URL.search(line):
                problems.append(f"{path}:{num}: contains a URL; name no download hosts")
    return problems


def check(root: Path) -> None:
    """Run every check on the repository at ``root``; raise SpackCheckError on problems."""
    problems: list[str] = []
    py = pyproject_info(root)
    where = root / versions.CONSTRAINTS
    for name in ("dask", "distributed"):
        if name not in py["pins"]:
            problems.append(f"{where}: {name} is not pinned with ==")
        elif py["pins"][name] not in SpecifierSet(py["requirements"].get(name, "")):
            problems.append(
                f"{where}: {name}=={py['pins'][name]} is outside pyproject.toml's "
                f"{name}{py['requirements'].get(name)}"
            )
    if py["pins"].get("dask") != py["pins"].get("distributed"):
        problems.append(
            f"{where}: dask {py['pins'].get('dask')} and distributed "
            f"{py['pins'].get('distributed')} are pinned differently"
        )
    common_problems, pin = check_common(root, py)
    problems += common_problems
    repo_problems, ours = check_repo(root, py, pin)
    problems += repo_problems
    known_path = root / "spack" / "builtin-packages.txt"
    known = known_builtin(root) if known_path.is_file() else set()
    if not known:
        problems.append(f"{known_path}: missing or empty")
    envs_dir = root / "spack" / "envs"
    present = {p.name for p in envs_dir.iterdir() if p.is_dir()} if envs_dir.is_dir() else set()
    targets = {p.stem for p in (root / "containers").glob("*.yaml")}
    if targets != set(SITE_ENVS):
        problems.append(
            f"{root}/containers: build targets {sorted(targets)} are not the environments "
            f"{sorted(SITE_ENVS)}"
        )
    for missing in sorted(set(SITE_ENVS) - present):
        problems.append(f"{envs_dir}/{missing}/spack.yaml: missing")
    for extra in sorted(present - set(SITE_ENVS)):
        problems.append(f"{envs_dir}/{extra}: not a known site environment ({sorted(SITE_ENVS)})")
    for env_name in sorted(set(SITE_ENVS) & present & targets):
        problems += check_site_env(root, env_name, site_data(root, env_name), known, py)
    problems += check_names(root, known, ours)
    problems += check_upstream(root)
    for env_name in sorted(set(SITE_ENVS) & present & targets):
        if ((site_data(root, env_name).get("gpu") or {}).get("vendor")) == "intel":
            problems += syclcheck.check(root, env_name)
    problems += check_no_urls(root)
    if problems:
        raise SpackCheckError(problems)


def main(argv: list[str] | None = None) -> int:
    """Command line: check the repository given (default: the current directory)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    try:
        check(root)
    except SpackCheckError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{len(exc.problems)} problem(s) in the Spack environments", file=sys.stderr)
        return 1
    print(f"Spack environments OK: {', '.join(sorted(SITE_ENVS))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
