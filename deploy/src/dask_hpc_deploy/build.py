"""Image builds: validate a target, then the exact commands that build its image."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dask_hpc.errors import UsageError
from dask_hpc.guard import images

from . import definitions, versions
from .targets import Target

ARCH_ALIASES: Mapping[str, str] = {"amd64": "x86_64", "ppc64el": "ppc64le", "arm64": "aarch64"}


@dataclass(frozen=True)
class Step:
    """One command of a build, run from the repository root."""

    what: str
    argv: Sequence[str]

    def __str__(self) -> str:
        return shlex.join(self.argv)


@dataclass
class BuildPlan:
    """Everything ``invoke build`` will do, in order."""

    target: Target
    definition: Path
    output: Path
    build_args: dict[str, str] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sign_key: Path | None = None  # the site's private key: the image is signed with it

    @property
    def digest_file(self) -> Path:
        """Where execute() records the finished image's sha256."""
        return images.digest_path(self.output)


def host_arch() -> str:
    """This machine's architecture in the names our build data uses."""
    machine = platform.machine()
    return ARCH_ALIASES.get(machine, machine)


def host_mirror() -> str:
    """The Debian/Ubuntu mirror this host's apt uses for its own release (from apt's view)."""
    try:
        codename = next(
            line.split("=", 1)[1].strip().strip('"')
            for line in Path("/etc/os-release").read_text().splitlines()
            if line.startswith("VERSION_CODENAME=")
        )
        policy = subprocess.run(
            ["apt-cache", "policy"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, StopIteration, subprocess.CalledProcessError):
        raise UsageError(
            "cannot read this host's apt sources", "the local image needs a Debian host with apt"
        ) from None
    for line in policy.splitlines():
        words = line.split()
        if len(words) >= 3 and words[2] == f"{codename}/main" and words[1].startswith("http"):
            return words[1]
    raise UsageError(
        f"no {codename}/main mirror in this host's apt sources",
        "add one to /etc/apt/sources.list.d",
    )


def _work_dir(target: Target, repo: Path) -> Path:
    return repo.resolve() / "build" / "containers" / target.name


def build_args(target: Target, repo: Path) -> dict[str, str]:
    """The ``--build-arg`` values a build of ``target`` passes: dask-hpc's version from git
    (the image's labels; the Spack stack installs dask-hpc as that version), and for the
    wheels stack where its base and wheels are."""
    args = {"dask_hpc_version": versions.source_version(repo)}
    if target.stack == "wheels":
        work = _work_dir(target, repo)
        args["base"] = str(work / f"base-{target.build['debian_suite']}")
        args["wheels"] = str(work / "wheels")
    return args


def _local_steps(target: Target, repo: Path, args: Mapping[str, str]) -> list[Step]:
    """Debian base from the host's mirror (cached) and wheels of dask-hpc and its dependencies."""
    build = target.build
    base, wheels = Path(args["base"]), Path(args["wheels"])
    steps: list[Step] = []
    if not (base / "usr" / "bin" / "python3").exists():
        partial = base.with_name(base.name + ".partial")
        include = ",".join(build["debian_packages"])
        steps += [
            Step("clear a half-made base", ["rm", "-rf", str(partial)]),
            Step(
                "Debian base from the host's mirror",
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={include}",
                    str(build["debian_suite"]),
                    str(partial),
                    host_mirror(),
                ],
            ),
            Step(
                "no device nodes in a build base",
                ["find", f"{partial}/dev", "-mindepth", "1", "-delete"],
            ),
            Step("base ready", ["mv", str(partial), str(base)]),
        ]
    version = args["dask_hpc_version"]  # the wheel's, built from the same tree
    pyver = str(build["python_version"])
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (36, 35, 34, 31, 28, 27, 24, 17)]
    steps += [
        Step("fresh wheel directory", ["rm", "-rf", str(wheels)]),
        Step(
            "dask-hpc wheel",
            ["python3", "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), "."],
        ),
        Step(
            "dependency wheels for the image's Python",
            [
                "python3",
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                f"--python-version={pyver}",
                "--implementation=cp",
                *platforms,
                "--platform=manylinux2014_x86_64",
                "--dest",
                str(wheels),
                "--constraint",  # the exact Dask of every image
                str(repo / versions.CONSTRAINTS),
                str(wheels / f"dask_hpc-{version}-py3-none-any.whl"),
                *map(str, build.get("pip_packages") or []),
            ],
        ),
    ]
    return steps


def plan(
    target: Target,
    repo: Path,
    output: Path | None = None,
    force: bool = False,
    check_tools: bool = True,
    sign_key: Path | None = None,
) -> BuildPlan:
    """Validate ``target`` for this host and list the commands that build its image (and sign
    it with ``sign_key``, Apptainer's own signing, when given)."""
    repo = repo.resolve()
    arch = host_arch()
    foreign = None
    if target.arch != arch:
        foreign = (
            f"a {target.arch} image cannot be built on this {arch} host",
            f"build it on a {target.arch} machine (see containers/README.md)",
        )
        if check_tools:  # the real build refuses; a dry run shows the plan with a warning
            raise UsageError(*foreign)
    definition = definitions.definition_path(repo / "containers", target)
    if not definition.is_file():
        raise UsageError(f"{definition} is missing", "run: invoke definitions")
    text = definition.read_text()
    if text != definitions.render(target):
        raise UsageError(
            f"{definition.relative_to(repo)} is out of date", "run: invoke definitions"
        )
    output = (output or Path(f"dask-hpc-{target.name}.sif")).resolve()
    if output.exists() and not force:
        raise UsageError(f"{output} exists", "remove it or pass --force")
    result = BuildPlan(target=target, definition=definition, output=output, sign_key=sign_key)
    if foreign:
        result.warnings.append(f"{foreign[0]}: {foreign[1]}")
    result.build_args = build_args(target, repo)
    if check_tools:  # before anything reads the host (apt sources): the first missing tool
        base = Path(result.build_args.get("base", "/nonexistent"))
        fresh = target.stack == "wheels" and not (base / "usr" / "bin" / "python3").exists()
        needed = ["apptainer"] + (["debootstrap"] if fresh else [])
        for tool in needed:
            if shutil.which(tool) is None:
                raise UsageError(f"{tool} is not on PATH", "install it (containers/README.md)")
    if target.stack == "spack":
        env = repo / "spack" / "envs" / target.name / "spack.yaml"
        if not env.is_file():
            raise UsageError(
                f"no Spack environment {env.relative_to(repo)}", "the image's stack comes from it"
            )
    if target.stack == "wheels":
        result.steps = _local_steps(target, repo, result.build_args)
    argv = ["apptainer", "build", *map(str, target.build.get("build_flags") or [])]
    argv += ["--force"] if force else []
    for key, value in result.build_args.items():
        argv += ["--build-arg", f"{key}={value}"]
    argv += [str(output), str(definition.relative_to(repo))]
    result.steps.append(Step("the image", argv))
    if sign_key is not None:
        result.steps.append(
            Step("sign the image", ["apptainer", "sign", "--key", str(sign_key), str(output)])
        )
    return result


def checkout_lock(repo: Path) -> Path:
    """The lock that wheels-stack builds of one checkout take in turn."""
    return repo.resolve() / "build" / "containers" / ".lock"


@contextlib.contextmanager
def _one_local_build_at_a_time(build_plan: BuildPlan, repo: Path) -> Iterator[None]:
    """Hold the checkout's lock for a wheels-stack build: its steps share the checkout's
    setuptools build/ (which `pip wheel .` empties when done) and the target's work directory
    (whose wheels the first step removes). Two such builds at once broke each other's wheel;
    the second now waits, and says so. Spack-stack builds write nothing in the checkout."""
    if build_plan.target.stack != "wheels":
        yield
        return
    path = checkout_lock(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another image build from this checkout ({path})",
                  file=sys.stderr, flush=True)  # fmt: skip
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's close


def execute(build_plan: BuildPlan, repo: Path, echo: bool = True) -> None:
    """Run every step from ``repo``, then record the image's sha256 beside it (IMAGE.sha256);
    UsageError naming the step that failed."""
    with _one_local_build_at_a_time(build_plan, repo):
        for step in build_plan.steps:
            if echo:
                print(f"+ {step}", flush=True)
            try:
                rc = subprocess.run(list(step.argv), cwd=repo, env=os.environ.copy()).returncode
            except FileNotFoundError:
                raise UsageError(
                    f"{step.argv[0]} is not on PATH", f"needed for: {step.what}"
                ) from None
            if rc != 0:
                raise UsageError(f"build step failed (exit {rc}): {step.what}", str(step))
    images.record_digest(build_plan.output)
