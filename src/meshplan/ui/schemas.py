"""The JSON API's request bodies: the library's own pydantic models (TrainingPlan, ServingPlan,
WorkloadSpec) wrapped with the model and hardware choices the CLI takes as flags. Field names
are the CLI's flag names with `_` for `-`, so an error names the flag a CLI user would see, and
the pages build their forms from these models' JSON schema (/openapi.json)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from meshplan.serving.plan import ServingPlan
from meshplan.serving.traffic.workload import WorkloadSpec
from meshplan.training.plan import Framework, Method, TrainingPlan

CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
MODEL_HELP = "Catalog name, hf:ORG/NAME, or upload:ID of a config.json uploaded to /api/configs."
NAME_MAX = 200
"""Longest name a request may hold (a model, GPU or engine name; hf:ORG/NAME fits in it)."""
Name = Annotated[str, Field(max_length=NAME_MAX)]


class Hardware(BaseModel):
    """The cluster of one training job (the CLI's hardware flags)."""

    model_config = CONFIG
    gpu: Name
    """GPU catalog name, e.g. h100-sxm-80gb (GET /api/gpus)."""
    num_gpus: int = Field(ge=1)
    """GPUs in the job."""
    gpus_per_node: int | None = Field(None, ge=1)
    """GPUs per node (default: the GPU's usual server)."""
    scale_up_domain: int | None = Field(None, ge=1)
    """GPUs sharing NVLink/NVSwitch (default: the node; 72 for NVL72 parts)."""
    inter_node_gbps_per_gpu: float | None = Field(None, gt=0)
    """Scale-out bandwidth per GPU in Gb/s (default: the GPU's NIC)."""
    gpu_power_limit_w: float | None = Field(None, gt=0)
    """GPU power cap in watts (default: TDP)."""
    host_memory_gb: float | None = Field(None, gt=0)
    """Host DRAM per node in GB (default: the GPU's reference server, hosts.yaml)."""
    host_link_gb_per_s: float | None = Field(None, gt=0)
    """Host<->GPU link per GPU, one direction, in GB/s (default: PCIe/C2C of the server)."""
    nvme_read_gb_per_s: float | None = Field(None, gt=0)
    """NVMe read bandwidth per node in GB/s."""
    nvme_write_gb_per_s: float | None = Field(None, gt=0)
    """NVMe write bandwidth per node in GB/s."""
    nvme_tb: float | None = Field(None, gt=0)
    """NVMe data capacity per node in TB."""


class TrainingRequest(BaseModel):
    """One training plan on one cluster (`train memory`, `train estimate`)."""

    model_config = CONFIG
    model: Name = Field(description=MODEL_HELP)
    hardware: Hardware
    plan: TrainingPlan = TrainingPlan()


class GoodputInputs(BaseModel):
    """Goodput at scale: failures, restarts, checkpoints and stragglers of a long run (the CLI's
    goodput flags; each left unset keeps its cited default)."""

    model_config = CONFIG
    restart_minutes: float | None = Field(None, ge=0)
    """Detection + restart + re-scheduling after an interruption, minutes (default 10)."""
    reschedule_minutes: float | None = Field(None, ge=0)
    """Extra wait for a replacement node when no hot spare is ready, minutes (default 0)."""
    hot_spare_nodes: int | None = Field(None, ge=0)
    """Idle nodes ready to replace a failed one (they are paid for)."""
    checkpoint_write_gb_per_s: float | None = Field(None, gt=0)
    """Aggregate write bandwidth of the checkpoint storage, GB/s (default 2,000)."""
    checkpoint_read_gb_per_s: float | None = Field(None, gt=0)
    """Aggregate read bandwidth of the checkpoint storage on a restart, GB/s (default 2,000)."""
    checkpoint_mode: Literal["sync", "async"] | None = None
    """sync (the step waits for the write) or async (only for the device-to-host copy)."""
    checkpoint_interval_minutes: float | None = Field(None, gt=0)
    """Minutes of training between checkpoints (default: the Young/Daly optimum)."""
    straggler_cv: float | None = Field(None, ge=0, lt=1)
    """Coefficient of variation of per-GPU speed (default 0.02)."""


class TrainingEstimateRequest(TrainingRequest):
    """One training step and, for a run of `train_tokens`, its goodput at scale (`train estimate`)."""

    train_tokens: float | None = Field(None, gt=0)
    """Tokens in the run: adds days and GPU-hours to train, with and without failures."""
    price_per_gpu_hour: float | None = Field(None, gt=0)
    """USD per GPU-hour: adds the run's cost (with train_tokens)."""
    goodput: GoodputInputs = GoodputInputs()


class TrainingSearchRequest(BaseModel):
    """A training layout search (`train plan`); set a pin to hold that field fixed."""

    model_config = CONFIG
    model: Name = Field(description=MODEL_HELP)
    gpu: Name
    """GPU catalog name, e.g. h100-sxm-80gb."""
    num_gpus: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=16)
    """GPUs in the job; several sizes (8,16,32) are each searched and ranked together (a single
    number is accepted too)."""
    gpus_per_node: int | None = Field(None, ge=1)
    """GPUs per node (default: the GPU's usual server)."""
    seq_len: int = Field(4096, ge=1)
    """Tokens per sequence."""
    global_batch_size: int | None = Field(None, ge=1)
    """Sequences per step."""
    global_batch_tokens: int | None = Field(None, ge=1)
    """Tokens per step (alternative to global_batch_size)."""
    framework: Framework | None = None
    """Framework whose launchable layouts are searched (default: megatron, or the first framework
    that runs `method`: hf for qlora)."""
    precision: Literal["fp32", "fp16", "bf16", "fp8", "fp4"] = "bf16"
    """Compute precision of matmuls."""
    tp: int | None = Field(None, ge=1)
    """Pin tensor parallelism."""
    pp: int | None = Field(None, ge=1)
    """Pin pipeline parallelism."""
    vpp: int | None = Field(None, ge=1)
    """Pin virtual pipeline stages."""
    cp: int | None = Field(None, ge=1)
    """Pin context parallelism."""
    ep: int | None = Field(None, ge=1)
    """Pin expert parallelism."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Pin the micro-batch size."""
    recompute: Literal["none", "selective", "full"] | None = None
    """Pin recompute."""
    dp_sharding: Literal["none", "optimizer", "gradients", "full"] | None = None
    """Pin data-parallel sharding."""
    schedule: Literal["gpipe", "1f1b", "interleaved", "zero-bubble"] | None = None
    """Pin the pipeline schedule."""
    doc_lengths: Name | None = None
    """Document lengths of the training data (fixed, lognormal:mean=1500,sigma=1.2,
    zipf:s=1.2,min=64,max=65536); adds the balance axis."""
    balance: Literal["none", "sort", "per-doc-cp", "reassign"] | None = None
    """Pin document balancing."""
    expert_skew: Name | None = None
    """MoE routing skew (zipf:s=1.2 or uniform); adds the moe_balance axis."""
    moe_balance: Literal["none", "aux-free", "eplb"] | None = None
    """Pin MoE balancing."""
    method: Method = "full"
    """What is trained (fixed; the layout is searched): full, lora or qlora."""
    lora_rank: int | None = Field(None, ge=1)
    """LoRA rank r (PEFT's default 8)."""
    lora_targets: Name | None = None
    """Adapted linear layers, comma-separated (q,k,v,o,gate,up,down); default q,v."""
    objective: Literal["throughput", "cost", "time-to-train"] = "throughput"
    """What the ranking optimises."""
    price_per_gpu_hour: float | None = Field(None, gt=0)
    """USD per GPU-hour (needed by objective cost)."""
    train_tokens: float | None = Field(None, gt=0)
    """Tokens in the run (needed by objective time-to-train)."""
    top: int = Field(5, ge=1, le=100)
    """Plans to keep per cluster size."""
    goodput: GoodputInputs = GoodputInputs()

    @field_validator("num_gpus", mode="before")
    @classmethod
    def _one_size(cls, value):
        """`num_gpus: 8` means `[8]` (the API took one size before it took several)."""
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value


class SLOFields(BaseModel):
    """Latency objectives, in ms, at a percentile of requests."""

    model_config = CONFIG
    slo_ttft_ms: float | None = Field(None, gt=0)
    """Time-to-first-token objective, ms."""
    slo_tpot_ms: float | None = Field(None, gt=0)
    """Time-per-output-token objective, ms."""
    slo_e2e_ms: float | None = Field(None, gt=0)
    """End-to-end latency objective, ms."""
    slo_percentile: float = Field(90.0, gt=0, le=100)
    """Share of requests (%) that must meet every objective."""


class SimulateRequest(SLOFields):
    """One serving deployment under a synthetic workload (`serve simulate`)."""

    model: Name = Field(description=MODEL_HELP)
    gpu: Name
    """GPU catalog name, e.g. h100-sxm-80gb."""
    num_gpus: int | None = Field(None, ge=1)
    """GPUs to serve on; with tp, pp, ep, dp and replicas left empty, meshplan chooses the layout
    for them. As with `serve simulate --num-gpus`, the choice is in the answer's `layout` and
    `notes`. Default: what the plan uses."""
    gpus_per_node: int | None = Field(None, ge=1)
    """GPUs per node (default: the GPU's usual server)."""
    plan: ServingPlan = ServingPlan()
    workload: WorkloadSpec = WorkloadSpec(num_requests=200)
    seed: int = Field(0, ge=0)
    """Random seed of the synthetic workload."""

    @field_validator("workload")
    @classmethod
    def _no_server_paths(cls, value: WorkloadSpec) -> WorkloadSpec:
        """A request may not make the server read one of its own files as lengths."""
        if value.lengths_file is not None:
            raise ValueError("workload.lengths_file would read a file on the server; give the lengths "
                             "as workload.histogram (edges and counts) instead")
        return value


class ServePlanRequest(SLOFields):
    """A serving deployment search (`serve plan`): the cheapest deployments meeting the SLOs."""

    model: Name = Field(description=MODEL_HELP)
    gpus: list[Name] = Field(min_length=1, max_length=64)
    """GPU catalog names to compare."""
    request_rate: float = Field(gt=0)
    """Requests/s to serve."""
    max_gpus: int = Field(8, ge=1)
    """Most GPUs a plan may use."""
    objective: Literal["min-gpus", "max-goodput-per-gpu", "min-cost"] = "min-gpus"
    """What the ranking optimises (min-cost needs prices)."""
    prices: dict[Name, float] = Field({}, max_length=64)
    """USD per GPU-hour by GPU name."""
    engine: Name = "vllm"
    """Engine whose scheduler and defaults are modeled (GET /api/engines)."""
    dataset: Literal["fixed", "random", "sharegpt", "sharegpt_vllm", "sharegpt_sglang", "normal", "lognormal",
                     "openorca", "cnn_dailymail", "longbench"] = "sharegpt"
    """Length distribution of requests."""
    input_len: int | None = Field(None, ge=1)
    """Prompt tokens (fixed, random centre or mean)."""
    output_len: int | None = Field(None, ge=1)
    """Output tokens (fixed, random centre or mean)."""
    range_ratio: float | None = Field(None, ge=0, lt=1)
    """random: lengths uniform in [L(1-r), L(1+r)]."""
    burstiness: float | None = Field(None, gt=0)
    """Gamma shape of inter-arrivals (< 1 burstier; 1 = Poisson)."""
    shared_prefix_len: int | None = Field(None, ge=0)
    """Tokens of a shared system prompt."""
    num_requests: int | None = Field(None, ge=1)
    """Requests per simulation (default: sized by duration as `serve plan` sizes them, so each
    trial's arrivals span 8 request lifetimes at its rate, 800 to 16,000 requests)."""
    quantization: bool = False
    """Also try fp8 weights and KV cache (changes the model's outputs); default: its own precision."""
    no_quantization: bool = False
    """Deprecated: the model's own precision is the default (kept so old requests still validate)."""
    no_disaggregation: bool = False
    """Only colocated replicas."""
    top: int = Field(5, ge=1, le=100)
    """Plans to keep."""
    seed: int = Field(0, ge=0)
    """Random seed of the synthetic workload."""
