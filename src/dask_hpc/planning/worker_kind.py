"""What a rank's workers are: on a gpu node, the node's GPUs, checked to hold one device per
worker; and the worker class (Dask's ``Worker``, or dask-cuda's when the GPUs are NVIDIA and
dask-cuda is installed), with the dask-cuda options checked against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from . import gpus
from .settings import Settings
from .sites import Site


def gpu_node(
    env: Mapping[str, str],
    site: Site,
    wpn: int,
    workers_here: int,
    gpu_root: Path,
    notes: list[str],
) -> gpus.GpuNode:
    """The node's GPUs, checked to hold one device per worker."""
    node = gpus.gpu_node(
        env, site.gpu_vendor, site.gpu_count, site.gpu_tiles, wpn, gpu_root, site.gpu_order
    )
    capacity = len(node.devices)
    keeps_launcher_device = node.narrowed and capacity == 1 and workers_here == 1
    if wpn > capacity and not keeps_launcher_device:
        unit = "tiles" if node.extra_env.get("ZE_FLAT_DEVICE_HIERARCHY") == "FLAT" else "GPUs"
        raise UsageError(
            f"{wpn} gpu workers per node need {wpn} {node.vendor.name} devices, "
            f"but this node has {capacity} {unit} ({node.source})",
            node.capacity_hint(),
        )
    notes.append(f"{node.vendor.runtime} devices from the {node.source}: {','.join(node.devices)}")
    return node


def worker_class(
    settings: Settings, gpu_node: gpus.GpuNode | None, nanny: bool, notes: list[str]
) -> str:
    cuda_flags = [
        flag
        for flag, value in (
            ("--device-memory-limit", settings.device_memory_limit),
            ("--rmm-pool-size", settings.rmm_pool_size),
            ("--enable-cudf-spill", settings.enable_cudf_spill),
        )
        if value
    ]
    nvidia = gpu_node is not None and gpu_node.vendor.name == "nvidia"
    if cuda_flags and not (nvidia and _has_dask_cuda()):
        raise UsageError(
            f"{cuda_flags[0]} is a dask-cuda option, for gpu workers on NVIDIA GPUs",
            "drop it, or run gpu workers with dask-cuda installed "
            "(pip install '.[cuda]' in dask-hpc's checkout)",
        )
    if not nvidia:
        return "distributed.Worker"
    if not _has_dask_cuda():
        notes.append(
            "dask-cuda is not installed: plain Dask workers pinned with CUDA_VISIBLE_DEVICES "
            "(pip install '.[cuda]' in dask-hpc's checkout)"
        )
        return "distributed.Worker"
    if not nanny:
        raise UsageError(
            "dask-cuda workers always run under a Nanny (as `dask cuda worker` does)",
            "drop --no-nanny",
        )
    if settings.rmm_pool_size and not _importable("rmm"):
        raise UsageError(
            "--rmm-pool-size needs RMM, which is not installed here",
            "install rmm (pip install rmm-cu12, or the site image), or drop --rmm-pool-size",
        )
    return "dask_cuda"


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _has_dask_cuda() -> bool:
    return _importable("dask_cuda")
