"""What `serve plan` prints: a ranked table, why the winner wins, and the misses when no plan
meets the SLOs. Plain dicts for --json."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from meshplan.bands.serving import metrics_bands
from meshplan.bands.serving_regime import serving_regime
from meshplan.hardware import get_gpu
from meshplan.serving.search.capacity import keeps_up
from meshplan.serving.search.run import SearchResult, deployment_plan
from meshplan.serving.search.candidates import Candidate, quantized
from meshplan.serving.search.trials import MAX_TRIAL_REQUESTS, MIN_TRIAL_REQUESTS, WINDOW_LIFETIMES

NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}


def layout(c: Candidate) -> str:
    """A short description of the unit: 'tp2 fp8 (kv fp8)' or 'P: 1 x tp1 | D: 2 x tp2 ...'."""
    p = c.plan
    dtype = p.weights_dtype + (f" kv {p.kv_cache_dtype}" if p.kv_cache_dtype != "auto" else "")
    knobs = f" budget {p.max_num_batched_tokens}" if p.max_num_batched_tokens else ""
    pp = f" pp{p.pp}" if p.pp > 1 else ""
    if p.disaggregated is None:
        return f"tp{p.tp}{pp} {dtype}{knobs}"
    d = p.disaggregated
    return (f"P {d.prefill_gpus // d.prefill_tp}x tp{d.prefill_tp} + D {d.decode_gpus // d.decode_tp}x "
            f"tp{d.decode_tp}{pp} {dtype}{knobs}")


def cost_per_million(c: Candidate, price: float | None) -> float | None:
    """USD per million output tokens at the target rate."""
    if price is None or c.verified is None:
        return None
    tokens = c.verified.metrics.output_tokens_per_s
    return None if not tokens else price * c.gpus / 3600 / tokens * 1e6


def plan_bands(c: Candidate, model) -> dict:
    """`{"intervals": {...}, "extrapolating": [...]}` of a plan's verified metrics (bands.serving;
    the requests arrive at a rate: a timed load); intervals None when it was not verified."""
    if c.verified is None:
        return {"intervals": None, "extrapolating": []}
    regime = serving_regime(model, get_gpu(c.gpu).architecture, c.plan, "timed", c.verified.records)
    return metrics_bands(regime, c.verified.metrics).to_dict()


def plan_dict(c: Candidate, r: SearchResult, model=None) -> dict:
    """One plan as JSON: the deployment, its capacity and its latencies at the target rate, with
    their p10-p90 bands when the ModelSpec `model` is given."""
    m = c.verified.metrics.to_dict() if c.verified else None
    return {"gpu": c.gpu, "layout": layout(c), "quantized": quantized(c), "replicas": c.replicas, "gpus": c.gpus,
            "plan": deployment_plan(c).model_dump(mode="json"),
            "capacity_requests_per_s": c.capacity.rate * c.replicas,
            "capacity_curve": [{"requests_per_s": rate * c.replicas, "slo_margins": m}
                               for rate, m in c.capacity.probes],
            "goodput_per_gpu": c.goodput_per_gpu(), "slo_margins": c.verified_margins or c.capacity.margins,
            "cost_per_million_output_tokens": cost_per_million(c, r.prices.get(c.gpu)), "metrics": m,
            "goodput_requests_per_s": m["goodput_requests_per_s"] if m else None,
            "steady_requests_per_s": m["steady_requests_per_s"] if m else None,
            "steady_goodput_requests_per_s": m["steady_goodput_requests_per_s"] if m else None,
            "keeps_up": keeps_up(c.verified) if c.verified else None, "notes": drain_notes(c, r.rate),
            **(plan_bands(c, model) if model is not None else {})}


DRAIN_SHORTFALL = 0.97
"""Completed req/s below this share of the arrival rate gets a note on the drain."""


def drain_notes(c: Candidate, rate: float) -> list[str]:
    """Why a finite run's `requests_per_s` sits below the target rate: vLLM's definition counts
    completions over the whole run, which ends when the last request drains after arrivals
    stop; the steady figure over the arrival window says whether it kept up."""
    if c.verified is None:
        return []
    m = c.verified.metrics
    if m.requests_per_s >= DRAIN_SHORTFALL * rate:
        return []
    arrivals = [rec.arrival_s for rec in c.verified.records]
    tail = m.duration_s - (max(arrivals) - min(arrivals))
    steady = m.steady_requests_per_s
    verdict = ("" if steady is None else
               f"; over the arrival window it takes {steady:.2f} req/s into service (steady_requests_per_s), "
               + ("so it keeps up" if keeps_up(c.verified) else "so a queue builds: it does not keep up"))
    return [f"requests_per_s {m.requests_per_s:.2f} is below the {rate:g} req/s arrival rate: it "
            f"counts the {m.completed} completions of a finite run over {m.duration_s:.1f} s, which "
            f"includes the {tail:.1f} s the last requests take to drain after the final arrival "
            f"(and the sampled arrivals' own spread){verdict}"]


def result_dict(r: SearchResult, model: str, spec=None) -> dict:
    """The `serve plan --json` object (`serve export --plan` reads plans[0]); with the ModelSpec
    `spec`, each plan's metrics carry their bands."""
    return {"model": model, "request_rate": r.rate, "slo": r.targets.label(), "objective": r.objective,
            "plans": [plan_dict(c, r, spec) for c in r.ranked],
            "infeasible": [{"gpu": c.gpu, "layout": layout(c), "misses": misses(c), "reason": reason(c, r)}
                           for c in r.infeasible],
            "smallest_beyond_max_gpus": None if r.smallest_beyond is None else {
                "gpu": r.smallest_beyond.gpu, "layout": layout(r.smallest_beyond),
                "replicas": r.smallest_beyond.replicas, "gpus": r.smallest_beyond.gpus,
                "simulated": r.smallest_beyond.capacity is not None},
            "search": {"simulated_plans": r.simulated, "simulations": r.simulations,
                       "pruned": r.pruned, "pruned_total": sum(r.pruned.values()), "wall_s": r.wall_s,
                       **trial_dict(r)}}


def trial_dict(r: SearchResult) -> dict:
    """How long each trial was (meshplan.serving.search.trials): the requests it simulated, the
    arrival window it spans, and the warm-up left out of its percentiles (none: the window is
    long enough that the empty-system start is a small share of the requests)."""
    low, high = r.requests_per_trial
    return {"requests_per_trial": {"min": low, "max": high},
            "trial_window_s": r.trial_window_s, "warm_up_excluded_requests": 0,
            "trial_rule": ("fixed --num-requests" if r.trial_window_s is None else
                           f"arrivals span {WINDOW_LIFETIMES:g} request lifetimes (TTFT + mean output x TPOT "
                           f"objectives, or E2E), {MIN_TRIAL_REQUESTS}-{MAX_TRIAL_REQUESTS} requests")}


def reason(c: Candidate, r: SearchResult) -> str:
    """Why a plan of `r.infeasible` is not among the ranked ones, in one phrase."""
    miss = ", ".join(f"P{r.targets.percentile:g} {k} by {v:+.0%}" for k, v in misses(c).items())
    if c.capacity.rate == 0 and c.capacity.simulations == 0:
        return f"a lone request misses {miss or 'an SLO'}"
    if c.capacity.rate == 0:
        return f"misses {miss or 'the SLOs'} even at a trickle"
    if c.gpus > r.max_gpus:
        return (f"sustains {c.capacity.rate:.2f} req/s per unit; needs more GPUs: "
                f"{c.gpus} > --max-gpus {r.max_gpus}")
    if c.verified is None:  # it meets the SLOs, but --top plans ranked before it were verified
        return (f"meets the SLOs up to {c.capacity.rate * c.replicas:.2f} req/s with {c.gpus} GPUs, but "
                f"ranks below the plans shown (--top), so it was not verified at the target rate")
    miss = ", ".join(f"{NAMES.get(k, k)} by {v - 1:+.0%}" for k, v in c.verified_margins.items() if v > 1)
    if not miss and keeps_up(c.verified) is False:
        return (f"falls behind the target rate with {c.gpus} GPUs: "
                f"{c.verified.metrics.steady_requests_per_s:.2f} req/s over the arrival window")
    return f"misses {miss or 'an SLO'} at the target rate with {c.gpus} GPUs"


def misses(c: Candidate) -> dict[str, float]:
    """SLOs missed at the lowest rate tried, as observed / objective - 1."""
    return {NAMES.get(k, k): v - 1 for k, v in c.capacity.margins.items() if v > 1}


def beyond_hint(r: SearchResult) -> str:
    """The smallest deployment beyond --max-gpus that could serve the rate, and how it was sized."""
    c = r.smallest_beyond
    basis = ("sized by its simulated capacity" if c.capacity is not None
             else "an analytical lower bound, not simulated")
    return (f"Beyond --max-gpus {r.max_gpus}, the smallest deployment that could serve it: {c.gpu} {layout(c)} "
            f"x{c.replicas} = {c.gpus} GPUs ({basis}); rerun with --max-gpus {c.gpus} or more.")


def table(r: SearchResult) -> Table:
    """The ranked plans."""
    t = Table(box=box.SIMPLE_HEAD, title=f"{r.rate:g} req/s within {r.targets.label()} ({r.objective})")
    for col in ("#", "GPU", "unit", "units", "GPUs", "capacity req/s", "req/s per GPU",
                f"TTFT P{r.targets.percentile:g} ms", f"TPOT P{r.targets.percentile:g} ms", "$/M out tok"):
        t.add_column(col, justify="right" if col not in ("GPU", "unit") else "left")
    for i, c in enumerate(r.ranked, 1):
        m = c.verified.records if c.verified else []
        ttft = _pct([x.ttft_s * 1e3 for x in m], r.targets.percentile)
        tpot = _pct([x.tpot_s * 1e3 for x in m if x.output_len > 1], r.targets.percentile)
        cost = cost_per_million(c, r.prices.get(c.gpu))
        t.add_row(str(i), c.gpu, layout(c), str(c.replicas), str(c.gpus), f"{c.capacity.rate * c.replicas:.1f}",
                  f"{c.goodput_per_gpu():.2f}", f"{ttft:,.0f}", f"{tpot:,.1f}", "-" if cost is None else f"{cost:.3f}")
    return t


def _pct(values: list[float], p: float) -> float:
    import numpy as np

    arr = np.asarray([v for v in values if v == v])
    return float(np.percentile(arr, p)) if arr.size else float("nan")


def why(r: SearchResult) -> str:
    """One paragraph on why the first plan wins."""
    if not r.ranked:
        return ""
    w = r.ranked[0]
    limit = w.capacity.limited_by
    limit = ("throughput (95% of its saturated rate) before any SLO" if limit == "throughput"
             else f"the P{r.targets.percentile:g} {NAMES.get(limit, limit)} objective")
    text = (f"{layout(w)} on {w.gpu} wins: {w.replicas} unit(s) of {w.unit_gpus} GPU(s) sustain "
            f"{w.capacity.rate * w.replicas:.1f} req/s ({w.goodput_per_gpu():.2f} per GPU); a higher rate "
            f"is limited by {limit}.")
    if len(r.ranked) > 1:
        b = r.ranked[1]
        text += (f" The runner-up ({layout(b)} on {b.gpu}) needs {b.gpus} GPUs and sustains "
                 f"{b.goodput_per_gpu():.2f} req/s per GPU.")
    return text + _precision_note(r)


def _precision_note(r: SearchResult) -> str:
    """With quantization allowed, the best plan at the model's own precision and the best
    quantized one, side by side (quantization changes the model's outputs)."""
    if not r.quantize:
        return ""

    def best(q: bool) -> str:
        c = next((c for c in r.ranked if quantized(c) == q), None)
        if c is None:
            return "none meets the SLOs"
        return f"{layout(c)} x{c.replicas} = {c.gpus} GPUs, {c.goodput_per_gpu():.2f} req/s per GPU"

    return (f" Best at the model's own precision: {best(False)}; best quantized (changes the model's "
            f"outputs): {best(True)}.")


def render(r: SearchResult) -> Group:
    """Everything `serve plan` prints for people."""
    parts: list = []
    if r.ranked:
        parts += [table(r), Text(why(r))]
    else:
        parts.append(Text(f"No plan serves {r.rate:g} req/s within {r.targets.label()} on the GPUs allowed.",
                          style="bold red"))
        parts += [Text(f"  {c.gpu} {layout(c)}: {reason(c, r)}") for c in r.infeasible]
        if r.smallest_beyond is not None:
            parts.append(Text(beyond_hint(r)))
    pruned = ", ".join(f"{n} {k}" for k, n in sorted(r.pruned.items()))
    parts.append(Text(f"simulated {r.simulated} plans ({r.simulations} simulations), pruned "
                      f"{sum(r.pruned.values())} analytically ({pruned}) in {r.wall_s:.1f} s", style="dim"))
    return Group(*parts)
