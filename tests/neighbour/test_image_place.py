"""The image a job verifies is the image its ranks run.

Before (85c333f): a job script verified the image (``apptainer verify``, with a site key only)
once, then every rank ran ``apptainer exec`` on the path again; the default path was relative
to the job's directory; without ``hpc.image-key`` nothing was checked, not even the recorded
sha256. In a project directory the other user could rename their image over the owner's
between the check and the ranks' starts. Now the job settles the image once before any rank
starts (``dask_hpc.batch.image``): resolved, refused where a user other than the owner and root
could change it or a directory above it, its recorded sha256 checked; the ranks run that path.
Each case runs a job script rendered as ``invoke job`` and HPCCluster render it, on the test
Slurm (real apptainer; the refusals come before any rank starts).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from harness.neighbour import Neighbour

from dask_hpc.batch import script
from dask_hpc.errors import UsageError

pytestmark = pytest.mark.slurm


def render(image: str) -> str:
    return script.render(
        script.JobRequest(
            site="generic",  # Apptainer's site: DeepOps' jobs may run Pyxis (runtimes)
            batch_system="slurm",
            nodes=1,
            workers_per_node=1,
            worker_type="cpu",
            cpus_per_worker=1,
            walltime="5",
            image=image,
            command=[sys.executable, "-c", "print('ran')"],
        )
    )


def submit(slurm_cluster, text: str, env: dict[str, str], cwd: Path) -> tuple[tuple, str]:  # noqa: ANN001
    job = slurm_cluster.sbatch(text, env={**env, **slurm_cluster.env}, cwd=cwd)
    state = slurm_cluster.wait_job(job, timeout=120)
    return state, slurm_cluster.job_output(job)


def refused(state: tuple, output: str, *fragments: str) -> str:
    """Exit status 2, one line of ours naming ``fragments``, and no rank started: that line."""
    assert state == ("FAILED", 2), output
    lines = [ln for ln in output.splitlines() if ln.startswith("dask-hpc: ")]
    assert len(lines) == 1, output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "start-cluster" not in output and "Traceback" not in output, output
    return lines[0]


def plant_image(directory: str) -> str:
    """As the other user: an image of theirs where the owner expects one."""
    path = Path(directory, "dask-hpc-deepops.sif")
    path.write_bytes(b"the other user's image")
    return str(path)


def test_an_image_others_could_change_is_refused(
    slurm_cluster, neighbour: Neighbour, owner_env: dict[str, str], project: Path
) -> None:
    """In a project directory: the owner's own image by its absolute path (refused when the
    script is rendered), by the site's relative default (refused by the job, which resolves it
    in its directory), and an image the other user put there under the owner's image's name."""
    own = project / "mine.sif"
    own.write_bytes(b"the owner's image")
    with pytest.raises(UsageError, match=f"{project} can be written by other users"):
        render(str(own))
    line = refused(
        *submit(slurm_cluster, render("mine.sif"), owner_env, project),
        f"image {own} can be changed by other users",
        f"{project} can be written by other",
        f"; copy it to a directory only you can write (cp -- {own} ",
    )
    assert "hpc.image-group" not in line  # open to every user: no group to trust
    own.unlink()
    theirs = neighbour.run(plant_image, str(project))
    with pytest.raises(UsageError, match=f"image {theirs} can be changed by other users"):
        render(theirs)
    refused(
        *submit(slurm_cluster, render("dask-hpc-deepops.sif"), owner_env, project),
        f"{theirs} belongs to uid {neighbour.uid}",
    )


def swap_in(directory: str, name: str) -> None:
    """As the other user: their image under the owner's image's name, if they can."""
    Path(directory, name).unlink()


def test_a_changed_image_is_refused_by_its_recorded_sha256_without_a_key(
    slurm_cluster, neighbour: Neighbour, owner_env: dict[str, str], tmp_path: Path
) -> None:
    """In a directory of the owner's: no site key, and the image is not the one whose sha256
    was recorded beside it (``invoke build``/``pull`` write ``IMAGE.sha256``): refused in one
    line, relative to the job's directory. The other user can change neither."""
    images = tmp_path / "images"
    images.mkdir(mode=0o755)
    image = images / "dask-hpc-deepops.sif"
    image.write_bytes(b"an image changed after its digest was recorded")
    recorded = hashlib.sha256(b"the image as built").hexdigest()
    (images / "dask-hpc-deepops.sif.sha256").write_text(f"{recorded}  {image.name}\n")
    refused(
        *submit(slurm_cluster, render("images/dask-hpc-deepops.sif"), owner_env, tmp_path),
        f"image {image} has sha256",
        f"not {recorded}",
    )
    with pytest.raises(AssertionError, match="Permission denied"):
        neighbour.run(swap_in, str(images), image.name)
