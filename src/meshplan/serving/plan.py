"""`ServingPlan`: the decisions of a serving deployment (engine, layout, knobs, quantization).

A plan never holds a hardware number. Engine knobs keep the engines' own names
(`max_num_seqs`, `max_num_batched_tokens`, `gpu_memory_utilization`); fields left as None take
the engine's default for the GPU (see `meshplan.serving.engine.defaults`), reported as chosen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from meshplan.serving.versions import parse_release

SpeculativeMethod = Literal["eagle", "mtp"]
Engine = Literal["vllm", "sglang", "tensorrt-llm"]
WeightsDtype = Literal["auto", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
KVDtype = Literal["auto", "bf16", "fp16", "fp8", "int4", "int2"]
Router = Literal["round-robin", "least-outstanding", "prefix-affinity"]
SchedulerPolicy = Literal["max-utilization", "guaranteed-no-evict"]
KVOffload = Literal["none", "cpu"]

ENGINE_KV_DTYPES = {
    "vllm": "vLLM's --kv-cache-dtype offers fp8 (e4m3/e5m2)",
    "sglang": "SGLang's --kv-cache-dtype offers fp8_e4m3/fp8_e5m2, and fp4_e2m1 on Blackwell",
    "tensorrt-llm": "TensorRT-LLM quantizes the KV cache to fp8 or int8 (nvfp4 on Blackwell)",
}
"""What each engine's low-precision KV cache is (vLLM and SGLang docs, Quantized KV Cache pages;
TensorRT-LLM's kv_cache_quant_algo)."""


def pool_phase(prefill_gpus: int | None, decode_gpus: int | None) -> str | None:
    """The one phase pool a disaggregated deployment or record has when the other side is null
    ("prefill" or "decode"); None when both pools are there."""
    if decode_gpus is None:
        return "prefill"
    return "decode" if prefill_gpus is None else None


def _check_two_batch_overlap(plan: "ServingPlan") -> None:
    """Two-batch overlap hides expert-parallel all-to-alls: refused without them, and on
    TensorRT-LLM (no such option found in its documentation) unless what_if."""
    if plan.ep == 1:
        raise ValueError("enable_two_batch_overlap=true needs ep > 1: it overlaps one micro-batch's "
                         "expert-parallel dispatch and combine with the other's compute, and with ep=1 "
                         "there is no dispatch to hide")
    if plan.engine == "tensorrt-llm" and not plan.what_if:
        raise ValueError("enable_two_batch_overlap=true: TensorRT-LLM has no two-micro-batch overlap "
                         "option (SGLang --enable-two-batch-overlap, vLLM --enable-dbo have one); set "
                         "what_if=true (--what-if) to model it anyway")


MULTI_STEP_RELEASES = ((0, 5, 5), (0, 10, 1))
"""vLLM releases with V0 multi-step scheduling: added by vllm-project/vllm PR #7000 (0.5.5),
removed with the V0 engine's remnants by PR #22138 (after 0.10.0)."""


def _check_multi_step(plan: "ServingPlan") -> None:
    """Multi-step scheduling is vLLM V0's, modeled with its default scheduler (chunked prefill
    off: a prefill batch is one step, decode batches run num_scheduler_steps steps)."""
    n = plan.num_scheduler_steps
    if plan.engine != "vllm":
        raise ValueError(f"num_scheduler_steps={n}: multi-step scheduling is vLLM V0's "
                         f"(--num-scheduler-steps); {plan.engine} has no such option: use 1")
    if plan.chunked_prefill:
        raise ValueError(f"num_scheduler_steps={n} with chunked_prefill=true: meshplan models vLLM V0 "
                         "multi-step with its default scheduler (prefill batches of whole prompts); "
                         "set chunked_prefill=false or num_scheduler_steps=1")
    if plan.speculative_tokens:
        raise ValueError(f"num_scheduler_steps={n} with speculative_tokens: vLLM V0 runs speculative "
                         "decoding without multi-step scheduling; set one of them to its default")
    if plan.disaggregated is not None:
        raise ValueError(f"num_scheduler_steps={n}: multi-step scheduling is not modeled with "
                         "disaggregated prefill/decode pools; use 1")
    release = parse_release(plan.engine_version)
    lo, hi = MULTI_STEP_RELEASES
    if release is not None and not lo <= release < hi:
        raise ValueError(f"num_scheduler_steps={n}: vLLM {plan.engine_version} has no multi-step "
                         "scheduling (vLLM 0.5.5 to 0.10.0, V0 engine); use 1 or such a release")


class Disaggregation(BaseModel):
    """Prefill/decode disaggregation: separate pools, KV cache shipped from prefill to decode.

    One side None is a phase pool: only the other pool is simulated (a benchmark of the prefill
    pool alone, or of the decode pool alone with every request's prompt KV already present)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    prefill_gpus: int | None = Field(None, ge=1)
    """GPUs in the prefill pool (a multiple of prefill_tp x pp); None: no prefill pool, requests
    reach the decode pool with their prompt's KV already computed."""
    decode_gpus: int | None = Field(None, ge=1)
    """GPUs in the decode pool (a multiple of decode_tp x pp); None: no decode pool, a request
    ends with the first token its prefill samples."""
    prefill_tp: int = Field(1, ge=1)
    """Tensor-parallel size of each prefill instance."""
    decode_tp: int = Field(1, ge=1)
    """Tensor-parallel size of each decode instance."""

    @model_validator(mode="after")
    def _check(self) -> "Disaggregation":
        if self.prefill_gpus is None and self.decode_gpus is None:
            raise ValueError("disaggregated needs prefill_gpus or decode_gpus (null means that pool "
                             "is not part of the deployment; one of them must be)")
        return self

    @property
    def phase(self) -> str | None:
        """The one pool deployed ("prefill" or "decode"); None when both are."""
        return pool_phase(self.prefill_gpus, self.decode_gpus)


class ServingPlan(BaseModel):
    """How a model is served: engine, parallel layout per replica, replicas, knobs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    engine: Engine = "vllm"
    """Serving engine whose scheduler and kernels are modeled."""
    engine_version: str | None = None
    """Engine release (e.g. "0.13.0", "1.0"); selects the engine generation's constants where
    releases really differ (TensorRT-LLM before 1.0 built TensorRT engines, from 1.0 on its
    PyTorch backend is the default). None: the current generation."""
    tp: int = Field(1, ge=1)
    """Tensor-parallel size per replica (vLLM --tensor-parallel-size)."""
    pp: int = Field(1, ge=1)
    """Pipeline-parallel stages per replica (vLLM --pipeline-parallel-size)."""
    ep: int = Field(1, ge=1)
    """Expert-parallel size for MoE layers: the experts are divided over ep of the tp x dp GPUs
    of a pipeline stage, and each expert's matrices over the remaining tp x dp / ep (expert
    tensor parallelism, as TensorRT-LLM's moe_tensor_parallel_size x moe_expert_parallel_size =
    tp); ep must divide tp x dp."""
    dp: int = Field(1, ge=1)
    """Attention data parallelism inside one engine (each rank runs its own batch)."""
    replicas: int = Field(1, ge=1)
    """Independent engine replicas behind the router."""
    router: Router = "round-robin"
    """How requests are spread over replicas."""
    weights_dtype: WeightsDtype = "auto"
    """Weight precision of every decoder weight (fp8/int8/int4/fp4 quantized checkpoints); auto:
    the checkpoint's quantization_config per module group (gpt-oss: MXFP4 experts, bf16
    attention; DeepSeek-V3: block-scaled fp8), bf16 when it has none."""
    kv_cache_dtype: KVDtype = "auto"
    """KV-cache precision; auto: the activation dtype (fp16 for fp16 weights, else bf16).
    int4/int2: KIVI-style group-quantized KV (meshplan.serving.cost.kvquant), a what-if (needs
    what_if: no modeled engine ships it)."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Most requests in one iteration's batch; None: the engine default for the GPU."""
    max_num_batched_tokens: int | None = Field(None, ge=1)
    """Token budget of one iteration (prefill chunk + decodes); None: the engine default."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """Fraction of GPU memory the engine may use (weights + activations + KV cache); None:
    the engine default (vLLM 0.9; SGLang mem_fraction_static; TensorRT-LLM KV fraction)."""
    chunked_prefill: bool | None = None
    """Split long prompts over iterations within the token budget; None: engine default."""
    prefix_caching: bool | None = None
    """Reuse KV blocks of shared prompt prefixes; None: engine default (on in vLLM V1, SGLang)."""
    block_size: int | None = Field(None, ge=1)
    """Tokens per KV-cache block (page); None: engine default (vLLM 16, SGLang 1, TRT-LLM 32)."""
    scheduler_policy: SchedulerPolicy | None = None
    """TensorRT-LLM capacity scheduler: guaranteed-no-evict reserves each request's full KV at
    admission; max-utilization admits greedily and pauses requests when blocks run out."""
    speculative_tokens: int = Field(0, ge=0)
    """Draft tokens proposed per step (speculative decoding); 0: off."""
    acceptance_rate: float | None = Field(None, ge=0, lt=1)
    """Probability each draft token is accepted; required with speculative_tokens."""
    speculative_method: SpeculativeMethod = "eagle"
    """Drafter: "eagle" (a one-layer EAGLE-3 head trained for the model) or "mtp" (the model's
    own multi-token-prediction module, DeepSeek-V3's MTP: one of its decoder layers plus a
    projection of the hidden state and the next token's embedding)."""
    disaggregated: Disaggregation | None = None
    """Separate prefill and decode pools; None: prefill and decode share each replica."""
    num_scheduler_steps: int = Field(1, ge=1)
    """vLLM V0 multi-step scheduling (--num-scheduler-steps, releases 0.5.5 to 0.10.0): a decode
    batch runs this many forward steps per scheduler call, so requests arriving or finishing
    meanwhile wait for the batch's last step; prefill batches stay single steps (vLLM V0's
    default scheduler, chunked prefill off). 1: the scheduler runs before every step."""
    enforce_eager: bool = False
    """Run every iteration eagerly, without CUDA graphs (vLLM --enforce-eager, SGLang
    --disable-cuda-graph): small batches then wait on the host's kernel launches."""
    enable_two_batch_overlap: bool | None = None
    """Split each iteration's batch into two micro-batches so one's expert-parallel dispatch and
    combine run under the other's attention and GEMMs (SGLang --enable-two-batch-overlap, vLLM
    --enable-dbo; meshplan.serving.cost.overlap); needs ep > 1. None: the engine default (off)."""
    lora_adapters: int = Field(0, ge=0)
    """Distinct LoRA adapters the traffic uses, each request naming one (meshplan.serving.cost.lora);
    0: the base model only."""
    lora_rank: int = Field(16, ge=1)
    """Rank of the adapters (vLLM --max-lora-rank, default 16)."""
    max_loras: int | None = Field(None, ge=1)
    """Adapters resident in HBM and usable in one batch (vLLM --max-loras, SGLang
    --max-loras-per-batch); None: the engine default (vLLM 1, SGLang 8)."""
    kv_offload: KVOffload = "none"
    """cpu: a host-memory tier under the KV cache (LMCache, SGLang's hierarchical cache): prompt
    KV found there is copied back over the host link instead of recomputed
    (meshplan.serving.engine.kvtier); none: the GPU cache only."""
    kv_cpu_bytes: float | None = Field(None, gt=0)
    """Host memory for offloaded KV per replica, bytes (with kv_offload=cpu, when the hits come
    from the workload's prefix sharing)."""
    kv_hit_rate: float | None = Field(None, ge=0, le=1)
    """Share of each prompt found in the CPU tier, given instead of derived from the workload's
    prefix sharing (with kv_offload=cpu)."""
    what_if: bool = False
    """Allow options no modeled engine ships (int4/int2 KV cache): a what-if of the cost model.
    Without it a plan is refused as the engine would refuse it; exporters refuse such options."""

    @model_validator(mode="after")
    def _check(self) -> "ServingPlan":
        if self.speculative_tokens and self.acceptance_rate is None:
            raise ValueError("speculative_tokens needs acceptance_rate (the probability a draft token is accepted)")
        if self.kv_offload == "none" and (self.kv_cpu_bytes is not None or self.kv_hit_rate is not None):
            raise ValueError("kv_cpu_bytes and kv_hit_rate describe a CPU KV tier: set kv_offload='cpu'")
        if self.kv_offload == "cpu" and self.kv_cpu_bytes is None and self.kv_hit_rate is None:
            raise ValueError("kv_offload='cpu' needs kv_cpu_bytes (host memory for the KV, per replica) "
                             "or kv_hit_rate (the share of each prompt found there)")
        if self.enable_two_batch_overlap:
            _check_two_batch_overlap(self)
        stage = self.tp * self.dp
        if self.disaggregated is None and self.ep > 1 and stage % self.ep:
            valid = ", ".join(str(n) for n in range(1, stage + 1) if stage % n == 0)
            raise ValueError(f"ep={self.ep}: the experts are divided over the tp x dp = {stage} GPUs of a "
                             f"pipeline stage, so ep must divide {stage} (valid: {valid}); what is left "
                             "of tp x dp splits each expert's matrices (expert tensor parallelism)")
        if self.num_scheduler_steps > 1:
            _check_multi_step(self)
        if self.kv_cache_dtype in ("int4", "int2") and not self.what_if:
            raise ValueError(
                f"kv_cache_dtype={self.kv_cache_dtype!r}: {self.engine} has no {self.kv_cache_dtype} KV cache "
                f"({ENGINE_KV_DTYPES[self.engine]}); 4-/2-bit KV (KIVI, arXiv 2402.02750) is served by "
                f"Hugging Face transformers' QuantizedCache, not by vLLM, SGLang or TensorRT-LLM: set "
                f"what_if=true (--what-if) to model it anyway, or use kv_cache_dtype='fp8'")
        return self

    @property
    def mtp_drafts(self) -> bool:
        """Speculative decoding with the model's own MTP module (its weights join the replica)."""
        return self.speculative_tokens > 0 and self.speculative_method == "mtp"

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one engine replica uses (tp x pp x dp; experts are spread within them)."""
        return self.tp * self.pp * self.dp

    @property
    def num_gpus(self) -> int:
        """GPUs of the whole deployment."""
        if self.disaggregated is not None:
            d = self.disaggregated
            return (d.prefill_gpus or 0) + (d.decode_gpus or 0)
        return self.gpus_per_replica * self.replicas
