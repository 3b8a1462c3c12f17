"""The lines of a job script that settle its image before the launcher starts any rank.

Every rank runs ``apptainer exec`` on the image's path, on its own node: a check made once
holds for what the ranks run only if nobody else can change that path between the check and
the last rank's start. So the job resolves the path once (relative to its directory, links
followed), refuses one that a user other than the owner and root could change (the rules of
``private.changeable_by_others``, in shell: the node needs coreutils, not dask-hpc), then
checks the image's recorded sha256 (``IMAGE.sha256``, written by ``invoke build``/``pull``)
and, with the site's key, its signature. The ranks run ``$dask_hpc_image``. The shell is in
``templates/image.sh``.
"""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path

from ..guard import images
from .templating import Template

VARIABLE = "dask_hpc_image"  # what the launch line runs: "$dask_hpc_image"
FIX = (
    "use an image built or pulled with the site's key (invoke build, invoke pull), or opt out: "
    f"{images.OPT_OUT}"
)


def lines(image: str, key: Path | None, apptainer: str = "apptainer") -> list[str]:
    """The job script's lines that settle ``image`` into ``$dask_hpc_image`` (one line and
    exit status 2 for each refusal); with ``key``, its signature is verified too."""
    signature = ""
    if key is not None:
        q_key = shlex.quote(str(key))
        verify = f"{shlex.quote(apptainer)} verify --key \"$dask_hpc_key\" \"${VARIABLE}\""
        signature = "\n".join(
            [
                f"  dask_hpc_key={q_key}",
                f"  if ! dask_hpc_verify=$({verify} 2>&1); then",
                "    dask_hpc_said=$(printf '%s\\n' \"$dask_hpc_verify\" | sed -n 's/^FATAL: *//p'"
                " | tail -n 1)",
                f"    dask_hpc_refuse \"image ${VARIABLE} failed verification ($dask_hpc_key:"
                f" $dask_hpc_said); {FIX}\"",
                "  fi",
                "",
            ]
        )
    text = resources.files(__package__).joinpath("templates", "image.sh").read_text()
    body = Template(text).substitute(image=shlex.quote(image), signature=signature)
    return body.rstrip("\n").split("\n")
