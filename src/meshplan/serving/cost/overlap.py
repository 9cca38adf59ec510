"""Two-batch overlap: an iteration's MoE layers run as two micro-batches so that one's
expert-parallel dispatch and combine run while the other computes.

What the engines do (read in their sources and the LMSYS write-up, cited in
`serving/data/engine_defaults.yaml` under `two_batch_overlap`):

- SGLang (`--enable-two-batch-overlap`, python/sglang/srt/two_batch_overlap.py and
  operations_strategy.py): the batch is cut in two at the request boundary that halves its tokens
  (decode: half the requests; prefill: the prefix of prompts whose lengths reach half the sum).
  Each MoE layer is written as a list of operations with yield points between attention, the
  DeepEP dispatch, the expert GEMMs and the combine; the two micro-batches take turns, stage by
  stage, so the communication of one runs while the other computes. Prefill starts both
  micro-batches together; decode starts the second two stages behind the first. The dense layers
  before the first MoE layer (DeepSeek-V3's first three) run on the whole batch first, and the
  halves are merged again before the LM head (DeepseekV2Model.forward: `can_run_tbo`).
- vLLM (`--enable-dbo`, dual batch overlap, vllm/config/parallel.py): two micro-batches the same
  way, only for steps above a token threshold (32 decode-only, 512 with a prefill by default:
  `above_tokens` in engine_defaults.yaml, applied by IterationCost). SGLang's write-up says its TBO follows the design of
  DeepSeek's own inference system (deepseek-ai/profile-data), which overlaps two micro-batches in
  prefill and decode alike.

The cost model, for the MoE layers of one pipeline stage:

    time = max(compute of both halves, dispatch + combine of both halves) + exposed

where each half pays its own GEMMs at half the rows (the shared GEMM model prices small batches
worse, so with little communication to hide the overlap costs a little), its own kernel tails
(`layer_s`), its share of the attention, and its own all-to-alls (whose busiest-rank imbalance
is larger at half the tokens); `exposed` is what has no partner to hide under: the first
micro-batch's dispatch in the first MoE layer and the second's combine in the last. The overlap
is taken over the whole stage, not per layer: the micro-batches stay out of phase across layers,
so the pipeline fills and drains once per forward pass.

DeepEP's normal (prefill) kernels occupy SMs while they move data (20 of them by default:
meshplan.serving.cost.deepep.NORMAL_KERNEL_SMS), so the compute that hides them runs on the
remaining share 1 - s of the GPU: compute work C and a communication stream of M seconds take
max(M, C + s * M) (C fits inside M at the reduced rate, or M of it ran slowed and the rest at
full rate). The LMSYS breakdown shows the effect: per-kernel times of TBO at 16k tokens above
no-TBO at 8k. The low-latency decode kernels occupy none (s = 0).
"""

from __future__ import annotations

import numpy as np


def two_batch_time(compute, comm, exposed, stolen=0.0):
    """Seconds of the overlapped MoE layers: the longer of the compute stream (`compute`, both
    micro-batches, slowed by `stolen` x `comm` when the communication kernels occupy that share
    of the SMs) and the communication stream (`comm`, both micro-batches' dispatch and combine),
    plus the communication that nothing hides (`exposed`). Floats or arrays."""
    return np.maximum(compute + stolen * comm, comm) + exposed


def split_tokens(tokens: int) -> tuple[int, int]:
    """The two micro-batches' rows: halves, the first taking the odd row."""
    first = (tokens + 1) // 2
    return first, tokens - first
