"""Re-derive nvidia-blackwell latency_inter_s (src/meshplan/costs/data/comm_constants.yaml) once
the collective model can run NCCL's tree as well as the ring.

Run: python scripts/fit_network_latency.py [path/to/hardware-microbench.yaml]

The per-step network latency was first fitted (scripts/fit_comm_constants.py) with every
multi-node all-reduce priced as a ring: 2(nodes - 1) network steps. NCCL (and AWS's tuner on EFA)
runs small and medium all-reduces across nodes as a tree, 2 log2(nodes) network steps, so on the
record it was fitted to (allreduce-busbw-aws-p6-b200-4nodes, 32 B200) the same plateau now
means a longer step. This script fits that one constant alone, every other constant as in the
YAML: least squares on log time over the record's points >= 128 KiB (the smaller two are
start-up artefacts, as in fit_comm_constants.py), each point priced by
meshplan.costs.comm.collective_choice, which also prints the algorithm it picks.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import minimize_scalar

from meshplan.costs.comm import collective_choice, family_constants
from meshplan.costs.placement import group_placement
from meshplan.hardware import Cluster
from meshplan.records import MICROBENCH

RECORD = "allreduce-busbw-aws-p6-b200-4nodes"
UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def measured_times(path: Path) -> list[tuple[float, float]]:
    """(payload bytes, seconds per call) of the record's points >= 128 KiB (busbw -> time)."""
    records = {r["id"]: r for r in yaml.safe_load(path.read_text())["records"]}
    rows = records[RECORD]["measured"]["busbw_GBps_by_payload"]
    n = records[RECORD]["hardware"]["count"]
    out = []
    for label, bw in rows:
        size = float(label[:-3]) * UNITS[label[-3:]]
        if size >= 2**17:
            out.append((size, size * 2 * (n - 1) / n / (bw * 1e9)))
    return out


def main() -> None:
    points = measured_times(Path(sys.argv[1]) if len(sys.argv) > 1 else MICROBENCH)
    cluster = Cluster.build("b200-180gb", 32)
    group = group_placement({"dp": 32}, "dp", ("dp",), cluster)
    base = family_constants("nvidia-blackwell")

    def errors(latency: float) -> np.ndarray:
        c = dataclasses.replace(base, latency_inter_s=latency)
        return np.array([np.log(collective_choice("all_reduce", s, group, cluster, c)[0] / t)
                         for s, t in points])

    fit = minimize_scalar(lambda us: float((errors(us * 1e-6) ** 2).sum()), bounds=(1, 500),
                          method="bounded", options={"xatol": 1e-3})
    best = fit.x * 1e-6
    for label, latency in (("YAML", base.latency_inter_s), ("fit", best)):
        rms = float(np.sqrt((errors(latency) ** 2).mean()))
        print(f"{label}: latency_inter_s {latency:.4g} rms log error {rms:.3f}")
    c = dataclasses.replace(base, latency_inter_s=best)
    for (size, seconds), err in zip(points, errors(best)):
        algo = collective_choice("all_reduce", size, group, cluster, c)[1]
        print(f"  {size / 2**20:10.3f} MiB  measured {seconds * 1e6:9.1f} us  {algo:12s} {err:+.3f}")


if __name__ == "__main__":
    main()
