"""Time of one engine iteration on one replica, from the shared op and collective costs.

An iteration runs every scheduled token (prefill chunks and one token per decoding request)
through the model once: GEMMs over all batched tokens with one read of the weights, prefill
attention over each chunk's context, decode attention reading each request's KV cache, the
tensor-parallel all-reduces, expert all-to-alls, and the LM head on the rows that sample.
The token-count dependent part is memoised per token count (iterations repeat the same sizes),
so one call costs a dictionary look-up and a few multiplications.

Pipeline parallelism: the batch is split into pp micro-batches that flow through the stages
together, so a step takes pp x the stage time of 1/pp of the batch (plus the stage hand-offs);
the engine schedules each micro-batch as its own step, so the fixed host time is paid pp times.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np

from meshplan.costs.comm import collective_time, load_constants, p2p_time
from meshplan.costs.constants import constants_for
from meshplan.costs.ops import attention_time, gemm_time, memory_time
from meshplan.costs.placement import group_placement
from meshplan.costs.routing import distinct_experts
from meshplan.hardware import Cluster
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec, MoEMLP
from meshplan.serving.cost.constants import EngineConstants
from meshplan.serving.cost.deepep import network_units, normal_copies, normal_pass_s, normal_sm_share, uses_deepep
from meshplan.serving.cost.graphs import GraphPolicy
from meshplan.serving.cost.kernels import (COMBINE_BYTES, dispatch_bytes_per_element, measured_constants,
                                           memory_bound_efficiency)
from meshplan.serving.cost.kvquant import dequant_s_per_byte
from meshplan.serving.cost.lora import layer_widths, lora_time
from meshplan.serving.cost.memory import KVLayout, kv_dtype, stage_layers
from meshplan.serving.cost.overlap import split_tokens, two_batch_time
from meshplan.serving.cost.weights import gemm_dtype, plan_precision, sixteen_bit
from meshplan.serving.plan import ServingPlan

ROOFLINE_ORDER = 2.0
"""GEMMs of serving batches sit near the roofline's ridge (tens to hundreds of rows), where
loads and math overlap only partly: time = (compute^2 + memory^2)^(1/2) instead of the ideal
max(compute, memory). On the TensorRT-LLM v0.13 records this removes most of the error's
dependence on the input/output lengths (spread of per-shape median error 0.07-0.20 -> 0.05-0.11)."""


class IterationCost:
    """Seconds of one iteration of a replica as a function of the batch it runs."""

    def __init__(self, model: ModelSpec, cluster: Cluster, plan: ServingPlan, kv: KVLayout,
                 engine: EngineConstants, graphs: GraphPolicy | None = None, device_scale: float = 1.0,
                 two_batch_overlap: bool = False, two_batch_above: tuple[int, int] = (1, 1)):
        self.model, self.cluster, self.plan, self.kv, self.k = model, cluster, plan, kv, engine
        self.graphs = graphs
        """When iterations replay a CUDA graph (None: always, no host floor)."""
        self.device = device_scale
        """Multiplier on device time (a site profile's serving.device; 1 = the packaged model)."""
        self.c = measured_constants(cluster.gpu, replace(constants_for(cluster.gpu),
                                                         hbm_efficiency=engine.weight_read_efficiency))
        """The GPU's op constants: its family's, or its measured rates (serving.cost.kernels)."""
        g = engine.grouped_gemm_efficiency
        self.c_experts = replace(self.c, gemm_efficiency=self.c.gemm_efficiency * g,
                                 fp8_gemm_efficiency=self.c.fp8_gemm_efficiency * g)
        self.formats = self._weight_formats()
        """(GEMM compute dtype, stored bytes per weight) of each group of weights: W8A8/W4A4 where
        the GPU has the peak, weight-only formats in 16-bit math over fewer bytes."""
        self.dtype = self.formats["experts"][0]
        self.dispatch_width = dispatch_bytes_per_element(plan.engine, self.dtype)
        """Bytes per hidden element of an expert-parallel dispatch (FP8 + scales, or 16 bits)."""
        self.layers = Counter(stage_layers(model, plan.pp))
        self.num_layers = sum(self.layers.values())
        self._memo: dict[int, float] = {}
        self._head_memo: dict[int, float] = {}
        self.moe_layers = sum(n for layer, n in self.layers.items() if isinstance(layer.mlp, MoEMLP))
        self._moe_overlap(two_batch_overlap, two_batch_above)
        self._groups()
        self._attention_rates()
        self.lora_widths = layer_widths(list(self.layers.elements()), model, plan.tp) if plan.lora_adapters else None
        """Adapted widths of the stage on one rank (multi-LoRA serving; None without adapters)."""

    def _weight_formats(self) -> dict[str, tuple[str, float]]:
        precision, sixteen = plan_precision(self.model, self.plan), sixteen_bit(self.plan)
        return {g: (gemm_dtype(precision.format(g), self.cluster.gpu.dtypes, sixteen),
                    precision.format(g).bits / 8) for g in ("attention", "mlp", "experts", "router")}

    def _moe_overlap(self, two_batch_overlap: bool, two_batch_above: tuple[int, int]) -> None:
        """How the MoE layers' all-to-alls run: two-batch overlap, and DeepEP's two modes."""
        plan = self.plan
        self.tbo = two_batch_overlap and plan.ep > 1 and self.moe_layers > 0
        """MoE layers run as two overlapping micro-batches (meshplan.serving.cost.overlap)."""
        self.tbo_above = two_batch_above
        """(decode-only, with a prefill): steps of more tokens than this are split."""
        deepep = uses_deepep(plan.engine, plan.ep, self.cluster) and self.moe_layers > 0
        self._mode_memos: tuple[dict, dict | None, dict | None] = ({}, {}, {}) if deepep else ({}, None, None)
        """Memos of `overlapped`, and under DeepEP of `linear_normal` and `overlapped` in normal
        mode (None without DeepEP): steps with prefill tokens dispatch with its normal kernels,
        decode-only steps with its low-latency ones (SGLang's --deepep-mode auto;
        meshplan.serving.cost.deepep). One attribute for the three: on CPython 3.11 a 30th
        instance attribute measurably slows every attribute read of the class (each step's)."""

    def _groups(self) -> None:
        p = self.plan
        sizes = {"tp": p.tp, "dp": p.dp, "pp": p.pp}
        self.tp_group = group_placement(sizes, "tp-dp-pp", ("tp",), self.cluster)
        self.ep_group = group_placement(sizes, "tp-dp-pp", ("tp", "dp"), self.cluster)

    def _attention_rates(self) -> None:
        gpu = self.cluster.gpu
        kv_read = memory_bound_efficiency(gpu.name, self.k.kv_read_efficiency)
        self.kv_read_s_per_byte = 1.0 / (gpu.hbm_bandwidth_bytes_per_s * kv_read)
        full = [l for l in self.layers.elements() if not _window(l)]
        windowed = [l for l in self.layers.elements() if _window(l)]
        self.full_flops_per_pair = sum(_pair_flops(l, self.plan.tp) for l in full)
        self.win_flops_per_pair = sum(_pair_flops(l, self.plan.tp) for l in windowed)
        self.window = max((_window(l) for l in windowed), default=0)
        self.attn_unit = attention_time(1e12, gpu=gpu, dtype="bf16", c=self.c, vendor_kernel=True) / 1e12
        self.dequant_s_per_byte = dequant_s_per_byte(kv_dtype(self.plan), gpu)
        """Dequantisation per KV byte read (4-/2-bit KV; 0 otherwise), added to the attention
        arithmetic that bounds a decode step's attention from below."""

    def __call__(self, tokens: int, seqs: int, decode_seqs: int, decode_ctx: float,
                 prefill_tokens: int, prefill_pairs: float, logits_rows: int) -> float:
        """Seconds for an iteration of `tokens` scheduled tokens over `seqs` requests, of which
        `decode_seqs` decode over `decode_ctx` cached tokens in total, and `prefill_tokens`
        prompt tokens whose causal (query, key) pairs number `prefill_pairs`."""
        pp = self.plan.pp
        eager = self.graphs is not None and not self.graphs.graphed(tokens, seqs, prefill_tokens)
        if pp > 1:
            tokens, decode_seqs = math.ceil(tokens / pp), decode_seqs / pp
            decode_ctx, prefill_tokens = decode_ctx / pp, prefill_tokens / pp
            prefill_pairs, logits_rows = prefill_pairs / pp, math.ceil(logits_rows / pp)
        if self.tbo and tokens > max(1, self.tbo_above[prefill_tokens > 0]):
            attention = self.decode_attention(decode_seqs, decode_ctx) + self.prefill_attention(prefill_tokens, prefill_pairs)
            stage = self._two_batch(tokens, attention, self.deepep and prefill_tokens > 0) + self.head(logits_rows)
        else:
            normal = prefill_tokens and self._mode_memos[1] is not None
            stage = (self.linear_normal(tokens) if normal else self.linear(tokens)) + self.head(logits_rows)
            stage += self.decode_attention(decode_seqs, decode_ctx)
            stage += self.prefill_attention(prefill_tokens, prefill_pairs)
        stage += self.num_layers * self.k.layer_s
        if pp > 1:
            stage += p2p_time(tokens * self.model.hidden_size * 2.0, False, self.cluster)
        stage *= self.device
        if eager:  # the GPU waits on the host's launches when its kernels are shorter
            stage = max(stage, self.graphs.host_floor_s)
        return pp * (stage + self.k.iteration_s + self.k.per_seq_s * seqs / pp)

    def batch(self, calls: np.ndarray) -> np.ndarray:
        """Seconds of many iterations at once: `calls` has one row of `__call__`'s arguments
        per iteration (vectorised; the token-dependent parts are evaluated once per size)."""
        t, seqs, dec, ctx, pre, pairs, rows = (calls[:, i] for i in range(7))
        eager = self._eager(t, seqs, pre)
        pp = self.plan.pp
        if pp > 1:
            t, rows = np.ceil(t / pp), np.ceil(rows / pp)
            dec, ctx, pre, pairs = dec / pp, ctx / pp, pre / pp, pairs / pp
        stage = self._by_mode(self.linear, self.linear_normal, t, pre) + _per_value(self.head, rows)
        read = ctx * self.kv.bytes_per_token + dec * self.kv.windowed_bytes_per_request
        flops = ctx * self.full_flops_per_pair + np.minimum(ctx, dec * self.window) * self.win_flops_per_pair
        compute = flops * self.attn_unit
        if self.dequant_s_per_byte:
            compute = compute + read * self.dequant_s_per_byte
        decode = np.where(dec > 0, np.maximum(read * self.kv_read_s_per_byte, compute), 0.0)
        stage += decode
        pflops = pairs * self.full_flops_per_pair + np.minimum(pairs, pre * self.window) * self.win_flops_per_pair
        prefill = np.where(pre > 0, pflops * self.attn_unit, 0.0)
        stage += prefill
        if self.tbo:  # two micro-batches in the steps above the engine's token threshold
            overlapped = self._two_batch_many(t, decode + prefill, pre) + _per_value(self.head, rows)
            above = np.maximum(1, np.where(pre > 0, self.tbo_above[1], self.tbo_above[0]))
            stage = np.where(t > above, overlapped, stage)
        stage += self.num_layers * self.k.layer_s  # in __call__'s order: equal to the last bit
        if pp > 1:
            stage += _per_value(lambda n: p2p_time(n * self.model.hidden_size * 2.0, False, self.cluster), t)
        stage = stage * self.device
        if eager is not None:
            stage = np.where(eager, np.maximum(stage, self.graphs.host_floor_s), stage)
        return pp * (stage + self.k.iteration_s + self.k.per_seq_s * seqs / pp)

    def _eager(self, tokens: np.ndarray, seqs: np.ndarray, prefill: np.ndarray) -> np.ndarray | None:
        """Which of many iterations run without a graph (None: all replay one)."""
        g = self.graphs
        if g is None:
            return None
        if g.scope == "tokens":
            return tokens > g.max_batch
        if g.scope == "decode":
            return np.where(prefill > 0, tokens > g.prefill_max_tokens, seqs > g.max_batch)
        return np.ones(tokens.shape, dtype=bool)

    @property
    def deepep(self) -> bool:
        """The replica dispatches with DeepEP (normal kernels for steps with prefill tokens)."""
        return self._mode_memos[1] is not None

    def _by_mode(self, fn, fn_normal, tokens: np.ndarray, prefill: np.ndarray) -> np.ndarray:
        """`fn` per distinct token count, or `fn_normal` for the steps with prefill tokens when
        the engine dispatches with DeepEP (its normal kernels; meshplan.serving.cost.deepep)."""
        if not self.deepep:
            return _per_value(fn, tokens)
        normal = prefill > 0
        out = np.empty(tokens.shape)
        out[normal] = _per_value(fn_normal, tokens[normal])
        out[~normal] = _per_value(fn, tokens[~normal])
        return out

    def linear(self, tokens: int) -> float:
        """GEMMs, memory-bound kernels and collectives of the stage's layers for `tokens` rows."""
        hit = self._memo.get(tokens)
        if hit is None:
            hit = sum(n * self._layer(layer, tokens) for layer, n in self.layers.items())
            self._memo[tokens] = hit
        return hit

    def linear_normal(self, tokens: int) -> float:
        """`linear` of a step whose expert-parallel dispatch runs DeepEP's normal kernels."""
        memo = self._mode_memos[1]
        hit = memo.get(tokens)
        if hit is None:
            hit = sum(n * self._layer(layer, tokens, True) for layer, n in self.layers.items())
            memo[tokens] = hit
        return hit

    def overlapped(self, tokens: int, normal: bool = False) -> tuple[float, float, float, float]:
        """The stage's layers for `tokens` rows under two-batch overlap: (layers before and
        between the MoE layers run on the whole batch; the MoE layers' compute of both halves;
        their dispatch + combine of both halves; the first half's first dispatch + the second
        half's last combine, which nothing hides). Memoised per token count and mode."""
        memo = self._mode_memos[2 if normal else 0]
        hit = memo.get(tokens)
        if hit is None:
            halves, whole, compute, comm, moe = split_tokens(tokens), 0.0, 0.0, 0.0, None
            for layer, n in self.layers.items():
                if not isinstance(layer.mlp, MoEMLP):
                    whole += n * self._layer(layer, tokens, normal)
                    continue
                moe = layer
                for rows in halves:
                    a2a = self._ep_comm(layer, rows, normal)
                    compute += n * (self._layer(layer, rows, normal) - a2a)
                    comm += n * a2a
            dispatch, _ = self._ep_parts(moe, halves[0], normal)
            _, combine = self._ep_parts(moe, halves[1], normal)
            hit = (whole, compute + self.moe_layers * self.k.layer_s, comm, dispatch + combine)
            memo[tokens] = hit
        return hit

    def _two_batch(self, tokens: int, attention: float, normal: bool = False) -> float:
        """GEMMs, collectives and `attention` of the stage under two-batch overlap: the MoE
        layers' share of the attention runs inside the overlapped compute; each micro-batch
        pays its own kernel tails (`layer_s` once more per MoE layer than the serial pass)."""
        whole, compute, comm, exposed = self.overlapped(tokens, normal)
        inside = attention * self.moe_layers / self.num_layers
        stolen = normal_sm_share(self.cluster.gpu.sm_count) if normal else 0.0
        return whole + (attention - inside) + float(two_batch_time(compute + inside, comm, exposed, stolen))

    def _two_batch_many(self, tokens: np.ndarray, attention: np.ndarray, prefill: np.ndarray) -> np.ndarray:
        """`_two_batch` over many iterations (token counts below 2 give placeholders that the
        caller replaces with the serial cost)."""
        parts = [self._by_mode(lambda n, i=i: self.overlapped(max(n, 2))[i],
                               lambda n, i=i: self.overlapped(max(n, 2), True)[i], tokens, prefill)
                 for i in range(4)]
        inside = attention * self.moe_layers / self.num_layers
        stolen = np.where(prefill > 0, normal_sm_share(self.cluster.gpu.sm_count), 0.0) if self.deepep else 0.0
        return parts[0] + (attention - inside) + two_batch_time(parts[1] + inside, parts[2], parts[3], stolen)

    def _gemm(self, m: float, n: float, k: float, c=None, group: str = "attention") -> float:
        dtype, width = self.formats[group]
        return gemm_time(m, n, k, gpu=self.cluster.gpu, dtype=dtype, c=c or self.c,
                         weight_width=width, roofline_order=ROOFLINE_ORDER)

    def _layer(self, layer: LayerSpec, t: int, normal: bool = False) -> float:
        a, tp, h = layer.attention, self.plan.tp, self.model.hidden_size
        if a.mla is None:
            proj = self._gemm(t, (a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.v_head_dim) / tp, h)
        else:
            m = a.mla
            proj = self._gemm(t, (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim, h)
            proj += self._gemm(t, a.num_heads * a.head_dim / tp, m.q_lora_rank or h)
            proj += self._gemm(t, a.num_heads * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank)
        proj += self._gemm(t, h, a.num_heads * a.v_head_dim / tp)
        mlp = layer.mlp
        if isinstance(mlp, DenseMLP):
            proj += self._mlp(mlp, t, tp, group="mlp") + self._activation(mlp, t, tp)
        else:
            proj += self._moe(mlp, t)
        elementwise = self._hbm(t * h * 2.0 * 10)
        return proj + elementwise + self._tp_comm(t) + self._ep_comm(layer, t, normal)

    def _hbm(self, nbytes: float) -> float:
        """Memory-bound passes moving `nbytes` (fused into neighbouring kernels: no launch)."""
        return memory_time(nbytes, gpu=self.cluster.gpu, c=self.c, kernels=0)

    def _activation(self, mlp: DenseMLP, rows: float, split: int) -> float:
        return self._hbm(activation_bytes(rows, mlp.intermediate_size / split, mlp.gated))

    def _mlp(self, mlp: DenseMLP, rows: float, split: int, c=None, group: str = "mlp") -> float:
        h, i = self.model.hidden_size, mlp.intermediate_size / split
        return self._gemm(rows, i * (2 if mlp.gated else 1), h, c, group) + self._gemm(rows, h, i, c, group)

    def _moe(self, mlp: MoEMLP, t: int) -> float:
        """Router, shared experts, and the routed experts this GPU holds: each reads its weights
        once if any token reaches it; tokens arrive from all attention-DP ranks. The experts run
        as grouped GEMMs at `grouped_gemm_efficiency` of the dense GEMM rate."""
        h, p = self.model.hidden_size, self.plan
        time = self._gemm(t, mlp.num_experts, h, group="router")
        if mlp.shared is not None:
            time += self._mlp(mlp.shared, t, p.tp) + self._activation(mlp.shared, t, p.tp)
        if p.ep > 1:  # the tp x dp / ep GPUs of an expert group split its matrices (expert TP)
            local, split, arriving = mlp.num_experts / p.ep, max(1, p.tp * p.dp // p.ep), t * p.dp
        else:
            local, split, arriving = mlp.num_experts, p.tp, t
        routed = arriving * mlp.top_k * local / mlp.num_experts * ep_imbalance(arriving * mlp.top_k, p.ep)
        active = local / mlp.num_experts * distinct_experts(arriving, mlp.top_k, mlp.num_experts)
        if active < 1e-9:
            return time
        per_expert = self._mlp(mlp.expert, routed / active, split, self.c_experts, "experts") - 2 * self.c.launch_s
        time += active * per_expert + 2 * self.c.launch_s  # one grouped GEMM per projection
        e = mlp.expert
        return time + self._hbm(moe_traffic_bytes(h, e.intermediate_size / split, e.gated, arriving, routed))

    def _tp_comm(self, t: int) -> float:
        if self.plan.tp == 1:
            return 0.0
        size = t * self.model.hidden_size * 2.0
        calls = 1 if self.model.parallel_residual else 2
        return calls * (collective_time("all_reduce", size, self.tp_group, self.cluster) + self.k.collective_s)

    def _ep_comm(self, layer: LayerSpec, t: int, normal: bool = False) -> float:
        """Dispatch of each token to its experts' ranks and the combine back: the busiest rank's
        share over the expert-parallel group, the dispatch in FP8 where the engine quantizes
        before sending (meshplan.serving.cost.kernels), the combine in 16 bits. Top-k copies as
        an all-to-all, or with `normal` DeepEP's one copy per destination node plus NVLink
        forwarding (meshplan.serving.cost.deepep)."""
        mlp = layer.mlp
        if not isinstance(mlp, MoEMLP) or self.plan.ep == 1:
            return 0.0
        if normal:
            return sum(self._ep_parts(layer, t, normal))
        rows = self._ep_rows(mlp, t)
        time = 2 * self.k.collective_s
        for width in (self.dispatch_width, COMBINE_BYTES):
            time += collective_time("all_to_all", rows * width, self.ep_group, self.cluster)
        return time

    def _ep_rows(self, mlp: MoEMLP, t: int) -> float:
        """Hidden elements the busiest expert-parallel rank sends (and receives back) for `t` rows."""
        return t * mlp.top_k * self.model.hidden_size * ep_imbalance(t * self.plan.dp * mlp.top_k, self.plan.ep)

    def _ep_parts(self, layer: LayerSpec, t: int, normal: bool = False) -> tuple[float, float]:
        """(dispatch, combine) of `_ep_comm`, each with its fixed collective time."""
        if normal:
            return tuple(self.k.collective_s + self._normal_pass(layer.mlp, t, width)
                         for width in (self.dispatch_width, COMBINE_BYTES))
        rows = self._ep_rows(layer.mlp, t)
        return tuple(self.k.collective_s + collective_time("all_to_all", rows * width, self.ep_group, self.cluster)
                     for width in (self.dispatch_width, COMBINE_BYTES))

    def _normal_pass(self, mlp: MoEMLP, t: int, width: float) -> float:
        """One DeepEP normal-kernel pass of the rank's `t` tokens at `width` bytes per element:
        network copies per remote node touched, NVLink copies per GPU touched; the busiest
        receiving node (of the replica's token-node pairs) and GPU (of its token-expert pairs)
        set the pace."""
        copies = normal_copies(mlp, self.ep_group, self.cluster)
        units = network_units(self.ep_group, self.cluster)[0]
        tokens = t * self.plan.dp
        imbalance = (ep_imbalance(tokens * copies[0] * units / max(units - 1, 1), units),
                     ep_imbalance(tokens * mlp.top_k, self.plan.ep))
        return normal_pass_s(t * self.model.hidden_size * width, copies, imbalance, self.cluster,
                             load_constants(self.cluster.gpu.name))

    def lora(self, tokens: int, adapters: int) -> float:
        """Batched LoRA kernels of an iteration of `tokens` rows using `adapters` distinct
        adapters (meshplan.serving.cost.lora.lora_time), per pipeline stage like `__call__`."""
        if self.lora_widths is None:
            return 0.0
        pp, gpu = self.plan.pp, self.cluster.gpu
        stage = lora_time(math.ceil(tokens / pp), adapters, self.plan.lora_rank, self.lora_widths,
                          hbm_s_per_byte=1.0 / (gpu.hbm_bandwidth_bytes_per_s * self.c.hbm_efficiency),
                          flop_s=1.0 / (gpu.peak_flops("bf16") * self.c.gemm_efficiency),
                          launch_s=self.c.launch_s)
        return pp * self.device * stage

    def draft(self, rows: int) -> float:
        """One draft-token proposal for `rows` requests: an EAGLE head is about one decoder layer
        (the first's shape) plus the LM head; an MTP module is one decoder layer like the last
        (an MoE layer for DeepSeek-V3, reading only the experts its tokens reach), the projection
        of [hidden state, next embedding] (2h -> h) and the shared LM head."""
        if self.plan.mtp_drafts:
            h = self.model.hidden_size
            layer = self.model.layers[-1]
            return self.device * (self._layer(layer, rows) + self._gemm(rows, h, 2 * h, group="mlp") + self.head(rows) + self.k.layer_s)
        layer = next(iter(self.layers))
        return self.device * (self._layer(layer, rows) + self.head(rows) + self.k.layer_s)

    def head(self, rows: int) -> float:
        """LM head over the rows that sample a token (vocab split over tp), in 16 bits."""
        if rows <= 0:
            return 0.0
        hit = self._head_memo.get(rows)
        if hit is None:  # iterations repeat the same sizes: price each once
            hit = gemm_time(rows, self.model.vocab_size / self.plan.tp, self.model.hidden_size,
                            gpu=self.cluster.gpu, dtype="bf16", c=self.c)
            self._head_memo[rows] = hit
        return hit

    def decode_attention(self, seqs: float, ctx: float) -> float:
        """Paged attention of decoding requests: reading their KV (windowed layers up to the
        window), bounded below by its FLOPs at fused-attention efficiency."""
        if seqs <= 0:
            return 0.0
        read = ctx * self.kv.bytes_per_token + seqs * self.kv.windowed_bytes_per_request
        flops = ctx * self.full_flops_per_pair + min(ctx, seqs * self.window) * self.win_flops_per_pair
        compute = flops * self.attn_unit
        if self.dequant_s_per_byte:  # 4-/2-bit KV: the fused kernel also dequantises what it reads
            compute += read * self.dequant_s_per_byte
        return max(read * self.kv_read_s_per_byte, compute)

    def prefill_attention(self, tokens: float, pairs: float) -> float:
        """Causal attention of prefill chunks: `pairs` (query, key) pairs; windowed layers see
        at most their window per query."""
        if tokens <= 0:
            return 0.0
        flops = pairs * self.full_flops_per_pair + min(pairs, tokens * self.window) * self.win_flops_per_pair
        return flops * self.attn_unit


def moe_traffic_bytes(hidden: int, intermediate: float, gated: bool, arriving: float, routed: float) -> float:
    """HBM bytes of the memory-bound passes around the expert GEMMs, in 16 bits: gathering the
    `arriving` tokens into expert order (one row per routed token-expert pair), the activation
    between the two grouped GEMMs (a gated one reads both halves and writes one), and the
    weighted sum of each token's top-k outputs: ~ (2 h + 3 i) x 2 bytes per routed row, top-k
    rows per token (a dense layer's few token-sized passes are the flat `elementwise` term of
    `_layer`). For fine-grained MoE (Qwen3-30B-A3B: h 2048, i 768, top-8) this traffic takes
    about as long per token on a B200 as the expert GEMMs' arithmetic."""
    return 2.0 * (arriving + routed) * hidden * 2 + activation_bytes(routed, intermediate, gated)


def activation_bytes(rows: float, intermediate: float, gated: bool) -> float:
    """HBM bytes of an MLP's activation kernel between its two GEMMs, in 16 bits: a gated one
    (SwiGLU) reads the gate and up halves and writes their product, a plain one reads and
    writes one intermediate row."""
    return 2.0 * rows * intermediate * (3 if gated else 2)


def ep_imbalance(routed: float, ep: int) -> float:
    """Busiest expert-parallel rank's load / the mean when `routed` token-expert pairs spread at
    random over `ep` ranks: the expected maximum of ep near-Poisson loads (Gaussian tail),
    1 + sqrt(2 ln(ep) / mean), never above all of them on one rank."""
    if ep <= 1 or routed <= 0:
        return 1.0
    mean = routed / ep
    return min(float(ep), 1.0 + math.sqrt(2.0 * math.log(ep) / mean))


def _per_value(fn, values: np.ndarray) -> np.ndarray:
    """fn applied once per distinct value of `values`, broadcast back (a decode stretch's
    token and row counts are one value: no sort then)."""
    if values.size and (values == values[0]).all():
        return np.array([fn(int(values[0]))]).repeat(values.size)
    unique, inverse = np.unique(values, return_inverse=True)
    return np.array([fn(int(v)) for v in unique])[inverse]


def _window(layer: LayerSpec) -> int:
    a = layer.attention
    return a.sliding_window or a.attention_chunk or 0


def _pair_flops(layer: LayerSpec, tp: int) -> float:
    """Attention FLOPs per (query, key) pair on one TP rank: scores and weighted values."""
    a = layer.attention
    heads = a.num_heads / tp
    if a.mla is not None:  # absorbed MLA: scores and values over the latent (+ rope key)
        return 2.0 * heads * (2 * a.mla.kv_lora_rank + a.mla.qk_rope_head_dim)
    return 2.0 * heads * (a.head_dim + a.v_head_dim)
