"""`meshplan train plan`: search the best training layout for a model on one or more clusters."""

from __future__ import annotations

from pathlib import Path

import typer

from meshplan.bands.training import estimate_bands, plus_minus
from meshplan.cli import html_option
from meshplan.cli import options as opt
from meshplan.cli import ranges
from meshplan.cli.conflicts import check_names, check_training_flags
from meshplan.cli.common import QUIET, console, err_console, finish, print_json, progress, show_progress, user_errors, with_site
from meshplan.errors import ConfigError
from meshplan.hardware import get_gpu
from meshplan.model import load_model
from meshplan.cli.commands.train import build_plan, extrapolation_lines
from meshplan.training.layout.capabilities import (
    default_framework,
    feature_problems,
    frameworks_for,
    schedules_for,
)
from meshplan.training.estimate import StepEstimate
from meshplan.training.search.economics import economics
from meshplan.cli import goodput_options
from meshplan.goodput import Resilience, goodput
from meshplan.goodput.render import goodput_json
from meshplan.training.plan import TrainingPlan
from meshplan.training.search.plans import OBJECTIVE_UNITS, SearchResult, search, why_winner
from meshplan.training.search.sweep import PARALLEL_FROM, default_workers
from meshplan.training.search.ties import ties

GIB = 2**30
ZERO = {"none": "0", "optimizer": "1", "gradients": "2", "full": "3"}
"""dp_sharding as the ZeRO stage it corresponds to (the table's `zero` column)."""
PINNABLE = ("tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "recompute", "dp_sharding", "schedule",
            "balance", "moe_balance")


def _field_help(field: str) -> str:
    return TrainingPlan.model_fields[field].description or ""


def parse_counts(text: str, flag: str = "--num-gpus") -> list[int]:
    """`64`, `64,128,256` or `64-512` (powers of two in the range); every count positive."""
    try:
        if "-" in text.strip("-"):
            low, high = (int(x) for x in text.split("-"))
            counts = [n for n in (2**k for k in range(20)) if low <= n <= high]
        else:
            counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected N, N,M,... or LOW-HIGH") from None
    if not counts or min(counts) < 1:
        raise ConfigError(f"{flag} {text!r}: give positive whole numbers (N, N,M,... or LOW-HIGH)")
    for count in counts:
        ranges.check(flag.lstrip("-").replace("-", "_"), count)
    return counts


def plan_entry(est: StepEstimate, model: str, cluster, score: float, money: dict | None = None) -> dict:
    """One ranked plan: launchable fields (model, hardware, plan) and its predicted behaviour."""
    p = est.plan
    fields = {k: getattr(p, k) for k in ("tp", "pp", "vpp", "dp", "cp", "ep", "etp",
                                          "sequence_parallel", "dp_sharding", "micro_batch_size",
                                          "global_batch_size", "seq_len", "recompute", "recompute_num_layers",
                                          "offload_optimizer", "precision",
                                          "schedule", "framework", "tp_comm_overlap",
                                          "doc_lengths", "balance", "expert_skew", "moe_balance",
                                          "method")}
    if p.method != "full":
        fields.update(lora_rank=p.lora_rank, lora_targets=list(p.lora_targets))
    sizes = [len(c) for c in p.chunk_layers]
    fields["pipeline_split"] = sizes if len(set(sizes)) > 1 else None
    return {"model": model, "hardware": {"gpu": cluster.gpu.name, "num_gpus": cluster.num_gpus,
                                         "gpus_per_node": cluster.gpus_per_node},
            "plan": fields, **fields, "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
            "step_time_s": est.step_time_s, "mfu": est.mfu, "peak_bytes": est.memory.peak_bytes,
            "gpu_memory_bytes": est.memory.gpu_memory_bytes, "imbalance": est.imbalance,
            **(money or {}), "score": score}


def plan_command(
    model: str = typer.Option(..., "--model", help="Catalog name, config.json path or hf:ORG/NAME."),
    gpu: str = opt.GPU,
    num_gpus: str = typer.Option(..., "--num-gpus", help="GPU count, a list (64,128) or a range (64-512)."),
    gpus_per_node: int = opt.GPUS_PER_NODE,
    host_memory_gb: float = opt.HOST_MEMORY, host_link_gb_per_s: float = opt.HOST_LINK,
    nvme_read_gb_per_s: float = opt.NVME_READ, nvme_write_gb_per_s: float = opt.NVME_WRITE,
    nvme_tb: float = opt.NVME_TB, memory_headroom: float = opt.MEMORY_HEADROOM,
    seq_len: int = typer.Option(4096, help="Tokens per sequence."),
    global_batch_size: int = typer.Option(None, help="Sequences per step."),
    global_batch_tokens: int = typer.Option(None, help="Tokens per step (alternative to the above)."),
    framework: str = typer.Option(None, help="megatron, nemo, torchtitan, deepspeed, hf, fsdp, ... "
                                  "Default: megatron, or the first framework that runs --method "
                                  "(hf for qlora)."),
    precision: str = typer.Option("bf16", help="bf16, fp16, fp8, fp4 (NVFP4, Blackwell) or fp32."),
    tp: int = typer.Option(None, help="Pin tensor parallelism."),
    pp: int = typer.Option(None, help="Pin pipeline parallelism."),
    vpp: int = typer.Option(None, help="Pin virtual pipeline stages."),
    cp: int = typer.Option(None, help="Pin context parallelism."),
    ep: int = typer.Option(None, help="Pin expert parallelism."),
    micro_batch_size: int = typer.Option(None, help="Pin the micro-batch size."),
    recompute: str = typer.Option(None, help="Pin recompute (none, selective, full)."),
    dp_sharding: str = typer.Option(None, help="Pin data-parallel sharding."),
    schedule: str = typer.Option(None, help="Pin the pipeline schedule (megatron: 1f1b, interleaved; "
                                 "torchtitan: gpipe, 1f1b, interleaved)."),
    method: str = typer.Option("full", help="full, lora or qlora (fixed; the layout is searched)."),
    lora_rank: int = typer.Option(None, help="LoRA rank r (PEFT's default 8)."),
    lora_targets: str = typer.Option(None, help="Adapted linear layers, comma-separated (q,k,v,o,"
                                     "gate,up,down); default q,v."),
    doc_lengths: str = typer.Option(None, help=_field_help("doc_lengths") + " Adds the balance axis."),
    balance: str = typer.Option(None, help="Pin document balancing (none, sort, per-doc-cp, reassign)."),
    expert_skew: str = typer.Option(None, help=_field_help("expert_skew") + " Adds the moe_balance axis."),
    moe_balance: str = typer.Option(None, help="Pin MoE balancing (none, aux-free, eplb)."),
    objective: str = typer.Option("throughput", help="throughput, cost or time-to-train."),
    price_per_gpu_hour: float = typer.Option(None, help="USD per GPU-hour: adds $/step, $/Mtok (and "
                                             "the run's cost with --train-tokens); needed by --objective cost."),
    train_tokens: float = typer.Option(None, help="Tokens in the run: adds days and GPU-hours to "
                                       "train; needed by --objective time-to-train."),
    top: int = typer.Option(5, help="Plans to show per cluster size."),
    restart_minutes: float = goodput_options.RESTART,
    reschedule_minutes: float = goodput_options.RESCHEDULE,
    hot_spare_nodes: int = goodput_options.HOT_SPARES,
    checkpoint_write_gb_per_s: float = goodput_options.CKPT_WRITE,
    checkpoint_read_gb_per_s: float = goodput_options.CKPT_READ,
    checkpoint_mode: str = goodput_options.CKPT_MODE,
    checkpoint_interval_minutes: float = goodput_options.CKPT_INTERVAL,
    straggler_cv: float = goodput_options.STRAGGLER_CV,
    workers: int = typer.Option(None, "--workers", help="Processes sharing a large search (from "
                                f"{PARALLEL_FROM:,} candidates; default: on Linux the CPUs this "
                                "process may use, elsewhere 1). The ranking is the same."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    html: Path = html_option.HTML,
    quiet: bool = QUIET,
) -> None:
    """Search tp, pp, vpp, cp, ep, micro-batch, recompute and sharding; rank the plans that fit."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    pinned = {k: v for k, v in locals().items() if k in PINNABLE and v is not None}
    if framework is None:
        framework, note = default_framework(method or "full")
        if note:
            err_console.print(f"note: {note}", highlight=False)
    check_training_flags(dict(locals()))
    base = search_inputs(objective, price_per_gpu_hour, train_tokens, seq_len, global_batch_size,
                         global_batch_tokens, framework, precision, pinned, doc_lengths=doc_lengths,
                         expert_skew=expert_skew, balance=balance, moe_balance=moe_balance,
                         method=method, lora_rank=lora_rank, lora_targets=lora_targets)
    resilience = goodput_options.pop_resilience(dict(locals()))
    spec = load_model(model)
    check_training_flags({"expert_skew": expert_skew, "moe_balance": moe_balance}, spec)
    entries, searches, results, clusters = [], [], {}, {}
    host = {k: v for k, v in locals().items() if k in opt.HOST_OPTIONS}
    for n in parse_counts(num_gpus):
        cluster = clusters[n] = opt.build_cluster(gpu, n, gpus_per_node, None, None, None,
                                                  memory_headroom, **host)
        with progress(f"searching {n} GPUs", show_progress(quiet, json_out), thread=False) as update:
            result, ranked, money = search_size(spec, model, cluster, base, pinned, objective, top,
                                                price_per_gpu_hour, train_tokens, update,
                                                workers or default_workers(), resilience)
        entries += ranked
        searches.append(search_dict(result, n))
        results[n] = result
        if not json_out:
            render(result, f"{spec.name} on {n} x {cluster.gpu.name}", cluster, money, spec)
    if json_out:
        entries.sort(key=lambda e: e["score"])
        print_json({"plans": entries, "score_unit": OBJECTIVE_UNITS[objective],
                    "search": searches[0] if len(searches) == 1 else searches})

    def page():
        from meshplan.report.figures_plan import plan_bands
        from meshplan.report.pages_training import plan_page

        return plan_page(results, f"{spec.name} on {num_gpus} x {gpu}: plan search", "meshplan train plan", given,
                         price_per_gpu_hour, winner_goodput(spec, results, clusters, train_tokens, resilience),
                         plan_bands(spec, clusters, results))

    html_option.write(html, page)
    finish(bool(entries))  # exit 1 when no requested cluster size has a plan that fits


def winner_goodput(spec, results: dict, clusters: dict, tokens: float | None,
                   resilience: Resilience):
    """The Goodput of the best plan over the searched sizes (None when nothing fits)."""
    best = min(((r.scores[0], n) for n, r in results.items() if r.ranked), default=None)
    if best is None:
        return None
    n = best[1]
    est = results[n].ranked[0]
    return goodput(spec, clusters[n], est.plan, est.step_time_s, tokens, resilience)


def search_inputs(objective: str, price: float | None, tokens: float | None, seq_len: int,
                  global_batch_size: int | None, global_batch_tokens: int | None, framework: str,
                  precision: str, pinned: dict, **plan_fields) -> TrainingPlan:
    """Check a search's inputs (objective and what it needs, batch, pinned schedule) and return
    the base plan it searches from, with `plan_fields` (the workload's document lengths, expert
    skew and balancing) set (`train plan` and the web app's plan page)."""
    if objective not in OBJECTIVE_UNITS:
        raise ConfigError(f"--objective {objective!r}: use throughput, cost or time-to-train")
    _check_money(objective, price, tokens)
    if global_batch_size is None:
        if global_batch_tokens is None:
            raise ConfigError("give --global-batch-size (sequences) or --global-batch-tokens")
        global_batch_size = max(1, global_batch_tokens // seq_len)
    method = plan_fields.get("method") or "full"
    if method != "full" and framework not in frameworks_for(method):
        raise ConfigError(f"--method {method} with --framework {framework}: {method} fine-tuning "
                          f"runs on {', '.join(frameworks_for(method))}")
    schedule = pinned.get("schedule")
    if schedule is not None and schedule not in schedules_for(framework):
        raise ConfigError(f"--schedule {schedule!r}: {framework} runs "
                          f"{', '.join(schedules_for(framework)) or 'no pipeline schedule'}")
    base = build_plan(seq_len=seq_len, global_batch_size=global_batch_size,
                      framework=framework, precision=precision, **plan_fields)
    _check_features(base, pinned)
    return base


def _check_features(base: TrainingPlan, pinned: dict) -> None:
    """A pinned recompute, offload or schedule the framework lacks is a usage error (exit 2)."""
    fields = ("recompute", "recompute_num_layers", "offload_optimizer", "offload_activations",
              "offload_params", "schedule")
    found = feature_problems(base.framework, base.model_copy(
        update={k: pinned[k] for k in fields if k in pinned}))
    if found:
        raise ConfigError(f"--framework {base.framework}: " + "; ".join(found))


def search_size(spec, model: str, cluster, base: TrainingPlan, pinned: dict, objective: str, top: int,
                price: float | None, tokens: float | None, update=None,
                workers: int = 1, resilience: Resilience | None = None) -> tuple[SearchResult, list, list]:
    """Search one cluster size: (the result, its ranked `plan_entry` dicts, their economics and
    goodput)."""
    check_pins(pinned, cluster.num_gpus)
    result = search(spec, cluster, base, pinned, objective=objective, top=top,
                    price_per_gpu_hour=price, train_tokens=tokens, progress=update, workers=workers,
                    resilience=resilience)
    money = [{**economics(e.tokens_per_s_per_gpu, e.step_time_s, cluster.num_gpus, price, tokens),
              **goodput_json(goodput(spec, cluster, e.plan, e.step_time_s, tokens, resilience),
                             cluster.num_gpus, price)}
             for e in result.ranked]
    tied = set(ties(result.ranked, result.scores).ranks)
    run = {"run": {"train_tokens": tokens}} if tokens is not None else {}
    entries = [{**plan_entry(e, model, cluster, s, m), **run,
                **estimate_bands(spec, cluster, e).to_dict(), "tied_with_winner": i in tied}
               for i, (e, s, m) in enumerate(zip(result.ranked, result.scores, money), 1)]
    return result, entries, money


def _check_money(objective: str, price: float | None, tokens: float | None) -> None:
    """The inputs an objective needs, positive and finite."""
    for flag, value in (("--price-per-gpu-hour", price), ("--train-tokens", tokens)):
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"{flag} {value!r}: give a positive, finite number")
    if objective == "cost" and price is None:
        raise ConfigError("--objective cost needs --price-per-gpu-hour (USD per GPU-hour)")
    if objective == "time-to-train" and tokens is None:
        raise ConfigError("--objective time-to-train needs --train-tokens (tokens in the run)")


def check_pins(pinned: dict, gpus: int) -> None:
    """Pinned sizes must leave a whole data-parallel degree on `gpus` GPUs."""
    fixed = {k: pinned[k] for k in ("tp", "pp", "cp") if k in pinned}
    product = 1
    for v in fixed.values():
        product *= v
    if gpus % product:
        factors = " x ".join(f"{k}={v}" for k, v in fixed.items())
        raise ConfigError(f"pinned {factors} = {product} does not divide --num-gpus {gpus}; "
                          f"unpin one or use a GPU count that is a multiple of {product}")


def search_dict(result: SearchResult, gpus: int) -> dict:
    return {"num_gpus": gpus, "evaluated": result.evaluated,
            "ties": ties(result.ranked, result.scores).to_dict(),
            "feasible": result.evaluated - result.rejected_memory,
            "rejected_memory": result.rejected_memory, "rejected_invalid": result.rejected_invalid,
            "seconds": result.seconds, "objective": result.objective,
            "closest": [blocked(m) for m in result.closest],
            "invalid_reasons": list(result.invalid_reasons)}


def blocked(memory) -> str:
    """What kept one too-big plan out: its layout and by how much it misses the tier it
    overflows (GPU memory, or the host's share of DRAM or NVMe for offloaded bytes)."""
    p = memory.plan
    used, cap, where = memory.peak_bytes, memory.usable_gpu_memory_bytes, f"stage {memory.peak_stage.stage}"
    if memory.memory_headroom_bytes and memory.short_of == "GPU memory":
        where += f", keeping the {memory.memory_headroom_bytes / GIB:g} GiB --memory-headroom free"
    if memory.short_of == "host memory":
        used, cap, where = memory.host_peak_bytes, memory.host_memory_bytes, "host memory per GPU"
    elif memory.short_of == "NVMe":
        used, cap, where = memory.nvme_peak_bytes, memory.nvme_capacity_bytes, "NVMe per GPU"
    return (f"tp{p.tp} pp{p.pp} vpp{p.vpp} cp{p.cp} ep{p.ep} mbs{p.micro_batch_size} "
            f"recompute {p.recompute} zero {_zero(p)}: needs "
            f"{used / GIB:.1f} of {cap / GIB:.1f} GiB ({(used - cap) / GIB:.1f} GiB over, {where})")


def _zero(plan) -> str:
    """The ZeRO stage, `+off` when optimizer states live off the GPU (ZeRO-Offload), `+par` when
    parameters do (ZeRO-Infinity), `+act` for offloaded activations, `/nvme` for the NVMe tier."""
    tiers = [tag for tag, on in (("+off", plan.offload_optimizer), ("+par", plan.offload_params),
                                 ("+act", plan.offload_activations)) if on]
    nvme = "/nvme" if plan.offload_target == "nvme" else ""
    return ZERO[plan.dp_sharding] + "".join(tiers) + nvme


def _recompute(plan) -> str:
    """`full`, or `full/k` when only k layers per chunk are recomputed."""
    if plan.recompute == "full" and plan.recompute_num_layers is not None:
        return f"full/{plan.recompute_num_layers}"
    return plan.recompute


BALANCE_COLUMNS = (("balance", "attention", "balance", "{}"),
                   ("attn busiest/mean", "attention", "imbalance", "{:.2f}"),
                   ("attn time x", "attention", "attention_load", "{:.2f}"),
                   ("moe balance", "moe", "moe_balance", "{}"),
                   ("EP busiest/mean", "moe", "busiest_ep_rank_load", "{:.2f}"))
"""Imbalance columns, shown for the kinds (document attention, MoE routing) the search priced."""


def _render_balance(ranked) -> None:
    """Each ranked plan's balancing strategies and the busiest rank's load over the mean."""
    shown = [c for c in BALANCE_COLUMNS if c[1] in ranked[0].imbalance]
    _numbered_table([c[0] for c in shown],
                    [[fmt.format(e.imbalance[kind][key]) for _, kind, key, fmt in shown] for e in ranked])


def _numbered_table(headers: list[str], rows: list[list[str]]) -> None:
    """A side table under the ranking: one numbered row per ranked plan (nothing without columns)."""
    if not headers:
        return
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for col in ("#", *headers):
        table.add_column(col, justify="right", no_wrap=True)
    for i, cells in enumerate(rows, 1):
        table.add_row(str(i), *cells)
    console.print(table)


MONEY_COLUMNS = (("USD/step", "usd_per_step", "{:,.2f}"), ("USD/Mtok", "usd_per_million_tokens", "{:,.3f}"),
                 ("days to train", "time_to_train_days", "{:,.1f}"),
                 ("GPU-hours", "run_gpu_hours", "{:,.0f}"), ("run USD", "run_usd", "{:,.0f}"),
                 ("interruptions", "expected_interruptions", "{:,.0f}"),
                 ("ETTR", "effective_training_time_ratio", "{:.1%}"),
                 ("days w/ failures", "days_to_train", "{:,.1f}"),
                 ("GPU-hours w/ failures", "gpu_hours", "{:,.0f}"), ("run USD w/ failures", "usd", "{:,.0f}"))
"""Cost and time columns, shown when the inputs that set them were given (a price, a budget);
the goodput ones (failures, checkpoints, restarts, stragglers) with a token budget."""


def render(result: SearchResult, title: str, cluster, money: list[dict] | None = None,
           spec=None) -> None:
    """The ranked table (with each throughput's p10-p90 as a ± column, ties marked `=`), its
    cost/time table, why the winner wins, the ties and the search counts."""
    from rich import box
    from rich.table import Table

    tied = ties(result.ranked, result.scores)
    bands = [estimate_bands(spec, cluster, e) for e in result.ranked] if spec is not None else []
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for col in ("#", "tp", "pp", "vpp", "cp/ep", "zero", "mbs", "recompute", "tok/s/GPU", "±%",
                "MFU", "step s", "GiB used"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for i, e in enumerate(result.ranked, 1):
        p = e.plan
        spread = plus_minus(e.tokens_per_s_per_gpu, bands[i - 1].tokens_per_s_per_gpu) if bands else ""
        table.add_row(f"{i}{'=' if i in tied.ranks else ''}", str(p.tp), str(p.pp), str(p.vpp),
                      f"{p.cp}/{p.ep}", _zero(p), str(p.micro_batch_size), _recompute(p),
                      f"{e.tokens_per_s_per_gpu:,.0f}", spread, f"{e.mfu:.1%}", f"{e.step_time_s:.2f}",
                      f"{e.memory.peak_bytes / GIB:.0f}/{e.memory.gpu_memory_bytes / GIB:.0f}",
                      style="bold" if i == 1 else None)
    if result.ranked:
        console.print(table)
        _render_money(money or [])
        _render_balance(result.ranked)
    console.print(why_winner(result), highlight=False, soft_wrap=True)
    if tied.ranks:
        console.print(tied.line(), highlight=False, soft_wrap=True)
    if bands and bands[0].extrapolating:
        extrapolation_lines(bands[0].extrapolating)
    if not result.ranked:
        for memory in result.closest:
            console.print(f"  closest: {blocked(memory)}", highlight=False, soft_wrap=True)
        for reason in result.invalid_reasons:
            console.print(f"  invalid: {reason}", highlight=False, soft_wrap=True)
    console.print(f"evaluated {result.evaluated} plans ({result.rejected_memory} do not fit, "
                  f"{result.rejected_invalid} invalid layouts skipped) in {result.seconds:.2f} s",
                  highlight=False)


def _render_money(money: list[dict]) -> None:
    """Cost and time to train per ranked plan, when a price or a token budget was given."""
    money = [{**m, **m.get("goodput", {}), **m.get("goodput_detail", {})} for m in money]
    if not money or money[0].get("days_to_train") is None:  # without a budget, no goodput column
        money = [{k: v for k, v in m.items() if k != "effective_training_time_ratio"} for m in money]
    shown = [c for c in MONEY_COLUMNS if money and money[0].get(c[1]) is not None]
    _numbered_table([c[0] for c in shown], [[fmt.format(m[key]) for _, key, fmt in shown] for m in money])


def register(app: typer.Typer) -> None:
    """Add `train plan` to the `train` group."""
    from meshplan.cli.commands.train import train_app

    train_app.command("plan")(user_errors(with_site(plan_command)))
    train_app.command("sweep")(user_errors(with_site(sweep_command)))


def sweep_command(
    models: str = typer.Option(..., "--models", help="Comma-separated model names or paths."),
    gpus: str = typer.Option(..., "--gpus", help="Comma-separated GPU catalog names."),
    num_gpus: str = typer.Option(..., "--num-gpus", help="Sizes: N,M,... or LOW-HIGH (powers of 2)."),
    seq_lens: str = typer.Option("4096", "--seq-lens", help="Comma-separated sequence lengths."),
    global_batch_tokens: int = typer.Option(4 * 2**20, help="Tokens per optimizer step."),
    framework: str = typer.Option("megatron", help="megatron, nemo, torchtitan or deepspeed."),
    out: Path = typer.Option(Path("sweep.csv"), "--out", help="CSV file to write."),
    workers: int = typer.Option(2, help="Worker processes (local), or CPUs of a local Ray."),
    backend: str = typer.Option("local", "--backend", help="local (a process pool) or ray (the ray "
                                "extra; --address for a running cluster, else a local Ray)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address, e.g. ray://head:10001 or auto."),
    chunk: int = typer.Option(None, "--chunk", help="Cells per task (default: up to 200, four tasks per worker)."),
    memory_headroom: float = opt.MEMORY_HEADROOM,
    html: Path = html_option.HTML,
    quiet: bool = QUIET,
) -> None:
    """The best plan of every grid cell, searched in parallel, as a CSV table (rows are written
    as tasks finish; the file ends sorted in grid order)."""
    given = html_option.inputs(dict(locals()))
    html_option.check(html)
    from meshplan.training.search.grid import run_sweep


    if backend not in ("local", "ray"):
        raise ConfigError(f"--backend {backend!r}: use local or ray")

    grid = (check_names("--models", models.split(","), load_model),
            check_names("--gpus", gpus.split(","), get_gpu), parse_counts(num_gpus),
            parse_counts(seq_lens, "--seq-lens"))
    total = len(grid[0]) * len(grid[1]) * len(grid[2]) * len(grid[3])
    with progress("searching cells", show_progress(quiet)) as update:
        done = iter(range(1, total + 1))
        rows = run_sweep(*grid, global_batch_tokens=global_batch_tokens, framework=framework,
                         out=out, workers=workers, progress=lambda: update(next(done), total),
                         backend=backend, address=address, chunk=chunk,
                         memory_headroom_gib=memory_headroom or 0.0)
    ok = sum(r["status"] == "ok" for r in rows)
    console.print(f"{len(rows)} cells ({ok} with a fitting plan) written to {out}", highlight=False)

    def page():
        from meshplan.report.pages_training import sweep_page

        return sweep_page(rows, "Training sweep: best plan per cell", "meshplan train sweep", given)

    html_option.write(html, page)
    finish(ok > 0)
