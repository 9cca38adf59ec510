"""The CPU side of a GPU server (hosts.yaml): DRAM bandwidth and capacity, cores, the host link
and the NVMe drives, shared by the GPUs of one host. Used to price the offload tiers (CPU
optimizer, ZeRO-Infinity's NVMe, activations) and host<->GPU copies."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt

from meshplan.errors import ConfigError
from meshplan.hardware.catalog import SourceRow, _read_rows, _Row, _validate, get_gpu


class HostRow(_Row):
    """One row of hosts.yaml (see the file's header for the meaning of each field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(min_length=1)
    gpus: tuple[str, ...]
    host_memory_bandwidth_bytes_per_s: PositiveFloat
    cpu_cores: PositiveInt
    gpus_per_host: PositiveInt
    host_link_bandwidth_bytes_per_s_per_direction: PositiveFloat
    host_memory_bytes: PositiveFloat
    nvme_read_bandwidth_bytes_per_s: PositiveFloat
    nvme_write_bandwidth_bytes_per_s: PositiveFloat
    nvme_bytes: PositiveFloat
    source: SourceRow
    notes: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    """A reference host and the share of it one GPU gets."""

    name: str
    """hosts.yaml row name (e.g. dgx-h100)."""
    memory_bandwidth_bytes_per_s: float
    """Peak DRAM bandwidth of the whole host, bytes/s."""
    cpu_cores: int
    """Physical cores of the whole host."""
    gpus_per_host: int
    """GPUs sharing the host's memory bandwidth and cores."""
    link_bytes_per_s: float
    """Host<->GPU link per GPU, one direction, bytes/s (PCIe x16 or NVLink-C2C)."""
    memory_bytes: float
    """DRAM capacity of the whole host, bytes."""
    nvme_read_bytes_per_s: float
    """Sequential read bandwidth of the host's data drives together, bytes/s."""
    nvme_write_bytes_per_s: float
    """Sequential write bandwidth of the host's data drives together, bytes/s."""
    nvme_bytes: float
    """Capacity of the host's data drives, bytes."""

    def share(self, gpus_in_job_per_host: int) -> tuple[float, float]:
        """(DRAM bytes/s, cores) one GPU's optimizer shard gets when `gpus_in_job_per_host` GPUs
        of the job run on this host at once."""
        sharers = max(1, min(self.gpus_per_host, gpus_in_job_per_host))
        return self.memory_bandwidth_bytes_per_s / sharers, self.cpu_cores / sharers


@functools.cache
def _hosts() -> dict[str, HostSpec]:
    """GPU name -> HostSpec; every listed GPU must be in the GPU catalog."""
    out: dict[str, HostSpec] = {}
    for i, raw in enumerate(_read_rows("hosts.yaml", "hosts")):
        row = _validate(HostRow, raw, "hosts.yaml", i)
        spec = HostSpec(name=row.name, memory_bandwidth_bytes_per_s=row.host_memory_bandwidth_bytes_per_s,
                        cpu_cores=row.cpu_cores, gpus_per_host=row.gpus_per_host,
                        link_bytes_per_s=row.host_link_bandwidth_bytes_per_s_per_direction,
                        memory_bytes=row.host_memory_bytes,
                        nvme_read_bytes_per_s=row.nvme_read_bandwidth_bytes_per_s,
                        nvme_write_bytes_per_s=row.nvme_write_bandwidth_bytes_per_s,
                        nvme_bytes=row.nvme_bytes)
        for gpu in row.gpus:
            get_gpu(gpu)  # an unknown name is a data error, reported by the GPU catalog
            if gpu in out:
                raise ConfigError(f"hosts.yaml: GPU {gpu!r} is listed by two hosts")
            out[gpu] = spec
    return out


def host_for(gpu_name: str) -> HostSpec:
    """The reference host of a catalog GPU (every catalog GPU has one; a test checks it)."""
    hosts = _hosts()
    if gpu_name not in hosts:
        raise ConfigError(f"no host row in hosts.yaml lists GPU {gpu_name!r}; offload cannot be priced")
    return hosts[gpu_name]
