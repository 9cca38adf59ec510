"""SGLang exporter: a shell script of `python -m sglang.launch_server` commands for a ServingPlan.

Server flags were checked against SGLang's server-argument reference,
docs/advanced_features/server_arguments.md of sgl-project/sglang
(https://github.com/sgl-project/sglang/blob/004813e1dd464844bd92ddbca5cab8c024a75f78/docs/advanced_features/server_arguments.md,
written against python/sglang/srt/server_args.py of the 0.5 line), and cross-checked with the
field declarations of the later main layout, python/sglang/srt/arg_groups/fields/*.py (parallel.py
@ 00ac7105, schedule.py @ 001b8862, memory.py @ 09eaaf15, spec.py @ 015c8726, disagg.py @ 07a7b67c),
which spell every flag below the same way. Where each flag is listed:

- Model and tokenizer / HTTP server: --model-path, --host, --port.
- Runtime options: --tp-size (alias --tensor-parallel-size), --pp-size.
- Data parallelism: --dp-size; Optimization: --enable-dp-attention ("the dp size should be equal
  to the tp size": attention runs dp-way inside the tp group, so --tp-size is tp x dp here).
- MoE: --ep-size (experts over ep of the tp-size GPUs; ep must divide it).
- Quantization and data type: --dtype (float16), --quantization fp8 ("on a fp16 checkpoint, or
  directly load a fp8 checkpoint without specifying any arguments"), --kv-cache-dtype (auto,
  fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1).
- Memory and scheduling: --mem-fraction-static (weights + KV pool), --max-running-requests,
  --chunked-prefill-size (-1 disables chunked prefill), --max-prefill-tokens, --page-size.
- Optimization/debug: --disable-radix-cache.
- Hierarchical cache (kv_offload=cpu): --enable-hierarchical-cache, --hicache-size (host pool per
  rank, GB; it must exceed the rank's device KV pool, else SGLang refuses to start).
- LoRA: --enable-lora, --lora-paths NAME=PATH ..., --max-loras-per-batch (adapters in one batch,
  the GPU pool), --max-lora-rank (docs/advanced_features/lora.ipynb).
- Speculative decoding: --speculative-algorithm (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM),
  --speculative-draft-model-path, --speculative-num-steps, --speculative-eagle-topk,
  --speculative-num-draft-tokens; with topk 1 server_args.py sets num_draft_tokens to
  num_steps + 1, which the exporter writes out.
- PD disaggregation: --disaggregation-mode (null, prefill, decode),
  --disaggregation-transfer-backend (mooncake, nixl, ascend, fake; default mooncake),
  --disaggregation-bootstrap-port (default 8998).
- Router (sgl-project/sglang sgl-router/py_src/sglang_router/router_args.py @
  083d601378d0baaef6191e7f2d40fb70d06518af, docs/advanced_features/router.md and
  pd_disaggregation.md): `python -m sglang_router.launch_router` with --worker-urls, --policy
  (random, round_robin, cache_aware, power_of_two), --pd-disaggregation, --prefill URL
  [BOOTSTRAP_PORT] and --decode URL (each repeated per instance), --host, --port.
- Multi-node instances (an engine wider than a host): the same command on each of its hosts with
  --nnodes, --node-rank and --dist-init-addr FIRST_HOST:PORT (server_arguments.md, "Multi-node
  distributed serving"; docs/references/multi_node_deployment).
"""

from __future__ import annotations

from meshplan import __version__
from meshplan.serving.versions import in_range, resolve_version
from meshplan.errors import ConfigError
from meshplan.export.serving._common import (
    DEFAULT_GPUS_PER_NODE, DRAFT_VARIABLE, FIRST_SIDE_PORT, LORA_VARIABLE, STOP_ALL, Flags, Instance, Raw,
    activation_dtype, address, check_model, command, gpu_words, host_lines, kv_dtype_error, layout, lora_lines,
    per_host, plan_lines, quantization_note, speculative_lines,
)
from meshplan.serving.cost.lora import lora_slots
from meshplan.serving.plan import ServingPlan

TARGET_VERSION = ("SGLang 0.5 (sgl-project/sglang docs/advanced_features/server_arguments.md @ "
                  "004813e1dd464844bd92ddbca5cab8c024a75f78; router_args.py @ "
                  "083d601378d0baaef6191e7f2d40fb70d06518af)")

POLICY = {"round-robin": "round_robin", "least-outstanding": "power_of_two",
          "prefix-affinity": "cache_aware"}
"""The plan's router policy as sglang_router's --policy."""
TRANSFER_BACKEND = "mooncake"
SPECULATIVE_ALGORITHM = "EAGLE3"


def _parallel_flags(plan: ServingPlan, tp: int) -> tuple[Flags, list[str]]:
    size = tp * plan.dp
    flags: Flags = [("--tp-size", size)] if size > 1 else []
    if plan.pp > 1:
        flags.append(("--pp-size", plan.pp))
    notes = []
    if plan.dp > 1:
        flags += [("--dp-size", plan.dp), ("--enable-dp-attention", None)]
        notes = [f"# DP attention: attention runs {plan.dp}-way data parallel inside the tp group, so "
                 f"--tp-size is tp x dp = {size};",
                 "# SGLang implements it for DeepSeek-V2/V3 and Qwen2/3 MoE models."]
    if plan.ep > 1:
        if size % plan.ep:
            raise ConfigError(f"ep={plan.ep}: SGLang spreads experts over ep of the tp x dp = {size} "
                              f"GPUs of an instance, so ep must divide {size}")
        flags.append(("--ep-size", plan.ep))
    return flags, notes


def _dtype_flags(model: str, plan: ServingPlan) -> tuple[Flags, list[str]]:
    flags: Flags = [("--dtype", "float16")] if plan.weights_dtype == "fp16" else []
    quantize, notes = quantization_note(model, plan, "SGLang")
    if quantize:
        flags.append(("--quantization", "fp8"))
    kv, act = plan.kv_cache_dtype, activation_dtype(plan)
    if kv == "fp8":
        flags.append(("--kv-cache-dtype", "fp8_e4m3"))
    elif kv == "bf16" and act != "bf16":
        flags.append(("--kv-cache-dtype", "bf16"))
    elif kv not in ("auto", act):
        raise kv_dtype_error(plan, "SGLang", "bf16 or fp8_e4m3")
    return flags, notes


def _knob_flags(plan: ServingPlan) -> tuple[Flags, list[str]]:
    flags: Flags = []
    notes = []
    if plan.max_num_seqs is not None:
        flags.append(("--max-running-requests", plan.max_num_seqs))
    if plan.chunked_prefill is False:
        flags.append(("--chunked-prefill-size", -1))
        if plan.max_num_batched_tokens is not None:
            flags.append(("--max-prefill-tokens", plan.max_num_batched_tokens))
    elif plan.max_num_batched_tokens is not None:
        flags.append(("--chunked-prefill-size", plan.max_num_batched_tokens))
    if plan.gpu_memory_utilization is not None:
        flags.append(("--mem-fraction-static", plan.gpu_memory_utilization))
        notes.append("# --mem-fraction-static bounds weights + KV pool (activations come on top), "
                     "unlike vLLM's gpu_memory_utilization.")
    if plan.prefix_caching is False:
        flags.append(("--disable-radix-cache", None))
    if plan.enforce_eager:
        flags.append(("--disable-cuda-graph", None))
        if _piecewise_flag_release(plan.engine_version):
            flags.append(("--disable-piecewise-cuda-graph", None))
    if plan.enable_two_batch_overlap:
        flags.append(("--enable-two-batch-overlap", None))
    if plan.block_size is not None:
        flags.append(("--page-size", plan.block_size))
    if plan.scheduler_policy is not None:
        notes.append(f"# scheduler_policy={plan.scheduler_policy} is a TensorRT-LLM knob with no "
                     "SGLang flag.")
    return flags, notes


def _piecewise_flag_release(version: str | None) -> bool:
    """SGLang 0.5.10-0.5.14 keep their default piecewise prefill graphs under --disable-cuda-graph
    (a separate --disable-piecewise-cuda-graph turns them off, server_args.py of the 0.5.10 wheel);
    from 0.5.15 --disable-cuda-graph turns off both phases (cuda_graph_hook.py)."""
    release = resolve_version("sglang", version).release
    return release is not None and in_range(release, "0.5.10", "0.5.15")


def _speculative_flags(plan: ServingPlan) -> Flags:
    k = plan.speculative_tokens
    if not k:
        return []
    steps: Flags = [("--speculative-num-steps", k), ("--speculative-eagle-topk", 1),
                    ("--speculative-num-draft-tokens", k + 1)]
    if plan.mtp_drafts:  # the drafter is the checkpoint's own MTP module: no draft path
        return [("--speculative-algorithm", "NEXTN"), *steps]
    return [("--speculative-algorithm", SPECULATIVE_ALGORITHM),
            ("--speculative-draft-model-path", Raw(f'"${{{DRAFT_VARIABLE}}}"')),
            ("--speculative-num-steps", k), ("--speculative-eagle-topk", 1),
            ("--speculative-num-draft-tokens", k + 1)]


def _role_flags(inst: Instance) -> Flags:
    if inst.role == "server":
        return []
    flags: Flags = [("--disaggregation-mode", inst.role),
                    ("--disaggregation-transfer-backend", TRANSFER_BACKEND)]
    if inst.role == "prefill":
        flags.append(("--disaggregation-bootstrap-port", _bootstrap_port(inst)))
    return flags


def _bootstrap_port(inst: Instance) -> int:
    return FIRST_SIDE_PORT["bootstrap"] + inst.index


def _url(inst: Instance) -> str:
    return f"http://{address(inst)}:{inst.port}"


def _router(plan: ServingPlan, instances: list[Instance], port: int, host: str) -> list[str]:
    """The sglang_router command on the entry port, with a comment on the policy."""
    policy = POLICY[plan.router]
    lines = [f"# Router on port {port}: the plan assumed {plan.router} routing "
             f"(sglang_router --policy {policy})."]
    if plan.router == "least-outstanding":
        lines.append("# sglang_router has no least-outstanding policy; power_of_two (the lighter of "
                     "two sampled workers) is the closest.")
    if plan.disaggregated is None:
        flags: Flags = [("--worker-urls", Raw(" ".join(_url(i) for i in instances)))]
    else:
        flags = [("--pd-disaggregation", None)]
        flags += [("--prefill", Raw(f"{_url(i)} {_bootstrap_port(i)}"))
                  for i in instances if i.role == "prefill"]
        flags += [("--decode", _url(i)) for i in instances if i.role == "decode"]
    flags += [("--policy", policy), ("--host", host), ("--port", port)]
    return lines + command(["python", "-m", "sglang_router.launch_router"], flags)


def _offload_flags(plan: ServingPlan) -> Flags:
    """kv_offload=cpu: SGLang's hierarchical cache, its host pool per GPU rank in GB."""
    if plan.kv_offload != "cpu":
        return []
    flags: Flags = [("--enable-hierarchical-cache", None)]
    if plan.kv_cpu_bytes is not None:
        flags.append(("--hicache-size", max(1, round(plan.kv_cpu_bytes / plan.gpus_per_replica / 1e9))))
    return flags


def _lora_flags(plan: ServingPlan) -> Flags:
    """Multi-LoRA: the adapters (from LORA_ADAPTERS), the GPU slots per batch and the rank."""
    if not plan.lora_adapters:
        return []
    return [("--enable-lora", None), ("--lora-paths", Raw(f"${LORA_VARIABLE}")),
            ("--max-loras-per-batch", lora_slots(plan)), ("--max-lora-rank", plan.lora_rank)]


def _node_flags(inst: Instance, node: int, position: int) -> Flags:
    """A multi-node engine's rank on `node`: every host of the instance runs the same server."""
    if inst.nodes == 1:
        return []
    init = Raw(f"{address(inst)}:{FIRST_SIDE_PORT['dist_init'] + position}")
    return [("--nnodes", inst.nodes), ("--node-rank", node - inst.node), ("--dist-init-addr", init)]


def export(model: str, plan: ServingPlan, *, port: int = 8000, host: str = "0.0.0.0",
           gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> str:
    """A bash script launching `plan` with SGLang: one server per instance (per host of an
    instance spanning hosts), plus the router; grouped by host on hosts of `gpus_per_node` GPUs."""
    model = check_model(model)
    instances = layout(plan, port, gpus_per_node)
    dtype_flags, notes = _dtype_flags(model, plan)
    knob_flags, knob_notes = _knob_flags(plan)
    shared = dtype_flags + knob_flags + _speculative_flags(plan) + _lora_flags(plan) + _offload_flags(plan)
    lines = ["#!/usr/bin/env bash",
             f"# SGLang launch script generated by meshplan {__version__}",
             f"# Target: {TARGET_VERSION}"]
    lines += plan_lines(model, plan, instances, "sglang") + notes + knob_notes
    lines += _parallel_flags(plan, instances[0].tp)[1]
    if plan.disaggregated is not None:
        lines += [f"# KV transfer backend {TRANSFER_BACKEND} (SGLang's default) needs "
                  "pip install mooncake-transfer-engine and RDMA;",
                  "# --disaggregation-transfer-backend nixl is the alternative."]
    several = len(instances) > 1 or instances[0].nodes > 1
    lines += ["set -euo pipefail"] + ([STOP_ALL] if several else []) + host_lines(instances, gpus_per_node)
    if plan.speculative_tokens:
        lines += speculative_lines(plan, f"an EAGLE-3 head (SGLang algorithm {SPECULATIVE_ALGORITHM})")
    if plan.lora_adapters:
        lines += lora_lines(plan, lora_slots(plan), "--lora-paths")
    blocks: dict[int, list[str]] = {}
    for position, inst in enumerate(instances):
        for node in range(inst.node, inst.node + inst.nodes):
            flags: Flags = [("--model-path", model), ("--host", host), ("--port", inst.port)]
            flags += _parallel_flags(plan, inst.tp)[0] + shared + _role_flags(inst) + _node_flags(inst, node, position)
            env = {"CUDA_VISIBLE_DEVICES": Raw(",".join(map(str, inst.gpus)))}
            where = gpu_words(inst, node if inst.nodes > 1 else None)
            blocks.setdefault(node, []).extend(["", f"# {inst.role} {inst.index}: {where}, port {inst.port}"])
            blocks[node] += command(["python", "-m", "sglang.launch_server"], flags, env=env, background=several)
    if len(instances) > 1:
        blocks[0] += [""] + _router(plan, instances, port, host)
    lines += per_host(instances[0].hosts, blocks)
    if several and (len(instances) == 1 or instances[0].hosts > 1):  # hosts without the router wait on their servers
        lines.append("wait")
    return "\n".join(lines) + "\n"
