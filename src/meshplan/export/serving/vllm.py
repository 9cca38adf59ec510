"""vLLM exporter: a shell script of `vllm serve` commands for a ServingPlan.

Flags were checked against vLLM 0.11 sources: vllm/engine/arg_utils.py of vllm-project/vllm
(https://github.com/vllm-project/vllm/blob/99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b/vllm/engine/arg_utils.py;
its deprecation notes name v0.12/v0.13 as the removal releases, so it sits in the 0.11 line).
Where each flag comes from:

- `vllm serve MODEL`, `--host`, `--port`: FrontendArgs in vllm/entrypoints/openai/cli_args.py.
- `EngineArgs.add_cli_args`, ParallelConfig group: --tensor-parallel-size, --pipeline-parallel-size,
  --data-parallel-size, --enable-expert-parallel. The EP size is not a flag: vLLM computes it as
  TP x DP (docs/serving/expert_parallel_deployment.md), so the exporter checks ep == tp x dp.
- ModelConfig group: --dtype (float16), --quantization (fp8: online FP8 quantization of a
  bf16/fp16 checkpoint, docs/features/quantization/fp8.md).
- CacheConfig group: --block-size (BlockSize = 1, 8, 16, 32, 64, 128, 256 and --kv-cache-dtype
  values auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla in vllm/config/cache.py @
  c1d86421174a87056edc90a41dc9942391509e84), --gpu-memory-utilization,
  --enable-prefix-caching / --no-enable-prefix-caching.
- SchedulerConfig group: --max-num-batched-tokens, --max-num-seqs,
  --enable-chunked-prefill / --no-enable-chunked-prefill. Fields typed `bool | None` get
  argparse.BooleanOptionalAction in `_compute_kwargs`, hence the --no- spellings.
- VllmConfig group: --speculative-config (parsed with json.loads; methods of v0.11's
  SpeculativeMethod include ngram, eagle, eagle3, medusa, mlp_speculator, draft_model, mtp:
  https://docs.vllm.ai/en/v0.11.0/api/vllm/config/speculative.html) and --kv-transfer-config
  (KVTransferConfig: kv_connector, kv_role in kv_producer, kv_consumer, kv_both).
- LoRAConfig group: --enable-lora, --max-loras, --max-lora-rank (one of 1, 8, 16, 32, 64, 128,
  256, 320, 512), --max-cpu-loras; FrontendArgs: --lora-modules NAME=PATH ...
  (docs/features/lora.md).
- KV offload to CPU (kv_offload=cpu): LMCache's vLLM connector, --kv-transfer-config
  {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"} with LMCACHE_LOCAL_CPU,
  LMCACHE_MAX_LOCAL_CPU_SIZE (GiB per worker) and LMCACHE_CHUNK_SIZE (LMCache docs, vLLM
  integration; needs pip install lmcache).
- Multi-node instances (a replica wider than a host): --distributed-executor-backend ray
  (ParallelConfig group) on the first host, after `ray start --head --port P` there and
  `ray start --block --address HEAD:P` on the others, each with that host's GPUs
  (docs/serving/parallelism_scaling.md, "Multi-node deployment", v0.11).
- Disaggregated prefill: NixlConnector with kv_role kv_both on both pools, a distinct
  VLLM_NIXL_SIDE_CHANNEL_PORT per instance on a host, and the test proxy
  tests/v1/kv_connector/nixl_integration/toy_proxy_server.py (--port, --prefiller-hosts,
  --prefiller-ports, --decoder-hosts, --decoder-ports), all from docs/features/nixl_connector_usage.md
  (https://docs.vllm.ai/en/v0.11.0/features/nixl_connector_usage.html).
"""

from __future__ import annotations

import json

from meshplan import __version__
from meshplan.errors import ConfigError
from meshplan.export.serving._common import (
    DEFAULT_GPUS_PER_NODE, DRAFT_VARIABLE, FIRST_SIDE_PORT, LORA_VARIABLE, STOP_ALL, Flags, Instance, Raw,
    activation_dtype, address, check_model, command, double_quoted, gpu_words, host_lines, kv_dtype_error, layout,
    lora_lines, per_host, plan_lines, quantization_note, speculative_lines,
)
from meshplan.serving.cost.lora import lora_slots
from meshplan.serving.plan import ServingPlan

TARGET_VERSION = "vLLM 0.11 (vllm-project/vllm main @ 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b)"

BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
"""vLLM's BlockSize literal (vllm/config/cache.py)."""
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""Values vLLM's LoRAConfig accepts for --max-lora-rank (vllm/config/lora.py MaxLoRARanks)."""
SPECULATIVE_METHOD = "eagle3"
KV_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
LMCACHE_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
LMCACHE_CHUNK_TOKENS = 256
"""LMCache's default chunk size (LMCACHE_CHUNK_SIZE), written out."""
ROUTER_NOTES = {"round-robin": "",
                "least-outstanding": " (each request to the replica with the fewest in flight)",
                "prefix-affinity": " (requests sharing a prefix or session go to the same replica)"}


def _parallel_flags(plan: ServingPlan, tp: int) -> Flags:
    flags: Flags = []
    if tp > 1:
        flags.append(("--tensor-parallel-size", tp))
    if plan.pp > 1:
        flags.append(("--pipeline-parallel-size", plan.pp))
    if plan.dp > 1:
        flags.append(("--data-parallel-size", plan.dp))
    if plan.ep > 1:
        if plan.ep != tp * plan.dp:
            raise ConfigError(f"ep={plan.ep}: vLLM's --enable-expert-parallel spreads experts over "
                              f"tp x dp = {tp} x {plan.dp} = {tp * plan.dp} GPUs; set ep to "
                              f"{tp * plan.dp} or change tp/dp")
        flags.append(("--enable-expert-parallel", None))
    return flags


def _dtype_flags(model: str, plan: ServingPlan) -> tuple[Flags, list[str]]:
    flags: Flags = [("--dtype", "float16")] if plan.weights_dtype == "fp16" else []
    quantize, notes = quantization_note(model, plan, "vLLM")
    if quantize:
        flags.append(("--quantization", "fp8"))
    kv = plan.kv_cache_dtype
    if kv == "fp8":
        flags.append(("--kv-cache-dtype", "fp8"))
    elif kv not in ("auto", activation_dtype(plan)):
        raise kv_dtype_error(plan, "vLLM", "fp8 (--kv-cache-dtype fp8)")
    return flags, notes


def _knob_flags(plan: ServingPlan) -> Flags:
    flags: Flags = []
    if plan.max_num_seqs is not None:
        flags.append(("--max-num-seqs", plan.max_num_seqs))
    if plan.max_num_batched_tokens is not None:
        flags.append(("--max-num-batched-tokens", plan.max_num_batched_tokens))
    if plan.gpu_memory_utilization is not None:
        flags.append(("--gpu-memory-utilization", plan.gpu_memory_utilization))
    if plan.chunked_prefill is not None or plan.num_scheduler_steps > 1:  # multi-step: V0, whole prompts
        flags.append(("--enable-chunked-prefill" if plan.chunked_prefill
                      else "--no-enable-chunked-prefill", None))
    if plan.num_scheduler_steps > 1:
        flags.append(("--num-scheduler-steps", plan.num_scheduler_steps))
    if plan.prefix_caching is not None:
        flags.append(("--enable-prefix-caching" if plan.prefix_caching
                      else "--no-enable-prefix-caching", None))
    if plan.enforce_eager:
        flags.append(("--enforce-eager", None))
    if plan.enable_two_batch_overlap:
        flags.append(("--enable-dbo", None))
    if plan.block_size is not None:
        if plan.block_size not in BLOCK_SIZES:
            raise ConfigError(f"block_size={plan.block_size}: vLLM's --block-size takes "
                              f"{', '.join(map(str, BLOCK_SIZES))}")
        flags.append(("--block-size", plan.block_size))
    return flags


def _speculative_flags(plan: ServingPlan) -> Flags:
    if not plan.speculative_tokens:
        return []
    if plan.mtp_drafts:  # the checkpoint's own MTP module drafts: no separate model
        config = {"method": "mtp", "num_speculative_tokens": plan.speculative_tokens}
    else:
        config = {"method": SPECULATIVE_METHOD, "model": f"${{{DRAFT_VARIABLE}}}",
                  "num_speculative_tokens": plan.speculative_tokens}
    return [("--speculative-config", double_quoted(json.dumps(config)))]


def _lora_flags(plan: ServingPlan) -> Flags:
    """--enable-lora with the plan's slots and rank; every adapter kept in host memory
    (--max-cpu-loras), as the plan models them; the adapters themselves from LORA_ADAPTERS."""
    if not plan.lora_adapters:
        return []
    rank = next((r for r in LORA_RANKS if r >= plan.lora_rank), None)
    if rank is None:
        raise ConfigError(f"lora_rank={plan.lora_rank}: vLLM's --max-lora-rank is at most {LORA_RANKS[-1]}")
    slots = lora_slots(plan)
    return [("--enable-lora", None), ("--max-loras", slots), ("--max-lora-rank", rank),
            ("--max-cpu-loras", max(slots, plan.lora_adapters)), ("--lora-modules", Raw(f"${LORA_VARIABLE}"))]


def _lmcache_env(plan: ServingPlan) -> dict[str, object]:
    """LMCache's CPU backend for kv_offload=cpu: its size per GPU worker in GiB (LMCache's
    default, 5, when the plan gives a hit rate instead of a size)."""
    if plan.disaggregated is not None:
        raise ConfigError("kv_offload='cpu' with disaggregated pools: vLLM takes one --kv-transfer-config "
                          "connector (NixlConnector for the pools); drop one of them")
    env: dict[str, object] = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_CHUNK_SIZE": LMCACHE_CHUNK_TOKENS}
    if plan.kv_cpu_bytes is not None:
        env["LMCACHE_MAX_LOCAL_CPU_SIZE"] = f"{plan.kv_cpu_bytes / plan.gpus_per_replica / 2**30:.1f}"
    return env


def _instance_command(model: str, plan: ServingPlan, inst: Instance, position: int, host: str,
                      shared: Flags, background: bool) -> dict[int, list[str]]:
    """The lines each host runs for one instance: the server (on its first host) and, for an
    instance spanning hosts, the Ray cluster its ranks join."""
    devices = Raw(",".join(map(str, inst.gpus)))
    env: dict[str, object] = {"CUDA_VISIBLE_DEVICES": devices}
    flags: Flags = [("--host", host), ("--port", inst.port)] + _parallel_flags(plan, inst.tp) + shared
    if plan.kv_offload == "cpu":
        env.update(_lmcache_env(plan))
    if inst.role != "server":
        # Each instance on a host needs its own NIXL handshake port (a DP rank adds its rank).
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = FIRST_SIDE_PORT["nixl"] + 100 * position
        flags.append(("--kv-transfer-config", json.dumps(KV_CONNECTOR)))
    elif plan.kv_offload == "cpu":
        flags.append(("--kv-transfer-config", json.dumps(LMCACHE_CONNECTOR)))
    head = [f"# {inst.role} {inst.index}: {gpu_words(inst)}, port {inst.port}"]
    if inst.nodes == 1:
        return {inst.node: head + command(["vllm", "serve", model], flags, env=env, background=background)}
    ray_port = FIRST_SIDE_PORT["ray"] + position
    flags.append(("--distributed-executor-backend", "ray"))
    blocks = {inst.node: head + [f"# A multi-node engine: its ranks on hosts {inst.node}-{inst.node + inst.nodes - 1} "
                                 f"join this host's Ray cluster; vLLM waits for their GPUs (`ray stop` ends it)."]
              + command(["ray", "start"], [("--head", None), ("--port", ray_port)], env={"CUDA_VISIBLE_DEVICES": devices})
              + command(["vllm", "serve", model], flags, env=env, background=True)}
    for node in range(inst.node + 1, inst.node + inst.nodes):
        blocks[node] = [f"# {inst.role} {inst.index}: {gpu_words(inst, node)}, ranks of the engine on host {inst.node}"]
        blocks[node] += command(["ray", "start"], [("--block", None), ("--address", Raw(f"{address(inst)}:{ray_port}"))],
                                env={"CUDA_VISIBLE_DEVICES": devices}, background=True)
    return blocks


def _entry_lines(plan: ServingPlan, instances: list[Instance], port: int) -> list[str]:
    """What must sit on the entry port when there are several instances (comments only)."""
    if len(instances) == 1:
        return []
    ports = [i.port for i in instances]
    if plan.disaggregated is None:
        behind = (f"ports {ports[0]}-{ports[-1]}" if instances[0].hosts == 1 else
                  " ".join(f"{address(i)}:{i.port}" for i in instances))
        lines = ["# vLLM has no cross-replica router: put an HTTP load balancer on port "
                 f"{port} in front of {behind}.",
                 f"# The plan assumed {plan.router} routing{ROUTER_NOTES[plan.router]}."]
        if plan.dp > 1:
            lines.append("# Each replica runs its own data-parallel group: replicas sharing a host "
                         "need distinct --data-parallel-rpc-port values.")
        return lines
    pre = [i for i in instances if i.role == "prefill"]
    dec = [i for i in instances if i.role == "decode"]
    return ["# A proxy must send each request to a prefill instance (max_tokens=1) and then, with",
            "# the returned kv_transfer_params, to a decode instance. vLLM's test proxy does this:",
            f"#   python tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --port {port} \\",
            f"#     --prefiller-hosts {' '.join(address(i) for i in pre)} "
            f"--prefiller-ports {' '.join(str(i.port) for i in pre)} \\",
            f"#     --decoder-hosts {' '.join(address(i) for i in dec)} "
            f"--decoder-ports {' '.join(str(i.port) for i in dec)}",
            "# NixlConnector needs the nixl package (pip install nixl) on every instance."]


def _notes(plan: ServingPlan) -> list[str]:
    notes = []
    if plan.scheduler_policy is not None:
        notes.append(f"# scheduler_policy={plan.scheduler_policy} is a TensorRT-LLM knob with no vLLM "
                     "flag; vLLM admits greedily and preempts.")
    if plan.chunked_prefill is False:
        notes.append("# With chunked prefill off, vLLM needs max_num_batched_tokens >= max_model_len.")
    return notes


def export(model: str, plan: ServingPlan, *, port: int = 8000, host: str = "0.0.0.0",
           gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> str:
    """A bash script launching `plan` with `vllm serve`: one command per instance, grouped by
    host when the deployment takes several (hosts of `gpus_per_node` GPUs)."""
    model = check_model(model)
    instances = layout(plan, port, gpus_per_node)
    dtype_flags, dtype_notes = _dtype_flags(model, plan)
    shared = dtype_flags + _knob_flags(plan) + _speculative_flags(plan) + _lora_flags(plan)
    lines = ["#!/usr/bin/env bash",
             f"# vLLM launch script generated by meshplan {__version__}",
             f"# Target: {TARGET_VERSION}"]
    lines += plan_lines(model, plan, instances, "vllm") + dtype_notes + _notes(plan)
    several = len(instances) > 1 or instances[0].nodes > 1
    lines += ["set -euo pipefail"] + ([STOP_ALL] if several else []) + host_lines(instances, gpus_per_node)
    if plan.speculative_tokens:
        lines += speculative_lines(plan, f"an EAGLE-3 head (vLLM method {SPECULATIVE_METHOD})")
    if plan.lora_adapters:
        lines += lora_lines(plan, lora_slots(plan), "--lora-modules")
    if plan.kv_offload == "cpu":
        lines.append("# kv_offload=cpu: LMCache's CPU backend (pip install lmcache)" +
                     ("." if plan.kv_cpu_bytes is not None else
                      "; the plan gave a hit rate, not a size: LMCache's default size applies."))
    blocks: dict[int, list[str]] = {}
    for position, inst in enumerate(instances):
        for node, block in _instance_command(model, plan, inst, position, host, shared, several).items():
            blocks.setdefault(node, []).extend([""] + block)
    if len(instances) > 1:
        blocks[0] += [""] + _entry_lines(plan, instances, port)
    lines += per_host(instances[0].hosts, blocks)
    if several:
        lines.append("wait")
    return "\n".join(lines) + "\n"
