"""invoke's task list, help texts, `invoke sites`, dry runs and one-line errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from build_support import REPO

TASKS = ("build", "sites", "job", "lint", "test", "definitions", "push", "pull")


def test_every_task_is_listed_with_help(invoke) -> None:
    result = invoke("--list")
    assert result.returncode == 0, result.stderr
    for name in TASKS:
        line = next((ln for ln in result.stdout.splitlines() if ln.strip().startswith(name)), "")
        assert len(line.split()) > 1, f"{name} has no help text in invoke --list"


@pytest.mark.parametrize("name", TASKS)
def test_task_help(invoke, name: str) -> None:
    result = invoke("--help", name)
    assert result.returncode == 0, result.stderr
    assert "Docstring:\n  none" not in result.stdout
    options = [ln for ln in result.stdout.splitlines() if ln.strip().startswith("-")]
    for option in options:
        assert len(option.split()) > 1 or option.strip() == "", f"{name}: {option} lacks help"


def test_build_help_names_its_options(invoke) -> None:
    out = invoke("--help", "build").stdout
    for option in ("--site", "--output", "--dry-run", "--force"):
        assert option in out


def test_sites_table(invoke) -> None:
    result = invoke("sites")
    assert result.returncode == 0, result.stderr
    rows = {ln.split()[0]: ln for ln in result.stdout.splitlines()[1:]}
    assert set(rows) == {
        "aurora",
        "deepops",
        "frontier",
        "local",
        "perlmutter",
        "polaris",
        "sophia",
        "summit",
        "thetagpu",
    }
    assert "lsf" in rows["summit"] and "jsrun" in rows["summit"]
    assert "nvidia/cuda:12.4.1-devel-ubi8" in rows["summit"] and "power9le" in rows["summit"]
    assert "pbs" in rows["aurora"] and "6 intel" in rows["aurora"]
    assert "ubuntu:24.04" in rows["aurora"]
    assert "cobalt" in rows["thetagpu"] and "openmpi" in rows["thetagpu"]
    assert "rocm/" in rows["frontier"] and "8 amd" in rows["frontier"]
    assert "detected nvidia" in rows["deepops"]
    assert "pbs" in rows["sophia"] and "openmpi" in rows["sophia"] and "8 nvidia" in rows["sophia"]
    retired = {name for name, row in rows.items() if "retired" in row}
    assert retired == {"summit", "thetagpu"}
    assert rows["summit"].endswith("retired 2024-11-15")


def test_dry_run_prints_the_exact_build_command(invoke) -> None:
    result = invoke("build", "--site", "local", "--dry-run", "--output", "/tmp/x/out.sif")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("apptainer build ")
    assert lines[-1].endswith(" /tmp/x/out.sif containers/local.def")
    assert any(ln.startswith("python3 -m pip download") for ln in lines)
    assert not Path("/tmp/x/out.sif").exists()


def test_dry_run_signs_with_the_configured_key(invoke, tagged_env, tmp_path: Path) -> None:
    """--sign-key (or $DASK_HPC_SIGNING_KEY): `apptainer sign --key` follows the build; a key
    others can read is refused in one line."""
    key = tmp_path / "site.key.pem"
    key.write_text("not read by a dry run\n")
    key.chmod(0o600)
    out = "/tmp/x/out.sif"
    signed = ("build", "--site", "local", "--dry-run", "--output", out)
    result = invoke(*signed, "--sign-key", str(key))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"apptainer sign --key {key} {out}"
    env = {**tagged_env, "DASK_HPC_SIGNING_KEY": str(key)}
    result = invoke("build", "--site", "local", "--dry-run", "--output", out, env=env)
    assert result.stdout.splitlines()[-1] == f"apptainer sign --key {key} {out}"
    key.chmod(0o644)
    _one_line_error(
        invoke("build", "--site", "local", "--dry-run", "--sign-key", str(key)),
        f"signing key {key} is readable by others (mode 0644); chmod 600 {key}",
    )
    _one_line_error(
        invoke("build", "--site", "local", "--dry-run", "--sign-key", str(tmp_path / "none")),
        "does not exist",
    )


def _one_line_error(result, expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]


def test_unknown_site_is_one_line(invoke) -> None:
    _one_line_error(invoke("build", "--site", "nowhere"), "unknown site 'nowhere'")
    _one_line_error(
        invoke("job", "--site", "nowhere", "--nodes", "1", "--", "x"), "unknown site 'nowhere'"
    )


def test_building_a_site_without_an_image_is_one_line(invoke) -> None:
    _one_line_error(
        invoke("build", "--site", "elcapitan"),
        "site elcapitan has no image: its jobs run dask-hpc from the job's own environment",
    )


def test_foreign_architecture_dry_run_prints_the_plan_with_a_warning(invoke) -> None:
    """A user on x86_64 can see the commands they will run on the ppc64le machine."""
    result = invoke("build", "--site", "summit", "--dry-run", "--output", "/tmp/x/summit.sif")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        "warning: a ppc64le image cannot be built on this x86_64 host: build it on a ppc64le "
        "machine (see containers/README.md)"
    ]
    assert result.stdout.splitlines()[-1].startswith("apptainer build --fakeroot ")
    assert result.stdout.splitlines()[-1].endswith(" /tmp/x/summit.sif containers/summit.def")


def test_foreign_architecture_real_build_is_one_line(invoke, tmp_path: Path) -> None:
    _one_line_error(
        invoke("build", "--site", "summit", "--output", str(tmp_path / "s.sif")),
        "a ppc64le image cannot be built on this x86_64 host",
    )


def test_missing_apptainer_is_one_line(invoke, tagged_env, tmp_path: Path) -> None:
    env = dict(tagged_env)
    env["PATH"] = str(Path(sys.executable).parent)  # python and invoke, no apptainer
    result = invoke("build", "--site", "local", "--output", str(tmp_path / "a.sif"), env=env)
    _one_line_error(result, "apptainer is not on PATH")


def test_bad_numbers_are_one_line(invoke) -> None:
    _one_line_error(
        invoke("job", "--site", "polaris", "--nodes", "two", "--", "x"),
        "--nodes takes a whole number",
    )
    _one_line_error(
        invoke("job", "--site", "polaris", "--nodes", "1", "--walltime", "1:75", "--", "x"),
        "bad walltime",
    )
    _one_line_error(invoke("job", "--site", "polaris", "--nodes", "1"), "no command to run")


def test_existing_image_is_not_overwritten(invoke, tmp_path: Path) -> None:
    out = tmp_path / "keep.sif"
    out.write_text("precious")
    _one_line_error(invoke("build", "--site", "local", "--dry-run", "--output", str(out)), "exists")
    assert out.read_text() == "precious"


def test_definitions_are_up_to_date(invoke) -> None:
    result = invoke("definitions", "--check")
    assert result.returncode == 0, result.stderr + result.stdout


def test_build_refuses_a_stale_definition(tmp_path: Path) -> None:
    from dask_hpc.errors import UsageError
    from dask_hpc_deploy import build
    from dask_hpc_deploy.targets import load_target

    (tmp_path / "containers").mkdir()
    text = (REPO / "containers" / "local.def").read_text()
    (tmp_path / "containers" / "local.def").write_text(text.replace("=1", "=0"))
    with pytest.raises(UsageError, match="out of date"):
        build.plan(load_target("local"), tmp_path, check_tools=False)


def test_lint_passes_on_the_repository(invoke) -> None:
    result = invoke("lint", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in ("definitions", "spack", "ansible", "python"):
        assert f"{name}: ok" in result.stdout


def test_lint_reports_a_stale_or_orphan_definition(tmp_path: Path) -> None:
    from dask_hpc_deploy.lint import lint_definitions

    shutil.copytree(REPO / "containers", tmp_path / "containers")
    path = tmp_path / "containers" / "frontier.def"
    path.write_text(path.read_text().replace("%labels", "%label"))
    (tmp_path / "containers" / "extra.def").write_text("Bootstrap: docker\n\n%post\n    true\n")
    (tmp_path / "containers" / "aurora.def").unlink()
    problems = "\n".join(lint_definitions(tmp_path))
    assert "containers/frontier.def: out of date" in problems
    assert "containers/extra.def: no build data containers/extra.yaml" in problems
    assert "containers/aurora.def: missing" in problems


def test_invoke_job_h_gives_its_help(invoke) -> None:
    """`-h` was taken for --launcher's short flag ("Flag <Argument: launcher (h)> needed
    value"); the options are long ones only, as hpc-job's (issue 35)."""
    result = invoke("job", "-h")
    assert result.returncode == 0, result.stderr
    assert "Usage: inv[oke] [--core-opts] job" in result.stdout
    for option in ("--site", "--nodes", "--batch-system", "--launcher", "--python"):
        assert option in result.stdout


def test_invoke_job_on_the_generic_site_names_batch_system(invoke) -> None:
    _one_line_error(
        invoke("job", "--site", "generic", "--nodes", "1", "--", "python", "job.py"),
        "site generic has no batch system; name one with --batch-system (slurm, pbs, lsf, "
        "flux, cobalt), or run start-cluster directly",
    )
