"""A CUDA base image's GPU settings reach Enroot (issue 45): the squashfs made from the SIF
keeps the base image's ``ENV``, and Enroot's NVIDIA hook asks for the GPUs with it.

The DeepOps image starts ``From: nvidia/cuda:...-runtime`` (containers/deepops.yaml), whose
``ENV`` holds ``NVIDIA_VISIBLE_DEVICES=all`` and ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``.
Apptainer keeps that ``ENV`` in ``/.singularity.d/env/10-docker2singularity.sh``, not in
``90-environment.sh``; a conversion that read only the latter gave Enroot an image without
them, and Enroot's ``98-nvidia.sh`` then gives the container no GPU and no driver (it exits at
once where ``NVIDIA_VISIBLE_DEVICES`` is unset).

Real parts: podman builds an image with that ``ENV`` (from scratch: no registry here), Apptainer
1.4.5 builds the SIF from it with a ``%environment`` of its own, ``images_enroot`` converts it,
Enroot 4.1.2 creates and starts the container with its own hooks. Emulated, as this machine
has no GPU: ``nvidia-container-cli`` (libnvidia-container), which the hook runs last; a stand-in
on the hook's PATH records the arguments it is given and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from containers_support import ENROOT, need_enroot
from podman_support import need_podman

from dask_hpc import images_enroot
from dask_hpc.batch import runtimes

pytestmark = pytest.mark.timeout(300)

# The ENV of nvidia/cuda:12.6.3-runtime-ubuntu22.04, as its Dockerfile sets it (less what
# this machine's root file system has no use for)
CUDA_ENV = {
    "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
    "/usr/sbin:/usr/bin:/sbin:/bin",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_REQUIRE_CUDA": "cuda>=12.6 brand=tesla,driver>=470,driver<471",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
}


def cuda_like_sif(where: Path) -> Path:
    """A SIF built as the DeepOps one is, from a base image with CUDA's ``ENV``: podman builds
    the base (a merged-/usr skeleton), Apptainer the SIF from its OCI archive, with a
    ``%environment`` that puts the stack's venv first on PATH."""
    context = where / "context"
    rootfs = context / "rootfs"
    for sub in ("etc", "usr/bin", "proc", "sys", "dev", "tmp", "run", "root", "var"):
        (rootfs / sub).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (rootfs / link).symlink_to(f"usr/{link}")
    env = " ".join(f'{k}="{v}"' for k, v in CUDA_ENV.items())
    (context / "Containerfile").write_text(f"FROM scratch\nCOPY rootfs/ /\nENV {env}\n")
    run = Path(tempfile.mkdtemp(prefix="dhp-podman-"))  # podman: a runroot under 50 chars
    podman = ["podman", "--root", str(where / "storage"), "--runroot", str(run),
              "--storage-driver", "vfs"]  # fmt: skip
    archive = where / "base.tar"
    try:
        for argv in (
            [*podman, "build", "-q", "-t", "dask-hpc-cuda-like", str(context)],
            [*podman, "save", "--format", "oci-archive", "-o", str(archive), "dask-hpc-cuda-like"],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr
    finally:
        subprocess.run([*podman, "rmi", "-a", "-f"], capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(where / "storage"), str(run)], check=False)
    definition = where / "image.def"
    definition.write_text(
        f"Bootstrap: oci-archive\nFrom: {archive}\n\n"
        "%environment\n    export PATH=/opt/dask-hpc/venv/bin:$PATH\n"
        "    export PYTHONNOUSERSITE=1\n"
    )
    sif = where / "dask-hpc-deepops.sif"
    done = subprocess.run(["apptainer", "build", "-F", str(sif), str(definition)],
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return sif


def test_the_squashfs_keeps_the_base_images_gpu_settings_and_enroot_asks_for_the_gpus_emulated(
    tmp_path: Path,
) -> None:
    need_enroot()
    need_podman()
    sqsh = images_enroot.convert(cuda_like_sif(tmp_path))
    listing = subprocess.run(["unsquashfs", "-cat", str(sqsh), "etc/environment"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    assert listing.stdout.splitlines() == [
        "PATH=/opt/dask-hpc/venv/bin:" + CUDA_ENV["PATH"],  # the stack's, then the base's
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "NVIDIA_REQUIRE_CUDA='cuda>=12.6 brand=tesla,driver>=470,driver<471'",
        "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "PYTHONNOUSERSITE=1",
    ], listing.stdout

    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    cli = stand_in / "nvidia-container-cli"
    cli.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$DASK_HPC_TEST_NVCLI_LOG"\n')
    cli.chmod(0o755)
    private = {name: tmp_path / "enroot" / name for name in ("data", "cache", "run")}
    env = {
        "PATH": f"{stand_in}:{ENROOT / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(tmp_path),
        "ENROOT_DATA_PATH": str(private["data"]),
        "ENROOT_CACHE_PATH": str(private["cache"]),
        "ENROOT_RUNTIME_PATH": str(private["run"]),
    }
    enroot = str(ENROOT / "bin" / "enroot")
    done = subprocess.run([enroot, "create", "--name", "gpu", str(sqsh)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # A GPU job leaves the image's settings be; a CPU job's script sets void first
    # (runtimes.pyxis_gpu_lines), and the hook then asks for nothing.
    void = runtimes.pyxis_gpu_lines(gpus=False)[-1]
    assert void == 'export NVIDIA_VISIBLE_DEVICES="${NVIDIA_VISIBLE_DEVICES:-void}"'
    asked = {}
    for job, extra in (("gpu", {}), ("cpu", {"NVIDIA_VISIBLE_DEVICES": "void"})):
        log = tmp_path / f"{job}.args"
        start = [enroot, "start", "--mount", "/usr:/usr", "gpu", "/usr/bin/true"]
        done = subprocess.run(start, env={**env, **extra, "DASK_HPC_TEST_NVCLI_LOG": str(log)},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        asked[job] = log.read_text().splitlines() if log.exists() else None
    subprocess.run([enroot, "remove", "--force", "gpu"], env=env, check=True, timeout=60)
    assert asked["cpu"] is None  # the hook never ran nvidia-container-cli
    gpu = asked["gpu"]
    assert gpu is not None and gpu[0:2] == ["--user", "configure"], gpu
    for wanted in ("--device=all", "--compute", "--utility",
                   "--require=cuda>=12.6 brand=tesla,driver>=470,driver<471"):  # fmt: skip
        assert wanted in gpu, gpu
    assert gpu[-1] == str(private["data"] / "gpu")  # the container's root file system
    assert not os.listdir(private["data"])


def test_a_base_image_value_apptainers_shell_would_expand_is_refused(tmp_path: Path) -> None:
    """Apptainer 1.4.5 writes ``ENV ODD="a'b $HOME"`` as below, and its shell then expands
    ``$HOME`` (read from a build: ``a'b \\/home/...``): not a plain value, so one line; an
    escaped quote is one."""
    env = tmp_path / images_enroot.DOCKER_ENV
    env.parent.mkdir(parents=True)
    env.write_text('#!/bin/sh\nexport Q="${Q:-"say \\"hi\\""}"\n')
    assert images_enroot.docker_environment(tmp_path) == {"Q": 'say "hi"'}
    env.write_text('#!/bin/sh\nexport ODD="${ODD:-"a\'b \\\\$HOME"}"\n')
    with pytest.raises(images_enroot.ImageError, match="is more than a plain value"):
        images_enroot.docker_environment(tmp_path)
