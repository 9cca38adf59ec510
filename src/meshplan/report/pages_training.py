"""HTML report pages of the training commands: memory, estimate, plan search and sweep.

Each function turns library results into a `Report` (headline numbers, figures, text); the
caller gives the command and its inputs and writes it with `html.write_html`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshplan.bands.band import Band
from meshplan.report import figures_plan as fp
from meshplan.report import figures_training as ft
from meshplan.report.html import Report, Section
from meshplan.training.estimate import StepEstimate
from meshplan.training.memory.total import MemoryEstimate
from meshplan.training.search.plans import SearchResult

GIB = 2**30


def memory_headline(estimate: MemoryEstimate) -> list[tuple[str, str]]:
    """Peak stage, its memory against the GPU's, and the verdict."""
    peak, cap = estimate.peak_stage, estimate.gpu_memory_bytes
    return [("verdict", "FITS" if estimate.fits else "DOES NOT FIT"),
            ("peak stage", str(peak.stage)),
            ("peak memory per GPU", f"{peak.total_bytes / GIB:.1f} GiB"),
            ("GPU memory", f"{cap / GIB:.1f} GiB"),
            ("headroom", f"{(cap - peak.total_bytes) / GIB:+.1f} GiB")] + (
            [("headroom asked (--memory-headroom)", f"{estimate.memory_headroom_bytes / GIB:.1f} GiB")]
            if estimate.memory_headroom_bytes else [])


def _plan_notes(estimate: MemoryEstimate) -> list[str]:
    return ([f"chose {field} = {why}" for field, why in estimate.plan.chosen.items()]
            + [f"warning: {w}" for w in estimate.plan.warnings])


def memory_page(estimate: MemoryEstimate, title: str, command: str, inputs: Mapping,
                bands: Mapping | None = None) -> Report:
    """`train memory`: the verdict and the stacked memory bars per stage; given the peak's band
    (`memory_bands`: {"intervals": {"peak_bytes": {low, high}}, "extrapolating": [...]}), its
    p10-p90 in the headline and as an error bar on the peak stage."""
    headline, notes, peak = memory_headline(estimate), _plan_notes(estimate), None
    if bands is not None:
        peak = Band(**bands["intervals"]["peak_bytes"])
        headline.append(("peak memory per GPU, p10-p90", f"{peak.low / GIB:.1f} - {peak.high / GIB:.1f} GiB"))
        notes += _band_notes(bands["extrapolating"])
    return Report(title=title, command=command, inputs=inputs, headline=headline, notes=notes,
                  sections=[Section(title="Memory per stage",
                                    figure=ft.memory_figure(estimate, peak_band=peak))])


def _band_rows(bands) -> list[tuple[str, str]]:
    """Headline rows of an estimate's p10-p90 bands (meshplan.bands), when there are some."""
    if bands is None:
        return []
    rows = (("step time", bands.step_time_s, "{:.3f} s"),
            ("tokens/s per GPU", bands.tokens_per_s_per_gpu, "{:,.0f}"), ("MFU", bands.mfu, "{:.1%}"))
    return [(f"{name}, p10-p90", f"{fmt.format(b.low)} - {fmt.format(b.high)}") for name, b, fmt in rows]


def _band_notes(reasons) -> list[str]:
    return [f"Extrapolating beyond the calibration records (the bands are twice as wide): {r}."
            for r in reasons]


def estimate_page(est: StepEstimate, title: str, command: str, inputs: Mapping, bands=None,
                  goodput=None) -> Report:
    """`train estimate`: throughput, MFU (with their p10-p90 bands when given), the time
    breakdown, the pipeline Gantt, memory, and (given a Goodput) the run's wall-clock waterfall.
    `est` must carry its pipeline events (estimate_step(..., with_events=True))."""
    headline = [("step time", f"{est.step_time_s:.3f} s"),
                ("tokens/s per GPU", f"{est.tokens_per_s_per_gpu:,.0f}"),
                ("MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}"),
                *_band_rows(bands),
                ("pipeline bubble (busiest stage idle, share of step)", f"{est.bubble_fraction:.1%}"),
                *memory_headline(est.memory)]
    sections = [Section(title="Step time breakdown", figure=ft.breakdown_figure(
                    est, step_band=bands.step_time_s if bands else None)),
                Section(title="Pipeline timeline", figure=ft.timeline_figure(est),
                        text="One row per stage and stream, as in the Chrome trace (--trace)."),
                Section(title="Memory per stage", figure=ft.memory_figure(
                    est.memory, peak_band=bands.peak_bytes if bands else None))]
    if goodput is not None:
        headline += goodput_headline(goodput)
        sections.append(goodput_section(goodput))
    notes = _plan_notes(est.memory) + _band_notes(bands.extrapolating if bands else ())
    return Report(title=title, command=command, inputs=inputs, headline=headline, notes=notes,
                  sections=sections)


def plan_page(results: Mapping[int, SearchResult], title: str, command: str, inputs: Mapping,
              price_per_gpu_hour: float | None = None, goodput=None, bands: fp.Bands | None = None) -> Report:
    """`train plan`: the ranked plans' throughput against their cost, GPUs or memory with the
    Pareto frontier, the ranked plans as a table, the winner and the runner-up side by side, and
    why the winner wins; given `bands` (fp.plan_bands), each number's p10-p90 in the headline,
    the table and the figures' error bars, and the extrapolating plans marked."""
    ranked = fp.ranked_with_bands(results, bands)
    headline = [("cluster sizes", ", ".join(str(n) for n in results)),
                ("plans evaluated", f"{sum(r.evaluated for r in results.values()):,}"),
                ("plans ranked", str(len(ranked)))]
    sections = [Section(title="Why the winner wins", text=fp.why_text(results))]
    notes: list[str] = []
    if ranked:
        n, best, band = ranked[0]
        headline += [("winner tokens/s per GPU", f"{best.tokens_per_s_per_gpu:,.0f}"),
                     ("winner step time", f"{best.step_time_s:.3f} s"), ("winner MFU", f"{best.mfu:.1%}"),
                     *[(f"winner {label}", value) for label, value in _band_rows(band)],
                     ("winner GPUs", str(n))]
        notes = _band_notes(band.extrapolating if band else ())
        sections.append(Section(title="Ranked plans", figure=fp.candidates_figure(
            results, price_per_gpu_hour=price_per_gpu_hour, bands=bands), table=plans_table(ranked)))
    if len(ranked) > 1:
        pair = [ranked[0][2], ranked[1][2]] if bands else None
        sections.append(Section(title="Winner and runner-up",
                                figure=fp.comparison_figure(ranked[0][1], ranked[1][1], bands=pair)))
    if goodput is not None:
        headline += goodput_headline(goodput)
        sections.append(goodput_section(goodput))
    return Report(title=title, command=command, inputs=inputs, headline=headline, notes=notes,
                  sections=sections)


TABLE_ROWS = 20
"""Most ranked plans the report's table lists (the figure shows them all)."""


def plans_table(ranked) -> tuple[list[str], list[list[str]]]:
    """The report's table of ranked plans ((GPUs, plan, bands or None) best first): layout,
    tokens/s per GPU, MFU and step time, each with its p10-p90 when the bands are known."""
    headers = ["#", "GPUs", "layout", "tokens/s per GPU", "p10-p90", "MFU", "p10-p90",
               "step time (s)", "p10-p90", "GiB per GPU", "extrapolating"]
    rows = []
    for i, (n, est, band) in enumerate(ranked[:TABLE_ROWS], 1):
        p = est.plan
        layout = (f"tp{p.tp} pp{p.pp} vpp{p.vpp} cp{p.cp} ep{p.ep} dp{p.dp} mbs{p.micro_batch_size} "
                  f"{p.recompute} {p.dp_sharding}")
        spans = ["", "", ""] if band is None else [
            f"{band.tokens_per_s_per_gpu.low:,.0f} - {band.tokens_per_s_per_gpu.high:,.0f}",
            f"{band.mfu.low:.1%} - {band.mfu.high:.1%}",
            f"{band.step_time_s.low:.3f} - {band.step_time_s.high:.3f}"]
        rows.append([str(i), str(n), layout, f"{est.tokens_per_s_per_gpu:,.0f}", spans[0],
                     f"{est.mfu:.1%}", spans[1], f"{est.step_time_s:.3f}", spans[2],
                     f"{est.memory.peak_bytes / GIB:.1f}",
                     "; ".join(band.extrapolating) if band and band.extrapolating else ""])
    return headers, rows


def goodput_headline(g) -> list[tuple[str, str]]:
    """Headline rows of a Goodput: interruptions, checkpoint interval, ETTR, days."""
    d = g.to_dict()
    rows = [("interruptions per day", f"{g.detail_dict()['interruptions_per_day']:.1f}"),
            ("checkpoint interval", f"{g.checkpoint_interval_s / 60:.1f} min"),
            ("effective training time", f"{d['effective_training_time_ratio']:.1%}")]
    if d["days_to_train"] is not None:
        rows.append(("days to train (with failures)", f"{d['days_to_train']:.1f}"))
    return rows


def goodput_section(g) -> Section:
    """The wall-clock waterfall of a Goodput."""
    from meshplan.report.figures_goodput import waterfall_figure

    return Section(title="Goodput at scale", figure=waterfall_figure(g),
                   text="Failures (Llama 3's interruption rates scaled by GPUs, nodes and links), "
                        "checkpoint stalls at the Young/Daly interval, work lost since the last "
                        "checkpoint, restarts and the slowest of N GPUs (meshplan.goodput).")


def sweep_page(rows: Sequence[dict], title: str, command: str, inputs: Mapping) -> Report:
    """`train sweep`: the best plan's tokens/s per GPU over cluster size, per model and GPU."""
    ok = sum(r["status"] == "ok" for r in rows)
    headline = [("cells", str(len(rows))), ("cells with a fitting plan", str(ok))]
    return Report(title=title, command=command, inputs=inputs, headline=headline,
                  sections=[Section(title="Throughput over cluster size", figure=fp.sweep_figure(rows))])
