"""One accelerator's data-sheet numbers (SI units) as an immutable `GPUSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from meshplan.errors import ConfigError

DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
"""Every dtype a catalog row may list a peak for, widest first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a catalog row's numbers come from."""

    url: str
    """Address of the vendor data sheet, whitepaper or page."""
    document: str
    """Which document and table (or column) the numbers were read from."""

    def to_dict(self) -> dict[str, str]:
        """Plain-dict form for JSON output."""
        return {"url": self.url, "document": self.document}


@dataclass(frozen=True, slots=True, kw_only=True)
class GPUSpec:
    """A GPU model from the catalog: compute, memory, links and power, all in SI units."""

    name: str
    """Catalog name, lower case, e.g. `h100-sxm-80gb`."""
    vendor: str
    """`nvidia` or `amd`."""
    architecture: str
    """Micro-architecture: volta, ampere, hopper, blackwell, ada, cdna2, cdna3 or cdna4."""
    form_factor: str
    """Package: sxm, pcie, oam or superchip (GPU with an on-module CPU)."""
    peak_flops_per_s: Mapping[str, float] = field(hash=False)
    """Dense (no 2:4 sparsity) peak FLOP/s (OP/s for int8) per dtype; only dtypes the part has."""
    hbm_bytes: int
    """Device memory capacity usable by software, bytes (HBM, or GDDR on PCIe parts)."""
    hbm_bandwidth_bytes_per_s: float
    """Peak device-memory bandwidth from the data sheet, bytes/s."""
    sm_count: int
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) enabled on the product."""
    boost_clock_hz: float | None
    """Maximum boost clock, Hz; None where the vendor does not publish one."""
    tdp_w: float
    """Maximum board/module power from the data sheet, watts."""
    scale_up_link: str
    """Scale-up technology, a name from the interconnect catalog (nvlink4, pcie5, xgmi, ...)."""
    scale_up_bandwidth_bytes_per_s_per_direction: float
    """Scale-up (NVLink/PCIe/Infinity Fabric) bandwidth per GPU, one direction, bytes/s."""
    default_gpus_per_node: int
    """GPUs in the usual server or compute tray for this part."""
    default_scale_up_domain: int | None
    """GPUs sharing the scale-up fabric by default; None means the whole node."""
    nic_bandwidth_bytes_per_s_per_direction: float
    """Typical scale-out NIC bandwidth per GPU, one direction, bytes/s."""
    source: Source = field(repr=False)
    """Data sheet and table the row was read from."""
    notes: str = field(default="", repr=False)
    """How derived values were obtained, and caveats."""

    def __post_init__(self) -> None:
        """Every capacity, rate and count positive and finite (a custom GPU too)."""
        from meshplan.checks import optional, positive, whole

        for name in ("hbm_bandwidth_bytes_per_s", "tdp_w", "scale_up_bandwidth_bytes_per_s_per_direction",
                     "nic_bandwidth_bytes_per_s_per_direction"):
            positive(f"GPUSpec {name}", getattr(self, name))
        for name in ("hbm_bytes", "sm_count", "default_gpus_per_node"):
            whole(f"GPUSpec {name}", getattr(self, name))
        optional(positive, "GPUSpec boost_clock_hz", self.boost_clock_hz)
        optional(whole, "GPUSpec default_scale_up_domain", self.default_scale_up_domain)
        for dtype, flops in self.peak_flops_per_s.items():
            positive(f"GPUSpec peak_flops_per_s[{dtype!r}]", flops)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes this part has a listed peak for, widest first."""
        return tuple(d for d in DTYPES if d in self.peak_flops_per_s)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; ConfigError if the part has no listed peak for it."""
        key = dtype.strip().lower()
        if key not in self.peak_flops_per_s:
            raise ConfigError(
                f"{self.name} has no {dtype!r} peak in the catalog; "
                f"it has: {', '.join(self.dtypes)}"
            )
        return self.peak_flops_per_s[key]

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON-ready values (SI units)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if name == "peak_flops_per_s":
                value = {d: value[d] for d in self.dtypes}
            elif name == "source":
                value = value.to_dict()
            out[name] = value
        return out
