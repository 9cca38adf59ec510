"""MoE routing imbalance: how many routed tokens the busiest expert and expert-parallel rank get.

A router does not spread tokens evenly: some experts are hot. Given each expert's share of the
routed token copies (`--expert-skew zipf:s=1.2`, or a measured profile file), experts laid out
contiguously over the EP ranks (rank r holds experts r E/ep .. (r+1) E/ep - 1, Megatron's
layout), the busiest rank receives ep x (its experts' shares) times the mean rank's tokens: its
all-to-all and grouped GEMMs set the layer's time.

Balancing (`TrainingPlan.moe_balance`):
- none: the shares as given.
- aux-free: auxiliary-loss-free balancing (a per-expert routing bias nudged against the load,
  DeepSeek-V3, arXiv 2412.19437 §2.1.2; Wang et al., arXiv 2408.15664) pulls the shares toward
  uniform until the hottest expert is at most AUX_FREE_RESIDUAL over the mean.
- eplb: DeepSeek's expert-parallel load balancer: REDUNDANT_SLOTS_PER_RANK extra expert slots per
  EP rank hold replicas of the hottest experts (each replica taking an equal part of its
  expert's tokens; greedily, the expert with the most tokens per replica gets the next one), and
  the replicas are packed onto ranks heaviest first, each to the least-loaded rank with a free
  slot.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from meshplan.errors import ConfigError
from meshplan.training.imbalance.doclengths import load_json, read_text

if TYPE_CHECKING:
    import numpy as np

MOE_BALANCE = ("none", "aux-free", "eplb")
AUX_FREE_RESIDUAL = 0.05
"""Hottest expert's load over the mean left by auxiliary-loss-free balancing (assumption: the
bias update, nudged every step against the load, keeps experts within a few percent of even
over a global batch)."""
REDUNDANT_SLOTS_PER_RANK = 1
"""Extra expert slots per EP rank under EPLB (assumption: one replica slot per rank; DeepSeek-V3
deploys redundant experts the same way, arXiv 2412.19437 §3.4)."""
EXAMPLE = "zipf:s=1.2 (hot experts spread by a seeded shuffle), or a file of per-expert token shares"


@dataclass(frozen=True, slots=True)
class RoutingLoad:
    """Routed tokens of the busiest expert and EP rank, relative to the mean."""

    busiest_expert: float
    """Tokens of the busiest expert (replica, under EPLB) / the mean expert's."""
    busiest_rank: float
    """Tokens of the busiest EP rank / the mean rank's: the factor on expert GEMMs and all-to-all."""

    def to_dict(self) -> dict[str, float]:
        return {"busiest_expert_load": self.busiest_expert, "busiest_ep_rank_load": self.busiest_rank}


def _zipf(spec: str, experts: int) -> np.ndarray:
    import numpy as np
    params = {"seed": 0.0}
    for item in filter(None, (p.strip() for p in spec.partition(":")[2].split(","))):
        key, _, value = item.partition("=")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            params[key.strip()] = float("nan")
    if set(params) != {"s", "seed"} or not params["s"] >= 0 or not params["seed"] >= 0:
        raise ConfigError(f"--expert-skew {spec!r}: zipf takes s=EXPONENT (>= 0) and optionally "
                          f"seed=N, e.g. {EXAMPLE}")
    shares = np.arange(1, experts + 1, dtype=float) ** -params["s"]
    rng = np.random.default_rng(int(params["seed"]))
    return shares[rng.permutation(experts)] / shares.sum()


@functools.lru_cache(maxsize=16)
def read_profile(path: str) -> tuple[float, ...]:
    """Per-expert token shares from a file: a JSON list, or one number per line (or CSV row)."""
    text = read_text(path, "--expert-skew")
    if path.lower().endswith(".json"):
        values = load_json(text, path, "--expert-skew")
        values = values.get("shares") if isinstance(values, dict) else values
        rows = list(enumerate(values if isinstance(values, list) else [], 1))
    else:
        rows = [(i, line.split(",")[-1].strip()) for i, line in enumerate(text.splitlines(), 1)
                if line.strip()]
        if rows and not _is_number(rows[0][1]):
            rows = rows[1:]  # a CSV header
    out = []
    for line, value in rows:
        share = float(value) if _is_number(value) else -1.0
        if not share >= 0 or share == float("inf"):
            raise ConfigError(f"--expert-skew {path}: line {line} has {value!r}; every expert "
                              f"share must be a finite number >= 0")
        out.append(share)
    if not out or sum(out) <= 0:
        raise ConfigError(f"--expert-skew {path}: no positive expert shares in the file")
    return tuple(out)


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def expert_shares(spec: str, experts: int) -> np.ndarray:
    """Each expert's share of the routed token copies (sums to 1)."""
    import numpy as np
    if spec.strip() == "uniform":
        return np.full(experts, 1.0 / experts)
    if spec.partition(":")[0].strip() == "zipf":
        return _zipf(spec, experts)
    if not Path(spec).is_file():
        raise ConfigError(f"--expert-skew {spec!r}: neither zipf:s=... nor a file (use {EXAMPLE})")
    shares = np.asarray(read_profile(str(Path(spec).resolve())))
    if len(shares) != experts:
        raise ConfigError(f"--expert-skew {spec}: {len(shares)} shares, but the model has "
                          f"{experts} routed experts (one share per expert)")
    return shares / shares.sum()


def aux_free(shares: np.ndarray) -> np.ndarray:
    """Shares pulled toward uniform until the hottest is at most AUX_FREE_RESIDUAL over the mean."""
    e = len(shares)
    over = e * shares.max() - 1.0
    if over <= AUX_FREE_RESIDUAL:
        return shares
    keep = AUX_FREE_RESIDUAL / over
    return 1.0 / e + keep * (shares - 1.0 / e)


def eplb_rank_loads(shares: np.ndarray, ep: int, slots: int) -> tuple[np.ndarray, float]:
    """(per-rank load, busiest replica's load) when `slots` redundant replicas are given to the
    experts with the most load per replica, and replicas packed heaviest first onto the
    least-loaded rank that has a free slot."""
    import numpy as np
    e = len(shares)
    replicas = np.ones(e, dtype=np.int64)
    for _ in range(slots):
        replicas[int(np.argmax(shares / replicas))] += 1
    per_replica = np.repeat(shares / replicas, replicas)
    capacity = (e + slots) // ep
    loads, used = np.zeros(ep), np.zeros(ep, dtype=np.int64)
    heap = [(0.0, r) for r in range(ep)]
    for load in np.sort(per_replica)[::-1].tolist():
        total, r = heapq.heappop(heap)
        loads[r] += load
        used[r] += 1
        if used[r] < capacity:
            heapq.heappush(heap, (total + load, r))
    return loads, float(per_replica.max())


@functools.lru_cache(maxsize=256)
@functools.lru_cache(maxsize=256)
def routing_load(spec: str, experts: int, ep: int, balance: str) -> RoutingLoad:
    """Busiest expert and EP rank load for `spec`'s shares under `balance` (cached: every MoE
    layer of every searched plan asks, and a measured profile is a file read)."""
    shares = expert_shares(spec, experts)
    if balance == "aux-free":
        shares = aux_free(shares)
    if balance == "eplb" and ep > 1:
        loads, hottest = eplb_rank_loads(shares, ep, REDUNDANT_SLOTS_PER_RANK * ep)
        mean_replica = 1.0 / (experts + REDUNDANT_SLOTS_PER_RANK * ep)
        return RoutingLoad(hottest / mean_replica, float(loads.max()) * ep)
    per_rank = shares.reshape(ep, -1).sum(axis=1)  # resolve_plan checked that ep divides experts
    return RoutingLoad(float(shares.max()) * experts, float(per_rank.max()) * ep)
