"""Signed images for real, on the local image `invoke build` makes (signed with the session's
site key): its recorded sha256 and signature, `invoke push` and `invoke pull` through a real OCI
registry on loopback (Debian's docker-registry), a byte changed and an unsigned image refused in
one line, and the Ansible role's image provider checking an image before it takes its place."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from build_support import REPO, ImageKeys, invoke_argv, make_image_keys, require_apptainer
from harness.waiting import free_ports, wait_for

from dask_hpc.guard import images

pytestmark = [pytest.mark.apptainer, pytest.mark.timeout(900)]


def verify_argv(image: Path, key: Path) -> list[str]:
    """``python -m dask_hpc.images verify --key KEY IMAGE``: the check jobs and deploys run."""
    return [sys.executable, "-m", "dask_hpc.images", "verify", "--key", str(key), str(image)]


def flip_one_byte(source: Path, target: Path) -> None:
    """A copy of source with one byte changed, in the middle (the image's file system)."""
    shutil.copyfile(source, target)
    with target.open("r+b") as f:
        f.seek(target.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_build_signs_and_records_the_sha256(
    run_cmd, local_image: Path, image_keys: ImageKeys
) -> None:
    """IMAGE.sha256 holds the file's sha256 (sha256sum's format); one signature, the site key's."""
    recorded = images.digest_path(local_image).read_text()
    assert recorded == f"{images.sha256(local_image)}  {local_image.name}\n"
    listing = run_cmd([require_apptainer(), "sif", "list", str(local_image)]).check().stdout
    assert listing.count("Signature") == 1, listing
    result = run_cmd(verify_argv(local_image, image_keys.public)).check()
    assert result.stdout.strip() == f"{local_image}: signed with {image_keys.public}"


def test_unsigned_changed_and_foreign_images_are_refused_in_one_line(
    run_cmd, local_image: Path, image_keys: ImageKeys, tmp_path: Path
) -> None:
    """Exit 2 and one line saying what is wrong: a byte changed, no signature, another key."""
    changed = tmp_path / "changed.sif"
    flip_one_byte(local_image, changed)
    unsigned = tmp_path / "unsigned.sif"
    shutil.copyfile(local_image, unsigned)
    listing = run_cmd([require_apptainer(), "sif", "list", str(unsigned)]).check().stdout
    signature = next(ln.split()[0] for ln in listing.splitlines() if "Signature" in ln)
    run_cmd([require_apptainer(), "sif", "del", signature, str(unsigned)]).check()
    other = make_image_keys(tmp_path, "other")
    cases = [
        (changed, image_keys.public, "was changed after it was signed"),
        (unsigned, image_keys.public, "is not signed ("),
        (local_image, other.public, "is not signed with the site key"),
    ]
    for image, key, meaning in cases:
        result = run_cmd(verify_argv(image, key))
        assert result.returncode == 2, (image, result.stdout, result.stderr)
        line = one_line(result.stderr)
        assert line.startswith(f"dask-hpc: image {image} {meaning}"), line
        assert line.endswith("or opt out: DASK_HPC__IMAGE_VERIFY=false"), line


@pytest.fixture
def registry(tagged_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A real OCI registry (Debian's docker-registry, CNCF Distribution) on loopback, plain HTTP;
    its address."""
    port = free_ports(1)[0]
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'registry'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    binary = shutil.which("docker-registry")
    assert binary, "docker-registry is not installed: run tests/setup/packages.sh"
    log = (tmp_path / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log, env=tagged_env)
    try:

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2):
                    return True
            except OSError:
                assert proc.poll() is None, (tmp_path / "registry.log").read_text()
                return False

        wait_for(answers, 30, what="the registry's /v2/")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_push_pull_through_a_registry_and_refuse_a_changed_image(
    run_cmd, local_image: Path, image_keys: ImageKeys, registry: str, tmp_path: Path
) -> None:
    """invoke push to oras://, invoke pull back (verified with the site key, the recorded sha256
    checked): the same bytes. An image changed by one byte that reached the registry anyway (it
    was pushed around invoke push, which verifies first) is refused by invoke pull in one line
    and not kept."""
    key = ["--key", str(image_keys.public), "--no-https"]
    uri = f"oras://{registry}/dask-hpc/local:test"
    pushed = run_cmd(invoke_argv("push", "--image", str(local_image), "--uri", uri, *key),
                     cwd=REPO, timeout=120).check()  # fmt: skip
    digest = images.recorded_digest(local_image)
    assert pushed.stdout.strip() == f"pushed {local_image} (sha256 {digest}) to {uri}"

    pulled = tmp_path / "pulled.sif"
    result = run_cmd(
        invoke_argv("pull", "--uri", uri, "--output", str(pulled), "--sha256", str(digest), *key),
        cwd=REPO, timeout=120,
    ).check()  # fmt: skip
    assert f"(sha256 {digest}, verified with {image_keys.public})" in result.stdout
    assert images.sha256(pulled) == digest == images.recorded_digest(pulled)

    changed = tmp_path / "changed.sif"
    flip_one_byte(local_image, changed)
    refused = run_cmd(invoke_argv("push", "--image", str(changed), "--uri", uri, *key),
                      cwd=REPO, timeout=120)  # fmt: skip
    assert refused.returncode == 2
    assert "was changed after it was signed" in one_line(refused.stderr)
    bad_uri = f"oras://{registry}/dask-hpc/local:changed"
    run_cmd([require_apptainer(), "push", "--no-https", str(changed), bad_uri], timeout=120).check()
    kept = tmp_path / "kept.sif"
    refused = run_cmd(invoke_argv("pull", "--uri", bad_uri, "--output", str(kept), *key),
                      cwd=REPO, timeout=120)  # fmt: skip
    assert refused.returncode == 2, refused.stdout
    line = one_line(refused.stderr)
    assert line.startswith(f"error: image {bad_uri} was changed after it was signed"), line
    assert ": not kept;" in line
    assert sorted(p.name for p in tmp_path.iterdir() if "kept" in p.name) == []


# --- the Ansible role's image provider ------------------------------------------------------------
ROLE_PLAYBOOK = """\
- name: The role's site-image tasks, on this machine
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Bring in the site image
      ansible.builtin.include_role:
        name: dask_hpc
        tasks_from: image.yml
"""


def run_role_image_tasks(
    tmp_path: Path, settings: dict[str, object]
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with the role's image.yml against localhost (Apptainer runs here, through
    the test root filesystem), the settings as extra variables."""
    assert shutil.which("ansible-playbook"), "ansible-playbook missing: run tests/setup/ansible.sh"
    playbook = tmp_path / "image.yml"
    playbook.write_text(ROLE_PLAYBOOK)
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_ROLES_PATH=str(REPO / "ansible/roles"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        ["ansible-playbook", "-i", "localhost,", str(playbook), "-e", f"@{variables}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def after(task: str, run: subprocess.CompletedProcess[str]) -> str:
    """The first result line printed for a task."""
    return run.stdout.split(f"TASK [dask_hpc : {task}]", 1)[1].split("\n", 2)[1].strip()


def test_role_checks_the_image_before_it_takes_its_place(
    local_image: Path, image_keys: ImageKeys, tmp_path: Path
) -> None:
    """The role's image provider (image.yml): the signed image is checked on the node (sha256,
    signature) and put in place with the key copied and named; an image changed by one byte (its
    checksum matching, as if the admin had taken the checksum of the wrong file) is refused in
    one line naming the node and the fix, and the image in place stays as it was."""
    require_apptainer()
    shared = tmp_path / "shared"
    settings: dict[str, object] = {
        "ansible_python_interpreter": sys.executable,
        "_dask_hpc_python_bin": sys.executable,
        "dask_hpc_provider": "image",
        "dask_hpc_shared_dir": str(shared),
        "dask_hpc_prefix": str(tmp_path / "prefix"),
        "dask_hpc_group": "root",
        "dask_hpc_image_src": str(local_image),
        "dask_hpc_image_checksum": f"sha256:{images.sha256(local_image)}",
        "dask_hpc_image_key": str(image_keys.public),
    }
    (shared / "images").mkdir(parents=True)
    first = run_role_image_tasks(tmp_path, settings)
    assert first.returncode == 0, first.stdout + first.stderr
    assert after("Check the staged site image (sha256, signature)", first) == "ok: [localhost]"
    placed = shared / "images/dask-hpc.sif"
    assert images.sha256(placed) == images.sha256(local_image)
    assert (tmp_path / "prefix/etc/image-key.pem").read_bytes() == image_keys.public.read_bytes()
    again = run_role_image_tasks(tmp_path, settings)  # the next deploy: verified where it is
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"^localhost\s*: ok=\d+\s+changed=0 ", again.stdout, re.M), again.stdout
    assert after("Verify the site image in place (once per deploy)", again) == "ok: [localhost]"

    changed = tmp_path / "changed.sif"
    flip_one_byte(local_image, changed)
    settings.update(
        dask_hpc_image_src=str(changed),
        dask_hpc_image_checksum=f"sha256:{images.sha256(changed)}",
    )
    refused = run_role_image_tasks(tmp_path, settings)
    assert refused.returncode != 0
    # The check's own failure is printed, then rescued: the play ends on the refusal.
    last = [line for line in refused.stdout.splitlines() if line.startswith("fatal: ")][-1]
    messages = [json.loads(last.split("FAILED! => ", 1)[1])["msg"]]
    assert "\n" not in messages[0], messages
    incoming = f"localhost: dask-hpc: image {shared}/images/.incoming-"
    assert messages[0].startswith(incoming), messages
    assert "was changed after it was signed" in messages[0]
    assert messages[0].endswith("The image in place is unchanged."), messages
    assert images.sha256(placed) == images.sha256(local_image)
    assert sorted(p.name for p in (shared / "images").iterdir()) == ["dask-hpc.sif"]


@pytest.mark.slurm
def test_job_with_a_changed_image_starts_no_rank(
    invoke, slurm_cluster, cluster_env, local_image: Path, image_keys: ImageKeys, tmp_path: Path
) -> None:
    """`invoke job --image-key` on an image changed by one byte, submitted to real Slurm: the
    job's check refuses it in one line and exits 2 before srun starts any rank."""
    changed = tmp_path / "changed.sif"  # under /tmp: Apptainer's root filesystem sees it
    flip_one_byte(local_image, changed)
    result = invoke(
        "job", "--site", "deepops", "--nodes", "1", "--workers-per-node", "1", "--worker-type",
        "cpu", "--image", str(changed), "--walltime", "5", "--image-key", str(image_keys.public),
        "--", "python", "-c", "print('ran')",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    env = {**cluster_env, **slurm_cluster.env}
    job = slurm_cluster.sbatch(result.stdout, env=env, cwd=tmp_path)
    state, code = slurm_cluster.wait_job(job, timeout=120)
    output = slurm_cluster.job_output(job)
    assert (state, code) == ("FAILED", 2), output
    line = one_line(output)
    assert line.startswith(f"dask-hpc: image {changed} failed verification ({image_keys.public}: "
                           "Failed to verify container: integrity: data object integrity "
                           "compromised"), line  # fmt: skip
    assert "start-cluster" not in output and "ran" not in output


def test_job_script_without_a_key_or_opted_out_has_no_check(invoke, image_keys: ImageKeys) -> None:
    """No site key: nothing to verify against, no check; --no-verify: the explicit opt-out."""
    # (DeepOps' node size from the command line: no Slurm to ask here)
    base = ("job", "--site", "deepops", "--nodes", "1", "--gpus-per-node", "4",
            "--cpus-per-worker", "8", "--", "python", "x.py")
    assert "apptainer verify" not in invoke(*base).stdout
    opted = invoke(*base[:-3], "--image-key", str(image_keys.public), "--no-verify", *base[-3:])
    assert opted.returncode == 0, opted.stderr
    assert "apptainer verify" not in opted.stdout
    missing = invoke(*base[:-3], "--image-key", "/no/such/key.pem", *base[-3:])
    assert missing.returncode == 2
    assert one_line(missing.stderr) == (
        "error: the site's image key /no/such/key.pem does not exist; name the site's public key "
        "(hpc.image-key, --image-key), or opt out: DASK_HPC__IMAGE_VERIFY=false"
    )
