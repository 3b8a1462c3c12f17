"""A podman-hpc image is as trusted as a SIF (issue 45): the OCI archive made from a signed
build has its recorded sha256 signed with the site key, and a job with the site's public key
loads it only when that signature and then the sha256 hold. The same SIF makes the same archive
(and so the same podman image ID).

Real parts: a SIF built by apptainer, the archive ``images_podman.convert`` makes of it, keys
made with openssl as a site makes them, the job's own image lines run by bash.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from containers_support import tiny_sif

from dask_hpc import images_podman
from dask_hpc.batch import image as image_lines
from dask_hpc.guard import images


def _keys(where: Path) -> tuple[Path, Path]:
    """(private, public) Ed25519 PEM keys, as a site makes them."""
    private, public = where / "site.key.pem", where / "site.pub.pem"
    for argv in (
        ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
        ["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    return private, public


def _settle(archive: Path, key: Path | None) -> subprocess.CompletedProcess[str]:
    """The job's image lines for a podman-hpc job, run by bash in the archive's directory."""
    lines = image_lines.lines(archive.name, key, group="", runtime="podman-hpc")
    body = "\n".join(["set -euo pipefail", *lines, 'echo "settled $dask_hpc_image"'])
    return subprocess.run(
        ["bash", "-c", body],
        cwd=archive.parent,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(archive signed with the site key, the site's public key, the SIF it came from)."""
    if shutil.which("apptainer") is None:
        pytest.fail("apptainer missing: run tests/setup/install.sh")
    where = tmp_path_factory.mktemp("signed")
    where.chmod(0o755)
    private, public = _keys(where)
    sif = tiny_sif(where)
    return images_podman.convert(sif, sign_key=private), public, sif


def test_a_signed_archive_is_an_oci_image_and_settles_with_the_site_key(
    signed: tuple[Path, Path, Path],
) -> None:
    archive, public, _ = signed
    assert archive.name == "dask-hpc-deepops.oci.tar"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"oci-layout", "index.json"} <= names
    assert f"blobs/sha256/{images_podman.image_id(archive)}" in names  # the config: podman's ID
    assert images.signature_path(archive).is_file()
    ran = _settle(archive, public)
    assert ran.returncode == 0 and ran.stdout.strip() == f"settled {archive}", ran.stderr


def test_the_same_sif_makes_the_same_archive(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    archive, _, sif = signed
    again = images_podman.convert(sif, tmp_path / "again.oci.tar")
    assert images.recorded_digest(again) == images.recorded_digest(archive)


def test_an_archive_rewritten_with_its_digest_is_refused_in_one_line(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Whoever replaced archive and sha256 together (no site key) is caught by the signature;
    a changed archive alone, by its sha256."""
    archive, public, _ = signed
    copy = tmp_path / archive.name
    shutil.copy(archive, copy)
    shutil.copy(images.digest_path(archive), images.digest_path(copy))
    shutil.copy(images.signature_path(archive), images.signature_path(copy))
    with copy.open("ab") as f:
        f.write(b"changed")
    ran = _settle(copy, public)
    assert ran.returncode == 2 and ran.stdout == "" and ran.stderr.count("\n") == 1, ran
    assert "sha256" in ran.stderr, ran.stderr
    images.record_digest(copy)  # a consistent sha256, as an attacker would write it
    ran = _settle(copy, public)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran
    assert "failed verification" in ran.stderr and "does not match" in ran.stderr, ran.stderr


def test_a_missing_sif_is_one_line(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "dask_hpc.images_podman", str(tmp_path / "none.sif")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 2 and ran.stdout == "", ran
    assert ran.stderr.count("\n") == 1 and "does not exist" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr
