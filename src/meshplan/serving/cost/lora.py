"""Multi-LoRA serving (S-LoRA, arXiv 2311.03285; Punica, arXiv 2310.18547): many low-rank
adapters over one base model, each request naming one.

What it adds to a replica:
- memory: `max_loras` adapter slots preallocated in HBM (vLLM sizes them at max_lora_rank), taken
  from the KV cache;
- time per iteration: the batched LoRA kernels (Punica's SGMV / vLLM's punica kernels), a
  shrink x A and an expand x B per adapted projection, reading the A and B of every adapter
  active in the batch and the tokens' activations (memory-bound at small ranks), plus their
  2 r (d_in + d_out) FLOPs per token;
- admission: a batch holds at most `max_loras` distinct adapters (a request whose adapter
  would exceed that waits and later ones go first, as vLLM's scheduler skips it);
- swaps: an adapter not resident is copied host -> GPU over the host link (PCIe) before the
  iteration that first needs it; the least recently used idle adapter leaves its slot.

Adapted projections: attention q, k, v, o and the dense MLP's gate, up and down (the modules
vLLM and SGLang adapt by default); routed experts are not adapted. Adapters are kept in 16
bits. Sharding follows vLLM's tensor-parallel LoRA layers: a column-parallel projection keeps
A whole and splits B by output; a row-parallel one (o, down) splits A by input and keeps B whole.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict

import numpy as np

from meshplan.errors import ConfigError
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec

LORA_BYTES = 2.0
"""Bytes per adapter weight (adapters are served in the base model's 16-bit dtype)."""

DEFAULT_MAX_LORAS = {"vllm": 1, "sglang": 8}
"""Adapter slots when the plan leaves max_loras unset: vLLM EngineArgs --max-loras (1) and
SGLang ServerArgs --max-loras-per-batch (8)."""

FIRST_VERSION = {"vllm": (0, 3), "sglang": (0, 3)}
"""First releases serving several LoRA adapters at once: vLLM 0.3.0 (multi-LoRA, January 2024)
and SGLang 0.3 (multi-LoRA serving, sgl-project/sglang pull request 1307, September 2024)."""

KERNELS_PER_PROJECTION = 2
"""A shrink and an expand kernel per adapted (packed) projection."""


def check_lora(model: ModelSpec, engine: str, version: str | None) -> None:
    """Refuse LoRA serving where it is not available or not modeled, naming what is."""
    if engine not in FIRST_VERSION:
        raise ConfigError(f"lora_adapters: multi-LoRA serving is modeled for vLLM and SGLang, not {engine}")
    first = FIRST_VERSION[engine]
    match = re.match(r"\s*v?(\d+)\.(\d+)", version or "")
    if match and (int(match.group(1)), int(match.group(2))) < first:
        raise ConfigError(f"lora_adapters: {engine} {version} has no multi-LoRA serving; it arrived in "
                          f"{engine} {first[0]}.{first[1]}.0")
    if any(layer.attention.mla is not None for layer in model.layers):
        raise ConfigError(f"lora_adapters: {model.name} uses multi-head latent attention; LoRA on its "
                          f"projections is not modeled")


def projections(layer: LayerSpec, model: ModelSpec) -> list[tuple[int, int, bool]]:
    """(d_in, d_out, column_parallel) of each adapted projection of `layer`."""
    a, h = layer.attention, model.hidden_size
    out = [(h, a.num_heads * a.head_dim, True), (h, a.num_kv_heads * a.head_dim, True),
           (h, a.num_kv_heads * a.v_head_dim, True), (a.num_heads * a.v_head_dim, h, False)]
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        i = mlp.intermediate_size
        out += [(h, i, True)] * (2 if mlp.gated else 1) + [(i, h, False)]
    return out


def _local(d_in: int, d_out: int, column: bool, tp: int) -> tuple[float, float]:
    """(input, output) widths of one projection's A and B on one TP rank."""
    return (d_in, d_out / tp) if column else (d_in / tp, d_out)


def adapter_params(model: ModelSpec, rank: int) -> int:
    """Weights of one adapter of `rank` over every layer (no tensor parallelism)."""
    return sum(rank * (i + o) for layer in model.layers for i, o, _ in projections(layer, model))


def layer_widths(layers: list[LayerSpec], model: ModelSpec, tp: int) -> tuple[float, float, int]:
    """Summed over `layers` on one TP rank: A input widths, B output widths, packed projections
    (q/k/v as one, gate/up as one: vLLM's packed LoRA layers)."""
    d_in = d_out = 0.0
    packed = 0
    for layer in layers:
        for i, o, column in projections(layer, model):
            li, lo = _local(i, o, column, tp)
            d_in, d_out = d_in + li, d_out + lo
        packed += 4 if isinstance(layer.mlp, DenseMLP) else 2
    return d_in, d_out, packed


def lora_time(tokens: float, adapters: int, rank: int, widths: tuple[float, float, int], *,
              hbm_s_per_byte: float, flop_s: float, launch_s: float) -> float:
    """Seconds of the batched LoRA kernels of one iteration: the larger of reading the active
    adapters' A and B plus the activations (x in, r-wide intermediate out and in, y read and
    written), and their FLOPs; plus the kernel launches."""
    if adapters <= 0 or tokens <= 0:
        return 0.0
    d_in, d_out, packed = widths
    weights = adapters * rank * (d_in + d_out) * LORA_BYTES
    acts = tokens * (d_in + 2 * d_out + 2 * rank * packed) * LORA_BYTES
    flops = 2.0 * tokens * rank * (d_in + d_out)
    return max((weights + acts) * hbm_s_per_byte, flops * flop_s) + KERNELS_PER_PROJECTION * packed * launch_s


def assign_adapters(n: int, adapters: int, popularity: str, exponent: float, seed: int) -> np.ndarray:
    """The adapter of each of `n` requests: uniform over `adapters`, or Zipf (adapter k drawn
    with probability proportional to 1 / (k+1)^exponent). A stream of its own, so the rest of
    the workload is the same with or without adapters."""
    rng = np.random.default_rng([seed, 0x10A])
    if popularity == "uniform":
        return rng.integers(adapters, size=n)
    weights = 1.0 / np.arange(1, adapters + 1) ** exponent
    return rng.choice(adapters, size=n, p=weights / weights.sum())


class AdapterSlots:
    """The adapters resident in one replica's HBM: `slots` of them, least recently used first."""

    def __init__(self, slots: int, load_s: float):
        self.slots, self.load_s = slots, load_s
        self.resident: OrderedDict[int, None] = OrderedDict()
        self.loads = 0
        """Host -> GPU adapter copies so far."""

    def admissible(self, adapter: int, active: set[int]) -> bool:
        """Whether a request of `adapter` may join a batch already using `active` adapters."""
        return adapter in active or len(active) < self.slots

    def make_resident(self, active: set[int]) -> int:
        """Load the active adapters that are not resident, evicting idle ones; returns loads."""
        loads = 0
        for adapter in active:
            if adapter in self.resident:
                self.resident.move_to_end(adapter)
                continue
            if len(self.resident) >= self.slots:
                idle = next((a for a in self.resident if a not in active), None)
                if idle is not None:
                    del self.resident[idle]
            self.resident[adapter] = None
            loads += 1
        self.loads += loads
        return loads


def lora_slots(plan) -> int:
    """Adapter slots of a replica: the plan's max_loras, else the engine default."""
    return plan.max_loras or DEFAULT_MAX_LORAS.get(plan.engine, 1)


def adapter_bytes(layers: list[LayerSpec], model: ModelSpec, tp: int, rank: int) -> float:
    """HBM bytes of one adapter's share of `layers` on one TP rank."""
    d_in, d_out, _ = layer_widths(layers, model, tp)
    return rank * (d_in + d_out) * LORA_BYTES


def load_seconds(adapter_bytes_per_gpu: float, link_bytes_per_s: float) -> float:
    """One adapter's copy host -> GPU: each GPU copies its shard over its own host link."""
    return adapter_bytes_per_gpu / link_bytes_per_s if math.isfinite(link_bytes_per_s) else 0.0
