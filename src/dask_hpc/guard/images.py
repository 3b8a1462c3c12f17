"""Trust in site images: their sha256 and Apptainer signature, checked once per job or deploy,
before any rank starts.

``invoke build`` signs an image with the site's private key (``apptainer sign --key``, PEM) and
records its sha256 beside it (``IMAGE.sha256``, as ``sha256sum`` writes it). Here is what the
runtime needs to trust one: ``verify`` runs ``apptainer verify --key`` with the site's public
key and turns a refusal into one line (unsigned, changed after signing, signed with another
key); ``batch.image`` makes the same checks in a batch script, on the node that runs the job
(with apptainer and coreutils, no dask-hpc). Which key and whether to check come from dask's
configuration: ``hpc.image-key`` (the site's public key; /etc/dask/dask-hpc.yaml where the
Ansible role set one) and ``hpc.image-verify`` (the opt-out: ``DASK_HPC__IMAGE_VERIFY=false``).

Only the standard library at module level, and Python 3.7 (ansible-core 2.17's oldest target
Python): the Ansible role runs this file by itself on nodes that have no dask-hpc
(``python3 images.py verify --key KEY IMAGE``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DIGEST_SUFFIX = ".sha256"
# A squashfs (Pyxis, Enroot) has no place for a signature: its recorded sha256 is signed with
# the same site key instead (``openssl pkeyutl -rawin``: Ed25519, RSA and EC keys alike).
SIGNATURE_SUFFIX = ".sha256.sig"
OPT_OUT = "DASK_HPC__IMAGE_VERIFY=false"
# What `apptainer verify` says (its FATAL line), and what that means for the image.
REASONS = (
    ("signature not found", "is not signed"),
    ("integrity compromised", "was changed after it was signed"),
    ("verify envelope failed", "is not signed with the site key"),
    ("signature object", "is not signed with the site key"),
)


class ImageError(Exception):
    """An image that must not run, or a check that cannot be made: one line, exit status 2."""

    exit_code = 2

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; {fix}" if fix else problem)


@dataclass(frozen=True)
class Trust:
    """What a job or deploy checks: the site's public key, or None when nothing is checked."""

    key: Path | None

    @property
    def checks(self) -> bool:
        return self.key is not None


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file (read in 1 MiB blocks: images are gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest_path(image: Path) -> Path:
    """Where an image's sha256 is recorded: IMAGE.sha256."""
    return image.with_name(image.name + DIGEST_SUFFIX)


def record_digest(image: Path) -> str:
    """Write IMAGE.sha256 (``sha256sum -c`` reads it) and return the digest. Beside the image,
    possibly a directory its group shares: a link planted there is replaced, not followed."""
    value = sha256(image)
    # private.replace_file's way, not a call to it: the role runs this file alone on the nodes
    # (ansible.builtin.script), where the package is not importable.
    fd, tmp = tempfile.mkstemp(dir=image.parent, prefix=f".{image.name}.sha256.")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(f"{value}  {image.name}\n")
        os.replace(tmp, digest_path(image))
    except BaseException:
        os.unlink(tmp)
        raise
    return value


def signature_path(image: Path) -> Path:
    """Where the signature of an image's recorded sha256 is kept: IMAGE.sha256.sig."""
    return image.with_name(image.name + SIGNATURE_SUFFIX)


def sign_digest(image: Path, key: Path) -> Path:
    """Sign IMAGE.sha256 with the site's private key (``openssl pkeyutl``) into
    IMAGE.sha256.sig, for images that cannot hold a signature (a squashfs); ImageError if
    openssl refuses."""
    out = signature_path(image)
    argv = ["openssl", "pkeyutl", "-sign", "-inkey", str(key), "-rawin"]
    argv += ["-in", str(digest_path(image)), "-out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImageError(f"could not sign the sha256 of {image} with {key}: {said}",
                         "give the site's private key (PEM)")  # fmt: skip
    return out


def recorded_digest(image: Path) -> str | None:
    """The digest recorded beside an image, or None."""
    try:
        text = digest_path(image).read_text().split()
    except OSError:
        return None
    return text[0] if text else None


def _reason(output: str) -> tuple[str, str]:
    """(what is wrong with the image, apptainer's own FATAL or last line)."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.strip()]
    fatal = next((line for line in reversed(lines) if line.startswith("FATAL:")), "")
    said = fatal[len("FATAL: "):] if fatal else (lines[-1] if lines else "no output")
    for marker, meaning in REASONS:
        if marker in output:
            return meaning, said
    return "failed verification", said


def verify(
    image: Path,
    key: Path | None,
    apptainer: str = "apptainer",
    digest: str | None = None,
) -> None:
    """Refuse (ImageError, one line) an image that is not signed with ``key`` as it is now (when
    a key is given), or whose sha256 is not ``digest`` (when given)."""
    if not image.is_file() or not os.access(image, os.R_OK):
        raise ImageError(f"cannot read the image {image}", "check the path and its permissions")
    if key is not None and not key.is_file():
        raise ImageError(
            f"the site's image key {key} does not exist",
            f"name the site's public key (hpc.image-key), or opt out: {OPT_OUT}",
        )
    if digest is not None:
        found = sha256(image)
        if found != digest.lower().split(":")[-1]:
            raise ImageError(
                f"image {image} has sha256 {found}, not {digest}",
                "fetch the image again, or fix the checksum",
            )
    if key is None:
        return
    argv = [apptainer, "verify", "--key", str(key), str(image)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ImageError(
            f"{apptainer} is not on PATH: it verifies the image",
            f"install Apptainer, or opt out: {OPT_OUT}",
        ) from None
    if proc.returncode != 0:
        meaning, said = _reason(proc.stdout + proc.stderr)
        raise ImageError(
            f"image {image} {meaning} ({key}: {said})",
            "use an image built or pulled with the site's key (invoke build, invoke pull), "
            f"or opt out: {OPT_OUT}",
        )


def configured_trust(key: str | Path | None = None, verify_images: bool | None = None) -> Trust:
    """The key and the opt-out, from the arguments or else dask's configuration (hpc.image-key,
    hpc.image-verify); ImageError for a key that does not exist. Imports dask only here: the
    role runs this file without it."""
    from dask_hpc import config

    if verify_images is None:
        verify_images = bool(config.get("image-verify"))
    if not verify_images:
        return Trust(None)
    key = key or config.get("image-key")
    if not key:
        return Trust(None)
    path = Path(str(key)).expanduser()
    if not path.is_file():
        raise ImageError(
            f"the site's image key {path} does not exist",
            f"name the site's public key (hpc.image-key, --image-key), or opt out: {OPT_OUT}",
        )
    return Trust(path)


def main(argv: list[str] | None = None) -> int:
    """``python3 -m dask_hpc.images verify --key KEY [--sha256 HEX] IMAGE`` (or this file run
    by itself): exit 0 when the image may run, else one line and exit 2."""
    parser = argparse.ArgumentParser(prog="dask_hpc.images", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("verify", help="verify an image's signature and/or sha256")
    check.add_argument("image", type=Path)
    check.add_argument("--key", type=Path, default=None, help="the site's public key (PEM)")
    check.add_argument("--sha256", default=None, help="the image's expected sha256")
    check.add_argument("--apptainer", default="apptainer", help="the apptainer command")
    args = parser.parse_args(argv)
    if args.key is None and args.sha256 is None:
        parser.error("give --key, --sha256 or both")
    try:
        verify(args.image, args.key, args.apptainer, args.sha256)
    except ImageError as e:
        sys.stderr.write(f"dask-hpc: {e}\n")
        return e.exit_code
    what = [f"signed with {args.key}"] if args.key else []
    what += [f"sha256 {args.sha256}"] if args.sha256 else []
    print(f"{args.image}: {', '.join(what)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
