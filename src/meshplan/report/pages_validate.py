"""The HTML report page of `meshplan validate`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshplan.report import figures_validate as fv
from meshplan.report.html import Report, Section
from meshplan.validate.run import stats_line


def record_groups(records: Sequence) -> dict[str, str]:
    """Record id -> 'source / GPU' (the source's short `key`, else its name): the groups of
    `figures_validate.error_by_group_figure`."""
    return {r.id: f"{r.source.get('key') or r.source.get('name', '?')} / {r.hardware.gpu}" for r in records}


def validate_page(rows: Sequence, summary: dict, skipped: int, groups: Mapping[str, str], title: str,
                  command: str, inputs: Mapping) -> Report:
    """`validate`: predicted vs measured with the ±10% band and the error per source and GPU."""
    headline = [("all", stats_line(summary)), *((metric, stats_line(s)) for metric, s in summary["by_metric"].items()),
                ("records skipped", str(skipped))]
    return Report(title=title, command=command, inputs=inputs, headline=headline,
                  sections=[Section(title="Predicted vs measured", figure=fv.validate_scatter_figure(rows)),
                            Section(title="Error by source and GPU", figure=fv.error_by_group_figure(rows, groups))])
