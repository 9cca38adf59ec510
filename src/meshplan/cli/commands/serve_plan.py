"""`meshplan serve plan | sweep | export`: search deployments, trace the latency-throughput curve,
print launch commands."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import typer
from rich import box
from rich.table import Table

from meshplan.cli import html_option
from meshplan.cli import options as opt
from meshplan.cli import ranges
from meshplan.cli.common import (
    QUIET,
    console,
    finish,
    print_json,
    progress,
    show_progress,
    user_errors,
    with_site,
)
from meshplan.cli.commands.serve import (build_serving_plan, build_workload, lengths_flags, serve_app,
                                        unit_workload)
from meshplan.cli.commands.serve_files import read_plan_entry
from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.serving.search.capacity import Targets
from meshplan.serving.plan import ServingPlan
from meshplan.serving.search.candidates import Space


def _targets(ttft, tpot, e2e, percentile) -> Targets:
    return Targets(ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e, percentile=percentile)


def sized_unit_workload(t: Targets, num_requests: int | None, *, trace, trace_format, on_error, seed, rate,
                        **spec):
    """(unit workload, target rate, trial window) of a search: `num_requests` requests, or as many
    as the duration rule of meshplan.serving.search.trials asks for at the target rate."""
    from meshplan.serving.search.trials import sized_unit

    def make(n: int):
        return unit_workload(trace, trace_format, on_error, seed, rate, num_requests=n, **spec)

    return sized_unit(make, t, num_requests)


def _prices(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items or []:
        gpu, _, value = item.partition("=")
        try:
            out[gpu.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--price {item!r}: expected GPU=USD_PER_GPU_HOUR, e.g. h100-sxm-80gb=2.5") from None
        problem = ranges.RANGES["price_per_gpu_hour"].problem(out[gpu.strip()])
        if problem:
            raise ConfigError(f"--price {item!r}: {problem}")
    return out


@serve_app.command("plan")
@user_errors
@with_site
def plan_cmd(
    model: str = typer.Option(..., "--model", help="Catalog name, config.json path or hf:ORG/NAME."),
    gpu: list[str] = typer.Option(..., "--gpu", help="GPU catalog name; repeat to compare GPU types."),
    request_rate: float = typer.Option(None, help="Requests/s to serve (default with --trace: its mean rate)."),
    max_gpus: int = typer.Option(8, help="Most GPUs a plan may use."),
    objective: str = typer.Option("min-gpus", help="min-gpus, max-goodput-per-gpu or min-cost (needs --price)."),
    price: list[str] = typer.Option(None, "--price", help="GPU=USD per GPU-hour, e.g. h100-sxm-80gb=2.5 (repeatable)."),
    engine: str = typer.Option("vllm", help="Engine whose scheduler and defaults are modeled."),
    slo_ttft_ms: float = typer.Option(None, help="Time-to-first-token objective, ms."),
    slo_tpot_ms: float = typer.Option(None, help="Time-per-output-token objective, ms."),
    slo_e2e_ms: float = typer.Option(None, help="End-to-end latency objective, ms."),
    slo_percentile: float = typer.Option(90.0, help="Percentile of requests the objectives apply to."),
    dataset: str = typer.Option(None, help="Lengths: fixed, random, normal, lognormal; a public dataset's packaged "
                                "table: sharegpt (default), sharegpt_vllm, sharegpt_sglang (ShareGPT as vllm bench serve / "
                                "SGLang bench_serving sample it), openorca, cnn_dailymail, longbench; file or histogram "
                                "(from --lengths-file)."),
    lengths_file: Path = typer.Option(None, "--lengths-file", help="Your own lengths: a CSV/JSONL file of (prompt, "
                                      "output) token counts, or a YAML histogram; implies --dataset file or histogram."),
    input_len: int = typer.Option(None, help="Prompt tokens (fixed, random centre or mean)."),
    output_len: int = typer.Option(None, help="Output tokens (fixed, random centre or mean)."),
    range_ratio: float = typer.Option(None, help="random: lengths uniform in [L(1-r), L(1+r)]."),
    burstiness: float = typer.Option(None, help="Gamma shape of inter-arrivals (< 1 burstier; 1 = Poisson)."),
    shared_prefix_len: int = typer.Option(None, help="Tokens of a shared system prompt."),
    num_requests: int = typer.Option(
        None, help="Requests per simulation (default: sized by duration, so each trial's arrivals span "
        "8 request lifetimes at its rate, 800 to 16,000 requests; see docs/serving/plan-search.md)."),
    trace: Path = typer.Option(None, "--trace", help="Plan for this trace's traffic instead."),
    trace_format: str = typer.Option(None, help="burstgpt, azure or mooncake (default: told from the file's first line)."),
    on_error: str = typer.Option("stop", help="Malformed trace rows: stop or skip."),
    quantization: bool = typer.Option(
        False, "--quantization/--no-quantization",
        help="Also try fp8 weights and KV cache (this changes the model's outputs) and show the best plan at "
             "the model's own precision next to the best quantized one. Default: the model's own precision "
             "(--no-quantization, kept for old scripts)."),
    no_disaggregation: bool = typer.Option(False, "--no-disaggregation", help="Only colocated replicas."),
    memory_headroom: float = typer.Option(
        None, "--memory-headroom", help="GPU memory in GiB each plan must leave free: plans get a "
        "gpu_memory_utilization of at most 1 - headroom / GPU memory when the engine's default would "
        "use more (vllm, sglang)."),
    top: int = typer.Option(5, help="Plans to show."),
    workers: int = typer.Option(2, help="Processes simulating candidates in parallel."),
    seed: int = typer.Option(0, help="Random seed of the synthetic workload."),
    json_out: bool = typer.Option(False, "--json", help="Print the ranked plans as JSON (input of serve export)."),
    html: Path = html_option.HTML,
    quiet: bool = QUIET,
) -> None:
    """The cheapest deployments that serve a request rate within latency SLOs."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    from meshplan.serving.search.report import render, result_dict, why
    from meshplan.serving.search.run import search

    t = _targets(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile)
    lengths = lengths_flags(dataset, lengths_file, default="sharegpt")
    unit, rate, window = sized_unit_workload(
        t, num_requests, trace=trace, trace_format=trace_format, on_error=on_error, seed=seed, rate=request_rate,
        **lengths, input_len=input_len, output_len=output_len, range_ratio=range_ratio, burstiness=burstiness,
        shared_prefix_len=shared_prefix_len)
    spec = load_model(model)
    clusters = [Cluster.build(g, 1) for g in gpu]  # hardware only; each plan is sized in the search
    space = Space(engine=engine, quantize=quantization, disaggregate=not no_disaggregation,
                  memory_headroom_bytes=(memory_headroom or 0.0) * 2**30)
    with progress("searching deployments", show_progress(quiet, json_out)):
        result = search(spec, clusters, unit, rate, t, max_gpus=max_gpus, objective=objective,
                        prices=_prices(price), space=space, top=top, workers=workers, window=window)
    if json_out:
        workload = {**lengths, "input_len": input_len, "output_len": output_len, "range_ratio": range_ratio,
                    "burstiness": burstiness, "shared_prefix_len": shared_prefix_len, "num_requests": len(unit),
                    "seed": seed, "trace": None if trace is None else str(trace), "trace_format": trace_format,
                    "on_error": on_error}
        slo_ms = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": slo_e2e_ms, "percentile": slo_percentile}
        print_json({**result_dict(result, model, spec), "workload": workload, "slo_ms": slo_ms})
    else:
        console.print(render(result))

    def page():
        from meshplan.report.pages_serving import serve_plan_page

        title = f"{spec.name}: serving {result.rate:g} req/s"
        return serve_plan_page(result, why(result), title, "meshplan serve plan", given)

    html_option.write(html, page)
    finish(bool(result.ranked))


@serve_app.command("sweep")
@user_errors
@with_site
def sweep_cmd(
    model: str = typer.Option(..., "--model", help="Catalog name, config.json path or hf:ORG/NAME."),
    gpu: str = opt.GPU,
    rates: str = typer.Option(..., help="Comma-separated request rates, e.g. 1,2,4,8,16."),
    engine: str = typer.Option("vllm"), tp: int = typer.Option(1), pp: int = typer.Option(1),
    replicas: int = typer.Option(1), weights_dtype: str = typer.Option("auto"),
    kv_cache_dtype: str = typer.Option("auto"),
    max_num_seqs: int = typer.Option(None), max_num_batched_tokens: int = typer.Option(None),
    dataset: str = typer.Option("sharegpt"), input_len: int = typer.Option(None),
    output_len: int = typer.Option(None), burstiness: float = typer.Option(None),
    num_requests: int = typer.Option(800), seed: int = typer.Option(0),
    csv_out: Path = typer.Option(None, "--csv", help="Also write the curve as CSV."),
    workers: int = typer.Option(1, "--workers", help="Rates simulated in parallel (processes, or CPUs of a local Ray)."),
    backend: str = typer.Option("local", "--backend", help="local (processes) or ray (the ray extra)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address for --backend ray."),
    slo_ttft_ms: float = typer.Option(None, help="Draw this TTFT objective (ms) on the --html curve."),
    slo_tpot_ms: float = typer.Option(None, help="Draw this TPOT objective (ms) on the --html curve."),
    slo_e2e_ms: float = typer.Option(None, help="Draw this E2E objective (ms) on the --html curve."),
    slo_percentile: float = typer.Option(90.0, help="Percentile the objectives apply to (their label)."),
    html: Path = html_option.HTML,
    quiet: bool = QUIET,
) -> None:
    """Latency and throughput over request rates: the latency-throughput curve of one deployment."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    from meshplan.serving.search.rate_sweep import sweep_rates

    targets = None
    if any(v is not None for v in (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)):
        targets = _targets(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile)

    try:
        values = [float(x) for x in rates.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--rates {rates!r}: expected comma-separated numbers, e.g. 1,2,4") from None
    if not values:
        raise ConfigError(f"--rates {rates!r}: give positive request rates")
    for value in values:
        ranges.check("rates", value)
    plan = build_serving_plan(engine=engine, tp=tp, pp=pp, replicas=replicas, weights_dtype=weights_dtype,
                              kv_cache_dtype=kv_cache_dtype, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=max_num_batched_tokens, prefill_gpus=None,
                              decode_gpus=None, prefill_tp=None, decode_tp=None)
    unit, _ = unit_workload(None, None, "stop", seed, 1.0, num_requests=num_requests, dataset=dataset,
                             input_len=input_len, output_len=output_len, burstiness=burstiness)
    load_model(model), Cluster.build(gpu, plan.num_gpus)  # bad names fail here, before any worker
    with progress("sweeping rates", show_progress(quiet)) as update:
        rows = sweep_rates(model, gpu, plan, unit, values, backend=backend, workers=workers,
                           address=address, progress=update)
    _print_sweep(rows)
    if csv_out:
        from meshplan.outfiles import open_atomic

        with open_atomic(csv_out, "--csv", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    def page():
        from meshplan.report.pages_serving import serve_sweep_page

        title = f"{model} on {plan.num_gpus} x {gpu}: latency vs request rate"
        return serve_sweep_page(rows, targets, title, "meshplan serve sweep", given)

    html_option.write(html, page)


def _print_sweep(rows: list[dict]) -> None:
    t = Table(box=box.SIMPLE_HEAD, title="latency vs request rate")
    cols = ("request_rate", "requests_per_s", "steady_requests_per_s", "output_tokens_per_s", "ttft_ms_p50", "ttft_ms_p90",
            "tpot_ms_p50", "tpot_ms_p90", "e2e_ms_p90")
    for c in cols:
        t.add_column(c.replace("_", " "), justify="right")
    for r in rows:
        t.add_row(*("-" if r[c] is None else f"{r[c]:,.1f}" for c in cols))
    console.print(t)


@serve_app.command("export")
@user_errors
def export_cmd(
    target: str = typer.Option(..., "--target", help="vllm or sglang."),
    plan_file: Path = typer.Option(..., "--plan", help="`serve plan --json` output (its first plan) or a plan "
                                   "file (YAML/JSON with `model` and ServingPlan fields)."),
    model: str = typer.Option(None, help="Checkpoint to load (default: the plan's model, as its Hub repo)."),
    plan_index: int = typer.Option(1, "--plan-index", help="Which plan of a `serve plan --json` file (1: the best)."),
    gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="GPUs per host (default: the plan's GPU's "
                                      "usual server, else 8); commands are grouped per host."),
    port: int = typer.Option(8000), host: str = typer.Option("0.0.0.0"),
) -> None:
    """Print the launch commands of a plan for vLLM or SGLang, one block per host."""
    from meshplan.cli.commands.serve_files import gpus_per_node as node_size
    from meshplan.export.serving import export_serving

    entry = read_plan_entry(plan_file, plan_index)
    sys.stdout.write(export_serving(target, model or hub_repo(entry.model), entry.plan, port=port, host=host,
                                    gpus_per_node=node_size(entry.gpu, gpus_per_node)))


def read_plan_file(path: Path) -> tuple[str, ServingPlan]:
    """(model name, plan) from `serve plan --json` output (its best plan) or a plan file."""
    entry = read_plan_entry(path)
    return entry.model, entry.plan


def hub_repo(name: str) -> str:
    """What the engine loads: a catalog model's Hugging Face repository, the repository of an
    `hf:ORG/NAME`, or the checkpoint directory of a local config.json (vLLM and SGLang take the
    directory, never the config file); else the name as given."""
    from meshplan.model.catalog_index import get_entry, is_catalog_name

    if is_catalog_name(name):
        repo = get_entry(name).hf_repo
        if repo:
            return repo
    if name.startswith("hf:"):
        return name[3:]
    path = Path(name)
    if path.name == "config.json":
        parent = path.parent
        return str(parent) if parent.is_absolute() else f"./{parent}".rstrip("/.") or "."
    return name


def register(app: typer.Typer) -> None:
    """`serve` is registered by meshplan.cli.commands.serve; importing this module adds its commands."""
    del app

