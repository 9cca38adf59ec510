"""A scale-up fabric or scale-out network preset (NVLink, PCIe, InfiniBand, ...) in SI units."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from meshplan.hardware.gpu import Source


@dataclass(frozen=True, slots=True, kw_only=True)
class Interconnect:
    """One link technology or network with its per-GPU (or per-port) bandwidth and latency."""

    name: str
    """Catalog name, lower case, e.g. `nvlink4`, `infiniband-ndr`, `nvl72`."""
    kind: str
    """`scale_up` (inside a node or NVLink domain) or `scale_out` (between nodes)."""
    bandwidth_bytes_per_s_per_direction: float
    """Bandwidth per GPU (scale-up) or per NIC port (scale-out), one direction, bytes/s."""
    max_domain_gpus: int | None
    """GPUs one switched domain joins at full bandwidth (8, 16, 72); None if not a switch domain."""
    latency_s: float
    """Typical small-message one-way latency as seen by a collective library, seconds."""
    latency_basis: str
    """Where latency_s comes from: a citation, or `typical estimate`."""
    source: Source
    """Document the bandwidth figure was read from."""
    notes: str = ""
    """Which systems use it, and caveats."""

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON-ready values (SI units)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            out[name] = value.to_dict() if name == "source" else value
        return out
