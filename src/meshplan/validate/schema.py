"""The run-record format of meshplan/records/SCHEMA.md as strict pydantic models.

Unknown keys are errors (typo safety) except inside `source` and `notes`; `model` is a catalog
name or a free-form Hugging Face config mapping.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from meshplan.serving.engine.scheduler import acceptance_for_length
from meshplan.serving.traffic.empirical import LengthHistogram

STRICT = ConfigDict(frozen=True, extra="forbid")


class Hardware(BaseModel):
    """What the run ran on."""

    model_config = STRICT
    gpu: str
    num_gpus: int = Field(ge=1)
    gpus_per_node: int | None = Field(None, ge=1)
    scale_up_domain: int | None = Field(None, ge=1)
    inter_node_gbps_per_gpu: float | None = Field(None, gt=0)
    gpu_power_limit_w: float | None = Field(None, gt=0)


class Training(BaseModel):
    """The `training:` section."""

    model_config = STRICT
    framework: Literal["megatron", "nemo", "torchtitan", "deepspeed", "fsdp", "llm-foundry",
                       "maxtext", "other"]
    seq_length: int = Field(ge=1)
    global_batch_size: int | None = Field(None, ge=1)
    micro_batch_size: int | None = Field(None, ge=1)
    tp: int | None = Field(None, ge=1)
    pp: int | None = Field(None, ge=1)
    vpp: int | None = Field(None, ge=1)
    dp: int | None = Field(None, ge=1)
    cp: int | None = Field(None, ge=1)
    ep: int | None = Field(None, ge=1)
    etp: int | None = Field(None, ge=1)
    sequence_parallel: bool | None = None
    dp_sharding: Literal["none", "optimizer", "gradients", "full"] | None = None
    recompute: Literal["none", "selective", "full"] | None = None
    precision: Literal["fp32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4"] | None = None
    moe_token_dispatch: Literal["dropless", "capacity", "forced_balance"] | None = None
    moe_dispatcher: Literal["alltoall", "allgather", "flex"] | None = None
    """MoE token dispatcher: alltoall, allgather, or flex (DeepEP / HybridEP); null: alltoall."""
    moe_a2a_overlap: bool | None = None
    """Expert-parallel dispatch overlapped with another micro-batch's compute (Megatron's
    1F1B all-to-all overlap, DualPipe); null: off."""
    attention: Literal["flash", "sdpa", "eager"] | None = None
    """The attention kernel: flash (FlashAttention / cuDNN fused), sdpa (PyTorch's
    scaled_dot_product_attention), eager (explicit score matmul, masked softmax and value matmul
    through memory); null: the framework's default."""
    implementation: Literal["eager", "compiled", "fused"] | None = None
    """How the trainer launches its kernels: eager (op by op from Python, or Transformer
    Engine's fused modules), compiled (torch.compile / XLA), fused (a hand-fused C/CUDA trainer
    such as llm.c); null: the framework's default."""


class Workload(BaseModel):
    """A serving benchmark's traffic."""

    model_config = STRICT
    mode: Literal["offline", "poisson", "gamma", "concurrency"]
    input_len: int | None = Field(None, ge=1)
    output_len: int | None = Field(None, ge=1)
    dataset: Literal["sharegpt", "sharegpt_vllm", "sharegpt_sglang", "random", "openorca", "cnn_dailymail",
                     "longbench", "histogram"] | None = None
    """Length distribution: random (with range_ratio), a named dataset's packaged table, or
    histogram (the `histogram` field)."""
    histogram: LengthHistogram | None = None
    """dataset=histogram: {input: {edges, counts}, output: {edges, counts}, spearman}."""
    range_ratio: float | None = Field(None, ge=0, le=1)
    num_requests: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)
    concurrency: int | None = Field(None, ge=1)
    burstiness: float | None = Field(None, gt=0)


class Disaggregated(BaseModel):
    """Prefill/decode disaggregation of a serving deployment.

    A phase-pool record (docs/run-records-phase-pools.md) measures one pool alone: the other
    side's `*_gpus` is null ("not part of the measurement") and its `*_tp` may be null too.
    A prefill pool's requests end with the token their prefill samples; a decode pool's
    requests arrive with their prompt's KV already present (context = `input_len`) and only
    decode, at the workload's concurrency."""

    model_config = STRICT
    prefill_gpus: int | None = Field(ge=1)
    decode_gpus: int | None = Field(ge=1)
    prefill_tp: int | None = Field(None, ge=1)
    decode_tp: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _sides(self) -> "Disaggregated":
        if self.prefill_gpus is None and self.decode_gpus is None:
            raise ValueError("prefill_gpus and decode_gpus are both null; null marks the one pool "
                             "that is not part of the measurement")
        for side in ("prefill", "decode"):
            if getattr(self, f"{side}_gpus") is not None and getattr(self, f"{side}_tp") is None:
                raise ValueError(f"{side}_tp is required when {side}_gpus is given")
        return self

    @property
    def phase(self) -> str | None:
        """The one pool measured ("prefill" or "decode"); None when both are."""
        from meshplan.serving.plan import pool_phase

        return pool_phase(self.prefill_gpus, self.decode_gpus)


PHASE_METRICS = {
    "prefill": ("input_tokens_per_s", "requests_per_s", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99"),
    "decode": ("output_tokens_per_s", "requests_per_s", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99",
               "itl_ms_p50", "e2e_ms_mean"),
}
"""What a phase-pool record may state: a prefill pool's prompt throughput and time to first
token; a decode pool's token throughput and per-token latencies at its concurrency and context."""


class Slo(BaseModel):
    """Latency targets the measured rate met."""

    model_config = STRICT
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    percentile: float | None = Field(None, gt=0, le=100)


class Speculative(BaseModel):
    """Speculative decoding: a drafter proposes `tokens` tokens per step and the target model
    verifies them in the same forward pass.

    The acceptance is given as the source gives it, exactly one of: `acceptance_rate`, the
    probability that a draft token is accepted once the drafts before it were; or
    `accepted_length`, the mean tokens one verification step emits counting the target model's
    own token (TensorRT-LLM's "acceptance rate" of MTP, SGLang's "accept length", 1.0 without
    drafts). meshplan accepts each draft with one probability p until the first rejection, so a
    step emits L = (1 - p^(k+1)) / (1 - p) tokens for k drafts; an accepted_length is turned into
    the p that gives it (`probability`)."""

    model_config = STRICT
    method: Literal["mtp", "eagle"]
    """mtp: the model's own multi-token-prediction module drafts (DeepSeek-V3/R1's nextn layer,
    run autoregressively); eagle: a one-layer EAGLE head trained for the model."""
    tokens: int = Field(ge=1, le=64)
    """Draft tokens per step (TensorRT-LLM num_nextn_predict_layers, vLLM num_speculative_tokens,
    SGLang speculative_num_steps)."""
    acceptance_rate: float | None = Field(None, ge=0, lt=1)
    """Probability a draft token is accepted once the drafts before it were (0 <= p < 1)."""
    accepted_length: float | None = Field(None, ge=1)
    """Mean tokens one verification step emits, counting the target model's own (1 <= L < tokens + 1)."""

    @model_validator(mode="after")
    def _one_acceptance(self) -> "Speculative":
        if (self.acceptance_rate is None) == (self.accepted_length is None):
            raise ValueError(
                "give exactly one of acceptance_rate (the probability each draft token is accepted, "
                "0 <= p < 1) or accepted_length (mean tokens per step counting the target's own, "
                f"1 <= L < tokens + 1 = {self.tokens + 1})")
        if self.accepted_length is not None and self.accepted_length >= self.tokens + 1:
            raise ValueError(
                f"accepted_length={self.accepted_length:g} with tokens={self.tokens}: a step emits at "
                f"most tokens + 1 = {self.tokens + 1} (only if every draft is always accepted), so "
                f"give a value below {self.tokens + 1}")
        return self

    @property
    def probability(self) -> float:
        """The per-draft acceptance probability the simulator uses."""
        if self.acceptance_rate is not None:
            return self.acceptance_rate
        return acceptance_for_length(self.tokens, self.accepted_length)


DType = Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]


class Serving(BaseModel):
    """The `serving:` section."""

    model_config = STRICT
    engine: Literal["vllm", "sglang", "tensorrt-llm", "other"]
    engine_version: str | None = None
    tp: int | None = Field(None, ge=1)
    pp: int | None = Field(None, ge=1)
    ep: int | None = Field(None, ge=1)
    dp: int | None = Field(None, ge=1)
    replicas: int | None = Field(None, ge=1)
    weights_dtype: DType | None = None
    activations_dtype: DType | None = None
    kv_cache_dtype: DType | None = None
    disaggregated: Disaggregated | None = None
    router: Literal["round-robin", "least-outstanding", "prefix-affinity"] | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    block_size: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    scheduler_policy: Literal["max-utilization", "guaranteed-no-evict"] | None = None
    enforce_eager: bool | None = None
    num_scheduler_steps: int | None = Field(None, ge=1)
    enable_two_batch_overlap: bool | None = None
    speculative: Speculative | None = None
    """Speculative decoding, or null (off)."""
    workload: Workload
    slo: Slo | None = None


class Measured(BaseModel):
    """Measured outcomes; at least one key set."""

    model_config = STRICT
    tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    step_time_s: float | None = Field(None, gt=0)
    peak_memory_gib: float | None = Field(None, gt=0)
    oom: bool | None = None
    tflops_per_gpu_reported: float | None = None
    mfu_pct_reported: float | None = None
    flops_formula: str | None = None
    output_tokens_per_s: float | None = Field(None, gt=0)
    total_tokens_per_s: float | None = Field(None, gt=0)
    input_tokens_per_s: float | None = Field(None, gt=0)
    requests_per_s: float | None = Field(None, gt=0)
    ttft_ms_mean: float | None = Field(None, gt=0)
    ttft_ms_p50: float | None = Field(None, gt=0)
    ttft_ms_p99: float | None = Field(None, gt=0)
    tpot_ms_mean: float | None = Field(None, gt=0)
    tpot_ms_p50: float | None = Field(None, gt=0)
    tpot_ms_p99: float | None = Field(None, gt=0)
    itl_ms_p50: float | None = Field(None, gt=0)
    e2e_ms_mean: float | None = Field(None, gt=0)
    max_request_rate_under_slo: float | None = Field(None, gt=0)


class Record(BaseModel):
    """One measured training run or serving benchmark."""

    model_config = STRICT
    id: str
    kind: Literal["training", "serving"]
    source: dict[str, Any]
    model: str | dict[str, Any]
    hardware: Hardware
    training: Training | None = None
    serving: Serving | None = None
    measured: Measured
    notes: Any = None

    @model_validator(mode="after")
    def _phase_metrics(self) -> "Record":
        dis = self.serving.disaggregated if self.serving else None
        phase = dis.phase if dis else None
        if phase is None:
            return self
        allowed = PHASE_METRICS[phase]
        stray = [k for k, v in self.measured.model_dump(exclude_none=True).items() if k not in allowed]
        if stray:
            raise ValueError(f"a {phase}-pool record (serving.disaggregated with the other side null) "
                             f"cannot state {', '.join(stray)}; it may state {', '.join(allowed)}")
        return self
