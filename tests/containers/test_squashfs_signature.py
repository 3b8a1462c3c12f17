"""A Pyxis image is as trusted as a SIF (issue 45): the squashfs made from a signed build has
its recorded sha256 signed with the site key, and a job with the site's public key runs it only
when that signature and then the sha256 hold.

Real parts: a SIF built by apptainer, the squashfs ``images_enroot.convert`` makes of it, keys
made with openssl as a site makes them, the job's own image lines run by bash.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from containers_support import tiny_sif

from dask_hpc import images_enroot
from dask_hpc.batch import image as image_lines
from dask_hpc.guard import images


def _keys(where: Path, name: str) -> tuple[Path, Path]:
    """(private, public) Ed25519 PEM keys, as tests/build's ``make_image_keys``."""
    private, public = where / f"{name}.key.pem", where / f"{name}.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True, capture_output=True)  # fmt: skip
    return private, public


def _settle(sqsh: Path, key: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    """The job's image lines for a Pyxis job, run by bash in the image's directory."""
    body = "\n".join(
        ["set -euo pipefail", *image_lines.lines(sqsh.name, key, group="", runtime="pyxis"),
         'echo "settled $dask_hpc_image"']
    )  # fmt: skip
    return subprocess.run(["bash", "-c", body], cwd=sqsh.parent, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", **env}, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(squashfs signed with the site key, the site's public key, another site's public key)."""
    if shutil.which("apptainer") is None or shutil.which("mksquashfs") is None:
        pytest.fail("apptainer and mksquashfs missing: run tests/setup/install.sh")
    where = tmp_path_factory.mktemp("signed")
    where.chmod(0o755)
    private, public = _keys(where, "site")
    _, other = _keys(where, "other")
    sqsh = images_enroot.convert(tiny_sif(where), sign_key=private)
    return sqsh, public, other


def test_a_squashfs_from_a_signed_build_runs_with_the_site_key(
    signed: tuple[Path, Path, Path],
) -> None:
    sqsh, public, _ = signed
    assert images.signature_path(sqsh).is_file()
    ran = _settle(sqsh, public)
    assert ran.returncode == 0 and ran.stdout.strip() == f"settled {sqsh}", ran.stderr


def test_an_image_rewritten_with_its_digest_is_refused_by_the_signature(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Whoever replaced image and sha256 together (no site key) is caught by the signature."""
    sqsh, public, _ = signed
    copy = tmp_path / sqsh.name
    shutil.copy(sqsh, copy)
    with copy.open("ab") as f:
        f.write(b"changed")
    images.record_digest(copy)  # a consistent sha256, as an attacker would write it
    shutil.copy(images.signature_path(sqsh), images.signature_path(copy))
    ran = _settle(copy, public)
    assert ran.returncode == 2 and ran.stdout == "", ran.stdout
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert "failed verification" in ran.stderr and "does not match" in ran.stderr, ran.stderr


def test_another_sites_key_and_a_missing_signature_are_refused_in_one_line(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    sqsh, public, other = signed
    ran = _settle(sqsh, other)
    assert ran.returncode == 2 and "does not match" in ran.stderr, ran.stderr
    unsigned = tmp_path / sqsh.name
    shutil.copy(sqsh, unsigned)
    images.record_digest(unsigned)
    ran = _settle(unsigned, public)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
    assert f"has no signed sha256 ({unsigned}.sha256.sig)" in ran.stderr, ran.stderr
    opted_out = _settle(unsigned, public, DASK_HPC__IMAGE_VERIFY="false")  # the explicit opt-out
    assert opted_out.returncode == 0, opted_out.stderr
