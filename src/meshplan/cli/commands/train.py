"""`meshplan train memory`: per-GPU memory of a training plan, per pipeline stage."""

from __future__ import annotations

import inspect
import typing
from dataclasses import replace
from pathlib import Path

import typer
from pydantic import ValidationError

from meshplan.bands.training import estimate_bands, memory_bands
from meshplan.cli import html_option, memory_table
from meshplan.cli import goodput_options
from meshplan.cli import options as opt
from meshplan.cli.conflicts import check_training_flags
from meshplan.cli.common import console, err_console, finish, print_json, user_errors, with_site
from meshplan.cli.lazy import new_app
from meshplan.errors import ConfigError
from meshplan.goodput import Resilience, goodput
from meshplan.goodput.render import goodput_json, goodput_lines
from meshplan.model import load_model
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan
from meshplan.training.layout.capabilities import default_framework
from meshplan.training.memory.total import MemoryEstimate
from meshplan.training.choose import best_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.estimate_report import estimate_dict, trace_extras
from meshplan.training.memory.report import memory_dict

train_app = new_app(help="Training runs: memory, step time, plan search, sweeps and launch configs.",
                        no_args_is_help=True)
GIB = 2**30


def _help(field: str) -> str:
    return TrainingPlan.model_fields[field].description or ""


def build_plan(**fields) -> TrainingPlan:
    """A TrainingPlan from CLI values; a bad value becomes one message naming the flag."""
    if isinstance(fields.get("pipeline_split"), str):
        try:
            fields["pipeline_split"] = tuple(int(x) for x in fields["pipeline_split"].split(","))
        except ValueError:
            raise ConfigError(f"--pipeline-split {fields['pipeline_split']!r}: expected "
                              f"comma-separated layer counts, e.g. 15,16,16,15") from None
    if isinstance(fields.get("lora_targets"), str):
        fields["lora_targets"] = tuple(t.strip() for t in fields["lora_targets"].split(",") if t.strip())
    try:
        return TrainingPlan(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:
            raise ConfigError(f"plan: {err['msg']}") from None
        flag = "--" + str(err["loc"][0]).replace("_", "-")
        raise ConfigError(f"{flag} {err.get('input')!r}: {err['msg']}") from None


def _plan_flags(
    model: str = typer.Option(..., "--model", help="Catalog name, config.json path or hf:ORG/NAME."),
    gpu: str = opt.GPU, num_gpus: int = opt.NUM_GPUS, gpus_per_node: int = opt.GPUS_PER_NODE,
    scale_up_domain: int = opt.SCALE_UP_DOMAIN, inter_node_gbps_per_gpu: float = opt.INTER_NODE_GBPS,
    gpu_power_limit_w: float = opt.POWER_LIMIT, host_memory_gb: float = opt.HOST_MEMORY,
    host_link_gb_per_s: float = opt.HOST_LINK, nvme_read_gb_per_s: float = opt.NVME_READ,
    nvme_write_gb_per_s: float = opt.NVME_WRITE, nvme_tb: float = opt.NVME_TB,
    memory_headroom: float = opt.MEMORY_HEADROOM,
    tp: int = typer.Option(1, help=_help("tp")), pp: int = typer.Option(1, help=_help("pp")),
    vpp: int = typer.Option(None, help=_help("vpp")), dp: int = typer.Option(None, help=_help("dp")),
    cp: int = typer.Option(1, help=_help("cp")), ep: int = typer.Option(1, help=_help("ep")),
    etp: int = typer.Option(None, help=_help("etp")),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help=_help("sequence_parallel")),
    dp_sharding: str = typer.Option(None, help=_help("dp_sharding")),
    dp_shard_size: int = typer.Option(None, help=_help("dp_shard_size")),
    micro_batch_size: int = typer.Option(None, help=_help("micro_batch_size")),
    global_batch_size: int = typer.Option(None, help=_help("global_batch_size")),
    seq_len: int = typer.Option(4096, help=_help("seq_len")),
    recompute: str = typer.Option("none", help=_help("recompute")),
    recompute_num_layers: int = typer.Option(None, help=_help("recompute_num_layers")),
    offload_activations: bool = typer.Option(False, help=_help("offload_activations")),
    offload_optimizer: bool = typer.Option(False, help=_help("offload_optimizer")),
    offload_params: bool = typer.Option(False, help=_help("offload_params")),
    offload_target: str = typer.Option("cpu", help=_help("offload_target")),
    precision: str = typer.Option("bf16", help=_help("precision")),
    optimizer: str = typer.Option("adamw", help=_help("optimizer")),
    schedule: str = typer.Option(None, help=_help("schedule")),
    pipeline_split: str = typer.Option(None, help=_help("pipeline_split") + " Comma-separated."),
    tp_comm_overlap: bool = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap",
                                         help=_help("tp_comm_overlap")),
    framework: str = typer.Option(None, help=_help("framework") + " Default: megatron, or the first "
                                  "framework that runs --method (hf for qlora)."),
    attention: str = typer.Option(None, help=_help("attention")),
    implementation: str = typer.Option(None, help=_help("implementation")),
    method: str = typer.Option("full", help=_help("method")),
    lora_rank: int = typer.Option(None, help=_help("lora_rank")),
    lora_targets: str = typer.Option(None, help=_help("lora_targets") + " Comma-separated."),
    doc_lengths: str = typer.Option(None, help=_help("doc_lengths")),
    balance: str = typer.Option(None, help=_help("balance")),
    expert_skew: str = typer.Option(None, help=_help("expert_skew")),
    moe_balance: str = typer.Option(None, help=_help("moe_balance")),
    moe_dispatcher: str = typer.Option(None, help=_help("moe_dispatcher")),
    moe_a2a_overlap: bool = typer.Option(None, "--moe-a2a-overlap/--no-moe-a2a-overlap",
                                         help=_help("moe_a2a_overlap")),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (SI units: bytes, seconds)."),
    html: Path = html_option.HTML,
) -> None:
    """The flags every `train` command takes (a signature template, never called)."""


HARDWARE = ("gpu", "num_gpus", "gpus_per_node", "scale_up_domain", "inter_node_gbps_per_gpu",
            "gpu_power_limit_w")


def choose_framework(flags: dict) -> None:
    """Fill `framework` when the user gave none (see default_framework), saying so on stderr
    when the method rules Megatron-LM out."""
    if flags.get("framework") is None:
        flags["framework"], note = default_framework(flags.get("method") or "full")
        if note:
            err_console.print(f"note: {note}", highlight=False)


def parse_inputs(flags: dict):
    """(model spec, cluster, TrainingPlan) from the shared flags."""
    spec = load_model(flags.pop("model"))
    choose_framework(flags)
    check_training_flags(flags, spec)
    cluster = opt.build_cluster(*(flags.pop(name) for name in HARDWARE),
                                memory_headroom=flags.pop("memory_headroom"),
                                **{name: flags.pop(name) for name in opt.HOST_OPTIONS})
    for name in ("json_out", "trace", "html"):
        flags.pop(name, None)
    return spec, cluster, build_plan(**flags)


def with_plan_flags(extra: dict | None = None):
    """Give a command `_plan_flags`' signature (plus `extra` parameters)."""

    def decorate(func):
        hints = typing.get_type_hints(_plan_flags)
        params = [p.replace(annotation=hints[p.name])
                  for p in inspect.signature(_plan_flags).parameters.values()]
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=annotation)
                   for name, (annotation, default) in (extra or {}).items()]
        func.__signature__ = inspect.Signature(params)
        return func

    return decorate


@train_app.command("memory")
@user_errors
@with_site
@with_plan_flags()
def memory(**flags) -> None:
    """Peak memory per GPU of a training plan, per pipeline stage, and whether it fits."""
    json_out, html, given = flags["json_out"], flags["html"], html_option.inputs(flags)
    html_option.check(html)
    spec, cluster, plan = parse_inputs(flags)
    estimate = estimate_memory(spec, cluster, resolve_plan(plan, spec, cluster))
    title = f"{spec.name} on {cluster.num_gpus} x {cluster.gpu.name}"
    bands = memory_bands(spec, cluster, estimate)
    hints = fit_hints(spec, cluster, plan, estimate)
    if json_out:
        print_json({**memory_dict(estimate), "would_fit_with": [h.to_dict() for h in hints], **bands})
    else:
        render_memory(estimate, title, bands, hints)

    def page():
        from meshplan.report.pages_training import memory_page

        return memory_page(estimate, f"{title}: memory per GPU", "meshplan train memory", given, bands)

    html_option.write(html, page)
    finish(estimate.fits)


def _shown_stages(estimate: MemoryEstimate) -> list[int]:
    n, peak = len(estimate.stages), estimate.peak_stage.stage
    if n <= 12:
        return list(range(n))
    return sorted({0, 1, 2, peak, n - 3, n - 2, n - 1})


def fit_hints(spec, cluster, plan: TrainingPlan, memory: MemoryEstimate) -> list:
    """Flags that would make a plan fit in GPU memory (training.would_fit); [] when it fits or
    overflows only the host or NVMe."""
    if memory.short_of != "GPU memory":
        return []
    from meshplan.training.would_fit import would_fit_with

    return would_fit_with(spec, cluster, plan, memory.plan, memory.peak_bytes)


def hint_lines(hints: list, memory: MemoryEstimate) -> list[str]:
    """`  would fit with --recompute full --tp 8 (71.2 of 79.6 GiB, 1.23 s/step on 8 GPUs)`."""
    if memory.short_of != "GPU memory":
        return []
    if not hints:
        return ["  no change of recompute, sharding, micro-batch, tp, pp, offload or GPU count "
                "(up to 4 of them) makes it fit: see `meshplan train plan`"]
    return [f"  would fit with {h.text} ({h.peak_bytes / GIB:.1f} of {h.gpu_memory_bytes / GIB:.1f} GiB, "
            f"{h.step_time_s:.2f} s/step on {h.num_gpus} GPUs)" for h in hints]


def render_memory(estimate: MemoryEstimate, title: str, bands: dict | None = None,
                  hints: list | None = None) -> None:
    """Print the per-stage table (GiB), the verdict with the peak's p10-p90 band, and what
    meshplan chose."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"{title}: memory per GPU (GiB)", box=box.SIMPLE_HEAD,
                  padding=(0, 1, 0, 0), pad_edge=False)
    for name in ("stage", "layers", "mb alive", *(c for c, _ in memory_table.PARTS), "total"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    peak = estimate.peak_stage
    for index in _shown_stages(estimate):
        s = estimate.stages[index]
        cells = [str(s.stage), str(s.num_layers), f"{s.in_flight_microbatches:g}"]
        cells += memory_table.rounded_cells(memory_table.stage_parts(s), s.total_bytes)
        table.add_row(*cells, style="bold yellow" if s is peak else None)
    console.print(table)
    note = memory_table.maxima_note(estimate.stages)
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(verdict(estimate))
    for line in hint_lines(hints or [], estimate):
        console.print(line, highlight=False, soft_wrap=True)
    if bands is not None:
        console.print(memory_band_line(estimate, bands["intervals"]["peak_bytes"]), highlight=False)
        extrapolation_lines(bands["extrapolating"])
    for field, why in estimate.plan.chosen.items():
        console.print(f"  chose {field} = {why}", highlight=False, soft_wrap=True)
    for warning in estimate.plan.warnings:
        console.print(f"  [yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


def memory_band_line(estimate: MemoryEstimate, band: dict) -> str:
    """The peak's p10-p90 band, and what it means for the verdict."""
    cap = estimate.usable_gpu_memory_bytes
    line = f"  peak p10-p90: {band['low'] / GIB:.1f} - {band['high'] / GIB:.1f} GiB"
    if estimate.fits and band["high"] > cap:
        line += " (the upper end does not fit: keep a margin, e.g. --memory-headroom)"
    elif not estimate.fits and band["low"] <= cap:
        line += " (the lower end fits: a measurement would tell)"
    return line


def verdict(estimate: MemoryEstimate) -> str:
    """FITS / DOES NOT FIT with the margin, for the peak stage (and the headroom asked for)."""
    peak, cap = estimate.peak_stage, estimate.gpu_memory_bytes
    margin, kept = (cap - peak.total_bytes) / GIB, estimate.memory_headroom_bytes / GIB
    where = f"stage {peak.stage}: {peak.total_bytes / GIB:.1f} of {cap / GIB:.1f} GiB"
    tiers = _offload_tiers(estimate)
    asked = f"; --memory-headroom {kept:g} GiB" if kept else ""
    if estimate.fits:
        return f"[bold green]FITS[/] ({where}, {margin:.1f} GiB free{asked}){tiers}"
    if estimate.short_of != "GPU memory":
        return f"[bold red]DOES NOT FIT[/] in {estimate.short_of} (GPU {where}: fits){tiers}"
    if margin >= 0:
        return (f"[bold red]DOES NOT FIT[/] ({where}, {margin:.1f} GiB free, less than the "
                f"--memory-headroom {kept:g} GiB){tiers}")
    return f"[bold red]DOES NOT FIT[/] ({where}, {-margin:.1f} GiB over{asked}){tiers}"


def _offload_tiers(estimate: MemoryEstimate) -> str:
    """Offloaded bytes per GPU against each tier's per-GPU share, one line per tier used."""
    lines = ""
    for name, used, cap in (("host memory", estimate.host_peak_bytes, estimate.host_memory_bytes),
                            ("NVMe", estimate.nvme_peak_bytes, estimate.nvme_capacity_bytes)):
        if used > 0:
            over = " [bold red]over[/]" if used > cap else ""
            lines += (f"\n  offloaded to {name}: {used / GIB:.1f} of {cap / GIB:.1f} GiB "
                      f"per GPU{over}")
    return lines


def register(app: typer.Typer) -> None:
    """Add the `train` command group."""
    app.add_typer(train_app, name="train")


@train_app.command("estimate")
@user_errors
@with_site
@with_plan_flags({
    "trace": (Path, typer.Option(None, "--trace", help="Write a Chrome/Perfetto trace of the step.")),
    "timeline": (bool, typer.Option(False, "--timeline", help="Print the pipeline as text.")),
    "train_tokens": (float, typer.Option(None, help="Tokens in the run: adds days, GPU-hours (and "
                                         "cost with a price) to train, with and without failures.")),
    "price_per_gpu_hour": (float, typer.Option(None, help="USD per GPU-hour: adds the run's cost "
                                               "(with --train-tokens).")),
    **goodput_options.FLAGS,
})
def estimate(**flags) -> None:
    """Step time, tokens/s per GPU, MFU and where the time goes, for one training plan.

    With --train-tokens (or a goodput flag), also its goodput at scale: interruptions,
    checkpoints, restarts and stragglers (--json always carries it)."""
    json_out, trace, timeline = flags["json_out"], flags["trace"], flags.pop("timeline")
    html, given = flags["html"], html_option.inputs({**flags, "timeline": timeline})
    html_option.check(html)
    tokens, price = flags.pop("train_tokens"), flags.pop("price_per_gpu_hour")
    resilience = goodput_options.pop_resilience(flags)
    spec, cluster, plan = parse_inputs(flags)
    title = f"{spec.name} on {cluster.num_gpus} x {cluster.gpu.name}"
    est = best_plan(plan, spec, cluster)
    if trace is not None or timeline or html is not None:
        est = replace(estimate_step(spec, cluster, est.plan, with_events=True), plan=est.plan)
    good = goodput(spec, cluster, est.plan, est.step_time_s, tokens, resilience)

    def page():
        from meshplan.report.pages_training import estimate_page

        return estimate_page(est, f"{title}: one training step", "meshplan train estimate", given,
                             estimate_bands(spec, cluster, est), good)

    if trace is not None:
        from meshplan.report import chrome_trace, write_trace

        write_trace(trace, chrome_trace(est.pipeline.events, extra=trace_extras(est),
                                        metadata={"model": spec.name, "gpu": cluster.gpu.name}))
    bands = estimate_bands(spec, cluster, est)
    hints = fit_hints(spec, cluster, plan, est.memory)
    if json_out:
        print_json({**estimate_dict(est), "would_fit_with": [h.to_dict() for h in hints], **bands.to_dict(),
                    **goodput_json(good, cluster.num_gpus, price)})
        html_option.write(html, page)
        finish(est.memory.fits)
        return
    render_estimate(est, title, bands, hints)
    if tokens is not None or resilience != Resilience():  # asked about a run, not only a step
        for line in goodput_lines(good, cluster.num_gpus, resilience.checkpoint_mode, price):
            console.print(line, highlight=False, soft_wrap=True)
    if timeline:
        from meshplan.report import text_timeline

        console.print(text_timeline(est.pipeline.events), highlight=False, soft_wrap=True)
    if trace is not None:
        console.print(f"trace written to {trace} (open in ui.perfetto.dev or chrome://tracing)")
    html_option.write(html, page)
    finish(est.memory.fits)


def render_estimate(est, title: str, bands=None, hints: list | None = None) -> None:
    """Headline numbers with their p10-p90 bands, the time breakdown and the memory verdict."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"{title}: one training step", show_header=False, box=box.SIMPLE_HEAD)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(justify="right", style="dim")
    step, tokens, mfu = ((bands.step_time_s, bands.tokens_per_s_per_gpu, bands.mfu) if bands
                         else (None, None, None))
    table.add_row("step time", f"{est.step_time_s:.3f} s", _band(step, "{:.3f} s"))
    table.add_row("tokens / s / GPU", f"{est.tokens_per_s_per_gpu:,.0f}", _band(tokens, "{:,.0f}"))
    table.add_row("MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}", _band(mfu, "{:.1%}"))
    for name, seconds in est.breakdown.items():
        if seconds > 0:
            share = seconds / est.step_time_s
            table.add_row(f"  {name.replace('_', ' ')}", f"{seconds:.3f} s  {share:5.1%}", "")
    console.print(table)
    if bands is not None:
        extrapolation_lines(bands.extrapolating)
    for line in imbalance_lines(est.imbalance):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(verdict(est.memory))
    for line in hint_lines(hints or [], est.memory):
        console.print(line, highlight=False, soft_wrap=True)
    for field, why in est.plan.chosen.items():
        console.print(f"  chose {field} = {why}", highlight=False, soft_wrap=True)


def _band(band, fmt: str) -> str:
    """A p10-p90 band as the third column of a headline table."""
    return "" if band is None else f"p10-p90 {fmt.format(band.low)} - {fmt.format(band.high)}"


def extrapolation_lines(reasons) -> None:
    """The out-of-regime warning: the band is wider, and why."""
    if reasons:
        console.print("[yellow]warning:[/] extrapolating beyond the calibration records (the band "
                      f"is twice as wide): {'; '.join(reasons)}", highlight=False, soft_wrap=True)


def imbalance_lines(report: dict) -> list[str]:
    """One line per kind of imbalance the estimate carries (none by default)."""
    out = []
    if "attention" in report:
        a = report["attention"]
        out.append(f"attention imbalance ({a['balance']}): busiest rank {a['imbalance']:.2f} x "
                   f"mean (DP {a['dp_imbalance']:.2f}, CP {a['cp_imbalance']:.2f}); document "
                   f"mask keeps {a['masked_share']:.0%} of causal work; attention time x "
                   f"{a['attention_load']:.2f}")
    if "moe" in report:
        m = report["moe"]
        out.append(f"MoE routing ({m['moe_balance']}): busiest expert {m['busiest_expert_load']:.2f} "
                   f"x mean, busiest EP rank {m['busiest_ep_rank_load']:.2f} x mean "
                   f"({m['unbalanced_busiest_ep_rank_load']:.2f} unbalanced)")
    return out
