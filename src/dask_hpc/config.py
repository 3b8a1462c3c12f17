"""Defaults of start-cluster as a dask config namespace, ``hpc`` (see ``hpc.yaml``), and the
one way a value goes into a ``DASK_*`` variable."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dask.config
import yaml

_DEFAULTS = yaml.safe_load((Path(__file__).with_name("hpc.yaml")).read_text())
dask.config.update_defaults(_DEFAULTS)


def get(key: str) -> Any:
    """The value of ``hpc.<key>`` from dask's configuration."""
    return dask.config.get(f"hpc.{key}")


def env_value(text: str) -> str:
    """``text`` as the value of a ``DASK_*`` variable that Dask reads back as this very string.

    Dask reads every ``DASK_*`` value as a Python literal (``ast.literal_eval``). Text that is
    not one but looks like one in part, a token or a temporary name with ``-1in`` in it, makes
    every ``import dask`` print ``SyntaxWarning: invalid decimal literal`` (a dashboard link:
    18 in 100,000 tokens); text made only of digits would come back a number. Such text is
    given quoted; text Dask reads back as it is stays unquoted (scripts read
    ``DASK_SCHEDULER_ADDRESS`` themselves).
    """
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        read = dask.config.interpret_value(text)
    return text if isinstance(read, str) and read == text and not warned else repr(text)
