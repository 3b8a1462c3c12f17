"""Structural checks of dask-hpc's Spack environments, without Spack.

CI has no Spack, so this module reads the environment files, the project's
package recipes (with :mod:`ast`, never importing them), the build data
(``containers/<site>.yaml``) and the site profiles, and reports every policy
inconsistency it finds: a site environment that does not
include the common stack, version pins that disagree with ``pyproject.toml``,
a target or GPU architecture that is not the site's, a package name Spack does
not know, and so on. Real concretization is a developer check:
``spack/check-concretize.sh``.

Run ``python -m dask_hpc_deploy.spackcheck [REPO_ROOT]``; it exits 1 on problems.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import SpecifierSet

from . import syclcheck, versions

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

#: Newest CUDA with ppc64le installers.
PPC64LE_MAX_CUDA = (12, 4)

#: NVIDIA x86_64 sites: dask-cuda from PyPI on top of the Spack environment.
DASK_CUDA_ENVS = ("thetagpu", "sophia", "polaris", "perlmutter", "deepops")

#: dask-cuda 26.10 requires Python >= 3.11 and NumPy 2 (its wheel's metadata).
DASK_CUDA_MIN_PYTHON = (3, 11)

#: PyPI-only packages (not in Spack) each environment must install, by file.
PYPI_EXTRAS: dict[str, dict[str, tuple[str, ...]]] = {
    "aurora": {"pypi.txt": ("dpctl", "dpnp")},
    **{env: {"pypi.txt": ("dask-cuda",)} for env in DASK_CUDA_ENVS},
}

_NAME = r"[a-z0-9][a-z0-9-]*"
_SPEC_NAME = re.compile(rf"^\s*({_NAME})(?=[\s@+~%^]|$)")
_DEP_NAME = re.compile(rf"[\^%]\s*(?:[a-z]+(?:,[a-z]+)*=)?({_NAME})")
_PIN = re.compile(r"@=?([0-9][0-9A-Za-z.]*)")
_RANGE = re.compile(r"@([0-9][0-9.]*:[0-9.]*)")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class SpackCheckError(Exception):
    """Raised by :func:`check` with every problem found, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_yaml(path: Path) -> Any:
    """Read a YAML file; a missing or malformed file raises SpackCheckError."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpackCheckError([f"{path}: cannot read YAML: {exc}"]) from exc


def spec_names(spec: str) -> list[str]:
    """Package names in a spec string: the root and every ``^dep``/``%compiler``."""
    if spec.startswith("$"):
        return []
    names = []
    root = _SPEC_NAME.match(spec)
    if root:
        names.append(root.group(1))
    names.extend(_DEP_NAME.findall(spec))
    return names


def version_tuple(text: str) -> tuple[int, ...]:
    """``'12.4.1'`` -> ``(12, 4, 1)`` (leading numeric components only)."""
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def spack_range_for(pip_spec: str) -> str | None:
    """Spack's range for a pip specifier of the form ``>=A`` or ``>=A,<B``.

    ``>=3.1,<3.10`` -> ``3.1:3.9`` (Spack's ``:3.9`` includes every 3.9.x); ``>=3.1``
    -> ``3.1:``. None for anything else (an upper bound ending in 0 beyond the first
    component, ``==``, ``!=``...), which the caller reports.
    """
    parts = dict(
        (m.group(1), m.group(2))
        for m in (re.fullmatch(r"(>=|<)\s*([0-9][0-9.]*)", p.strip()) for p in pip_spec.split(","))
        if m
    )
    if ">=" not in parts or len(parts) != len(pip_spec.split(",")):
        return None
    if "<" not in parts:
        return f"{parts['>=']}:"
    upper = list(version_tuple(parts["<"]))
    while len(upper) > 1 and upper[-1] == 0:
        upper.pop()
    if not upper or upper[-1] == 0:
        return None
    upper[-1] -= 1
    return f"{parts['>=']}:{'.'.join(map(str, upper))}"


def pyproject_info(root: Path) -> dict[str, Any]:
    """Dependency names and specifiers from pyproject.toml, exact pins from constraints.txt."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = None  # type: ignore[assignment]
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        deps: list[str] = project["dependencies"]
        extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    else:  # pragma: no cover - only on 3.10
        deps = re.findall(
            r'^\s*"([^"]+)",?\s*$', text.split("dependencies", 1)[1].split("]")[0], re.M
        )
        extras = {"cuda": re.findall(r'"(dask-cuda[^"]*)"', text)}
    pins: dict[str, str] = {}
    names: dict[str, str] = {}
    full: dict[str, str] = {}
    for dep in deps + extras.get("cuda", []):
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", dep)
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        names[name] = m.group(3)
        full[name] = re.sub(r"\s+", "", dep.split(";", 1)[0])
        exact = re.match(r"==\s*([0-9][0-9A-Za-z.*]*)$", m.group(3).strip())
        if exact:
            pins[name] = exact.group(1)
    if (root / versions.CONSTRAINTS).is_file():
        pins.update(versions.pins(root))
    return {
        "requirements": names,
        "full": full,
        "pins": pins,
        "runtime": [n for n in names if n != "dask-cuda"],
    }


def read_env(env_dir: Path) -> tuple[dict[str, Any], list[tuple[Path, dict[str, Any]]]]:
    """An environment's ``spack:`` mapping and its included files (path, content)."""
    manifest = env_dir / "spack.yaml"
    data = load_yaml(manifest)
    if not isinstance(data, dict) or not isinstance(data.get("spack"), dict):
        raise SpackCheckError([f"{manifest}: no top-level 'spack:' mapping"])
    env = data["spack"]
    included = []
    for entry in env.get("include", []) or []:
        rel = entry.get("path") if isinstance(entry, dict) else entry
        path = (env_dir / str(rel)).resolve()
        content = load_yaml(path) if path.is_file() else None
        if content is not None and not isinstance(content, dict):
            raise SpackCheckError([f"{path}: included file is not a mapping"])
        included.append((path, content or {}))
    return env, included


def _requires(section: Any) -> list[str]:
    """The ``require:`` strings of one ``packages:`` entry."""
    if not isinstance(section, dict):
        return []
    req = section.get("require", [])
    if isinstance(req, str):
        return [req]
    out = []
    for item in req or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for key in ("spec", "one_of", "any_of"):
                val = item.get(key)
                out.extend([val] if isinstance(val, str) else list(val or []))
    return out


def _externals(section: Any) -> list[str]:
    """The external spec strings of one ``packages:`` entry."""
    if not isinstance(section, dict):
        return []
    return [
        e["spec"]
        for e in section.get("externals", []) or []
        if isinstance(e, dict) and isinstance(e.get("spec"), str)
    ]


class _Scopes:
    """An environment merged with its includes, enough for the checks below."""

    def __init__(self, env: dict[str, Any], included: list[tuple[Path, dict[str, Any]]]):
        self.scopes = [env] + [content for _, content in included]

    def packages(self) -> Iterator[tuple[str, Any]]:
        for scope in self.scopes:
            yield from (scope.get("packages") or {}).items()

    def requires(self, name: str) -> list[str]:
        return [r for pkg, sec in self.packages() if pkg == name for r in _requires(sec)]

    def externals(self, name: str) -> list[str]:
        return [e for pkg, sec in self.packages() if pkg == name for e in _externals(sec)]

    def definitions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for scope in self.scopes:
            for block in scope.get("definitions") or []:
                for key, val in block.items():
                    if key != "when":
                        out.setdefault(key, []).extend(str(v) for v in val or [])
        return out

    def specs(self) -> list[str]:
        """Root specs with ``$name`` definitions expanded."""
        defs = self.definitions()
        out = []
        for spec in self.scopes[0].get("specs") or []:
            spec = str(spec)
            out.extend(defs.get(spec[1:], [spec]) if spec.startswith("$") else [spec])
        return out

    def all_spec_strings(self) -> list[str]:
        strings = self.specs()
        for values in self.definitions().values():
            strings.extend(values)
        for _pkg, sec in self.packages():
            strings.extend(_requires(sec))
            strings.extend(_externals(sec))
        return strings


def recipe_info(path: Path) -> dict[str, Any]:
    """Classes, bases, versions and ``depends_on`` specs of a package.py, via ast."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    versions: dict[str, dict[str, str]] = {}
    depends: list[str] = []
    for cls in classes:
        for call in ast.walk(cls):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            first = call.args[0] if call.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            kwargs = {
                k.arg: k.value.value
                for k in call.keywords
                if k.arg and isinstance(k.value, ast.Constant)
            }
            if call.func.id == "version":
                versions[first.value] = kwargs
            elif call.func.id == "depends_on":
                depends.append(first.value)
    return {
        "classes": {
            c.name: [imports.get(ast.unparse(b), ast.unparse(b)) for b in c.bases] for c in classes
        },
        "versions": versions,
        "depends": depends,
    }


def class_name(pkg_dir: str) -> str:
    """Spack's class name for a package directory: ``py_dask_hpc`` -> ``PyDaskHpc``."""
    return "".join(part.capitalize() for part in pkg_dir.lstrip("_").split("_"))


def our_repo(root: Path) -> Path:
    """The project's Spack repository (the directory holding repo.yaml)."""
    return root / "spack" / "repo" / "spack_repo" / "dask_hpc"


def known_builtin(root: Path) -> set[str]:
    """Builtin package names recorded in spack/builtin-packages.txt."""
    path = root / "spack" / "builtin-packages.txt"
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


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
                found = [m.group(1) for m in [_RANGE.search(deps[spack_name])] if m]
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
    scopes = _Scopes({}, [(common_path, common)])
    stack = [spec_names(s)[:1] for s in scopes.definitions().get("dask_stack", [])]
    stack_names = {n[0] for n in stack if n}
    for name in STACK:
        if name not in stack_names:
            problems.append(f"{common_path}: definition dask_stack lacks {name}")
    pins = {}
    for name in ("py-dask", "py-distributed"):
        found = [m.group(1) for r in scopes.requires(name) for m in [_PIN.search(r)] if m]
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
            [m.group(1) for r in scopes.requires(spack_name) for m in [_RANGE.search(r)] if m],
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
    scopes = _Scopes(env, included)
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
        version_tuple(_PIN.search(e).group(1)) for e in scopes.externals("cuda") if _PIN.search(e)
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
            for ext in _externals(sec):
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
            for ext in _externals(sec):
                m = _PIN.search(ext)
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
        scopes = _Scopes(env, included)
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
                m = _PIN.search(ext)
                version = m.group(1) if m else ""
                allowed = [str(v) for v in declared.get(kind) or []]
                if not any(version == a or version.startswith(a + ".") for a in allowed):
                    problems.append(
                        f"{where}: {package}@{version} is not a {kind.upper()} CuPy {pins[0]} "
                        f"declares ({', '.join(allowed) or 'none'})"
                    )
    return problems


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
        scopes = _Scopes(scope, [])
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


def site_data(root: Path, name: str) -> dict[str, Any]:
    """Site profile ``name`` (``{"name": name}`` for local) with ``containers/<name>.yaml``."""
    profile = root / "src" / "dask_hpc" / "sites" / f"{name}.yaml"
    site = dict(load_yaml(profile) or {}) if profile.is_file() else {"name": name}
    site["build"] = load_yaml(root / "containers" / f"{name}.yaml") or {}
    return site


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
