"""HTML report pages of the serving commands: simulate, plan and sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshplan.report import figures_capacity as fc
from meshplan.report import figures_serving as fs
from meshplan.report.html import Report, Section
from meshplan.serving.search.capacity import Targets
from meshplan.serving.metrics.summary import SLO
from meshplan.serving.search.run import SearchResult
from meshplan.serving.simulate import SimulationResult


def _ms(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:,.1f} ms"


def simulate_page(result: SimulationResult, slo: SLO | None, percentile: float | None, title: str,
                  command: str, inputs: Mapping) -> Report:
    """`serve simulate`: throughput and latency percentiles; CDFs, activity over time and, with
    an SLO, the attainment per objective."""
    m = result.metrics
    headline = [("requests completed", f"{m.completed:,}"), ("requests/s", f"{m.requests_per_s:,.2f}"),
                ("output tokens/s", f"{m.output_tokens_per_s:,.0f}"),
                ("TTFT p50 / p90", f"{_ms(m.ttft_ms.p50)} / {_ms(m.ttft_ms.p90)}"),
                ("TPOT p50 / p90", f"{_ms(m.tpot_ms.p50)} / {_ms(m.tpot_ms.p90)}"),
                ("E2E p50 / p90", f"{_ms(m.e2e_ms.p50)} / {_ms(m.e2e_ms.p90)}")]
    if m.mean_kv_utilization is not None:
        headline.append(("mean KV-cache used", f"{m.mean_kv_utilization:.1%}"))
    sections = [Section(title="Latency CDFs", figure=fs.latency_cdf_figure(result, slo)),
                Section(title="Throughput, requests and KV cache over time", figure=fs.activity_figure(result))]
    if slo is not None:
        attained = fs.slo_attainment(result, slo)["all"]
        headline.append(("SLO attainment", f"{attained:.1%}"))
        sections.append(Section(title="SLO attainment", figure=fs.slo_figure(result, slo, percentile)))
    return Report(title=title, command=command, inputs=inputs, headline=headline, sections=sections)


def serve_plan_page(result: SearchResult, why: str, title: str, command: str, inputs: Mapping) -> Report:
    """`serve plan`: each ranked plan's capacity and latencies against the SLOs, and why the
    winner wins (`why`, as the command prints it)."""
    headline = [("target rate", f"{result.rate:g} req/s"), ("SLOs", result.targets.label()),
                ("objective", result.objective), ("plans ranked", str(len(result.ranked))),
                ("plans simulated", str(result.simulated))]
    if result.ranked:
        best = result.ranked[0]
        headline += [("winner GPUs", f"{best.gpus} x {best.gpu}"),
                     ("winner capacity", f"{best.capacity.rate * best.replicas:.2f} req/s")]
    sections = [Section(title="Why the winner wins", text=why or "no plan meets the SLOs")]
    if result.ranked:
        sections += [Section(title="Capacity of each plan", figure=fc.plan_capacity_figure(result)),
                     Section(title="Latency against request rate",
                             figure=fc.plan_curves_figure(result),
                             text="Circles: the verifying simulation at the target rate; crosses: "
                                  "the highest rate meeting every SLO; open circles: the other rates "
                                  "the capacity search simulated.")]
    return Report(title=title, command=command, inputs=inputs, headline=headline, sections=sections)


def serve_sweep_page(rows: Sequence[dict], targets: Targets | None, title: str, command: str,
                     inputs: Mapping) -> Report:
    """`serve sweep`: the latency-throughput curve of one deployment."""
    best = max(rows, key=lambda r: r["requests_per_s"])
    headline = [("rates swept", ", ".join(f"{r['request_rate']:g}" for r in rows)),
                ("highest throughput", f"{best['requests_per_s']:,.2f} req/s, "
                                       f"{best['output_tokens_per_s']:,.0f} output tokens/s")]
    return Report(title=title, command=command, inputs=inputs, headline=headline,
                  sections=[Section(title="Latency vs throughput", figure=fc.sweep_curve_figure(rows, targets))])
