"""A converge target made to look like a DeepOps node today: Pyxis and Enroot, no Apptainer.

Neither can run in a chroot converge, and the role only needs to find them: what DeepOps' pyxis
role leaves (plugstack.conf.d/pyxis.conf naming spank_pyxis.so, included from plugstack.conf)
and an ``enroot`` on PATH stand in for them, as detection input only
(tests/containers/test_pyxis.py runs the real srun --container-image). The site image is a
stand-in squashfs with what ``invoke build --site deepops`` writes beside it: its recorded
sha256 and that sha256's signature with a real site key.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from node_support import sha256

from dask_hpc.guard import images

PLUGSTACK = "include /etc/slurm/plugstack.conf.d/*\n"
PYXIS_CONF = "required /usr/local/lib/slurm/spank_pyxis.so\n"  # DeepOps' pyxis role's line
ENROOT = '#!/bin/sh\necho "enroot 4.1.2 (dask-hpc test stand-in: detection only)"\n'


def emulate_deepops_pyxis(root: Path, workdir: Path) -> dict[str, object]:
    """Put the Pyxis and Enroot stand-ins into ``root``; make a site key pair and a signed
    squashfs in ``workdir``; return the host's variables (image provider, that squashfs)."""
    conf = root / "etc/slurm/plugstack.conf.d"
    conf.mkdir(parents=True)
    (root / "etc/slurm/plugstack.conf").write_text(PLUGSTACK)
    (conf / "pyxis.conf").write_text(PYXIS_CONF)
    enroot = root / "usr/local/bin/enroot"
    enroot.write_text(ENROOT)
    enroot.chmod(0o755)
    build = workdir / "pyxis-build"
    build.mkdir()
    private, public = build / "site.pem", build / "site.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True, capture_output=True)  # fmt: skip
    image = build / "dask-hpc-deepops.sqsh"
    image.write_bytes(os.urandom(1 << 16))  # content does not matter to the role
    images.record_digest(image)
    images.sign_digest(image, private)
    return {
        "dask_hpc_provider": "image",
        "dask_hpc_image_src": str(image),
        "dask_hpc_image_checksum": f"sha256:{sha256(image)}",
        "dask_hpc_image_key": str(public),
    }
