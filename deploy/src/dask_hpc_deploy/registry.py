"""Share site images through an OCI registry (``oras://``, Apptainer's own push and pull), and
sign them: the build-side half of dask_hpc.guard.images.

A SIF pushed with ``apptainer push IMAGE oras://...`` is one layer whose digest is the file's
sha256, the digest ``invoke build`` records in IMAGE.sha256: what was built is what is pulled.
A pull lands under a temporary name and becomes the output only once it is verified.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from dask_hpc.errors import UsageError
from dask_hpc.guard import images

SIGNING_KEY_VARIABLE = "DASK_HPC_SIGNING_KEY"


def signing_key(given: str = "") -> Path | None:
    """The private key that signs built images: ``--sign-key``, else $DASK_HPC_SIGNING_KEY, else
    None (unsigned). It must be a file only its owner can read."""
    value = given or os.environ.get(SIGNING_KEY_VARIABLE, "")
    if not value:
        return None
    key = Path(value).expanduser().resolve()
    if not key.is_file():
        raise UsageError(f"signing key {key} does not exist", "give the site's private key (PEM)")
    mode = stat.S_IMODE(key.stat().st_mode)
    if mode & 0o077:
        raise UsageError(
            f"signing key {key} is readable by others (mode {mode:04o})", f"chmod 600 {key}"
        )
    return key


def oras_uri(uri: str) -> str:
    """An ``oras://REGISTRY/NAME:TAG`` reference, or a one-line error."""
    if not uri.startswith("oras://") or "/" not in uri.removeprefix("oras://"):
        raise UsageError(
            f"{uri!r} is not an OCI registry reference", "write oras://REGISTRY/NAME:TAG"
        )
    return uri


def _apptainer(argv: Sequence[str], what: str) -> None:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not on PATH", f"needed to {what}") from None
    if proc.returncode != 0:
        said = [" ".join(line.split()) for line in (proc.stderr + proc.stdout).splitlines()]
        fatal = next((line for line in reversed(said) if line.startswith("FATAL:")), "")
        raise UsageError(
            f"apptainer could not {what}: {fatal.removeprefix('FATAL: ') or (said or ['?'])[-1]}"
        )


def sign(image: Path, key: Path, apptainer: str = "apptainer") -> None:
    """Sign every object of the image with the private key (``apptainer sign --key``)."""
    _apptainer([apptainer, "sign", "--key", str(key), str(image)], f"sign {image}")


def _trusted(image: Path, trust: images.Trust, apptainer: str) -> None:
    """Check the recorded digest, and the signature when a site key is configured."""
    recorded = images.recorded_digest(image)
    if recorded is not None and images.sha256(image) != recorded:
        raise UsageError(
            f"{image} changed since its sha256 was recorded in {images.digest_path(image)}",
            "build or pull it again",
        )
    if trust.key is not None:
        try:
            images.verify(image, trust.key, apptainer)
        except images.ImageError as e:
            raise UsageError(e.problem, e.fix) from None


def push(
    image: Path, uri: str, trust: images.Trust, no_https: bool = False, apptainer: str = "apptainer"
) -> str:
    """Push a verified image to ``oras://...``; return its sha256."""
    uri = oras_uri(uri)
    if not image.is_file():
        raise UsageError(f"no image {image}", "build it first: invoke build --site SITE")
    _trusted(image, trust, apptainer)
    flags = ["--no-https"] if no_https else []
    _apptainer([apptainer, "push", *flags, str(image), uri], f"push {image} to {uri}")
    return images.recorded_digest(image) or images.sha256(image)


def pull(
    uri: str,
    output: Path,
    trust: images.Trust,
    digest: str = "",
    no_https: bool = False,
    force: bool = False,
    apptainer: str = "apptainer",
) -> str:
    """Pull ``oras://...`` into ``output``, verified (signature with the site key, sha256 when
    given) before it takes that name; record and return its sha256."""
    uri = oras_uri(uri)
    if output.exists() and not force:
        raise UsageError(f"{output} exists", "remove it or pass --force")
    partial = output.with_name(f".{output.name}.partial")
    partial.unlink(missing_ok=True)
    flags = ["--no-https"] if no_https else []
    try:
        _apptainer([apptainer, "pull", *flags, str(partial), uri], f"pull {uri}")
        if digest and images.sha256(partial) != digest.lower().removeprefix("sha256:"):
            raise UsageError(
                f"{uri} has sha256 {images.sha256(partial)}, not {digest}",
                "pull the image that was built, or fix --sha256",
            )
        if trust.key is not None:
            try:
                images.verify(partial, trust.key, apptainer)
            except images.ImageError as e:
                problem = e.problem.replace(str(partial), uri)
                raise UsageError(f"{problem}: not kept", e.fix) from None
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return images.record_digest(output)
