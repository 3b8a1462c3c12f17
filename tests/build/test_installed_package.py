"""dask-hpc installed as a user installs it (issue 35): `pip install .` (not editable) gives a
command that writes any site's job script, from any directory; the documentation builds with
the package and its `docs` extra, no invoke; and the build tooling installed the same way
(`pip install ./deploy`, not editable) still drives `invoke sites` and `invoke build` from the
checkout.

The installs are real (pip, from this tree, into a virtual environment over this Python's
packages for the dependencies: ``--no-deps``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from build_support import REPO
from golden_cases import CASES
from harness.venvs import venv_over_this_python

GOLDEN = Path(__file__).resolve().parent / "golden"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with dask-hpc and dask-hpc-deploy installed, not editable."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    python = venv_over_this_python(venv)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(REPO), str(REPO / "deploy")],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    where = subprocess.run(
        [str(python), "-c", "import dask_hpc, dask_hpc_deploy as d; print(dask_hpc.__file__); "
         "print(d.__file__)"], capture_output=True, text=True, cwd=venv, timeout=60, check=True,
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where  # not the checkout's
    return venv


def test_hpc_job_writes_every_sites_script_from_an_install(
    installed: Path, run_cmd, tmp_path: Path
) -> None:
    """The same scripts as `invoke job` in the checkout (the goldens), from a directory that
    is no checkout, with the installed package's data files (profiles, templates)."""
    for name, args in CASES.items():
        result = run_cmd([str(installed / "bin" / "hpc-job"), *args], cwd=tmp_path, timeout=60)
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout == (GOLDEN / f"{name}.sh").read_text(), name


def test_the_docs_build_from_the_install_with_no_invoke(installed: Path, run_cmd, tmp_path) -> None:
    """Every page's generated scripts come from the installed commands: with invoke made
    unimportable, the documentation still builds (warnings are errors)."""
    poison = tmp_path / "no-invoke"
    poison.mkdir()
    (poison / "invoke.py").write_text("raise ImportError('the documentation needs no invoke')\n")
    env = {"PYTHONPATH": str(poison)}
    argv = [str(installed / "bin" / "python"), "-m", "sphinx", "-c", "docs", "-W", "--keep-going",
            "-n", "-b", "html", "-q", ".", str(tmp_path / "html")]
    result = run_cmd(argv, cwd=REPO, env={**_base_env(), **env}, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "html" / "docs" / "sites.html").is_file()


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_invoke_sites_and_build_with_the_tooling_installed_as_a_wheel(
    installed: Path, run_cmd
) -> None:
    """Before: `invoke sites` printed an empty table and `invoke build --dry-run` a
    FileNotFoundError traceback (the tooling looked for containers/ beside its own files)."""
    python = str(installed / "bin" / "python")
    sites = run_cmd([python, "-m", "invoke", "sites"], cwd=REPO, timeout=120)
    assert sites.returncode == 0, sites.stderr
    names = [line.split()[0] for line in sites.stdout.splitlines()[1:]]
    assert {"aurora", "polaris", "sophia", "perlmutter", "frontier", "deepops", "local"} <= set(
        names
    ), sites.stdout
    build = run_cmd([python, "-m", "invoke", "build", "--site", "local", "--dry-run"], cwd=REPO,
                    timeout=120)
    assert build.returncode == 0 and "Traceback" not in build.stderr, build.stderr
    assert build.stdout.splitlines()[-1].startswith("apptainer build "), build.stdout
