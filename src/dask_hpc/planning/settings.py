"""start-cluster's settings as one typed object: what the command line gave, checked by its
parser (``cli.parse``), and all the plan reads of it. Nothing past the command line sees
argparse."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Settings:
    """One per rank: the options of ``start-cluster`` (``cli.build_parser``), None where not
    given (the plan then takes ``hpc.*`` from dask's config, or the site's default)."""

    worker_type: str  # "cpu" or "gpu"
    workers_per_node: int
    command: list[str] | None = None  # after --
    site: str | None = None
    launcher: str | None = None
    scheduler_file: str | None = None
    join: str | None = None
    name_prefix: str | None = None
    abort_on_node_loss: bool | None = None
    timeout: float | None = None
    nthreads: int | None = None
    memory_limit: str | None = None
    resources: dict[str, float] | None = None
    local_directory: str | None = None
    death_timeout: float | None = None
    nanny: bool | None = None
    device_memory_limit: str | None = None
    rmm_pool_size: str | None = None
    enable_cudf_spill: bool = False
    interface: str | None = None
    protocol: str | None = None
    scheduler_port: int | None = None
    dashboard_address: str | None = None
    tls: bool | None = None
    jupyter: bool = False
    dry_run: bool = False

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        """From the parser's values (``vars(namespace)``); a value it has no field for is a
        bug, raised here."""
        known = {f.name for f in fields(cls)}
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"start-cluster options without a setting: {sorted(unknown)}")
        return cls(**options)
