"""Interruptions of a synchronous training job: per-component rates from fleet data (Llama 3,
Table 5) scaled by the job's GPUs, nodes and scale-out links, and the mean time between them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from meshplan.goodput.data import reliability

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Exposure:
    """What a job exposes to failures: counts of each unit an interruption rate scales with."""

    gpus: int
    nodes: int
    links: int
    """Scale-out links (one NIC port per GPU; none on a single node)."""

    def count(self, scales_with: str) -> float:
        return {"gpu": self.gpus, "node": self.nodes, "link": self.links, "job": 1}[scales_with]


def exposure(num_gpus: int, gpus_per_node: int, links_per_gpu: float = 1.0) -> Exposure:
    """The Exposure of `num_gpus` GPUs in nodes of `gpus_per_node`."""
    nodes = -(-num_gpus // gpus_per_node)
    return Exposure(gpus=num_gpus, nodes=nodes,
                    links=int(num_gpus * links_per_gpu) if nodes > 1 else 0)


@functools.cache
def rates_per_hour() -> dict[str, tuple[str, float]]:
    """Component -> (what it scales with, interruptions per unit-hour), unexpected ones from the
    Table 5 counts over the snapshot's exposure, plus `planned` (maintenance) per job-hour."""
    data = reliability()
    snap = data["snapshot"]
    hours = snap["days"] * 24.0
    seen = exposure(snap["num_gpus"], snap["gpus_per_node"], snap["links_per_gpu"])
    out = {}
    for row in data["components"]:
        count = sum(row["table5"].values())
        out[row["name"]] = (row["scales_with"], count / (seen.count(row["scales_with"]) * hours))
    planned = data["planned"]
    out["planned"] = (planned["scales_with"], planned["interruptions"] / hours)
    return out


def interruptions_per_hour(job: Exposure) -> dict[str, float]:
    """Expected interruptions per hour of the job's wall clock, by component (and `planned`)."""
    return {name: rate * job.count(unit) for name, (unit, rate) in rates_per_hour().items()}


def hardware_share(rates: dict[str, float]) -> float:
    """Share of the unexpected interruptions a hot spare node can replace (GPU, HBM, host, NIC):
    the failed part is in a server, which a spare takes over."""
    unexpected = {k: v for k, v in rates.items() if k != "planned"}
    hardware = sum(unexpected.get(k, 0.0) for k in ("gpu", "hbm", "host", "nic"))
    total = sum(unexpected.values())
    return hardware / total if total else 0.0
