"""The image podman-hpc runs (NERSC Perlmutter), made from the SIF's own file system: no second
Spack build, and no podman on the build machine.

The SIF's root file system (``images_enroot.unpack``) becomes the one layer of an OCI image,
written here as an OCI archive (``IMAGE.oci.tar``: an OCI image layout in a tar file, which
``podman load`` reads): the layer an uncompressed tar of the file system, sorted, its owners
kept; the image's configuration the definition's ``%environment`` (``Env``, the ``PATH`` to
start-cluster) and ``WorkingDir``, with no creation time, so the same SIF always makes the same
image ID (podman's ID is the sha256 of that configuration).

The archive has the SIF's sha256 story: ``IMAGE.oci.tar.sha256`` recorded beside it, and with
the site's private key that sha256 signed (``.sig``, ``guard.images.sign_digest``). A job checks
both before any rank starts (``batch.image``, as for a squashfs), then loads the checked file
once into its own private image store and migrates it there (squashed), which every rank runs
from (``batch.runtimes``): a copy per job, never a store another user can write. Why one file
and not an image ID checked in the user's store: a store holds layers podman never re-hashes at
``run``, so an ID there proves only the configuration, and an archive is what a site or a user
copies between machines.

``python3 -m dask_hpc.images_podman [--key PEM] SIF [ARCHIVE]``: one line and exit status 2
on a problem.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import sys
import tarfile
import tempfile
from pathlib import Path

from .guard.images import ImageError, record_digest, sign_digest
from .images_enroot import converted, environment, site_runs, unpack

SUFFIX = ".oci.tar"
LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le"}
CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def write_layer(rootfs: Path, layer: Path) -> None:
    """``rootfs`` as a tar layer: entries sorted, modes, times and (as root) owners kept;
    links written as links, never followed."""
    keep_owner = os.geteuid() == 0
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in [*sorted(dirs), *sorted(files)]:
                path = Path(top, name)
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
                if not keep_owner:
                    info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def image_config(env: dict[str, str], diff_id: str) -> bytes:
    """The image's OCI configuration: its environment, ``/`` to work in, one layer; no
    creation time (the same SIF, the same ID)."""
    config = {
        "architecture": ARCHITECTURES.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {"Env": [f"{k}={v}" for k, v in env.items()], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "dask_hpc.images_podman: the SIF's root file system"}],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def convert(
    sif: Path,
    output: Path | None = None,
    apptainer: str = "apptainer",
    sign_key: Path | None = None,
) -> Path:
    """Write ``output`` (default: SIF's name with ``.oci.tar``), an OCI archive of ``sif``'s
    file system, and its ``.sha256`` (signed with ``sign_key``, the site's private key, where
    given); return its path."""
    sif = Path(sif)
    output = Path(output) if output else sif.with_name(sif.name.removesuffix(".sif") + SUFFIX)
    if not sif.is_file():
        raise ImageError(f"image {sif} does not exist", "build it first (invoke build)")
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as tmp:
        rootfs = unpack(sif, Path(tmp), apptainer)
        env = environment(rootfs)
        layer = Path(tmp, "layer.tar")
        write_layer(rootfs, layer)
        diff_id = f"sha256:{_sha256(layer)}"
        packed = Path(tmp, output.name)
        with tarfile.open(packed, "w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(f"blobs/sha256/{diff_id.removeprefix('sha256:')}")
            info.size, info.mode = layer.stat().st_size, 0o644
            with layer.open("rb") as f:
                tar.addfile(info, f)
            config = _blob(tar, image_config(env, diff_id))
            manifest = {
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": {"mediaType": CONFIG, **config},
                "layers": [{"mediaType": LAYER, "digest": diff_id, "size": info.size}],
            }
            entry = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
            index = {"schemaVersion": 2, "manifests": [{"mediaType": MANIFEST, **entry}]}
            _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
            _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        os.chmod(packed, 0o644)
        os.replace(packed, output)
    record_digest(output)
    if sign_key is not None:
        sign_digest(output, sign_key)
    return output


def image_id(archive: Path) -> str:
    """The image ID podman gives ``archive`` once loaded: the sha256 of its configuration."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
    return str(manifest["config"]["digest"]).removeprefix("sha256:")


def for_site(site: str, sif: Path, sign_key: Path | None = None) -> Path | None:
    """``invoke build``'s hook: the OCI archive beside ``sif`` where ``site``'s nodes run
    podman-hpc, else None."""
    return convert(sif, sign_key=sign_key) if site_runs(site, "podman-hpc") else None


def main(argv: list[str] | None = None) -> int:
    """``[--key PEM] SIF [ARCHIVE]``: convert, print the archive, its sha256 and image ID."""
    done = converted(argv, "dask_hpc.images_podman", "ARCHIVE", convert)
    if isinstance(done, int):
        return done
    out, key = done
    digest = out.with_name(out.name + ".sha256").read_text().split()[0]
    signed = f", signed with {key}" if key else ""
    print(f"wrote {out} (sha256 {digest}{signed}; image ID {image_id(out)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
