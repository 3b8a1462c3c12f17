"""GPU devices of a node and one device per worker, for NVIDIA, Intel and AMD.

A launcher may have narrowed a rank's devices already. AMD's are narrowed in ROCm's own
variable (``ROCR_VISIBLE_DEVICES``, Slurm's and mpibind's) or in the ones its HIP runtime also
reads: Flux's job shell sets ``CUDA_VISIBLE_DEVICES`` whatever the vendor (flux-core 0.88's
gpu-affinity plugin; HIP honours it on AMD GPUs), ``-1`` where the job was given none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class Vendor:
    """How a GPU runtime is told which devices a process may see."""

    name: str
    visible_var: str
    runtime: str
    # Variables the runtime also narrows its devices by, below visible_var's (HIP: indices
    # into the devices ROCr shows); read where visible_var is unset.
    also_visible: tuple[str, ...] = ()


VENDORS: dict[str, Vendor] = {
    "nvidia": Vendor("nvidia", "CUDA_VISIBLE_DEVICES", "CUDA"),
    "intel": Vendor("intel", "ZE_AFFINITY_MASK", "Level Zero"),
    "amd": Vendor("amd", "ROCR_VISIBLE_DEVICES", "ROCm", ("HIP_VISIBLE_DEVICES",
                                                         "CUDA_VISIBLE_DEVICES")),
}


@dataclass(frozen=True)
class GpuNode:
    """The GPUs one rank can hand out, and where that knowledge came from."""

    vendor: Vendor
    devices: tuple[str, ...]  # what to put in the visible-devices variable, one per slot
    narrowed: bool  # the launcher already narrowed this rank to these devices
    source: str  # "environment", "hardware" or "site profile"
    tiles: int  # tiles per device (Intel Max: 2); FLAT hierarchy exposes each tile
    extra_env: Mapping[str, str]  # settings for every worker of the node
    visible_var: str = ""  # the variable the launcher narrowed the devices in, if it did

    def capacity_hint(self) -> str:
        """How many GPU workers per node fit, as advice."""
        flat = self.extra_env.get("ZE_FLAT_DEVICE_HIERARCHY") == "FLAT"
        gpus = len(self.devices) // self.tiles if flat else len(self.devices)
        if self.vendor.name == "intel" and self.tiles > 1:
            return (
                f"start at most {gpus} gpu workers per node (one per GPU), "
                f"or exactly {gpus * self.tiles} (one per tile)"
            )
        return f"start at most {gpus} gpu workers per node"


def probe_count(vendor: str, root: Path = Path("/")) -> int:
    """Devices of ``vendor`` that the kernel shows (0 when none or unknown)."""
    if vendor == "nvidia":
        gpus = root / "proc/driver/nvidia/gpus"
        return len(list(gpus.iterdir())) if gpus.is_dir() else 0
    if vendor == "amd":
        nodes = root / "sys/class/kfd/kfd/topology/nodes"
        if not nodes.is_dir():
            return 0
        ids = [
            (n / "gpu_id").read_text().strip() for n in nodes.iterdir() if (n / "gpu_id").exists()
        ]
        return sum(1 for i in ids if i not in ("", "0"))
    if vendor == "intel":
        drm = root / "sys/class/drm"
        if not drm.is_dir():
            return 0
        cards = [
            c
            for c in drm.glob("card[0-9]*")
            if "-" not in c.name
            and (c / "device/vendor").exists()
            and (c / "device/vendor").read_text().strip() == "0x8086"
            and (c / "device/driver").resolve().name in ("i915", "xe")
        ]
        return len(cards)
    return 0


def probe_vendor(root: Path = Path("/")) -> str | None:
    for name in VENDORS:
        if probe_count(name, root):
            return name
    return None


def _visible(env: Mapping[str, str], vendor: Vendor) -> tuple[str, tuple[str, ...]] | None:
    """(the variable, its devices) of the first of the vendor's variables that is set."""
    for var in (vendor.visible_var, *vendor.also_visible):
        raw = env.get(var)
        if raw is not None:
            return var, tuple(d.strip() for d in raw.split(",") if d.strip())
    return None


def gpu_node(
    env: Mapping[str, str],
    vendor_name: str | None,
    profile_count: int | None,
    tiles: int,
    workers_per_node: int,
    root: Path = Path("/"),
    order: str = "local-rank",
) -> GpuNode:
    """Work out the devices this rank hands to its GPU workers, or fail clearly. ``order``
    ``reverse``: the i-th worker of a node gets the last device but i (a site whose GPUs are
    numbered against its CPUs' order: ALCF Polaris); a launcher's narrowing is kept as it is."""
    vendor_name = vendor_name or probe_vendor(root)
    if vendor_name is None:
        raise UsageError(
            "gpu workers asked for, but no GPU was found on this node",
            "start cpu workers, or pick the site with --site (its profile knows the GPUs)",
        )
    vendor = VENDORS[vendor_name]
    extra: dict[str, str] = {}
    found = _visible(env, vendor)
    if found is not None:
        var, visible = found
        if not visible:
            raise UsageError(
                f"{var} is set but empty: this rank may use no GPU",
                f"unset {var} or give the rank a device",
            )
        if any(d.startswith("-") for d in visible):  # Flux's -1: the job has no GPU here
            raise UsageError(
                f"the launcher gave this rank no GPU ({var}={','.join(visible)})",
                "ask it for one per gpu worker (flux run --gpus-per-task=1, "
                "srun --gpus-per-task=1)",
            )
        return GpuNode(vendor, visible, True, "environment", 1, extra, var)
    count = probe_count(vendor_name, root)
    source = "hardware"
    if not count and profile_count:
        count, source = profile_count, "site profile"
    if not count:
        raise UsageError(
            f"gpu workers asked for, but no {vendor_name} GPU was found on this node",
            "start cpu workers, or run on a GPU node",
        )
    slots = count
    if vendor_name == "intel":
        flat = tiles > 1 and workers_per_node == count * tiles
        extra["ZE_FLAT_DEVICE_HIERARCHY"] = "FLAT" if flat else "COMPOSITE"
        if flat:
            extra["ZE_ENABLE_PCI_ID_DEVICE_ORDER"] = "1"
            slots = count * tiles
    indices = range(slots - 1, -1, -1) if order == "reverse" else range(slots)
    return GpuNode(vendor, tuple(str(i) for i in indices), False, source, tiles, extra)


def worker_gpu_env(node: GpuNode, index: int, workers_here: int) -> dict[str, str]:
    """Environment that pins worker ``index`` (of ``workers_here`` started by this rank).

    The plan has checked that ``index`` is within the node's devices.
    """
    if node.narrowed and len(node.devices) == 1 and workers_here == 1:
        return dict(node.extra_env)  # the launcher already gave this rank its one device
    pinned = {**node.extra_env, node.vendor.visible_var: node.devices[index]}
    if node.visible_var in node.vendor.also_visible:
        # Narrowed in a variable below ROCr's (Flux's CUDA_VISIBLE_DEVICES=0,1,2,3): the
        # worker's one device is index 0 of what ROCR_VISIBLE_DEVICES leaves it.
        pinned.update({var: "0" for var in node.vendor.also_visible})
    return pinned
