"""HTML report pages of the training commands: memory, estimate, plan search and sweep.

Each function turns library results into a `Report` (headline numbers, figures, text); the
caller gives the command and its inputs and writes it with `html.write_html`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def memory_page(estimate: MemoryEstimate, title: str, command: str, inputs: Mapping) -> Report:
    """`train memory`: the verdict and the stacked memory bars per stage."""
    return Report(title=title, command=command, inputs=inputs, headline=memory_headline(estimate),
                  notes=_plan_notes(estimate),
                  sections=[Section(title="Memory per stage", figure=ft.memory_figure(estimate))])


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
    sections = [Section(title="Step time breakdown", figure=ft.breakdown_figure(est)),
                Section(title="Pipeline timeline", figure=ft.timeline_figure(est),
                        text="One row per stage and stream, as in the Chrome trace (--trace)."),
                Section(title="Memory per stage", figure=ft.memory_figure(est.memory))]
    if goodput is not None:
        headline += goodput_headline(goodput)
        sections.append(goodput_section(goodput))
    notes = _plan_notes(est.memory) + _band_notes(bands.extrapolating if bands else ())
    return Report(title=title, command=command, inputs=inputs, headline=headline, notes=notes,
                  sections=sections)


def plan_page(results: Mapping[int, SearchResult], title: str, command: str, inputs: Mapping,
              price_per_gpu_hour: float | None = None, goodput=None) -> Report:
    """`train plan`: the ranked plans' throughput against their cost, GPUs or memory with the
    Pareto frontier, the winner and the runner-up side by side, and why the winner wins."""
    ranked = fp.ranked_overall(results)
    headline = [("cluster sizes", ", ".join(str(n) for n in results)),
                ("plans evaluated", f"{sum(r.evaluated for r in results.values()):,}"),
                ("plans ranked", str(len(ranked)))]
    sections = [Section(title="Why the winner wins", text=fp.why_text(results))]
    if ranked:
        n, best = ranked[0]
        headline += [("winner tokens/s per GPU", f"{best.tokens_per_s_per_gpu:,.0f}"),
                     ("winner step time", f"{best.step_time_s:.3f} s"), ("winner MFU", f"{best.mfu:.1%}"),
                     ("winner GPUs", str(n))]
        sections.append(Section(title="Ranked plans", figure=fp.candidates_figure(results, price_per_gpu_hour=price_per_gpu_hour)))
    if len(ranked) > 1:
        sections.append(Section(title="Winner and runner-up",
                                figure=fp.comparison_figure(ranked[0][1], ranked[1][1])))
    if goodput is not None:
        headline += goodput_headline(goodput)
        sections.append(goodput_section(goodput))
    return Report(title=title, command=command, inputs=inputs, headline=headline, sections=sections)


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
