"""The web form's label of every request field: a few words with the unit in parentheses, as a
person reads them ("GPUs", "Global batch (sequences)", "Price per GPU-hour (USD)"). The help text
under each label is the field's own docstring, so label, help, /openapi.json and /docs all come
from here and the models; `titled()` writes these labels into the schema as each field's `title`
(the form reads the title; pydantic's default title is only the name with capitals)."""

from __future__ import annotations

from typing import Any

LABELS = {
    # what and where
    "model": "Model", "gpu": "GPU", "gpus": "GPUs to compare", "num_gpus": "GPUs",
    "gpus_per_node": "GPUs per node", "scale_up_domain": "NVLink domain (GPUs)",
    "inter_node_gbps_per_gpu": "Scale-out per GPU (Gb/s)", "gpu_power_limit_w": "GPU power cap (W)",
    "host_memory_gb": "Host memory per node (GB)", "host_link_gb_per_s": "Host link per GPU (GB/s)",
    "nvme_read_gb_per_s": "NVMe read per node (GB/s)", "nvme_write_gb_per_s": "NVMe write per node (GB/s)",
    "nvme_tb": "NVMe per node (TB)", "max_gpus": "Most GPUs per plan",
    "hardware": "Hardware", "plan": "Plan", "goodput": "Goodput at scale (failures, checkpoints)",
    "workload": "Workload", "disaggregated": "Prefill/decode disaggregation",
    # training workload and run
    "seq_len": "Sequence length (tokens)", "global_batch_size": "Global batch (sequences)",
    "global_batch_tokens": "Global batch (tokens)", "train_tokens": "Training tokens",
    "price_per_gpu_hour": "Price per GPU-hour (USD)", "prices": "Price per GPU-hour by GPU (USD)",
    "objective": "Rank by", "top": "Plans to keep", "doc_lengths": "Document lengths",
    "expert_skew": "MoE routing skew",
    # training plan
    "framework": "Framework", "method": "Training method", "precision": "Compute precision",
    "tp": "Tensor parallel (TP)", "pp": "Pipeline stages (PP)", "vpp": "Virtual stages per PP rank (VPP)",
    "dp": "Data parallel (DP)", "cp": "Context parallel (CP)", "ep": "Expert parallel (EP)",
    "etp": "Expert tensor parallel", "micro_batch_size": "Micro-batch (sequences)",
    "recompute": "Activation recompute", "recompute_num_layers": "Recomputed layers per chunk",
    "dp_sharding": "Data-parallel sharding (ZeRO)", "dp_shard_size": "Shard group (DP ranks)",
    "sequence_parallel": "Sequence parallel", "schedule": "Pipeline schedule",
    "pipeline_split": "Layers per pipeline chunk", "rank_order": "Rank order",
    "balance": "Document balancing", "moe_balance": "MoE balancing", "capacity_factor": "MoE capacity factor",
    "lora_rank": "LoRA rank", "lora_targets": "LoRA target layers", "optimizer": "Optimizer",
    "offload_activations": "Offload activations", "offload_optimizer": "Offload optimizer state",
    "offload_params": "Offload parameters", "offload_target": "Offload to", "attention": "Attention kernel",
    "tp_comm_overlap": "Overlap TP communication",
    # goodput at scale
    "restart_minutes": "Restart time (minutes)", "reschedule_minutes": "Replacement wait (minutes)",
    "hot_spare_nodes": "Hot spare nodes", "checkpoint_write_gb_per_s": "Checkpoint write (GB/s)",
    "checkpoint_read_gb_per_s": "Checkpoint read (GB/s)", "checkpoint_mode": "Checkpoint mode",
    "checkpoint_interval_minutes": "Checkpoint interval (minutes)", "straggler_cv": "GPU speed spread (CV)",
    # serving plan
    "engine": "Engine", "engine_version": "Engine version", "replicas": "Replicas", "router": "Router",
    "weights_dtype": "Weight precision", "kv_cache_dtype": "KV-cache precision",
    "max_num_seqs": "Batch limit (requests)", "max_num_batched_tokens": "Token budget per iteration (tokens)",
    "gpu_memory_utilization": "GPU memory for the engine (fraction)", "chunked_prefill": "Chunked prefill",
    "prefix_caching": "Prefix caching", "block_size": "KV block (tokens)", "scheduler_policy": "Scheduler policy",
    "speculative_tokens": "Draft tokens per step", "acceptance_rate": "Draft acceptance (probability)",
    "speculative_method": "Drafter", "enforce_eager": "Eager mode (no CUDA graphs)",
    "num_scheduler_steps": "Decode steps per scheduler call (vLLM V0)",
    "enable_two_batch_overlap": "Two-batch overlap (MoE, EP)",
    "lora_adapters": "LoRA adapters", "max_loras": "Resident LoRA adapters", "kv_offload": "KV offload",
    "kv_cpu_bytes": "CPU KV memory per replica (bytes)", "kv_hit_rate": "CPU KV hit rate (fraction)",
    "what_if": "Allow what-if options", "prefill_gpus": "Prefill GPUs", "decode_gpus": "Decode GPUs",
    "prefill_tp": "Prefill TP", "decode_tp": "Decode TP", "quantization": "Also try fp8",
    "no_quantization": "No quantization (deprecated)", "no_disaggregation": "Colocated only",
    # serving workload and objectives
    "request_rate": "Request rate (requests/s)", "num_requests": "Requests", "arrival": "Arrivals",
    "concurrency": "Concurrent clients", "burstiness": "Burstiness (gamma shape)", "dataset": "Lengths",
    "input_len": "Prompt length (tokens)", "output_len": "Output length (tokens)",
    "input_std": "Prompt length spread (tokens)", "output_std": "Output length spread (tokens)",
    "range_ratio": "Length range (fraction)", "max_len": "Longest request (tokens)",
    "shared_prefix_len": "Shared prefix (tokens)", "num_prefixes": "Shared prefixes", "turns": "Turns per session",
    "think_time_s": "Time between turns (s)", "hash_block_tokens": "Prefix hash block (tokens)",
    "lora_popularity": "LoRA adapter popularity", "lora_zipf_exponent": "LoRA zipf exponent",
    "slo_ttft_ms": "TTFT objective (ms)", "slo_tpot_ms": "TPOT objective (ms)", "slo_e2e_ms": "End-to-end objective (ms)",
    "slo_percentile": "Requests meeting the objectives (%)", "seed": "Random seed",
    "lengths_file": "Lengths file (CLI only)", "histogram": "Length histogram",
    "implementation": "Trainer implementation (eager, compiled, fused)",
    "moe_dispatcher": "MoE token dispatcher (alltoall, allgather, flex)", "moe_a2a_overlap": "Overlap MoE dispatch with compute",
    "input": "Prompt lengths", "output": "Output lengths", "spearman": "Prompt/output rank correlation", "edges": "Bin edges (tokens)", "counts": "Requests per bin",
}
"""Field name -> form label. A field name means the same thing in every request, so one label each."""


def titled(schemas: dict[str, Any]) -> dict[str, Any]:
    """`schemas` (an OpenAPI `components.schemas`) with each property's `title` set to its label;
    a property with no label keeps pydantic's title (a test asserts there is none)."""
    for schema in schemas.values():
        for name, prop in (schema.get("properties") or {}).items():
            if name in LABELS:
                prop["title"] = LABELS[name]
    return schemas
