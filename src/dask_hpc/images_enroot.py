"""The image Pyxis and Enroot run, made from the SIF's own file system: no second Spack build.

A SIF holds its root file system as one squashfs partition (``FS (Squashfs/*System/...)`` in
``apptainer sif list``). The conversion dumps that partition, unpacks it, writes what Enroot
reads and Apptainer keeps elsewhere (the base image's ``ENV``, kept in
``/.singularity.d/env/10-docker2singularity.sh``, and the definition's ``%environment``, in
``90-environment.sh``, become ``/etc/environment``: the ``PATH`` to start-cluster, and a CUDA
base image's ``NVIDIA_VISIBLE_DEVICES`` and ``NVIDIA_DRIVER_CAPABILITIES``, without which
Enroot's NVIDIA hook gives the container no GPU and no driver), packs it again with
``mksquashfs`` and records ``IMAGE.sqsh.sha256`` beside it, as ``invoke build`` does for the
SIF; the job checks it before any rank starts
(``batch.image``). A squashfs has no place for a signature: with the site's private key the
recorded sha256 is signed instead (``IMAGE.sqsh.sha256.sig``, ``guard.images.sign_digest``),
and a job with the site's public key verifies that signature and then the sha256.

``python3 -m dask_hpc.images_enroot [--key PEM] SIF [SQSH]``: one line and exit status 2 on
a problem.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .guard.images import ImageError, record_digest, sign_digest

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Apptainer's
ENVIRONMENT = ".singularity.d/env/90-environment.sh"  # the definition's %environment
DOCKER_ENV = ".singularity.d/env/10-docker2singularity.sh"  # the base image's ENV
EXPORT = re.compile(r"^\s*export\s+([A-Za-z_]\w*)=(.*?)\s*$")
# How Apptainer (1.4.5, read from a build) writes an image's ENV: PATH as it is, the others
# to be kept where the host sets them: export NAME="${NAME:-"VALUE"}"
DOCKER_EXPORT = re.compile(r'^export ([A-Za-z_]\w*)="(?:\$\{\1:-"(.*)"\}|(.*))"$')
SQUASH_OPTIONS = ("-noappend", "-no-progress", "-quiet", "-comp", "zstd")


def _run(argv: list[str], what: str) -> str:
    """Run ``argv``; ImageError naming ``what`` and the tool's last line if it fails."""
    if shutil.which(argv[0]) is None:
        raise ImageError(f"{argv[0]} not found, needed to {what}", f"install {argv[0]}")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise ImageError(f"could not {what}: {argv[0]} exited {proc.returncode} ({said})")
    return proc.stdout


def rootfs_partition(sif: Path, apptainer: str = "apptainer") -> str:
    """The id of the SIF's root file system partition (its squashfs ``*System`` one)."""
    listing = _run([apptainer, "sif", "list", str(sif)], f"list the partitions of {sif}")
    for line in listing.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[4].startswith("FS (Squashfs/*System"):
            return cells[0]
    raise ImageError(f"{sif} has no squashfs root file system", "give a SIF that invoke build made")


def docker_environment(rootfs: Path) -> dict[str, str]:
    """The base image's ``ENV`` as Apptainer keeps it, as plain values (the image's own, not
    the host's); ImageError for a value with a ``$`` or a backquote left unescaped, which
    Apptainer's shell would expand."""
    path = rootfs / DOCKER_ENV
    values: dict[str, str] = {}
    for line in (path.read_text() if path.is_file() else "").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = DOCKER_EXPORT.match(line)
        quoted = (m.group(2) if m.group(2) is not None else m.group(3)) if m else None
        if quoted is None or re.search(r'(?<!\\)[$`"]', quoted.replace("\\\\", "")):
            raise ImageError(
                f"{DOCKER_ENV} line {line.strip()!r} is more than a plain value",
                "give the base image plain ENV values",
            )
        values[m.group(1)] = re.sub(r"\\([\\$`\"])", r"\1", quoted)
    return values


def environment(rootfs: Path) -> dict[str, str]:
    """The base image's ``ENV`` (``docker_environment``), then the ``%environment`` of the
    definition as plain values: each ``export NAME=VALUE`` of Apptainer's file, ``$NAME`` and
    ``${NAME}`` taken from those before it (``PATH`` from the base image, else Apptainer's
    default); ImageError for a line that is more than that."""
    docker = docker_environment(rootfs)
    values = {"PATH": BASE_PATH, **docker}
    names: list[str] = [name for name in docker if name != "PATH"]
    path = rootfs / ENVIRONMENT
    text = path.read_text() if path.is_file() else ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = EXPORT.match(line)
        value = m.group(2) if m else ""
        if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if not m or re.search(r"[`;&|<>()\\]|\$\(", value):
            raise ImageError(
                f"{ENVIRONMENT} line {line.strip()!r} is more than export NAME=VALUE",
                "keep the definition's %environment to plain exports",
            )
        values[m.group(1)] = re.sub(r"\$\{?(\w+)\}?", lambda v: values.get(v.group(1), ""), value)
        names.append(m.group(1))
    return {name: values[name] for name in dict.fromkeys(["PATH", *names])}


def unpack(sif: Path, where: Path, apptainer: str = "apptainer") -> Path:
    """The SIF's root file system unpacked into ``where/rootfs`` (its squashfs partition
    dumped, then ``unsquashfs``): what each other runtime's image is made from."""
    partition = rootfs_partition(sif, apptainer)
    part, rootfs = where / "rootfs.squashfs", where / "rootfs"
    with part.open("wb") as f:
        proc = subprocess.run(
            [apptainer, "sif", "dump", partition, str(sif)], stdout=f, check=False
        )
    if proc.returncode != 0:
        raise ImageError(f"could not dump partition {partition} of {sif}")
    _run(["unsquashfs", "-no-progress", "-d", str(rootfs), str(part)], f"unpack {sif}")
    part.unlink()
    return rootfs


def _quoted(value: str) -> str:
    """``value`` as both Enroot (which strips one pair of surrounding quotes) and ``sh``'s
    ``.`` read it: single-quoted unless plain (the job sources the file: ``batch.launch``)."""
    if re.fullmatch(r"[\w./:@%+,=-]*", value):
        return value
    if "'" in value:
        raise ImageError(
            f"%environment value {value!r} holds a single quote",
            "keep the definition's %environment values free of quotes",
        )
    return f"'{value}'"


def convert(
    sif: Path,
    output: Path | None = None,
    apptainer: str = "apptainer",
    sign_key: Path | None = None,
) -> Path:
    """Write ``output`` (default: SIF's name with ``.sqsh``) from ``sif``'s file system, with
    ``/etc/environment`` from its ``%environment``, and its ``.sha256`` (signed with
    ``sign_key``, the site's private key, where given); return its path."""
    sif = Path(sif)
    output = Path(output) if output else sif.with_suffix(".sqsh")
    if not sif.is_file():
        raise ImageError(f"image {sif} does not exist", "build it first (invoke build)")
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as tmp:
        rootfs = unpack(sif, Path(tmp), apptainer)
        env = environment(rootfs)
        etc = rootfs / "etc"
        etc.mkdir(mode=0o755, exist_ok=True)
        target = etc / "environment"
        if target.is_symlink():
            target.unlink()  # never written through a link the image holds
        target.write_text("".join(f"{k}={_quoted(v)}\n" for k, v in env.items()))
        os.chmod(target, 0o644)
        packed = Path(tmp, output.name)
        _run(["mksquashfs", str(rootfs), str(packed), *SQUASH_OPTIONS], f"pack {output}")
        os.chmod(packed, 0o644)
        os.replace(packed, output)
    record_digest(output)
    if sign_key is not None:
        sign_digest(output, sign_key)
    return output


def site_runs(site: str, runtime: str) -> bool:
    """Whether ``site``'s nodes have ``runtime`` (its profile's ``container_runtime`` or one it
    also has); False for a build target that is no site."""
    from .planning.sites import all_sites

    profile = all_sites().get(site)
    return profile is not None and runtime in (
        profile.container_runtime,
        *profile.container_runtimes_also,
    )


def for_site(site: str, sif: Path, sign_key: Path | None = None) -> Path | None:
    """``invoke build``'s hook: the squashfs beside ``sif`` where ``site``'s nodes run Pyxis,
    else None."""
    return convert(sif, sign_key=sign_key) if site_runs(site, "pyxis") else None


def converted(
    argv: list[str] | None, module: str, output: str, make: Callable[..., Path]
) -> tuple[Path, Path | None] | int:
    """A conversion command's ``[--key PEM] SIF [OUTPUT]``: (what ``make`` wrote, the key), or
    the exit status after one line on stderr."""
    args = sys.argv[1:] if argv is None else list(argv)
    key = None
    if args[:1] == ["--key"] and len(args) > 1:
        key, args = Path(args[1]), args[2:]
    if len(args) not in (1, 2):
        print(f"usage: python3 -m {module} [--key PEM] SIF [{output}]", file=sys.stderr)
        return 2
    try:
        return make(Path(args[0]), Path(args[1]) if len(args) == 2 else None, sign_key=key), key
    except ImageError as e:
        print(f"{module}: error: {e}", file=sys.stderr)
        return e.exit_code


def main(argv: list[str] | None = None) -> int:
    """``[--key PEM] SIF [SQSH]``: convert (the sha256 signed with the site's private key
    where given), print the squashfs and its sha256; one line on a problem."""
    done = converted(argv, "dask_hpc.images_enroot", "SQSH", convert)
    if isinstance(done, int):
        return done
    out, key = done
    signed = f", signed with {key}" if key else ""
    print(f"wrote {out} (sha256 {out.with_name(out.name + '.sha256').read_text().split()[0]}"
          f"{signed})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
