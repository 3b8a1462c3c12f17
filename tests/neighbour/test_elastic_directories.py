"""The elastic cluster's directories (its files, its jobs' scripts and output) where another
user can write: refused before anything is made or submitted.

Before: ``HPCCluster(directory=...)`` and ``log_directory=`` were ``mkdir(exist_ok=True)``'d
and used whatever was there, the other user's directory or symbolic link included.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness.neighbour import Neighbour

from dask_hpc import HPCCluster
from dask_hpc.errors import UsageError


def plant(sticky: str) -> None:
    Path(sticky, "theirs").mkdir(mode=0o777)
    Path(sticky, "their-link").symlink_to(Path(sticky, "theirs"))


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ({"directory": "{project}"}, "is not sticky"),
        ({"directory": "{sticky}/theirs"}, "belongs to dask-hpc-intruder"),
        ({"log_directory": "{sticky}/theirs"}, "belongs to dask-hpc-intruder"),
        ({"log_directory": "{sticky}/their-link"}, "is not a directory (a symbolic link"),
        ({"log_directory": "{project}/logs"}, "is not sticky"),
    ],
)
def test_hpccluster_refuses_directories_others_can_change(
    where: dict[str, str], problem: str, neighbour: Neighbour, sticky: Path, project: Path,
    tmp_path: Path,
) -> None:
    neighbour.run(plant, str(sticky))
    kwargs = {k: v.format(sticky=sticky, project=project) for k, v in where.items()}
    kwargs.setdefault("directory", str(tmp_path / "mine"))
    with pytest.raises(UsageError, match=re.escape(problem)):
        HPCCluster("cpu", batch_system="slurm", site="generic", quiet=True, **kwargs)
    assert not list(project.iterdir())
    assert sorted(p.name for p in sticky.iterdir()) == ["their-link", "theirs"]
    assert not list((sticky / "theirs").iterdir())
