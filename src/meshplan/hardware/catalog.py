"""The GPU and interconnect catalogs: packaged YAML rows, validated once, looked up by name."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from meshplan.yamlread import load_packaged
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.hardware.gpu import DTYPES, GPUSpec, Source
from meshplan.hardware.interconnect import Interconnect

# The row models only add constraints; each field means what the GPUSpec / Interconnect field
# of the same name documents.


class _Row(BaseModel):
    """Base of the catalog row schemas: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceRow(_Row):
    """A row's `source:` mapping (see `Source`)."""

    url: str = Field(pattern=r"^https?://\S+$")
    document: str = Field(min_length=1)

    def to_source(self) -> Source:
        """The dataclass form."""
        return Source(url=self.url, document=self.document)


class PeakFlopsRow(_Row):
    """A row's `peak_flops_per_s:` mapping: dense peaks, omitted dtypes absent."""

    fp64: PositiveFloat | None = None
    fp32: PositiveFloat | None = None
    tf32: PositiveFloat | None = None
    bf16: PositiveFloat | None = None
    fp16: PositiveFloat | None = None
    fp8: PositiveFloat | None = None
    int8: PositiveFloat | None = None
    fp4: PositiveFloat | None = None

    def to_mapping(self) -> Mapping[str, float]:
        """Read-only dtype -> FLOP/s mapping in DTYPES order, listed dtypes only."""
        values = {d: getattr(self, d) for d in DTYPES}
        return MappingProxyType({d: v for d, v in values.items() if v is not None})


class GPURow(_Row):
    """One row of gpus.yaml (see `GPUSpec` for what each field means)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    vendor: Literal["nvidia", "amd"]
    architecture: Literal[
        "volta", "ampere", "hopper", "blackwell", "ada", "cdna2", "cdna3", "cdna4"
    ]
    form_factor: Literal["sxm", "pcie", "oam", "superchip"]
    peak_flops_per_s: PeakFlopsRow
    hbm_bytes: PositiveInt
    hbm_bandwidth_bytes_per_s: PositiveFloat
    sm_count: PositiveInt
    boost_clock_hz: PositiveFloat | None
    tdp_w: PositiveFloat
    scale_up_link: str
    scale_up_bandwidth_bytes_per_s_per_direction: PositiveFloat
    default_gpus_per_node: PositiveInt
    default_scale_up_domain: PositiveInt | None
    nic_bandwidth_bytes_per_s_per_direction: PositiveFloat
    source: SourceRow
    notes: str = ""

    @model_validator(mode="after")
    def _domain_fits_node(self) -> GPURow:
        domain, node = self.default_scale_up_domain, self.default_gpus_per_node
        if domain is not None and domain % node and node % domain:
            raise ValueError(
                f"default_scale_up_domain {domain} must divide or be a multiple of "
                f"default_gpus_per_node {node}"
            )
        return self

    def to_spec(self) -> GPUSpec:
        """The immutable dataclass the rest of meshplan uses."""
        data = dict(self)
        data["peak_flops_per_s"] = self.peak_flops_per_s.to_mapping()
        data["source"] = self.source.to_source()
        return GPUSpec(**data)


class InterconnectRow(_Row):
    """One row of interconnects.yaml (see `Interconnect` for what each field means)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    kind: Literal["scale_up", "scale_out"]
    bandwidth_bytes_per_s_per_direction: PositiveFloat
    max_domain_gpus: PositiveInt | None
    latency_s: PositiveFloat
    latency_basis: str = Field(min_length=1)
    source: SourceRow
    notes: str = ""

    def to_interconnect(self) -> Interconnect:
        """The immutable dataclass the rest of meshplan uses."""
        return Interconnect(**{**dict(self), "source": self.source.to_source()})


RowT = TypeVar("RowT", bound=_Row)


def _validate(model: type[RowT], row: Any, origin: str, index: int) -> RowT:
    """Validate one row; a bad row raises ConfigError naming the row and the field."""
    label = row.get("name", f"#{index + 1}") if isinstance(row, Mapping) else f"#{index + 1}"
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '(row)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{origin} row {label!r}: {problems}") from None


def _unique(names: list[str], origin: str) -> None:
    """ConfigError if a catalog repeats a name."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{origin}: name {name!r} appears more than once")
        seen.add(name)


def parse_gpu_rows(rows: Iterable[Any], origin: str = "gpus.yaml") -> list[GPUSpec]:
    """Validate gpus.yaml rows into GPUSpecs (file order); ConfigError on the first bad row."""
    specs = [_validate(GPURow, row, origin, i).to_spec() for i, row in enumerate(rows)]
    _unique([s.name for s in specs], origin)
    return specs


def parse_interconnect_rows(
    rows: Iterable[Any], origin: str = "interconnects.yaml"
) -> list[Interconnect]:
    """Validate interconnects.yaml rows into Interconnects (file order)."""
    links = [_validate(InterconnectRow, r, origin, i).to_interconnect() for i, r in enumerate(rows)]
    _unique([link.name for link in links], origin)
    return links


def _read_rows(filename: str, key: str) -> list[Any]:
    """The list under `key` in a packaged data file."""
    text = (resources.files("meshplan.hardware") / "data" / filename).read_text("utf-8")
    data = load_packaged(text)
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ConfigError(f"{filename}: expected a mapping with a {key!r} list")
    return data[key]


@functools.cache
def _interconnects() -> Mapping[str, Interconnect]:
    """Name -> Interconnect, loaded and validated once."""
    links = parse_interconnect_rows(_read_rows("interconnects.yaml", "interconnects"))
    return MappingProxyType({link.name: link for link in links})


@functools.cache
def _gpus() -> Mapping[str, GPUSpec]:
    """Name -> GPUSpec, loaded and validated once; every scale_up_link must be a known preset."""
    specs = parse_gpu_rows(_read_rows("gpus.yaml", "gpus"))
    links = _interconnects()
    for spec in specs:
        if spec.scale_up_link not in links:
            raise ConfigError(
                f"gpus.yaml row {spec.name!r}: field scale_up_link: unknown interconnect "
                f"{spec.scale_up_link!r}; known: {', '.join(links)}"
            )
    return MappingProxyType({spec.name: spec for spec in specs})


def get_gpu(name: str) -> GPUSpec:
    """The catalog GPU called `name` (case-insensitive); UnknownNameError suggests close names."""
    key = name.strip().lower()
    table = _gpus()
    if key not in table:
        raise UnknownNameError("GPU", key, table)
    return table[key]


def list_gpus() -> list[GPUSpec]:
    """Every catalog GPU, in catalog order."""
    return list(_gpus().values())


def get_interconnect(name: str) -> Interconnect:
    """The interconnect preset called `name` (case-insensitive)."""
    key = name.strip().lower()
    table = _interconnects()
    if key not in table:
        raise UnknownNameError("interconnect", key, table)
    return table[key]


def list_interconnects() -> list[Interconnect]:
    """Every interconnect preset, in catalog order."""
    return list(_interconnects().values())
