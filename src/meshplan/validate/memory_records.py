"""Predicted peak memory for training records that measured it (`peak_memory_gib`, `oom`)."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.training import estimate_memory, resolve_plan
from meshplan.validate.schema import Record
from meshplan.validate.training_records import training_case

GIB = 2**30


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One record's measured and predicted peak memory."""

    id: str
    measured_gib: float | None
    predicted_gib: float
    """What the source's tool reports: the caching allocator's peak (CUDA context excluded)."""
    measured_oom: bool | None
    predicted_fits: bool

    @property
    def rel_error(self) -> float | None:
        """predicted / measured - 1, when the peak was measured."""
        return None if self.measured_gib is None else self.predicted_gib / self.measured_gib - 1


def memory_row(record: Record) -> MemoryRow:
    """Predict one record's peak memory."""
    case = training_case(record)
    plan = resolve_plan(case.plan, case.model, case.cluster)
    estimate = estimate_memory(case.model, case.cluster, plan)
    return MemoryRow(record.id, record.measured.peak_memory_gib,
                     estimate.peak_stage.allocator_bytes / GIB, record.measured.oom,
                     estimate.fits)


def memory_rows(records: list[Record]) -> list[MemoryRow]:
    """Rows for every training record with a measured peak or an OOM verdict."""
    return [memory_row(r) for r in records if r.kind == "training"
            and (r.measured.peak_memory_gib is not None or r.measured.oom is not None)]
