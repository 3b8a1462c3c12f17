"""The role converged on a Debian 12 target made to look like DeepOps today (Pyxis and Enroot,
no Apptainer; pyxis_support says what stands in), first under DeepOps' ansible-core 2.17 and
ansible.cfg, then again under the newest ansible-core."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ansible_support import PlaybookRun, warnings
from conftest import Env
from node_support import run_on_node, sha256

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(1500)]
IMAGES = "sw/dask-hpc/images"
PLACED = ["dask-hpc.sqsh", "dask-hpc.sqsh.sha256", "dask-hpc.sqsh.sha256.sig"]


def test_converge_emulated_deepops(first_runs: dict[str, PlaybookRun]) -> None:
    """Under DeepOps' pin and ansible.cfg: Pyxis found, no Apptainer task runs, the squashfs's
    signature checked on the node, no warning."""
    run = first_runs["converge_pyxis"]
    assert run.returncode == 0, run.describe()
    changed = run.changed_tasks()
    assert not [t for t in changed if "pptainer" in t], changed
    assert (
        "dask_hpc : Put the recorded sha256, its signature and then the site squashfs in place"
        in changed
    )
    checked = run.output.split(
        "Check the signature of the staged recorded sha256 (openssl, the site key)]", 1
    )[1]
    assert checked.split("\n", 2)[1] == "ok: [pyxis]", run.describe()
    assert warnings(run) == [], run.describe()


def test_second_converge_newest_core_emulated_deepops(reruns: dict[str, PlaybookRun]) -> None:
    """Converged again under the newest ansible-core: nothing changes; the squashfs in place is
    verified (its signature, with openssl)."""
    run = reruns["again_pyxis"]
    assert run.returncode == 0, run.describe()
    assert run.recap()["pyxis"]["changed"] == 0, run.changed_tasks()
    verified = run.output.split("Verify the signature in place (once per deploy)]", 1)[1]
    assert verified.split("\n", 2)[1] == "ok: [pyxis]", run.describe()


def test_no_apptainer_and_the_squashfs_in_place_emulated_deepops(converged: Env) -> None:
    """No apptainer package, no user-namespace sysctl file; the squashfs, its recorded sha256
    and signature in the shared images directory (root:dask-hpc 0640), the signature verifying
    on the node with the copied key; /etc/dask/dask-hpc.yaml names the site, the key and the
    squashfs; start-cluster on the node refuses in one line naming srun --container-image."""
    target = converged.targets["pyxis"]
    root = target.root
    dpkg = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "apptainer"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert dpkg.returncode != 0, dpkg.stdout
    assert not (root / "usr/bin/apptainer").exists()
    assert not (root / "etc/sysctl.d/90-dask-hpc-userns.conf").exists()
    assert sorted(p.name for p in (root / IMAGES).iterdir()) == PLACED
    group = re.search(r"^dask-hpc:x:(\d+):", (root / "etc/group").read_text(), re.M)
    assert group
    for name in PLACED:
        st = (root / IMAGES / name).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, int(group[1]), 0o640), name
    source = str(target.hostvars["dask_hpc_image_src"])
    assert sha256(root / IMAGES / "dask-hpc.sqsh") == sha256(Path(source))
    placed = "/sw/dask-hpc/images/dask-hpc.sqsh"
    check = run_on_node(
        root,
        "openssl pkeyutl -verify -pubin -inkey /opt/dask-hpc/etc/image-key.pem -rawin "
        f"-in {placed}.sha256 -sigfile {placed}.sha256.sig",
    )
    assert check.returncode == 0, check.stdout + check.stderr
    config = (root / "etc/dask/dask-hpc.yaml").read_text()
    for line in ('  site: "deepops"', '  scheduler-directory: "/sw/dask-hpc"',
                 '  image-key: "/opt/dask-hpc/etc/image-key.pem"', f'  image: "{placed}"',
                 "  cluster:",
                 f'    image: "{placed}"'):  # fmt: skip
        assert line in config.splitlines(), config
    refused = run_on_node(root, "start-cluster gpu 1", user="alice")
    assert refused.returncode == 2, refused
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert f"srun --container-image={placed} " in refused.stderr
