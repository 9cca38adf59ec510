"""`meshplan record training|serving`: write one of your own measured runs as a run record
(SCHEMA.md) and append it to a record file, for `meshplan validate` and `meshplan calibrate`."""

from __future__ import annotations

from pathlib import Path

import typer

from meshplan.cli import options as opt
from meshplan.cli.common import err_console, user_errors
from meshplan.cli.lazy import new_app
from meshplan.validate.bench_results import read_result
from meshplan.validate.record_build import (DEFAULT_SOURCE, append_record, existing_ids, serving_record,
                                            training_record, unique_id)

record_app = new_app(help="Write your own measured runs as run records (for validate and calibrate).",
                         no_args_is_help=True)

OUT = typer.Option(..., "--out", help="Run-record YAML file to append to (created when missing).")
ID = typer.Option(None, "--id", help="Record id (default: model, GPU, GPU count and today's date).")
SOURCE = typer.Option(DEFAULT_SOURCE, "--source-name", help="Where the run was measured.")
MODEL = typer.Option(..., "--model", help="Catalog name, or a config.json path (its mapping is stored).")
NOTES = typer.Option(None, "--notes", help="Free text kept with the record.")
PARALLEL = "Parallel size (not given: not recorded)."


def _append(out: Path, record: dict, named: bool) -> None:
    """Append, renaming a generated id that the file already holds; print the one-line summary."""
    if not named:
        record = {**record, "id": unique_id(record["id"], existing_ids(out))}
    count = append_record(out, record)
    typer.echo(f"appended {record['id']} to {out} ({count} records)")


def _hardware(gpu, num_gpus, gpus_per_node, inter_node_gbps_per_gpu, gpu_power_limit_w) -> dict:
    return {"gpu": gpu, "num_gpus": num_gpus, "gpus_per_node": gpus_per_node,
            "inter_node_gbps_per_gpu": inter_node_gbps_per_gpu, "gpu_power_limit_w": gpu_power_limit_w}


def training(
    out: Path = OUT, record_id: str = ID, source_name: str = SOURCE, model: str = MODEL,
    gpu: str = opt.GPU, num_gpus: int = opt.NUM_GPUS, gpus_per_node: int = opt.GPUS_PER_NODE,
    inter_node_gbps_per_gpu: float = opt.INTER_NODE_GBPS, gpu_power_limit_w: float = opt.POWER_LIMIT,
    framework: str = typer.Option(..., help="megatron, nemo, torchtitan, deepspeed, fsdp, llm-foundry, "
                                  "maxtext or other."),
    seq_len: int = typer.Option(..., help="Tokens per sequence (schema key seq_length)."),
    global_batch_size: int = typer.Option(None, help="Sequences per optimizer step."),
    micro_batch_size: int = typer.Option(None, help="Sequences per micro-batch per GPU."),
    tp: int = typer.Option(None, help=PARALLEL), pp: int = typer.Option(None, help=PARALLEL),
    vpp: int = typer.Option(None, help="Model chunks per pipeline rank."),
    dp: int = typer.Option(None, help=PARALLEL), cp: int = typer.Option(None, help=PARALLEL),
    ep: int = typer.Option(None, help=PARALLEL), etp: int = typer.Option(None, help=PARALLEL),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help="Megatron sequence parallelism."),
    dp_sharding: str = typer.Option(None, help="none, optimizer, gradients or full."),
    recompute: str = typer.Option(None, help="none, selective or full."),
    precision: str = typer.Option(None, help="fp32, fp16, bf16, fp8, mxfp8 or nvfp4."),
    tokens_per_s_per_gpu: float = typer.Option(None, help="Measured training tokens per second per GPU."),
    step_time_s: float = typer.Option(None, help="Measured seconds per optimizer step."),
    peak_memory_gib: float = typer.Option(None, help="Measured peak memory, max over GPUs, GiB."),
    notes: str = NOTES,
) -> None:
    """Append one measured training run to a run-record file (at least one measured value)."""
    plan = {"framework": framework, "seq_length": seq_len, "global_batch_size": global_batch_size,
            "micro_batch_size": micro_batch_size, "tp": tp, "pp": pp, "vpp": vpp, "dp": dp, "cp": cp,
            "ep": ep, "etp": etp, "sequence_parallel": sequence_parallel, "dp_sharding": dp_sharding,
            "recompute": recompute, "precision": precision}
    measured = {"tokens_per_s_per_gpu": tokens_per_s_per_gpu, "step_time_s": step_time_s,
                "peak_memory_gib": peak_memory_gib}
    hardware = _hardware(gpu, num_gpus, gpus_per_node, inter_node_gbps_per_gpu, gpu_power_limit_w)
    record = training_record(model, hardware, plan, measured, id=record_id, source_name=source_name,
                             notes=notes)
    _append(out, record, named=record_id is not None)


def serving(
    out: Path = OUT, record_id: str = ID, source_name: str = SOURCE, model: str = MODEL,
    gpu: str = opt.GPU, num_gpus: int = opt.NUM_GPUS, gpus_per_node: int = opt.GPUS_PER_NODE,
    inter_node_gbps_per_gpu: float = opt.INTER_NODE_GBPS, gpu_power_limit_w: float = opt.POWER_LIMIT,
    engine: str = typer.Option(..., help="vllm, sglang, tensorrt-llm or other."),
    engine_version: str = typer.Option(None, help="Engine version, e.g. 0.11.0."),
    tp: int = typer.Option(None, help=PARALLEL), pp: int = typer.Option(None, help=PARALLEL),
    ep: int = typer.Option(None, help=PARALLEL),
    dp: int = typer.Option(None, help="Attention data parallel inside one engine."),
    replicas: int = typer.Option(None, help="Engine replicas."),
    weights_dtype: str = typer.Option(None, help="bf16, fp16, fp8, int8, int4 or fp4."),
    kv_cache_dtype: str = typer.Option(None, help="bf16, fp16, fp8, int8, int4 or fp4."),
    max_num_seqs: int = typer.Option(None, help="Engine knob as set (not given: engine default)."),
    max_num_batched_tokens: int = typer.Option(None, help="Engine knob as set (not given: engine default)."),
    result: Path = typer.Option(..., "--result", help="Benchmark result: vllm bench serve --save-result "
                                "JSON or sglang.bench_serving --output-file JSON lines."),
    result_format: str = typer.Option(None, help="vllm or sglang (default: told from the keys)."),
    bench_command: str = typer.Option(None, help="The benchmark command line, for the workload "
                                      "(dataset, lengths, prompts, rate, concurrency)."),
    input_len: int = typer.Option(None, help="Prompt tokens (overrides the command and result)."),
    output_len: int = typer.Option(None, help="Output tokens (overrides the command and result)."),
    num_requests: int = typer.Option(None, help="Requests in the benchmark (must agree with the "
                                     "command and result where they say)."),
    request_rate: float = typer.Option(None, help="Requests per second (must agree with the command "
                                       "and result where they say; not given: as run)."),
    concurrency: int = typer.Option(None, help="Closed-loop clients, --max-concurrency (must agree "
                                    "with the command and result where they say)."),
    dataset: str = typer.Option(None, help="random, sharegpt_vllm, sharegpt_sglang or another named table "
                                "(overrides; a benchmark's sharegpt is recorded as its tool's sampler)."),
    notes: str = NOTES,
) -> None:
    """Append one measured serving benchmark to a run-record file (measured: its result file).

    The result file, --bench-command and the workload flags must agree on what they all state
    (rate, concurrency, prompts, random lengths against the measured means); a contradiction, or
    a record `meshplan validate` could not simulate, exits 2 and writes nothing."""
    bench = read_result(result, result_format)
    for remark in bench.remarks:
        err_console.print(f"note: {remark}", highlight=False, markup=False, soft_wrap=True)
    engine_keys = {"engine": engine, "engine_version": engine_version, "tp": tp, "pp": pp, "ep": ep,
                   "dp": dp, "replicas": replicas, "weights_dtype": weights_dtype,
                   "kv_cache_dtype": kv_cache_dtype, "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": max_num_batched_tokens}
    workload = {"input_len": input_len, "output_len": output_len, "num_requests": num_requests,
                "request_rate": request_rate, "concurrency": concurrency, "dataset": dataset}
    hardware = _hardware(gpu, num_gpus, gpus_per_node, inter_node_gbps_per_gpu, gpu_power_limit_w)
    record = serving_record(model, hardware, engine_keys, bench, bench_command=bench_command,
                            workload=workload, id=record_id, source_name=source_name, notes=notes)
    _append(out, record, named=record_id is not None)


record_app.command("training")(user_errors(training))
record_app.command("serving")(user_errors(serving))

