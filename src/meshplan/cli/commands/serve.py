"""`meshplan serve simulate`: replay a workload through a simulated serving deployment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from pydantic import ValidationError

from meshplan.bands.serving import ServingBands, simulation_bands
from meshplan.cli import html_option
from meshplan.cli import options as opt
from meshplan.cli.common import (QUIET, console, err_console, finish, print_json, progress, show_progress,
                                 user_errors, with_site)
from meshplan.cli.commands.serve_files import PlanEntry, read_plan_entry
from meshplan.cli.lazy import new_app
from meshplan.errors import ConfigError
from meshplan.model import load_model
from meshplan.serving.cost.constants import version_note
from meshplan.serving.cost.lora import lora_slots
from meshplan.serving.engine.layout import RULE as LAYOUT_RULE, choose_layout
from meshplan.serving.engine.placement import check_placement
from meshplan.serving.metrics.summary import SLO
from meshplan.serving.plan import Disaggregation, ServingPlan
from meshplan.serving.simulate import SimulationResult, simulate
from meshplan.serving.traffic.traces import read_trace
from meshplan.serving.traffic.stream import StreamWorkload, stream_workload
from meshplan.serving.traffic.workload import MAX_REQUESTS, Workload, WorkloadSpec, synthesize

serve_app = new_app(help="Serving deployments: simulate traffic, plan, export launch commands.",
                        no_args_is_help=True)


def _help(field: str) -> str:
    return ServingPlan.model_fields[field].description or ""


POOLS = ("both", "prefill", "decode")


def phase_pool(pool: str, dis: dict, tp: int, pp: int, replicas: int) -> dict:
    """The disaggregation flags of `--pool prefill|decode`: that pool alone (the other side
    None), sized by its own flags or else by --tp, --pp and --replicas."""
    if pool not in POOLS:
        raise ConfigError(f"--pool {pool!r}: choose one of {', '.join(POOLS)}")
    if pool == "both":
        return dis
    other = "decode" if pool == "prefill" else "prefill"
    given = [f"--{other}-{k}" for k in ("gpus", "tp") if dis[f"{other}_{k}"] is not None]
    if given:
        raise ConfigError(f"--pool {pool} simulates the {pool} pool alone; drop {' and '.join(given)}")
    size = dis[f"{pool}_tp"] or tp
    gpus = dis[f"{pool}_gpus"] or size * pp * replicas
    return {f"{pool}_gpus": gpus, f"{pool}_tp": size, f"{other}_gpus": None, f"{other}_tp": None}


_OPEN_LAYOUT = (" With --num-gpus and no tp/pp/ep/dp/replicas, meshplan chooses the layout: the smallest "
                "TP that fits, replicas filling the GPUs (said on stderr).")


def build_serving_plan(pool: str = "both", **fields) -> ServingPlan:
    """A ServingPlan from CLI values; a bad value becomes one message naming the flag."""
    dis = {k: fields.pop(k) for k in ("prefill_gpus", "decode_gpus", "prefill_tp", "decode_tp")}
    dis = phase_pool(pool, dis, fields.get("tp") or 1, fields.get("pp") or 1, fields.get("replicas") or 1)
    try:
        if any(v is not None for v in dis.values()):
            if pool == "both" and (dis["prefill_gpus"] is None or dis["decode_gpus"] is None):
                raise ConfigError("disaggregation needs both --prefill-gpus and --decode-gpus "
                                  "(or --pool prefill|decode to simulate one pool alone)")
            fields["disaggregated"] = Disaggregation(**{k: v for k, v in dis.items() if v is not None})
        return ServingPlan(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a check across fields: its own sentence names them
            raise ConfigError(str(err.get("ctx", {}).get("error", err["msg"]))) from None
        flag = "--" + str(err["loc"][0]).replace("_", "-")
        raise ConfigError(f"{flag} {err.get('input')!r}: {err['msg']}") from None


def build_workload(trace: Path | None, trace_format: str | None, on_error: str, time_scale: float,
                   seed: int, stream: bool = False, **spec) -> Workload | StreamWorkload:
    """The workload: a trace file, or a synthetic spec from the workload flags (streamed, a chunk
    at a time, with `stream` or more than MAX_REQUESTS requests)."""
    if trace is not None:
        if stream:
            raise ConfigError("--stream with --trace: a trace is replayed whole; drop --stream")
        workload = read_trace(trace, trace_format, on_error=on_error, time_scale=time_scale,
                              max_requests=spec.get("num_requests"))
        lora = {k: spec[k] for k in ("lora_popularity", "lora_zipf_exponent") if spec.get(k) is not None}
        return replace(workload, **lora, seed=seed) if lora else workload
    if stream or (spec.get("num_requests") or 0) > MAX_REQUESTS:
        return stream_workload(WorkloadSpec(**spec), seed=seed)
    return synthesize(WorkloadSpec(**spec), seed=seed)


def unit_workload(trace, trace_format, on_error, seed, rate, **spec):
    """Requests at 1 req/s on average (plan search compresses them to any rate), and the target
    rate (the trace's own mean rate unless --request-rate is given)."""
    from meshplan.serving.search.capacity import at_rate

    if trace is not None:
        w = build_workload(trace, trace_format, on_error, 1.0, seed, num_requests=spec.get("num_requests"))
        span = w.requests[-1].arrival_s - w.requests[0].arrival_s
        native = (len(w) - 1) / span if span > 0 else 1.0
        return at_rate(w, 1.0 / native), rate or native  # stretched to 1 req/s on average
    if rate is None:
        raise ConfigError("give --request-rate (requests/s to serve) or a --trace")
    arrival = "gamma" if spec.get("burstiness") not in (None, 1.0) else "poisson"
    return build_workload(None, None, on_error, 1.0, seed, arrival=arrival, request_rate=1.0, **spec), rate


def lengths_flags(dataset: str | None, lengths_file: Path | None, default: str = "random") -> dict:
    """--dataset and --lengths-file as WorkloadSpec fields: a lengths file alone picks `file`
    (.csv, .jsonl) or `histogram` (.yaml)."""
    if lengths_file is None:
        return {"dataset": dataset or default}
    if dataset is None:
        dataset = "histogram" if lengths_file.suffix.lower() in (".yaml", ".yml") else "file"
    return {"dataset": dataset, "lengths_file": str(lengths_file)}


def _arrival(offline: bool, request_rate: float | None, concurrency: int | None, burstiness: float | None) -> str:
    chosen = [name for name, on in (("--offline", offline), ("--request-rate", request_rate is not None),
                                    ("--concurrency", concurrency is not None)) if on]
    if len(chosen) > 1:
        raise ConfigError(f"choose one arrival mode, got {' and '.join(chosen)}")
    if concurrency is not None:
        return "concurrency"
    if request_rate is not None:
        return "gamma" if burstiness not in (None, 1.0) else "poisson"
    return "offline"


def _run(model, cluster, plan, workload, slo, shown: bool) -> SimulationResult:
    with progress("simulating requests", shown) as update:
        return simulate(model, cluster, plan, workload, slo=slo, progress=update if shown else None)


@serve_app.command("simulate")
@user_errors
@with_site
def simulate_cmd(
    model: str = typer.Option(None, "--model", help="Catalog name, config.json path or hf:ORG/NAME "
                              "(required unless --plan names it)."),
    gpu: str = typer.Option(None, "--gpu", help="GPU catalog name, e.g. h100-sxm-80gb (see `meshplan gpus "
                            "list`; required unless --plan names it)."),
    plan_file: Path = typer.Option(None, "--plan", help="Simulate this plan: `serve plan --json` output (with "
                                   "its model, GPU, workload, rate and SLOs unless given here) or a plan file "
                                   "(YAML/JSON with `model` and ServingPlan fields); the plan flags then stay unset."),
    plan_index: int = typer.Option(1, "--plan-index", help="Which plan of a `serve plan --json` file (1: the best)."),
    num_gpus: int = typer.Option(None, "--num-gpus", help="GPUs available (default: what the plan uses)."),
    gpus_per_node: int = opt.GPUS_PER_NODE, inter_node_gbps_per_gpu: float = opt.INTER_NODE_GBPS,
    engine: str = typer.Option("vllm", help=_help("engine")),
    engine_version: str = typer.Option(None, help=_help("engine_version")),
    tp: int = typer.Option(None, help=_help("tp") + _OPEN_LAYOUT), pp: int = typer.Option(None, help=_help("pp")),
    ep: int = typer.Option(None, help=_help("ep")), dp: int = typer.Option(None, help=_help("dp")),
    replicas: int = typer.Option(None, help=_help("replicas")),
    router: str = typer.Option("round-robin", help=_help("router")),
    weights_dtype: str = typer.Option("auto", help=_help("weights_dtype")),
    kv_cache_dtype: str = typer.Option("auto", help=_help("kv_cache_dtype")),
    max_num_seqs: int = typer.Option(None, help=_help("max_num_seqs")),
    max_num_batched_tokens: int = typer.Option(None, help=_help("max_num_batched_tokens")),
    gpu_memory_utilization: float = typer.Option(None, help=_help("gpu_memory_utilization")),
    prefix_caching: bool = typer.Option(None, "--prefix-caching/--no-prefix-caching", help=_help("prefix_caching")),
    chunked_prefill: bool = typer.Option(None, "--chunked-prefill/--no-chunked-prefill", help=_help("chunked_prefill")),
    speculative_tokens: int = typer.Option(0, help=_help("speculative_tokens")),
    acceptance_rate: float = typer.Option(None, help=_help("acceptance_rate")),
    speculative_method: str = typer.Option("eagle", help=_help("speculative_method")),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help=_help("enforce_eager")),
    num_scheduler_steps: int = typer.Option(1, help=_help("num_scheduler_steps")),
    enable_two_batch_overlap: bool = typer.Option(None, "--enable-two-batch-overlap/--no-two-batch-overlap",
                                                  help=_help("enable_two_batch_overlap")),
    what_if: bool = typer.Option(False, "--what-if", help=_help("what_if")),
    kv_offload: str = typer.Option("none", help=_help("kv_offload")),
    kv_cpu_gib: float = typer.Option(None, help="kv_offload=cpu: host memory for offloaded KV per replica, GiB."),
    kv_hit_rate: float = typer.Option(None, help=_help("kv_hit_rate")),
    lora_adapters: int = typer.Option(0, help=_help("lora_adapters")),
    lora_rank: int = typer.Option(None, help=_help("lora_rank")),
    max_loras: int = typer.Option(None, help=_help("max_loras")),
    lora_popularity: str = typer.Option(None, help="How requests pick adapters: uniform or zipf."),
    lora_zipf_exponent: float = typer.Option(None, help="zipf popularity: adapter k ~ 1/(k+1)^exponent (default 1)."),
    prefill_gpus: int = typer.Option(None, help="Disaggregated: GPUs of the prefill pool."),
    decode_gpus: int = typer.Option(None, help="Disaggregated: GPUs of the decode pool."),
    prefill_tp: int = typer.Option(None, help="Disaggregated: TP of each prefill instance."),
    decode_tp: int = typer.Option(None, help="Disaggregated: TP of each decode instance."),
    pool: str = typer.Option("both", help="both, or one pool of a disaggregated deployment alone: prefill "
                             "(requests end with their first token) or decode (prompts' KV already present)."),
    dataset: str = typer.Option(None, help="Lengths: fixed, random (default), normal, lognormal; a public dataset's "
                                "packaged table: sharegpt, sharegpt_vllm, sharegpt_sglang (ShareGPT as vllm bench serve / "
                                "SGLang bench_serving sample it), openorca, cnn_dailymail, longbench; file or histogram "
                                "(from --lengths-file)."),
    lengths_file: Path = typer.Option(None, "--lengths-file", help="Your own lengths: a CSV/JSONL file of (prompt, "
                                      "output) token counts, resampled, or a YAML histogram {input: {edges, counts}, "
                                      "output: {edges, counts}}; implies --dataset file or histogram."),
    input_len: int = typer.Option(None, help="Prompt tokens (fixed value, random centre, or mean)."),
    output_len: int = typer.Option(None, help="Output tokens (fixed value, random centre, or mean)."),
    range_ratio: float = typer.Option(None, help="random: lengths uniform in [L(1-r), L(1+r)]."),
    request_rate: float = typer.Option(None, help="Open-loop arrivals, requests/s (Poisson, or gamma with --burstiness)."),
    burstiness: float = typer.Option(None, help="Gamma shape of inter-arrivals (< 1 burstier; 1 = Poisson)."),
    concurrency: int = typer.Option(None, help="Closed loop: this many clients, each sending when its last ends."),
    offline: bool = typer.Option(False, "--offline", help="All requests at t=0 (the default arrival mode)."),
    num_requests: int = typer.Option(None, help="Requests to simulate (default 1000; with --trace: at most this many)."),
    shared_prefix_len: int = typer.Option(None, help="Tokens of a system prompt shared by requests."),
    num_prefixes: int = typer.Option(None, help="Distinct shared system prompts."),
    turns: int = typer.Option(None, help="Turns per multi-turn session."),
    trace: Path = typer.Option(None, "--trace", help="Replay this trace file instead of a synthetic workload."),
    trace_format: str = typer.Option(None, help="Trace format: burstgpt, azure or mooncake (default: told from the file's first line)."),
    on_error: str = typer.Option("stop", help="Malformed trace rows: stop (error) or skip (and report)."),
    time_scale: float = typer.Option(1.0, help="Trace replay: multiply inter-arrival times by this."),
    slo_ttft_ms: float = typer.Option(None, help="Goodput SLO on time to first token, ms."),
    slo_tpot_ms: float = typer.Option(None, help="Goodput SLO on time per output token, ms."),
    slo_e2e_ms: float = typer.Option(None, help="Goodput SLO on end-to-end latency, ms."),
    slo_percentile: float = typer.Option(90.0, help="Share of requests (%) that must meet the SLOs "
                                         "for the run to pass (exit 0; else 1)."),
    seed: int = typer.Option(None, help="Random seed of the synthetic workload (default 0)."),
    json_out: bool = typer.Option(False, "--json", help="Print metrics and simulation stats as JSON."),
    stream: bool = typer.Option(False, "--stream", help="Fold requests into quantile sketches (percentiles within "
                                "0.5%) as they finish: memory flat in the request count. On by itself above "
                                "1,000,000 requests; no --requests-csv, --trace-out or --html then."),
    requests_csv: Path = typer.Option(None, help="Write one CSV row per request here."),
    trace_out: Path = typer.Option(None, help="Write a Chrome/Perfetto trace of the iterations here."),
    html: Path = html_option.HTML,
    quiet: bool = QUIET,
) -> None:
    """Simulate a deployment under traffic: TTFT, TPOT, ITL, E2E, throughput and goodput."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    plan = build_serving_plan(
        engine=engine, engine_version=engine_version, tp=tp, pp=pp, ep=ep, dp=dp, replicas=replicas,
        router=router, weights_dtype=weights_dtype, kv_cache_dtype=kv_cache_dtype, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, gpu_memory_utilization=gpu_memory_utilization,
        prefix_caching=prefix_caching, chunked_prefill=chunked_prefill,
        speculative_tokens=speculative_tokens, acceptance_rate=acceptance_rate,
        speculative_method=speculative_method, enforce_eager=enforce_eager, what_if=what_if or None,
        enable_two_batch_overlap=enable_two_batch_overlap, num_scheduler_steps=num_scheduler_steps,
        lora_adapters=lora_adapters, lora_rank=lora_rank, max_loras=max_loras, kv_offload=kv_offload,
        kv_cpu_bytes=None if kv_cpu_gib is None else kv_cpu_gib * 2**30, kv_hit_rate=kv_hit_rate,
        prefill_gpus=prefill_gpus, decode_gpus=decode_gpus, prefill_tp=prefill_tp, decode_tp=decode_tp,
        pool=pool)
    flags = dict(trace=trace, request_rate=request_rate, burstiness=burstiness, concurrency=concurrency,
                 num_requests=num_requests, dataset=dataset, input_len=input_len, output_len=output_len,
                 range_ratio=range_ratio, shared_prefix_len=shared_prefix_len, num_prefixes=num_prefixes,
                 turns=turns, seed=seed, offline=offline or None, lengths_file=lengths_file)
    entry, plan, model, gpu = _target(plan_file, plan_index, plan, model, gpu)
    spec_model = load_model(model)
    cluster = opt.build_cluster(gpu, num_gpus or plan.num_gpus, gpus_per_node, None, inter_node_gbps_per_gpu, None)
    check_placement(plan, cluster.gpus_per_node)
    if entry is not None and entry.workload and entry.request_rate and all(v is None for v in flags.values()):
        workload = _planned_workload(entry)  # the very requests `serve plan` verified the plan with
    else:
        workload = _flag_workload(flags, trace_format, on_error, time_scale, lora_popularity,
                                  lora_zipf_exponent, stream)
    _check_streamed(workload, requests_csv=requests_csv, trace_out=trace_out, html=html)
    slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile = _entry_slo(
        entry, slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile)
    slo = _slo(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile)
    open_layout = entry is None and layout_open(num_gpus, plan, [tp, pp, ep, dp, replicas])
    plan, chosen = _chosen(spec_model, cluster, plan, workload, open_layout)
    result = _run(spec_model, cluster, plan, workload, slo,
                  shown=show_progress(quiet, json_out) and len(workload.requests) >= 5000)
    _write_outputs(result, requests_csv, trace_out)
    verdict = slo_verdict(result, slo, slo_percentile)
    bands = simulation_bands(spec_model, cluster, plan, workload, result.metrics)
    _show(result, workload, {**chosen, **bands.to_dict()}, bands, verdict, json_out)

    def page():
        from meshplan.report.pages_serving import simulate_page

        title = f"{spec_model.name} on {plan.num_gpus} x {cluster.gpu.name}: {workload.description}"
        return simulate_page(result, slo, slo_percentile, title, "meshplan serve simulate", given)

    html_option.write(html, page)
    finish(verdict is None or verdict["met"])


def _target(plan_file, plan_index: int, plan: ServingPlan, model: str | None, gpu: str | None):
    """(plan-file entry or None, plan, model, GPU): a --plan file's entry fills what the flags
    leave out; a model and a GPU are required from one or the other."""
    entry = None
    if plan_file is not None:
        entry, plan = _from_plan_file(plan_file, plan_index, plan)
        model, gpu = model or entry.model, gpu or entry.gpu
    if model is None or gpu is None:
        raise ConfigError(f"give {'--model' if model is None else '--gpu'} (or a --plan file that names it)")
    return entry, plan, model, gpu


def _show(result, workload, extra: dict, bands, verdict: dict | None, json_out: bool) -> None:
    """The answer on stdout: `--json` (the result, `extra` (chosen layout, notes, bands) and the
    SLO verdict) or the tables."""
    if json_out:
        print_json({**result.to_dict(), **extra, **({"slo": verdict} if verdict else {})})
    else:
        _render(result, workload, bands)
        _render_verdict(verdict)


def layout_open(num_gpus: int | None, plan: ServingPlan, layout_given: list) -> bool:
    """Whether meshplan chooses the layout: a GPU count is given, and neither a layout (the
    tp/pp/ep/dp/replicas given, None where not) nor disaggregated pools."""
    return num_gpus is not None and plan.disaggregated is None and all(v is None for v in layout_given)


def choices(model, cluster, plan: ServingPlan, workload: Workload, open_layout: bool) -> tuple[ServingPlan, dict]:
    """The plan to simulate and what meshplan chose for it (JSON fields `layout`, `notes`): the
    layout when only a GPU count was given, the engine release when the version names none, bf16
    for a checkpoint whose quant_method is not modeled (with `--weights-dtype auto`)."""
    notes, extra = [n for n in (version_note(plan.engine, plan.engine_version),) if n], {}
    if plan.weights_dtype == "auto" and model.weights is not None:
        notes += model.weights.notes
    if open_layout:
        plan, note = choose_layout(model, cluster, plan, workload)
        notes.append(note)
        extra["layout"] = {"tp": plan.tp, "pp": plan.pp, "replicas": plan.replicas, "chosen": True, "rule": LAYOUT_RULE}
    return plan, {**extra, **({"notes": notes} if notes else {})}


def _chosen(model, cluster, plan: ServingPlan, workload: Workload, open_layout: bool) -> tuple[ServingPlan, dict]:
    """`choices`, each of its notes also a `note:` line on stderr."""
    plan, chosen = choices(model, cluster, plan, workload, open_layout)
    for note in chosen.get("notes", ()):
        err_console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    return plan, chosen


def _check_streamed(workload, **outputs) -> None:
    """A streamed run keeps no per-request records or iteration rows to write out."""
    if isinstance(workload, StreamWorkload):
        given = [f"--{k.replace('_', '-')}" for k, v in outputs.items() if v is not None]
        if given:
            raise ConfigError(f"{' and '.join(given)} with a streamed run ({len(workload):,} requests, or "
                              f"--stream): it keeps no per-request records; drop {' and '.join(given)} or "
                              f"simulate at most {MAX_REQUESTS:,} requests without --stream")


def _flag_workload(flags: dict, trace_format, on_error, time_scale, lora_popularity,
                   lora_zipf_exponent, stream: bool = False) -> Workload | StreamWorkload:
    """The workload the traffic flags describe (`flags` as simulate_cmd collects them)."""
    f = flags
    return build_workload(
        f["trace"], trace_format, on_error, time_scale, 0 if f["seed"] is None else f["seed"], stream,
        arrival=_arrival(bool(f["offline"]), f["request_rate"], f["concurrency"], f["burstiness"]),
        request_rate=f["request_rate"], burstiness=f["burstiness"], concurrency=f["concurrency"],
        num_requests=f["num_requests"], **lengths_flags(f["dataset"], f["lengths_file"]), input_len=f["input_len"],
        output_len=f["output_len"], range_ratio=f["range_ratio"],
        shared_prefix_len=f["shared_prefix_len"], num_prefixes=f["num_prefixes"], turns=f["turns"],
        lora_popularity=lora_popularity, lora_zipf_exponent=lora_zipf_exponent)


def _entry_slo(entry, ttft_ms, tpot_ms, e2e_ms, percentile) -> tuple:
    """The SLOs a --plan file carries when the command line gives none (else those given)."""
    if entry is not None and entry.slo and all(v is None for v in (ttft_ms, tpot_ms, e2e_ms)):
        return (*(entry.slo.get(k) for k in ("ttft_ms", "tpot_ms", "e2e_ms")),
                entry.slo.get("percentile", percentile))
    return ttft_ms, tpot_ms, e2e_ms, percentile


def _from_plan_file(path: Path, index: int, flagged: ServingPlan) -> tuple[PlanEntry, ServingPlan]:
    """The plan of a --plan file; plan flags given as well would be silently lost, so they are refused."""
    entry = read_plan_entry(path, index)
    default = ServingPlan()
    given = [f"--{k.replace('_', '-')}" for k in ServingPlan.model_fields if getattr(flagged, k) != getattr(default, k)]
    if given:
        raise ConfigError(f"--plan {path} gives the deployment; drop {', '.join(given)} (or drop --plan)")
    return entry, entry.plan


def _planned_workload(entry: PlanEntry) -> Workload:
    """The workload `serve plan` simulated: its unit requests (1 req/s) compressed to its rate."""
    from meshplan.serving.search.capacity import at_rate

    w = dict(entry.workload)
    trace = w.pop("trace", None)
    fmt, on_error, seed = w.pop("trace_format", None), w.pop("on_error", "stop"), w.pop("seed", 0)
    unit, rate = unit_workload(None if trace is None else Path(trace), fmt, on_error, seed, entry.request_rate, **w)
    return at_rate(unit, rate)


def slo_verdict(result: SimulationResult, slo: SLO | None, percentile: float) -> dict | None:
    """Share of completed requests meeting every objective, and whether it reaches `percentile`."""
    if slo is None:
        return None
    m = result.metrics
    attainment = (m.goodput_requests_per_s or 0.0) / m.requests_per_s if m.requests_per_s else 0.0
    return {"attainment": attainment, "percentile": percentile,
            "met": attainment * 100 >= percentile - 1e-9}


def _write_outputs(result: SimulationResult, requests_csv: Path | None, trace_out: Path | None) -> None:
    from meshplan.report.serving_outputs import write_iterations_trace, write_requests_csv

    if requests_csv is not None:
        write_requests_csv(result.records, requests_csv)
    if trace_out is not None:
        write_iterations_trace(result.log, trace_out)


def _slo(ttft_ms: float | None, tpot_ms: float | None, e2e_ms: float | None,
         percentile: float) -> SLO | None:
    """The SLO of the --slo-* flags (None when none is given), the percentile checked."""
    if not percentile <= 100:
        raise ConfigError(f"--slo-percentile {percentile!r}: give a share of requests in (0, 100]")
    if all(v is None for v in (ttft_ms, tpot_ms, e2e_ms)):
        return None
    return SLO(ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms)


def _render_verdict(verdict: dict | None) -> None:
    if verdict:
        word = "[bold green]MET[/]" if verdict["met"] else "[bold red]NOT MET[/]"
        console.print(f"SLOs {word}: {verdict['attainment']:.1%} of requests meet every objective "
                      f"(needed {verdict['percentile']:g}%)", highlight=False)


def _render(result: SimulationResult, workload: Workload, bands: ServingBands) -> None:
    for pool in result.to_dict()["deployment"]:
        console.print(
            f"[bold]{pool['role']}[/] x{pool['replicas']}: tp={pool['tp']} pp={pool['pp']} ep={pool['ep']} "
            f"max_num_seqs={pool['max_num_seqs']} max_num_batched_tokens={pool['max_num_batched_tokens']} "
            f"KV {pool['kv_cache_gib']:.1f} GiB = {pool['kv_tokens']:,} tokens/replica")
    console.print(f"workload: {workload.description}")
    console.print(result.metrics.tables(bands.pairs()))
    if bands.extrapolating:
        console.print(f"[yellow]extrapolating[/]: {'; '.join(bands.extrapolating)} (those bands twice as wide)",
                      highlight=False, soft_wrap=True)
    pools = result.pools
    plan = pools[0].plan
    if plan.lora_adapters:
        console.print(f"LoRA: {plan.lora_adapters} adapters of rank {plan.lora_rank}, {lora_slots(plan)} resident "
                      f"per replica; {result.adapter_loads:,} host-to-GPU adapter loads", highlight=False)
    if len(pools) == 1 and pools[0].role != "both":  # a phase pool measured alone
        m, gpus = result.metrics, pools[0].replicas * pools[0].plan.gpus_per_replica
        rate, what = ((m.input_tokens_per_s, "input") if pools[0].role == "prefill"
                      else (m.output_tokens_per_s, "output"))
        console.print(f"{pools[0].role} pool alone: {rate:,.0f} {what} tokens/s = {rate / gpus:,.0f} per GPU",
                      highlight=False)
    shown = result.metrics.completed if result.streamed else len(result.records)
    console.print(f"simulated {result.simulated_s:,.1f} s of traffic ({shown:,} requests, "
                  f"{result.iterations:,} iterations) in {result.wall_s:.2f} s wall")


def register(app: typer.Typer) -> None:
    """Attach `serve` to the root app."""
    app.add_typer(serve_app, name="serve")
