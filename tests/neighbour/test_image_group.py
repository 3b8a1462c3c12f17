"""Images in a project directory (issue 44, item 2), as its members and as a user outside it.

ALCF runs jobs from the project's directory, group-writable (2770, the project's group); an
image there was refused with no way out. Now the user may name the one group they trust,
``hpc.image-group``: a member's image is accepted (each step of its path writable by that group
at most, or a member's), provided its sha256 is recorded (``IMAGE.sha256``, under the same
rule) and matches at job start. Without the setting the refusal names both ways out. Each case
runs the job script's own image lines (``dask_hpc.batch.image``) in bash, as the job does
(``set -euo pipefail``), after the render-time check (``invoke job``, HPCCluster).

The project: a group made here with the test's user (root, the owner) and the second user
(``dask-hpc-intruder``, the member) in it, a third user made here outside it, and a 2770
directory of root's and the project's. The other users act through ``harness.neighbour`` with
the groups the user database gives them (as after a login) and umask 007 (a project's).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import secrets
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.config
import harness.neighbour
import pytest
from harness.neighbour import Neighbour, account, shared_place

from dask_hpc.batch import image as image_lines
from dask_hpc.batch import script
from dask_hpc.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
RAN = "ran the project's image"
IMAGE = f'#!/bin/sh\necho "{RAN}"\n'.encode()


def _as_logged_in(user: pwd.struct_passwd) -> None:
    """harness.neighbour's privilege drop, keeping the groups the user database gives."""
    os.setgroups(os.getgrouplist(user.pw_name, user.pw_gid))
    os.setresgid(user.pw_gid, user.pw_gid, user.pw_gid)
    os.setresuid(user.pw_uid, user.pw_uid, user.pw_uid)
    os.umask(0o007)
    os.chdir("/")


def _admin(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Neighbour, Neighbour]]:
    """(the project's group, a member, a user outside it): made here, removed after."""
    monkeypatch.setattr(harness.neighbour, "_become", _as_logged_in)
    member = account()
    tag = secrets.token_hex(3)
    group, outsider = f"dhp-proj-{tag}", f"dhp-out-{tag}"
    _admin("groupadd", "--system", "--users", f"root,{member.pw_name}", group)
    try:
        _admin("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
               "--shell", "/usr/sbin/nologin", outsider)  # fmt: skip
        try:
            yield group, Neighbour(member), Neighbour(pwd.getpwnam(outsider))
        finally:
            _admin("userdel", outsider)
    finally:
        _admin("groupdel", group)


@pytest.fixture
def project(users: tuple[str, Neighbour, Neighbour]) -> Iterator[Path]:
    """The project's directory: root's, the project's group, 2770."""
    with shared_place(0o2770) as path:
        os.chown(path, 0, _gid(users[0]))
        os.chmod(path, 0o2770)
        yield path


def _gid(group: str) -> int:
    return grp.getgrnam(group).gr_gid


def put_image(directory: str, digest: bool) -> str:
    """As a member: an image (and its recorded sha256) in the project's directory."""
    path = Path(directory, "dask-hpc-aurora.sif")
    path.write_bytes(IMAGE)
    path.chmod(0o770)
    if digest:
        value = hashlib.sha256(IMAGE).hexdigest()
        Path(f"{path}.sha256").write_text(f"{value}  {path.name}\n")
    return str(path)


def rewrite(path: str, data: bytes) -> None:
    """As a member: the image's bytes changed where it is."""
    with open(path, "r+b") as f:
        f.write(data)


def try_to_write(path: str) -> str:
    """As anyone: what happens to a write of ``path``."""
    try:
        with open(path, "ab") as f:
            f.write(b"x")
    except OSError as error:
        return type(error).__name__
    return "written"


def chmod(path: str, mode: int) -> None:
    os.chmod(path, mode)


def chgrp(path: str, gid: int) -> None:
    os.chown(path, -1, gid)


def job_lines(
    image: str, group: str | None, cwd: Path, verify: bool = True
) -> tuple[int, str, str]:
    """The job's image lines (as rendered with ``hpc.image-group=group``) and then the image
    itself, run in bash as the job runs them: (exit status, stdout, stderr)."""
    with dask.config.set({"hpc.image-group": group}):
        text = "\n".join(["set -euo pipefail", *image_lines.lines(image, None)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_HPC__")}
    env["DASK_HPC__IMAGE_VERIFY"] = "true" if verify else "false"
    proc = subprocess.run(
        ["bash", "-c", f'{text}\n"$dask_hpc_image"'],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def refused(result: tuple[int, str, str], *fragments: str) -> str:
    """Exit status 2, one line of ours naming ``fragments``; the image did not run."""
    code, out, err = result
    assert code == 2 and RAN not in out, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dask-hpc: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def render(image: str, group: str | None) -> str:
    with dask.config.set({"hpc.image-group": group}):
        return script.render(
            script.JobRequest(
                site="generic", batch_system="slurm", nodes=1, workers_per_node=1,
                worker_type="cpu", cpus_per_worker=1, walltime="5", image=image,
                command=["python", "x.py"],
            )
        )  # fmt: skip


def test_a_members_image_is_refused_without_the_setting_naming_both_fixes(users, project) -> None:
    """No hpc.image-group: the member's image in the 2770 directory is refused when the job is
    rendered and when it starts, each in one line naming the group to trust and the copy."""
    group, member, outsider = users
    image = member.run(put_image, str(project), True)
    trust = f"set hpc.image-group={group} (DASK_HPC__IMAGE_GROUP={group}) to trust your project's"
    copy = f"copy it to a directory only you can write (cp -- {image} {image}.sha256 ~/)"
    with pytest.raises(UsageError) as caught:
        render(image, None)
    said = str(caught.value)
    assert said.startswith(f"image {image} can be changed by other users: {project} "), said
    assert trust in said and copy in said, said
    line = refused(job_lines(image, None, project), f"{image} belongs to uid {member.uid}")
    assert trust in line and copy in line, line
    # the owner's own image there: the directory is what others can change
    own = project / "mine.sif"
    own.write_bytes(IMAGE)
    refused(job_lines(str(own), None, project),
                   f"{project} can be written by other users (mode 2770)", trust)  # fmt: skip


def test_with_the_setting_a_members_image_runs_and_outsiders_cannot_change_it(
    users, project, run_cmd
) -> None:
    """hpc.image-group names the project: the member's image, its sha256 recorded, passes the
    render's and the job's checks and runs (the job's image lines, then the image itself, a
    script standing in for apptainer exec); the user outside the group can change neither the
    image, nor its digest, nor the directory."""
    group, member, outsider = users
    image = member.run(put_image, str(project), True)
    assert f"dask_hpc_group={group}\n" in render(image, group)
    job = ["job", "--site", "generic", "--batch-system", "slurm", "--nodes", "1",
           "--cpus-per-worker", "1", "--image", image, "--", "python", "x.py"]  # fmt: skip
    env = {**os.environ, "DASK_HPC__IMAGE_GROUP": group}
    made = run_cmd([sys.executable, "-m", "invoke", *job], env=env, cwd=REPO)
    assert made.returncode == 0 and f"dask_hpc_group={group}\n" in made.stdout, made.stderr
    code, out, err = job_lines(image, group, project)
    assert (code, out, err) == (0, f"{RAN}\n", ""), (code, out, err)
    code, out, err = job_lines(Path(image).name, group, project)  # relative, as the default
    assert (code, out.strip()) == (0, RAN), err
    for path in (image, f"{image}.sha256", f"{project}/new.sif"):
        assert outsider.run(try_to_write, path) == "PermissionError", path
    assert member.run(try_to_write, f"{project}/new.sif") == "written"  # the member can


def test_a_member_changing_the_image_after_its_digest_is_refused_at_job_start(
    users, project
) -> None:
    """The render passed (nothing is hashed then); the member then changed the image: the job's
    sha256 check refuses it in one line, even with DASK_HPC__IMAGE_VERIFY=false."""
    group, member, _ = users
    image = member.run(put_image, str(project), True)
    render(image, group)
    member.run(rewrite, image, b"#!/bin/sh\necho swapped\n#")
    recorded = hashlib.sha256(IMAGE).hexdigest()
    for verify in (True, False):
        refused(job_lines(image, group, project, verify), f"image {image} has sha256",
                f"not {recorded} as recorded in {image}.sha256", "(invoke pull)")  # fmt: skip


def test_a_missing_digest_is_refused_with_the_setting(users, project) -> None:
    """Trusted through the group only with its sha256 recorded: none recorded is refused when
    the job is rendered and when it starts, naming how to record it."""
    group, member, _ = users
    image = member.run(put_image, str(project), False)
    with pytest.raises(UsageError, match=r"\.sha256 is missing; record it \(invoke pull, or"):
        render(image, group)
    for verify in (True, False):
        refused(job_lines(image, group, project, verify),
                f"image {image} is trusted through group {group} only with its sha256",
                f"{image}.sha256 is missing; record it (invoke pull, or",
                f"sha256sum -- {image} > {image}.sha256)")  # fmt: skip


@pytest.mark.parametrize("change", ["o+w", "other group", "ACL", "outsider's", "digest o+w"])
def test_more_than_the_group_could_change_it_refused_even_with_the_setting(
    change: str, users, project
) -> None:
    """What the group's trust does not cover: an image others can write, one writable by
    another group (the member's own), one whose access control list lets the outsider write,
    one of the outsider's (given to them), a digest others can write."""
    group, member, outsider = users
    image = member.run(put_image, str(project), True)
    outside = f"image {image} can be changed by users outside group {group}: "
    if change == "o+w":
        member.run(chmod, image, 0o777)
        why = f"{image} can be written by other users (mode 777)"
    elif change == "other group":
        own = member.user.pw_gid
        member.run(chgrp, image, own)
        why = f"{image} can be written by group {member.user.pw_name} (mode 770)"
    elif change == "ACL":
        member.run(grant_write, image, outsider.uid)
        assert outsider.run(try_to_write, image) == "PermissionError"  # the directory: 2770
        why = f"{image} has an access control list"
    elif change == "outsider's":
        os.chown(image, outsider.uid, -1)
        why = f"{image} belongs to uid {outsider.uid}"
    else:
        member.run(chmod, f"{image}.sha256", 0o666)
        outside = f"the recorded sha256 of {image} can be changed by other users: "
        why = f"{image}.sha256 can be written by other users (mode 666)"
    with pytest.raises(UsageError) as caught:
        render(image, group)
    assert str(caught.value).startswith(outside), caught.value
    refused(job_lines(image, group, project), outside + why)


def grant_write(path: str, uid: int) -> None:
    """As the image's owner: an access control list giving ``uid`` write (setfacl u:UID:rw)."""
    tags = [(0x01, 6, -1), (0x02, 6, uid), (0x04, 6, -1), (0x10, 6, -1), (0x20, 0, -1)]
    blob = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", tag, perm, ident & 0xFFFFFFFF) for tag, perm, ident in tags
    )
    os.setxattr(path, "system.posix_acl_access", blob)


def test_a_group_the_user_is_not_in_is_refused(users, project) -> None:
    """hpc.image-group naming a group the user is not in (the outsider's own), or one that is
    not there: refused when rendered; and at job start, for a user who left the project since."""
    group, member, outsider = users
    image = member.run(put_image, str(project), True)
    theirs = re.escape(f"you (root) are not in group {outsider.user.pw_name}")
    with pytest.raises(UsageError, match=theirs):
        render(image, outsider.user.pw_name)
    with pytest.raises(UsageError, match="hpc.image-group: no group no-such-group here"):
        render(image, "no-such-group")
    with dask.config.set({"hpc.image-group": group}):
        text = "\n".join(["set -euo pipefail", *image_lines.lines(image, None)])
    _admin("gpasswd", "--delete", "root", group)
    proc = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=60)
    refused((proc.returncode, proc.stdout, proc.stderr),
            f"hpc.image-group: you (root) are not in group {group}")  # fmt: skip
