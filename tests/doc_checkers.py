"""One checker per program the documentation's commands start (importable as
``doc_checkers``; what each does: tests/doc_commands.py). A checker returns how it checked the
command, or raises AssertionError; a program with no checker fails the test."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import tomllib
from doc_commands import REPO, SUBMIT, Command, PageRun, redirects, run
from doc_launch import plan_line

SITES = ("aurora", "polaris", "sophia", "perlmutter", "frontier", "elcapitan", "deepops", "summit",
         "thetagpu")
LAUNCHERS = ("srun", "mpiexec", "mpirun", "jsrun", "start-cluster")


def site_of(command: Command) -> str | None:
    """The site a command is for: its image's name, else the nearest heading naming one."""
    match = re.search(r"dask-hpc-(\w+)\.sif", command.text)
    if match and match.group(1) in SITES:
        return match.group(1)
    lines = command.page.read_text().splitlines()[: command.line]
    for line in reversed(lines):
        if line.startswith("#") and not line.startswith("#!") and " " in line:
            named = [s for s in SITES if s in line.lower()]
            if named:
                return named[0]
    return None


def launch(argv: list[str], command: Command, page: PageRun) -> str:
    if "start-cluster" not in argv:
        raise AssertionError(f"{argv[0]} runs no start-cluster: nothing here can run it")
    own = argv[argv.index("start-cluster") + 1 :]
    if own and own[0] in ("--version", "--help"):
        done = run([sys.executable, "-m", "dask_hpc", own[0]], page)
        assert done.returncode == 0, done.stderr
        return "ran"
    return plan_line(argv, page.allocation, site_of(command))


def salloc(argv: list[str], command: Command, page: PageRun) -> str:
    later = command.block[command.block.index(command.text) + 1 :]
    if not any(line.startswith("srun ") for line in later):
        raise AssertionError("salloc with no srun after it in its block")
    page.allocation = argv
    return "the allocation of the srun lines after it"


def submit(argv: list[str], command: Command, page: PageRun) -> str:
    argv, _, stdin = redirects(argv)
    if argv[0] == "sbatch" and any(a.startswith("--wrap") for a in argv):
        wrapped = next(a.split("=", 1)[1] if "=" in a else argv[argv.index(a) + 1]
                       for a in argv if a.startswith("--wrap"))
        page.allocation = argv
        return launch(wrapped.split(), command, page)
    script = stdin if argv[0] == "bsub" else argv[-1]
    kind = "flux batch" if argv[0] == "flux" else argv[0]
    text = page.files.get(script or "")
    assert text is not None, f"{script} was written by no command before it on the page"
    assert text.split("\n", 2)[1].startswith(SUBMIT[argv[0]]), f"{script} is not a {kind} job"
    return f"submits {script}, a {kind} job script the page wrote"


def flux(argv: list[str], command: Command, page: PageRun) -> str:
    """flux run (a launcher), flux batch (a submission), flux alloc (an allocation)."""
    if argv[1] == "run":
        return launch(argv, command, page)
    if argv[1] == "batch":
        return submit(argv, command, page)
    if argv[1] == "alloc":
        page.allocation = argv
        return "the allocation of the flux run lines after it"
    raise AssertionError(f"flux {argv[1]}: no checker for it")


def invoke(argv: list[str], command: Command, page: PageRun) -> str:
    argv, out, _ = redirects(argv)
    task = argv[1]
    if task in ("push", "pull"):  # a registry: dry-run their options against the task's own
        sys.path.insert(0, str(REPO))
        import tasks as tasklib  # the repository's tasks.py

        names = {a.name for a in getattr(tasklib, task).get_arguments()}
        given = {a[2:].split("=")[0].replace("-", "_") for a in argv[2:] if a.startswith("--")}
        assert given <= names, f"invoke {task} has no {sorted(given - names)}"
        return f"invoke {task}'s options are its own (no registry here)"
    if task == "build" and "--dry-run" not in argv:
        argv = [*argv, "--dry-run"]
    done = run([sys.executable, "-m", "invoke", *argv[1:]], page, command.env, timeout=300)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
    if out:
        page.files[out] = done.stdout
    return "ran" if "--dry-run" in command.text or task != "build" else "dry-run (--dry-run)"


def hpc_job(argv: list[str], command: Command, page: PageRun) -> str:
    argv, out, _ = redirects(argv)
    done = run([sys.executable, "-m", "dask_hpc.batch", *argv[1:]], page, command.env)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
    if out:
        page.files[out] = done.stdout
    return "ran"


def hpc_cluster(argv: list[str], command: Command, page: PageRun) -> str:
    from dask_hpc.elastic.cli_args import build_parser, split_command

    if argv[1] == "script":
        done = run([sys.executable, "-m", "dask_hpc.elastic", *argv[1:]], page, command.env)
        assert done.returncode == 0, done.stderr
        return "ran"
    options, _ = split_command(argv[1:])
    build_parser().parse_args(options)
    return f"hpc-cluster {argv[1]}: parsed by its own parser (it needs a running cluster)"


def python(argv: list[str], command: Command, page: PageRun) -> str:
    rest = argv[1:]
    if rest[:2] == ["-m", "venv"]:
        done = run([sys.executable, "-m", "venv", "--without-pip", *rest[2:]], page)
        assert done.returncode == 0, done.stderr
        return "ran (without pip: the install lines are checked on their own)"
    if rest[:3] == ["-m", "pip", "install"]:
        extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
                     ["optional-dependencies"])
        for word in rest[3:]:
            for extra in re.findall(r"\[([\w,-]+)\]", word):
                assert set(extra.split(",")) <= extras, f"no extra {extra} in pyproject.toml"
        return "its paths and extras exist (tests/build/test_readme_install.py installs)"
    if rest[:3] == ["-m", "pip", "wheel"]:
        out = Path(rest[rest.index("-w") + 1])
        # From a clone: setuptools builds in the tree's build/ and removes its bdist directory
        # when done, under a wheel another test builds from this checkout at the same time
        # (the local image's: "could not create 'build/bdist.linux-x86_64/...'", 2026-12-01)
        tree = page.work / "checkout"
        cloned = run(["git", "clone", "-q", str(REPO), str(tree)], page)
        assert cloned.returncode == 0, cloned.stderr
        done = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(page.work / out), str(tree)], page, timeout=300)
        assert done.returncode == 0, done.stderr
        assert list((page.work / out).glob("dask_hpc-*.whl")), "no wheel"
        return "ran"
    if rest[:2] == ["-m", "sphinx"]:
        assert rest[2:8] == ["-c", "docs", "-W", "-n", "-b", "html"], rest
        return "the build tests/test_docs.py runs"
    if rest[:2] == ["-m", "pytest"]:
        return "the suite itself (tests/test_collection.py checks it collects)"
    return help_options([sys.executable, *rest], page)


def help_options(argv: list[str], page: PageRun) -> str:
    """A program's --help, which must list every option the command gives."""
    head = argv[:3] if argv[1] == "-m" else argv[:2]
    if len(argv) > len(head) and not argv[len(head)].startswith("-"):
        head.append(argv[len(head)])  # a subcommand (dask_hpc.images verify)
    done = run([*head, "--help"], page, {"PYTHONPATH": f"{REPO / 'src'}"})
    assert done.returncode == 0, done.stderr
    given = [a.split("=")[0] for a in argv if a.startswith("--")]
    missing = [a for a in given if a not in done.stdout]
    assert not missing, f"{' '.join(head)} --help has no {missing}"
    return "its options are in its --help"


def shell_file(argv: list[str], command: Command, page: PageRun) -> str:
    done = run(["bash", "-n", argv[1]], page)
    assert done.returncode == 0, done.stderr
    return "bash -n"


def real(argv: list[str], command: Command, page: PageRun) -> str:
    done = run(argv, page)
    assert done.returncode == 0, done.stderr
    return "ran"


def apptainer(argv: list[str], command: Command, page: PageRun) -> str:
    if "start-cluster" in argv:
        return launch(["start-cluster", *argv[argv.index("start-cluster") + 1 :]], command, page)
    assert shutil.which("apptainer"), "apptainer is not on PATH: run tests/setup/apptainer.sh"
    done = run(["apptainer", argv[1], "--help"], page, timeout=120)
    assert done.returncode == 0, done.stderr
    return f"apptainer {argv[1]} exists (the image is built and run by tests/build)"


def ansible_playbook(argv: list[str], command: Command, page: PageRun) -> str:
    words = [w.replace("/path/to/dask-hpc", str(REPO)) for w in argv]
    if "-i" not in words:
        words += ["-i", str(REPO / "ansible/inventory/example")]
    done = run([*words, "--syntax-check"], page, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return "--syntax-check"


def sidroot(argv: list[str], command: Command, page: PageRun) -> str:
    return CHECKERS[argv[1]](argv[1:], command, page)


def activate(argv: list[str], command: Command, page: PageRun) -> str:
    if (page.work / argv[1]).is_file():
        return "the file it sources exists"
    # the suite's environment, which tests/setup/install.sh makes in the checkout
    venv = Path(argv[1]).parts[0]
    scripts = (REPO / "tests/setup").glob("*.sh")
    makers = [p.name for p in scripts if f"VENV={venv}\n" in p.read_text()]
    assert makers, f"{argv[1]} does not exist, and no tests/setup script makes {venv}"
    return f"the environment tests/setup/{makers[0]} makes"


CHECKERS = {
    **dict.fromkeys(LAUNCHERS, launch),
    "salloc": salloc,
    **dict.fromkeys(SUBMIT, submit),
    "flux": flux,
    "invoke": invoke,
    "hpc-cluster": hpc_cluster,
    "hpc-job": hpc_job,
    "python3": python,
    "python": python,
    "bash": shell_file,
    "openssl": real,
    "chmod": real,
    "apptainer": apptainer,
    "ansible-playbook": ansible_playbook,
    "sidroot": sidroot,
    ".": activate,
}
