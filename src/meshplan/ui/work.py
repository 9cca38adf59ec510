"""What each page computes, as plain functions from a request body (a dict) to the CLI's `--json`
object. They call the same library functions and CLI helpers as the commands, so a page and a
command given the same inputs answer the same. Long ones take `progress(done, total)` and run in
a background process (meshplan.ui.jobs); `run_in_child` is that process's entry point."""

from __future__ import annotations

from typing import Callable

from meshplan.errors import DoesNotFitError, MeshplanError, UnknownNameError
from meshplan.ui.figures import inputs, report_json

Progress = Callable[[int, int], None]


def train_memory(body: dict, plots: bool = False) -> dict:
    """`train memory --json` of a TrainingRequest (and its report page when `plots`)."""
    from meshplan.training import estimate_memory, resolve_plan
    from meshplan.training.memory.report import memory_dict

    spec, cluster, plan = _training_inputs(body)
    est = estimate_memory(spec, cluster, resolve_plan(plan, spec, cluster))

    def page():
        from meshplan.report.pages_training import memory_page

        return memory_page(est, f"{_title(spec, cluster)}: memory per GPU", "meshplan train memory",
                           inputs(body))

    from meshplan.bands.training import memory_bands
    from meshplan.cli.commands.train_plan import blocked

    page_only = {"report": report_json(page, [framework_note(body.get("plan"))]),
                 "why": "" if est.fits else f"Does not fit: {blocked(est)}"}
    return {**memory_dict(est), "would_fit_with": _hints(spec, cluster, plan, est),
            **memory_bands(spec, cluster, est), **(page_only if plots else {})}


def _hints(spec, cluster, plan, memory) -> list[dict]:
    """The CLI's "would fit with ..." flags (`would_fit_with` in its --json)."""
    from meshplan.cli.commands.train import fit_hints

    return [h.to_dict() for h in fit_hints(spec, cluster, plan, memory)]


def train_estimate(body: dict, plots: bool = False) -> dict:
    """`train estimate --json` of a TrainingEstimateRequest (and its report page when `plots`)."""
    from meshplan.bands.training import estimate_bands
    from meshplan.training.choose import best_plan
    from meshplan.training.estimate_report import estimate_dict

    from meshplan.goodput import goodput
    from meshplan.goodput.render import goodput_json
    from meshplan.ui.schemas import TrainingEstimateRequest

    req = TrainingEstimateRequest(**body)
    spec, cluster, plan = _training_inputs(body, req)
    est = best_plan(plan, spec, cluster)
    good = goodput(spec, cluster, est.plan, est.step_time_s, req.train_tokens, resilience(req.goodput))
    bands = {**estimate_bands(spec, cluster, est).to_dict(),
             **goodput_json(good, cluster.num_gpus, req.price_per_gpu_hour)}
    bands = {"would_fit_with": _hints(spec, cluster, plan, est.memory), **bands}
    if not plots:
        return {**estimate_dict(est), **bands}
    from dataclasses import replace

    from meshplan.training.estimate import estimate_step

    est = replace(estimate_step(spec, cluster, est.plan, with_events=True), plan=est.plan)

    def page():
        from meshplan.report.pages_training import estimate_page

        return estimate_page(est, f"{_title(spec, cluster)}: one training step", "meshplan train estimate",
                             inputs(body), estimate_bands(spec, cluster, est), good)

    return {**estimate_dict(est), **bands, "report": report_json(page, [framework_note(body.get("plan"))])}


def resilience(inputs):
    """The Resilience of a request's goodput inputs (a GoodputInputs), as the CLI's flags make it."""
    from meshplan.cli.goodput_options import pop_resilience

    return pop_resilience(inputs.model_dump(exclude_none=True))


def framework_note(fields: dict | None) -> str | None:
    """What the CLI says on stderr when it picks the framework for a plan's method (None when the
    fields name a framework, or the default runs the method)."""
    from meshplan.training.layout.capabilities import default_framework

    fields = fields or {}
    return None if fields.get("framework") else default_framework(fields.get("method") or "full")[1]


def _training_inputs(body: dict, req=None):
    """(model spec, cluster, plan) of a training request; without a framework, the one the CLI
    picks for the plan's method (megatron, or hf for qlora)."""
    from meshplan.cli import options as opt
    from meshplan.model import load_model
    from meshplan.training.layout.capabilities import default_framework
    from meshplan.ui.schemas import TrainingRequest

    req = req or TrainingRequest(**body)
    plan = req.plan
    if "framework" not in (body.get("plan") or {}):
        plan = plan.model_copy(update={"framework": default_framework(plan.method)[0]})
    hw = req.hardware
    host = {name: getattr(hw, name) for name in opt.HOST_OPTIONS}
    cluster = opt.build_cluster(hw.gpu, hw.num_gpus, hw.gpus_per_node, hw.scale_up_domain,
                                hw.inter_node_gbps_per_gpu, hw.gpu_power_limit_w, **host)
    return load_model(req.model), cluster, plan


def train_plan_inputs(body: dict):
    """The checked inputs of a training plan search: (request, pins, base plan, model, cluster)."""
    from meshplan.cli import options as opt
    from meshplan.cli.commands.train_plan import PINNABLE, check_pins, search_inputs
    from meshplan.model import load_model
    from meshplan.training.layout.capabilities import default_framework
    from meshplan.ui.schemas import TrainingSearchRequest

    r = TrainingSearchRequest(**body)
    pinned = {k: getattr(r, k) for k in PINNABLE if getattr(r, k) is not None}
    framework = r.framework or default_framework(r.method)[0]  # the CLI's rule (train plan)
    base = search_inputs(r.objective, r.price_per_gpu_hour, r.train_tokens, r.seq_len,
                         r.global_batch_size, r.global_batch_tokens, framework, r.precision, pinned,
                         doc_lengths=r.doc_lengths, expert_skew=r.expert_skew, balance=r.balance,
                         moe_balance=r.moe_balance, method=r.method, lora_rank=r.lora_rank,
                         lora_targets=r.lora_targets)
    spec = load_model(r.model)
    clusters = []
    for n in dict.fromkeys(r.num_gpus):  # each size once, in the order given
        clusters.append(opt.build_cluster(r.gpu, n, r.gpus_per_node, None, None, None))
        check_pins(pinned, n)
    return r, pinned, base, spec, clusters


def _in_parts(progress: Progress | None, part: int, parts: int) -> Progress | None:
    """Progress of one of `parts` equal parts of a job (a cluster size of a plan search)."""
    if progress is None:
        return None
    return lambda done, total: progress(part * total + done, parts * total)


def train_plan(body: dict, progress: Progress | None = None) -> dict:
    """`train plan --json` of a TrainingSearchRequest: every cluster size searched, the plans
    ranked together by score, and why the winner wins."""
    from meshplan.cli.commands.train_plan import search_dict, search_size, winner_goodput
    from meshplan.report.figures_plan import why_text
    from meshplan.training.search.plans import OBJECTIVE_UNITS

    r, pinned, base, spec, clusters = train_plan_inputs(body)
    entries, searches, results, failures = [], [], {}, resilience(r.goodput)
    for k, cluster in enumerate(clusters):
        result, ranked, _ = search_size(spec, r.model, cluster, base, pinned, r.objective, r.top,
                                        r.price_per_gpu_hour, r.train_tokens, _in_parts(progress, k, len(clusters)),
                                        resilience=failures)
        entries += ranked
        searches.append(search_dict(result, cluster.num_gpus))
        results[cluster.num_gpus] = result
    entries.sort(key=lambda e: e["score"])

    def page():
        from meshplan.report.figures_plan import plan_bands
        from meshplan.report.pages_training import plan_page

        sizes = ", ".join(str(n) for n in results)
        by_size = {c.num_gpus: c for c in clusters}
        return plan_page(results, f"{spec.name} on {sizes} x {clusters[0].gpu.name}: plan search",
                         "meshplan train plan", inputs(body), r.price_per_gpu_hour,
                         winner_goodput(spec, results, by_size, r.train_tokens, failures),
                         bands=plan_bands(spec, by_size, results))

    return {"plans": entries, "score_unit": OBJECTIVE_UNITS[r.objective],
            "search": searches[0] if len(searches) == 1 else searches, "why": why_text(results),
            "report": report_json(page, [framework_note(body)])}


def simulate_inputs(body: dict):
    """The checked inputs of a serving simulation: (request, model, cluster, workload, SLO)."""
    from meshplan.cli import options as opt
    from meshplan.model import load_model
    from meshplan.serving.metrics.summary import SLO
    from meshplan.serving.traffic.workload import synthesize
    from meshplan.ui.schemas import SimulateRequest

    r = SimulateRequest(**body)
    spec = load_model(r.model)
    cluster = opt.build_cluster(r.gpu, r.num_gpus or r.plan.num_gpus, r.gpus_per_node, None, None, None)
    workload = synthesize(r.workload, seed=r.seed)
    slo = None
    if any(v is not None for v in (r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms)):
        slo = SLO(ttft_ms=r.slo_ttft_ms, tpot_ms=r.slo_tpot_ms, e2e_ms=r.slo_e2e_ms)
    return r, spec, cluster, workload, slo


LAYOUT_FIELDS = ("tp", "pp", "ep", "dp", "replicas")
"""The plan fields that make a layout; a simulation given num_gpus and none of them gets one chosen."""


def serve_simulate(body: dict, progress: Progress | None = None) -> dict:
    """`serve simulate --json` of a SimulateRequest (with the SLO verdict when SLOs are given):
    given `num_gpus` and no layout, the CLI's chosen layout, and its notes (`layout`, `notes`)."""
    from meshplan.cli.commands.serve import choices, layout_open, slo_verdict
    from meshplan.serving.simulate import simulate

    r, spec, cluster, workload, slo = simulate_inputs(body)
    given = body.get("plan") or {}
    plan, chosen = choices(spec, cluster, r.plan, workload,
                           layout_open(r.num_gpus, r.plan, [given.get(k) for k in LAYOUT_FIELDS]))
    result = simulate(spec, cluster, plan, workload, slo=slo, progress=progress)
    verdict = slo_verdict(result, slo, r.slo_percentile)

    def page():
        from meshplan.report.pages_serving import simulate_page

        return simulate_page(result, slo, r.slo_percentile if slo else None,
                             f"{spec.name} on {cluster.num_gpus} x {cluster.gpu.name}: serving simulation",
                             "meshplan serve simulate", inputs(body))

    return {**result.to_dict(), **chosen, **({"slo": verdict} if verdict else {}), "report": report_json(page)}


def serve_plan_inputs(body: dict):
    """The checked inputs of a serving plan search: (request, targets, unit workload, rate, trial
    window, model, clusters, search space); the unit and window are the ones `serve plan` sizes."""
    from meshplan.cli.commands.serve_plan import _targets, sized_unit_workload
    from meshplan.hardware import Cluster
    from meshplan.model import load_model
    from meshplan.serving.search.candidates import Space
    from meshplan.ui.schemas import ServePlanRequest

    r = ServePlanRequest(**body)
    t = _targets(r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms, r.slo_percentile)
    unit, rate, window = sized_unit_workload(
        t, r.num_requests, trace=None, trace_format=None, on_error="stop", seed=r.seed, rate=r.request_rate,
        dataset=r.dataset, input_len=r.input_len, output_len=r.output_len, range_ratio=r.range_ratio,
        burstiness=r.burstiness, shared_prefix_len=r.shared_prefix_len)
    spec = load_model(r.model)
    clusters = [Cluster.build(g, 1) for g in r.gpus]
    space = Space(engine=r.engine, quantize=r.quantization and not r.no_quantization, disaggregate=not r.no_disaggregation)
    return r, t, unit, rate, window, spec, clusters, space


def serve_plan(body: dict, progress: Progress | None = None) -> dict:
    """`serve plan --json` of a ServePlanRequest (simulated in this process: no nested pool): the
    same sized and screened capacity trials, the plans with their bands."""
    from meshplan.serving.search.report import result_dict, why
    from meshplan.serving.search.run import search

    r, t, unit, rate, window, spec, clusters, space = serve_plan_inputs(body)
    result = search(spec, clusters, unit, rate, t, max_gpus=r.max_gpus, objective=r.objective,
                    prices=dict(r.prices), space=space, top=r.top, workers=1, window=window)

    def page():
        from meshplan.report.pages_serving import serve_plan_page

        return serve_plan_page(result, why(result), f"{spec.name}: serving plan search", "meshplan serve plan",
                               inputs(body))

    return {**result_dict(result, r.model, spec), "why": why(result), "report": report_json(page)}


def validate(body: dict, progress: Progress | None = None) -> dict:
    """`validate --json` of one uploaded run-record file (`body["path"]`); records that break the
    schema are skipped with their reason, as the CLI does without --strict."""
    from meshplan.validate.records import read_records
    from meshplan.validate.run import Skip, predict, report

    records, bad = read_records(body["path"], strict=False)
    rows, skips = predict(records, progress, 1)
    skips = [Skip(rid, reason.replace(body["path"], body["filename"])) for rid, reason in bad] + skips
    data = report(rows, skips)

    def page():
        from meshplan.report.pages_validate import record_groups, validate_page

        return validate_page(rows, data["summary"], len(skips), record_groups(records),
                             f"validation of {body['filename']}", "meshplan validate", {"file": body["filename"]})

    return {**data, "report": report_json(page)}


def _title(spec, cluster) -> str:
    return f"{spec.name} on {cluster.num_gpus} x {cluster.gpu.name}"


JOBS: dict[str, Callable[..., dict]] = {"train-plan": train_plan, "serve-simulate": serve_simulate,
                                        "serve-plan": serve_plan, "validate": validate}
"""Background jobs by name: the pages that can run for seconds or minutes."""
CHECKS: dict[str, Callable[[dict], object]] = {"train-plan": train_plan_inputs,
                                               "serve-simulate": simulate_inputs,
                                               "serve-plan": serve_plan_inputs}
"""The quick checks of a job's inputs, run before it is queued, so bad input is a 4xx at once."""


def status_of(exc: MeshplanError) -> int:
    """The HTTP status of a user error: unknown name 404, an answer that does not fit 422, 400."""
    if isinstance(exc, UnknownNameError):
        return 404
    return 422 if isinstance(exc, DoesNotFitError) else 400


def run_in_child(kind: str, body: dict, conn) -> None:
    """Entry point of a job's process: sends ("progress", done, total) messages, then one
    ("result", dict) or ("error", status, message)."""
    def progress(done: int, total: int) -> None:
        conn.send(("progress", int(done), int(total)))

    try:
        conn.send(("result", JOBS[kind](body, progress)))
    except MeshplanError as exc:
        conn.send(("error", status_of(exc), str(exc)))
    except Exception as exc:  # noqa: BLE001 - reported to the page, the server keeps serving
        conn.send(("error", 500, f"internal error: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()
