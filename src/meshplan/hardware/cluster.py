"""The hardware a run uses: a GPU model, how many, and how they are grouped and networked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshplan.errors import ConfigError
from meshplan.hardware.catalog import get_gpu
from meshplan.hardware.gpu import GPUSpec
from meshplan.hardware.host import host_for

BITS_PER_BYTE = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """GPUs of one catalog model in nodes and scale-up domains; defaults come from the GPU row.

    Fields left as None are filled at construction from the GPU row, so on a built Cluster
    every field except power_limit_w holds a concrete value.
    """

    gpu: GPUSpec
    """The GPU model every rank runs on."""
    num_gpus: int
    """GPUs in the job (at least 1)."""
    gpus_per_node: int | None = None
    """GPUs per server/tray; default the GPU row's default_gpus_per_node."""
    scale_up_domain: int | None = None
    """GPUs sharing NVLink/NVSwitch/xGMI; default the GPU row's (72 for NVL72 parts) or the node."""
    inter_node_bandwidth_bytes_per_s_per_gpu: float | None = None
    """Scale-out network bandwidth per GPU, one direction, bytes/s; default the GPU row's NIC."""
    scale_up_bandwidth_bytes_per_s_per_direction: float | None = None
    """Scale-up bandwidth per GPU, one direction, bytes/s; default the GPU row's value."""
    power_limit_w: float | None = None
    """GPU power cap below the data-sheet TDP, watts; None runs at TDP."""
    host_memory_bytes_per_node: float | None = None
    """Host DRAM per node, bytes (holds offloaded states and activations); default the GPU's
    reference host (hosts.yaml), scaled to gpus_per_node."""
    host_link_bandwidth_bytes_per_s_per_gpu: float | None = None
    """Host<->GPU link per GPU, one direction, bytes/s (PCIe x16, NVLink-C2C); default the host's."""
    nvme_read_bandwidth_bytes_per_s_per_node: float | None = None
    """Sequential read bandwidth of a node's NVMe data drives together, bytes/s."""
    nvme_write_bandwidth_bytes_per_s_per_node: float | None = None
    """Sequential write bandwidth of a node's NVMe data drives together, bytes/s."""
    nvme_bytes_per_node: float | None = None
    """Capacity of a node's NVMe data drives, bytes."""
    memory_headroom_bytes: float = 0.0
    """GPU memory a plan must leave free, bytes (a safety margin the user asks for: allocator
    spikes, a profiler, another process); a plan fits when its peak is at most HBM minus this."""

    def __post_init__(self) -> None:
        _fill_defaults(self)
        _check_counts(self)
        _check_domain(self)
        _check_rates(self)
        _check_headroom(self)

    @property
    def usable_gpu_memory_bytes(self) -> float:
        """GPU memory a plan may fill: the GPU's HBM less the headroom asked for."""
        return float(self.gpu.hbm_bytes) - self.memory_headroom_bytes

    @property
    def gpus_on_node(self) -> int:
        """GPUs of the job on one node, sharing its host memory, NVMe and CPUs."""
        return min(self.gpus_per_node, self.num_gpus)  # type: ignore[type-var]

    @property
    def num_nodes(self) -> int:
        """Nodes used: num_gpus / gpus_per_node, rounded up (a partial node counts as one)."""
        return -(-self.num_gpus // self.gpus_per_node)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        """The cluster in SI units with its aggregate capacities (the `cluster show --json` payload)."""
        gpu = self.gpu
        return {
            "gpu": gpu.name,
            "num_gpus": self.num_gpus,
            "gpus_per_node": self.gpus_per_node,
            "num_nodes": self.num_nodes,
            "scale_up_domain": self.scale_up_domain,
            "scale_up_bandwidth_bytes_per_s_per_direction": self.scale_up_bandwidth_bytes_per_s_per_direction,
            "inter_node_bandwidth_bytes_per_s_per_gpu": self.inter_node_bandwidth_bytes_per_s_per_gpu,
            "power_limit_w": self.power_limit_w,
            **{name: getattr(self, name) for name in HOST_FIELDS},
            "total_hbm_bytes": gpu.hbm_bytes * self.num_gpus,
            "total_peak_flops_per_s": {d: v * self.num_gpus for d, v in gpu.peak_flops_per_s.items()},
        }

    @classmethod
    def build(
        cls,
        gpu: str,
        num_gpus: int,
        gpus_per_node: int | None = None,
        scale_up_domain: int | None = None,
        inter_node_gbps_per_gpu: float | None = None,
        gpu_power_limit_w: float | None = None,
        host_memory_gb: float | None = None,
        host_link_gb_per_s: float | None = None,
        nvme_read_gb_per_s: float | None = None,
        nvme_write_gb_per_s: float | None = None,
        nvme_tb: float | None = None,
        memory_headroom_gib: float | None = None,
    ) -> Cluster:
        """A Cluster from the run-record `hardware:` keys (catalog name, gigabits/s per GPU) and
        host overrides in decimal GB, GB/s and TB (per node; the host link per GPU); the GPU
        memory to keep free in GiB."""
        network = None
        if inter_node_gbps_per_gpu is not None:
            network = inter_node_gbps_per_gpu * 1e9 / BITS_PER_BYTE

        def si(value: float | None, scale: float) -> float | None:
            return None if value is None else value * scale

        return cls(
            host_memory_bytes_per_node=si(host_memory_gb, 1e9),
            host_link_bandwidth_bytes_per_s_per_gpu=si(host_link_gb_per_s, 1e9),
            nvme_read_bandwidth_bytes_per_s_per_node=si(nvme_read_gb_per_s, 1e9),
            nvme_write_bandwidth_bytes_per_s_per_node=si(nvme_write_gb_per_s, 1e9),
            nvme_bytes_per_node=si(nvme_tb, 1e12),
            gpu=get_gpu(gpu),
            num_gpus=num_gpus,
            gpus_per_node=gpus_per_node,
            scale_up_domain=scale_up_domain,
            inter_node_bandwidth_bytes_per_s_per_gpu=network,
            power_limit_w=gpu_power_limit_w,
            memory_headroom_bytes=(memory_headroom_gib or 0.0) * 2**30,
        )


def _fill_defaults(c: Cluster) -> None:
    """Resolve None fields from the GPU row (frozen dataclass: set through object.__setattr__)."""
    gpu = c.gpu
    gpn = _default(c.gpus_per_node, gpu.default_gpus_per_node)
    defaults = {
        "gpus_per_node": gpn,
        "scale_up_domain": _default(c.scale_up_domain, gpu.default_scale_up_domain or gpn),
        "inter_node_bandwidth_bytes_per_s_per_gpu": _default(
            c.inter_node_bandwidth_bytes_per_s_per_gpu, gpu.nic_bandwidth_bytes_per_s_per_direction
        ),
        "scale_up_bandwidth_bytes_per_s_per_direction": _default(
            c.scale_up_bandwidth_bytes_per_s_per_direction,
            gpu.scale_up_bandwidth_bytes_per_s_per_direction,
        ),
    }
    host = host_for(gpu.name)
    per_node = gpn / host.gpus_per_host  # a node holds this many reference hosts (or a share)
    host_defaults = {
        "host_memory_bytes_per_node": host.memory_bytes * per_node,
        "host_link_bandwidth_bytes_per_s_per_gpu": host.link_bytes_per_s,
        "nvme_read_bandwidth_bytes_per_s_per_node": host.nvme_read_bytes_per_s * per_node,
        "nvme_write_bandwidth_bytes_per_s_per_node": host.nvme_write_bytes_per_s * per_node,
        "nvme_bytes_per_node": host.nvme_bytes * per_node,
    }
    defaults.update({k: _default(getattr(c, k), v) for k, v in host_defaults.items()})
    for name, value in defaults.items():
        object.__setattr__(c, name, value)


HOST_FIELDS = ("host_memory_bytes_per_node", "host_link_bandwidth_bytes_per_s_per_gpu",
               "nvme_read_bandwidth_bytes_per_s_per_node", "nvme_write_bandwidth_bytes_per_s_per_node",
               "nvme_bytes_per_node")
"""The host side of a node: what offload tiers store and move (defaults from hosts.yaml)."""


def _default(value: Any, default: Any) -> Any:
    """`value` unless it is None."""
    return default if value is None else value


def _check_counts(c: Cluster) -> None:
    """num_gpus and gpus_per_node are positive; full nodes once the job spans more than one."""
    if not isinstance(c.num_gpus, int) or c.num_gpus < 1:
        raise ConfigError(f"num_gpus must be a whole number of at least 1, got {c.num_gpus!r}")
    gpn = c.gpus_per_node
    if not isinstance(gpn, int) or gpn < 1:
        raise ConfigError(f"gpus_per_node must be a whole number of at least 1, got {gpn!r}")
    if c.num_gpus > gpn and c.num_gpus % gpn:
        lower, upper = c.num_gpus // gpn * gpn, (c.num_gpus // gpn + 1) * gpn
        raise ConfigError(
            f"num_gpus {c.num_gpus} spans several nodes but is not a multiple of "
            f"gpus_per_node {gpn}; use a multiple of {gpn} (e.g. {lower} or {upper}) "
            f"or at most {gpn} GPUs"
        )


def _check_domain(c: Cluster) -> None:
    """The scale-up domain either splits a node evenly or spans whole nodes."""
    domain, gpn = c.scale_up_domain, c.gpus_per_node
    assert isinstance(gpn, int)
    if not isinstance(domain, int) or domain < 1:
        raise ConfigError(f"scale_up_domain must be a whole number of at least 1, got {domain!r}")
    if domain % gpn and gpn % domain:
        divisors = [d for d in range(1, gpn + 1) if gpn % d == 0]
        hint = ""
        if domain == c.gpu.default_scale_up_domain:
            hint = f" (it is the {c.gpu.name} default; pass scale_up_domain explicitly)"
        raise ConfigError(
            f"scale_up_domain {domain}{hint} must divide gpus_per_node {gpn} "
            f"({', '.join(map(str, divisors))}) or be a multiple of it "
            f"({gpn * 2}, {gpn * 3}, ...)"
        )


def _check_headroom(c: Cluster) -> None:
    """The headroom is zero or more and leaves some of the GPU's memory to use."""
    headroom, hbm = c.memory_headroom_bytes, c.gpu.hbm_bytes
    if not isinstance(headroom, (int, float)) or not 0 <= headroom < hbm:
        shown = f"{headroom / 2**30:g} GiB" if isinstance(headroom, (int, float)) else repr(headroom)
        raise ConfigError(f"--memory-headroom {shown}: give 0 or more and less than the "
                          f"{c.gpu.name}'s {hbm / 2**30:.1f} GiB")


def _check_rates(c: Cluster) -> None:
    """Bandwidths are positive; a power limit lies in (0, TDP]."""
    for name in (
        "inter_node_bandwidth_bytes_per_s_per_gpu",
        "scale_up_bandwidth_bytes_per_s_per_direction",
        *HOST_FIELDS,
    ):
        value = getattr(c, name)
        if value is None or value <= 0:
            raise ConfigError(f"{name} must be positive, got {value!r}")
    limit, tdp = c.power_limit_w, c.gpu.tdp_w
    if limit is not None and not 0 < limit <= tdp:
        raise ConfigError(
            f"gpu_power_limit_w {limit:g} is outside (0, {tdp:g}]: the {c.gpu.name} "
            f"data-sheet TDP is {tdp:g} W"
        )
