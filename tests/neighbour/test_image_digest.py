"""IMAGE.sha256, written beside a built or pulled image (``images.record_digest``).

Before: ``Path.write_text`` followed whatever stood at that name: in a site's group-shared
image directory, a symbolic link the other user planted there made the builder overwrite a file
of its own (or hung it on a FIFO). Now the digest is written under a random name and renamed
over the name: what was planted is replaced, never written through.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from harness.neighbour import Neighbour

from dask_hpc.guard import images

PLANTS = {
    "a symbolic link to the owner's file": lambda path, target: os.symlink(target, path),
    "a FIFO": lambda path, _: os.mkfifo(path, 0o666),
}


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_the_digest_replaces_what_was_planted_beside_the_image(
    what: str, neighbour: Neighbour, project: Path, tmp_path: Path
) -> None:
    owners_file = tmp_path / "job.sh"
    owners_file.write_text("the owner's script\n")
    image = project / "dask-hpc-site.sif"
    image.write_bytes(b"an image")
    digest = images.digest_path(image)
    neighbour.run(PLANTS[what], str(digest), str(owners_file))
    done = threading.Event()

    def record() -> None:
        images.record_digest(image)
        done.set()

    threading.Thread(target=record, daemon=True).start()
    if not done.wait(30):  # hung opening the FIFO: free the thread before failing
        with open(digest, "rb"):  # the FIFO's other end: the writer opens and ends
            pass
        pytest.fail("record_digest hung on the planted FIFO")
    assert owners_file.read_text() == "the owner's script\n"
    assert digest.is_file() and not digest.is_symlink()
    assert digest.read_text() == f"{images.sha256(image)}  {image.name}\n"
    assert digest.stat().st_uid == os.geteuid() and digest.stat().st_mode & 0o777 == 0o644
    assert images.recorded_digest(image) == images.sha256(image)
