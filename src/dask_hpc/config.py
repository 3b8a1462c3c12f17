"""Defaults of start-cluster as a dask config namespace, ``hpc`` (see ``hpc.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.config
import yaml

_DEFAULTS = yaml.safe_load((Path(__file__).with_name("hpc.yaml")).read_text())
dask.config.update_defaults(_DEFAULTS)


def get(key: str) -> Any:
    """The value of ``hpc.<key>`` from dask's configuration."""
    return dask.config.get(f"hpc.{key}")
