"""A CPU tier under the GPU KV cache (LMCache with vLLM, SGLang's hierarchical cache): the KV of
computed prompt prefixes is also kept in host memory, and a later request whose prefix is there
but no longer in HBM copies it back over the host link instead of recomputing it.

Two ways to say how much is found there:
- from the workload's prefix sharing: prefix units (the block-hash units of the GPU cache) are
  stored in an LRU of `kv_cpu_bytes` when their prefill ends, and a request looks for the
  units after its GPU hit;
- a given hit rate h: that share of every prompt (beyond its GPU hit) comes from the CPU tier.

The copy back is priced at the host link's bandwidth (each GPU of a replica moves its own shard
over its own link, one direction) and is not overlapped with the iteration's compute
(assumption: a conservative reading of layer-wise overlap). Storing is asynchronous and free.
"""

from __future__ import annotations

from collections import OrderedDict


class CpuTier:
    """The prefix units one replica keeps in host memory, least recently used first."""

    def __init__(self, capacity_units: int, hit_rate: float | None, load_s_per_token: float):
        self.capacity = capacity_units
        self.hit_rate = hit_rate
        """A given share of each prompt found here; None: look the units up."""
        self.load_s_per_token = load_s_per_token
        """Seconds to copy one token's KV (this GPU's shard) host -> GPU."""
        self.units: OrderedDict[int, None] = OrderedDict()
        self.loaded_tokens = 0
        """Tokens copied back over the run."""

    def found(self, hashes: tuple[int, ...], prompt: int, gpu_tokens: int, unit_tokens: int) -> int:
        """Tokens of a prompt (after the `gpu_tokens` the GPU cache holds) served from here; at
        least the prompt's last token is always computed."""
        room = prompt - 1 - gpu_tokens
        if room <= 0:
            return 0
        if self.hit_rate is not None:
            return max(0, min(room, int(self.hit_rate * prompt) - gpu_tokens))
        hit = 0
        for h in hashes[gpu_tokens // unit_tokens:]:
            if h not in self.units:
                break
            self.units.move_to_end(h)
            hit += 1
        return min(room, hit * unit_tokens)

    def store(self, hashes: tuple[int, ...]) -> None:
        """Keep these units (a finished prefill's), evicting the least recently used."""
        if self.hit_rate is not None or self.capacity <= 0:
            return
        for h in hashes:
            if h in self.units:
                self.units.move_to_end(h)
                continue
            if len(self.units) >= self.capacity:
                self.units.popitem(last=False)
            self.units[h] = None


def capacity_units(kv_cpu_bytes: float, gpus: int, bytes_per_token: float, unit_tokens: int) -> int:
    """Prefix units that fit in a replica's `kv_cpu_bytes` of host memory: every GPU's shard of a
    unit is `unit_tokens x bytes_per_token`, and the replica's `gpus` shards share the memory."""
    return int(kv_cpu_bytes // (gpus * bytes_per_token * unit_tokens))
