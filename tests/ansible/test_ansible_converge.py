"""Real ansible-playbook runs of ansible/site.yml against Debian 12 and Ubuntu 22.04 chroots."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_support import TIMINGS, Env, PlaybookRun, run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(900)]

BAD_CHECKSUM = "sha256:" + "0" * 64
# Runs that only read the converged targets (or fail before touching them): run side by side.
RERUNS: dict[str, tuple[str, ...]] = {
    "check_fresh": ("--check",),  # against env.fresh_inventory: a node never converged
    "idempotence": (),
    "check_diff": ("--check", "--diff"),
    "bad_checksum": ("-l", "debian12", "--check", "-e", f"dask_hpc_image_checksum={BAD_CHECKSUM}"),
    "wrong_type": ("-l", "debian12", "-e", "dask_hpc_nofile=lots"),
    "wrong_choice": ("-l", "debian12", "-e", "dask_hpc_gpu=amd"),
}


@pytest.fixture(scope="module")
def reruns(converged: Env) -> dict[str, PlaybookRun]:
    """The playbook runs after the first converge, started concurrently."""
    with ThreadPoolExecutor(len(RERUNS)) as pool:
        futures = {
            name: pool.submit(
                run_playbook,
                converged.workdir,
                converged.fresh_inventory if name == "check_fresh" else converged.inventory,
                *args,
            )
            for name, args in RERUNS.items()
        }
        runs = {name: f.result() for name, f in futures.items()}
    for name, run in runs.items():
        TIMINGS[f"{name} (concurrent)"] = run.seconds
    return runs


def test_converge_changes_both_targets(converged: Env) -> None:
    """The first converge succeeds on both targets and changes them."""
    run = converged.converge
    assert run is not None
    recap = run.recap()
    assert set(recap) == set(converged.targets), run.describe()
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, host
        assert counts["changed"] > 10, (host, counts)


def test_second_converge_changes_nothing(converged: Env, reruns: dict[str, PlaybookRun]) -> None:
    """Idempotence: a second converge reports changed=0 everywhere."""
    run = reruns["idempotence"]
    assert run.returncode == 0, run.describe()
    recap = run.recap()
    assert set(recap) == set(converged.targets), run.describe()
    assert {h: c["changed"] for h, c in recap.items()} == dict.fromkeys(recap, 0), run.describe()


def test_check_diff_on_converged_targets_reports_no_change(
    converged: Env, reruns: dict[str, PlaybookRun]
) -> None:
    """--check --diff against converged targets: no change and no diff."""
    run = reruns["check_diff"]
    assert run.returncode == 0, run.describe()
    recap = run.recap()
    assert set(recap) == set(converged.targets), run.describe()
    assert all(c["changed"] == 0 for c in recap.values()), run.describe()
    assert "--- before" not in run.output, run.describe()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("wrong_type", "argument 'dask_hpc_nofile' is of type str"),
        ("wrong_choice", "value of dask_hpc_gpu must be one of: auto, nvidia, none, got: amd"),
    ],
)
def test_wrong_variable_fails_with_argument_spec_message(
    reruns: dict[str, PlaybookRun], name: str, message: str
) -> None:
    """A variable of the wrong type or value stops the play at argument validation."""
    run = reruns[name]
    assert run.returncode != 0, run.describe()
    assert "Validating arguments against arg spec 'main'" in run.output, run.describe()
    assert "Validation of arguments failed" in run.output, run.describe()
    assert message in run.output, run.describe()
    assert run.recap()["debian12"] == {"ok": 1, "changed": 0, "unreachable": 0, "failed": 1}


def test_wrong_image_checksum_fails_before_copying(reruns: dict[str, PlaybookRun]) -> None:
    """An image whose checksum differs from dask_hpc_image_checksum is refused."""
    run = reruns["bad_checksum"]
    assert run.returncode != 0, run.describe()
    assert f"not dask_hpc_image_checksum {BAD_CHECKSUM}" in run.output, run.describe()
    assert "TASK [dask_hpc : Copy the image into the shared directory]" not in run.output


def test_check_mode_on_a_fresh_node_changes_nothing(
    converged: Env, reruns: dict[str, PlaybookRun]
) -> None:
    """--check on a node never converged reports what it would change, and changes nothing."""
    run = reruns["check_fresh"]
    assert run.returncode == 0, run.describe()
    assert run.recap()["debian12-fresh"]["changed"] > 10, run.describe()
    root = converged.fresh.root
    for path in ("shared", "opt/dask-hpc", "usr/share/deepops", "etc/sysctl.d/90-dask-hpc.conf"):
        assert not (root / path).exists(), path
