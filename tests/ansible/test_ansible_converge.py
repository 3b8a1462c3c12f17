"""Real ansible-playbook runs of ansible/site.yml against Debian 12, Ubuntu 22.04 and 24.04."""

from __future__ import annotations

import json
import re

import pytest
from ansible_support import ROLE_PATHS, PlaybookRun, warnings
from conftest import CHECKED, NO_VARS, Env

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(1500)]
CONVERGED = (*NO_VARS, "configured")


def failure_messages(run: PlaybookRun) -> list[str]:
    """The msg of every failed task (fatal: [...]: FAILED! => {json})."""
    messages = []
    for line in run.output.splitlines():
        if line.startswith("fatal: ") and "FAILED! => " in line:
            messages.append(json.loads(line.split("FAILED! => ", 1)[1])["msg"])
    return messages


@pytest.mark.parametrize("name", CONVERGED)
def test_first_converge(first_runs: dict[str, PlaybookRun], name: str) -> None:
    """With no variables (or the configured node's), the first converge succeeds and changes,
    with no warning."""
    run = first_runs[f"converge_{name}"]
    assert run.returncode == 0, run.describe()
    counts = run.recap()[name]
    assert counts["failed"] == 0 and counts["unreachable"] == 0, run.describe()
    assert counts["changed"] >= 15, (counts, run.changed_tasks())
    assert warnings(run) == [], run.describe()  # under this checkout's ansible.cfg


def test_lists_refreshed_though_fresh(first_runs: dict[str, PlaybookRun]) -> None:
    """ubuntu2204's lists were emptied and stamped younger than a day: the role refreshed them
    because packages it needs were missing, and installed them."""
    run = first_runs["converge_ubuntu2204"]
    changed = run.changed_tasks()
    assert "dask_hpc : Install the missing packages" in changed, run.describe()
    refresh = run.output.split("TASK [dask_hpc : Refresh apt's package lists", 1)[1]
    assert refresh.split("\n", 2)[1].startswith(("ok: [ubuntu2204]", "changed: [ubuntu2204]"))


@pytest.mark.parametrize("name", CONVERGED)
def test_second_converge_changes_nothing(reruns: dict[str, PlaybookRun], name: str) -> None:
    """Idempotence: a second converge reports changed=0."""
    run = reruns[f"again_{name}"]
    assert run.returncode == 0, run.describe()
    assert run.recap()[name]["changed"] == 0, (run.changed_tasks(), run.describe())


@pytest.mark.parametrize("name", CHECKED)
def test_check_diff_on_converged_node(reruns: dict[str, PlaybookRun], name: str) -> None:
    """--check --diff on a converged node (the configured one with a package URL): no change, no
    diff."""
    run = reruns[f"check_{name}"]
    assert run.returncode == 0, run.describe()
    assert run.recap()[name]["changed"] == 0, (run.changed_tasks(), run.describe())
    assert "--- before" not in run.output, run.describe()


def test_check_on_a_fresh_node(first_runs: dict[str, PlaybookRun]) -> None:
    """--check --diff on a node never converged, with a package URL and booleans and integers
    given as strings: it succeeds and reports what it would change."""
    run = first_runs["check_fresh_package"]
    assert run.returncode == 0, run.describe()
    changed = run.changed_tasks()
    assert run.recap()["fresh"]["changed"] >= 10, (changed, run.describe())
    assert "--- before" in run.output  # --diff shows the files it would write
    assert "dask_hpc : Copy the Apptainer package from the controller" in changed
    # -e dask_hpc_wrapper=true: the wrapper and its link on PATH; -e dask_hpc_lmod=no: no
    # module (the string "no" is not true); -e dask_hpc_nofile=900000 compared as a number with
    # the hard limit 1048576 (as strings, "900000" > "1048576" would be refused).
    assert "dask_hpc : Install the start-cluster wrapper" in changed, run.describe()
    assert "dask_hpc : Put start-cluster on every user's PATH" in changed, run.describe()
    assert "dask_hpc : Install the Lmod module (module load dask-hpc)" not in changed
    link = run.output.split("Create the Lmod module directory]", 1)[1]
    assert link.split("\n", 2)[1].startswith("skipping: [fresh]"), run.describe()


def test_fresh_node_unchanged(env: Env, first_runs: dict[str, PlaybookRun]) -> None:
    """After every --check and refused run against them, the fresh node and the node that cannot
    reach its package index have nothing of the role."""
    assert first_runs  # all of them have run
    for name in ("fresh", "noindex"):
        root = env.targets[name].root
        assert [p for p in ROLE_PATHS if (root / p).exists()] == [], name
        assert "dask-hpc" not in (root / "etc/group").read_text(), name


# Ansible's own argument_specs messages come as "Validation of arguments failed:" and one line
# per problem; the role's own checks are one line each.
REFUSED = {
    "wrong_type": "argument 'dask_hpc_nofile' is of type str and we were unable to convert to int",
    "wrong_choice": "value of dask_hpc_gpu must be one of: auto, nvidia, none, got: amd",
    "numeric_mode": (
        'dask_hpc_shared_dir_mode must be a quoted string of octal digits such as "3770": YAML '
        "read 3770 as a number, which Ansible would apply as mode 7272."
    ),
    "open_mode": 'dask_hpc_shared_dir_mode "3777" would make the directory writable by everyone',
    "string_for_list": (
        'dask_hpc_python_extras must be a list, e.g. -e \'{"dask_hpc_python_extras": ["cuda"]}\', '
        'not the string "cuda".'
    ),
    "list_for_string": (
        'dask_hpc_group must be a string (quote it in YAML), not the list ["dask-hpc"]'
    ),
    "image_without_source": "dask_hpc_provider=image needs the site image: set dask_hpc_image_src",
    "apptainer_on_debian": (
        "Debian 12 has no apptainer package: set dask_hpc_apptainer_package_url to an Apptainer "
        "release .deb (fetched once on the controller, copied to the nodes)"
    ),
    "unknown_user": "dask_hpc_users nosuchuser: no such user on fresh (getent passwd)",
    "unknown_site": 'dask_hpc_site "deepop" is not a dask-hpc site profile: use one of',
    "bad_image_checksum": f"not dask_hpc_image_checksum sha256:{'0' * 64}: fix the checksum",
    "pyxis_asked_none_there": (
        "dask_hpc_container_runtime=pyxis, but fresh has no Pyxis (no line naming spank_pyxis.so "
        "in /etc/slurm/plugstack.conf or /etc/slurm/plugstack.conf.d/*.conf): install Pyxis and "
        "Enroot first"
    ),
    "two_nodes_unshared": (
        "node-a shares none of /sw, /shared, /home over a network file system or an NFS export, "
        "and the cluster has 2 nodes"
    ),
    "two_nodes_local_fs": "dask_hpc_shared_dir /shared/dask-hpc is on a local file system (",
    "index_unreachable": (
        "noindex cannot reach the package index http://127.0.0.1:9/simple (/etc/pip.conf): "
        "Connection refused. Fix the node's network or its pip settings"
    ),
    "two_nodes_check_off": (
        "dask_hpc_provider=image runs apptainer, which node-a does not have, and "
        "dask_hpc_apptainer=false: let the role install it"
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_settings_refused_in_one_line(first_runs: dict[str, PlaybookRun], name: str) -> None:
    """A bad setting stops the play with one line naming the problem and the fix, before any
    change."""
    run = first_runs[name]
    assert run.returncode != 0, run.describe()
    assert all(c["changed"] == 0 for c in run.recap().values()), run.describe()
    assert "changed: " not in run.output, run.describe()
    lines = []
    for message in failure_messages(run):
        header = "Validation of arguments failed:\n"
        lines += (
            message.removeprefix(header).split("\n") if message.startswith(header) else [message]
        )
    expected = REFUSED[name]
    assert [line for line in lines if expected in line], (expected, lines, run.describe())
    if name == "two_nodes_local_fs":
        assert any(
            "but the cluster has 2 nodes" in line and "dask_hpc_shared_dir_check=false" in line
            for line in lines
        ), lines


def test_two_nodes_check_off_passes_the_file_system_check(
    first_runs: dict[str, PlaybookRun],
) -> None:
    """dask_hpc_shared_dir_check=false (a directory shared by other means): nothing shared is
    required, validation goes on to its later checks."""
    run = first_runs["two_nodes_check_off"]
    task = run.output.split("TASK [dask_hpc : Require a shared directory every node sees]", 1)[1]
    assert task.split("\n", 2)[1].startswith("ok: [node-"), run.describe()
    assert set(run.recap()) == {"node-a", "node-b"}


def test_no_conditional_on_a_string(first_runs: dict[str, PlaybookRun]) -> None:
    """Booleans given as strings never reach a conditional (ansible-core would refuse or, worse,
    treat "false" as true)."""
    for run in first_runs.values():
        assert not re.search(r"Conditional result .* was of type 'str'", run.output), run.describe()
