"""Fit the communication constants of src/meshplan/costs/data/comm_constants.yaml.

Run: python scripts/fit_comm_constants.py [path/to/hardware-microbench.yaml]
Prints the fitted constants and each record's reproduction error (with the YAML's constants
for the records not fitted); copy the values into the YAML by hand, with the date. Every
prediction goes through meshplan.costs.comm itself.

Blackwell (records allreduce-busbw-aws-p6-b200-1node / -4nodes):
1. Efficiencies are asymptotes, set so the model meets the largest payloads exactly: ring
   scale_up_efficiency at 4 GiB on one node (the ring region: busbw flat 2-4 GiB), NVLS at
   16 GiB on one node (the jump at 8 GiB), scale_out_efficiency at 16 GiB on 4 nodes.
2. latency_intra_s, latency_inter_s and half_bandwidth_bytes by least squares on log time over
   the 1-node points <= 4 GiB and the 4-node points >= 128 KiB (32 and 64 KiB take longer
   than 128 KiB: start-up artefacts). With saturation chunk/(chunk + h) and chunk = S/n, h
   adds exactly steps x h / bandwidth, so per link class h trades against the per-step
   latency; the two tables pin only two combinations. Weak log-priors (weight PRIOR_WEIGHT)
   pick the point of that valley nearest NCCL's own numbers: per-step latency 3.4 us (NVLink)
   and 9.6 us (network), ring/Simple hwLat of NCCL's src/graph/tuning.cc, and a 512 KiB chunk
   (Simple protocol: 4 MiB NCCL_BUFFSIZE over 8 NCCL_STEPS).
Ampere (allreduce-a100-40gb-3nodes-4xhdr: nccl-tests -b 8 -e 128M, default 1 MiB steps):
3. scale_out_efficiency = peak busbw 96 GB/s / 100 GB/s node line rate; then one common scale
   on Blackwell's two latencies so that the model's average busbw over those sizes meets the
   reported 84.8 GB/s (half_bandwidth_bytes from Blackwell, scale_up_efficiency from the YAML).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from meshplan.costs.comm import bus_bandwidth, collective_time, family_constants, p2p_time
from meshplan.costs.placement import group_placement
from meshplan.records import MICROBENCH
from meshplan.hardware import Cluster

RECORDS = MICROBENCH
UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
GIB, GBPS = 2**30, 1e9
PRIORS = {"latency_intra_s": 3.4e-6, "latency_inter_s": 9.6e-6, "half_bandwidth_bytes": 2**19}
PRIOR_WEIGHT = 0.1
FITTED = tuple(PRIORS)
B200_1, B200_4 = "allreduce-busbw-aws-p6-b200-1node", "allreduce-busbw-aws-p6-b200-4nodes"


def load(path: Path) -> dict[str, dict]:
    """Microbenchmark records by id."""
    return {r["id"]: r for r in yaml.safe_load(path.read_text())["records"]}


def table(record: dict) -> list[tuple[float, float]]:
    """(payload bytes, busbw bytes/s) rows of a busbw_GBps_by_payload table."""
    rows = record["measured"]["busbw_GBps_by_payload"]
    return [(float(s[:-3]) * UNITS[s[-3:]], bw * GBPS) for s, bw in rows]


def busbw(consts, gpu: str, n: int, size: float, op: str = "all_reduce", **over) -> float:
    """Modelled busbw (bytes/s) of one collective over all `n` GPUs of a cluster."""
    cluster = Cluster.build(gpu, n, **over)
    group = group_placement({"dp": n}, "dp", ("dp",), cluster)
    return bus_bandwidth(op, size, n, collective_time(op, size, group, cluster, consts))


def ring_only(c):
    """The constants with NVLS switched off."""
    return dataclasses.replace(c, nvls_allreduce_efficiency=0.0)


def set_asymptotes(c, one: list, four: list):
    """Scale each efficiency so the model meets its largest-payload point exactly."""
    s4, bw4 = next((s, bw) for s, bw in one if s == 4 * GIB)
    up = c.scale_up_efficiency * bw4 / busbw(ring_only(c), "b200-180gb", 8, s4)
    nvls = c.nvls_allreduce_efficiency * one[-1][1] / busbw(c, "b200-180gb", 8, one[-1][0])
    out = c.scale_out_efficiency * four[-1][1] / busbw(c, "b200-180gb", 32, four[-1][0])
    return dataclasses.replace(c, scale_up_efficiency=up, nvls_allreduce_efficiency=nvls,
                               scale_out_efficiency=out)


def residuals(x: np.ndarray, c, one: list, four: list) -> np.ndarray:
    """Log busbw errors on both tables, then the weak log-priors."""
    c = dataclasses.replace(c, **dict(zip(FITTED, np.exp(x))))
    out = [np.log(bw / busbw(ring_only(c), "b200-180gb", 8, s)) for s, bw in one if s <= 4 * GIB]
    out += [np.log(bw / busbw(c, "b200-180gb", 32, s)) for s, bw in four if s >= 2**17]
    out += [PRIOR_WEIGHT * (xi - np.log(PRIORS[k])) for k, xi in zip(FITTED, x)]
    return np.array(out)


def fit_blackwell(recs: dict):
    """Asymptotes, then latencies and half-bandwidth, iterated to a fixed point."""
    one, four = table(recs[B200_1]), table(recs[B200_4])
    c = family_constants("nvidia-blackwell")
    for _ in range(4):
        c = set_asymptotes(c, one, four)
        res = least_squares(residuals, np.log([getattr(c, k) for k in FITTED]), args=(c, one, four))
        c = dataclasses.replace(c, **dict(zip(FITTED, np.exp(res.x))))
    return c, res


def nccl_tests_sizes() -> list[float]:
    """nccl-tests -b 8 -e 128M with the default 1 MiB step."""
    return [8.0 + k * 2**20 for k in range(128)]


def fit_ampere(recs: dict, base):
    """scale_out_efficiency = peak busbw / node line rate; then one scale on Blackwell's two
    latencies so that the modelled average busbw over the nccl-tests sizes meets the record's.
    Returns the constants, the scale, and the (avg, peak) relative errors."""
    m = recs["allreduce-a100-40gb-3nodes-4xhdr"]["measured"]
    avg, peak = m["avg_busbw_GBps"] * GBPS, m["peak_busbw_GBps"] * GBPS
    base = dataclasses.replace(base, scale_out_efficiency=peak / (4 * 200e9 / 8))  # 4x HDR

    def scaled(x: np.ndarray):
        return dataclasses.replace(base, latency_intra_s=np.exp(x[0]) * base.latency_intra_s,
                                   latency_inter_s=np.exp(x[0]) * base.latency_inter_s)

    def busbws(x: np.ndarray) -> list[float]:
        c = scaled(x)
        return [busbw(c, "a100-sxm-40gb", 24, s, inter_node_gbps_per_gpu=100) for s in nccl_tests_sizes()]

    res = least_squares(lambda x: [np.log(np.mean(busbws(x)) / avg)], [0.0])
    bws = busbws(res.x)
    return scaled(res.x), float(np.exp(res.x[0])), (np.mean(bws) / avg - 1, np.max(bws) / peak - 1)


def report_tables(c, recs: dict) -> None:
    """Fitted values and the per-payload errors of both B200 tables (ring-only too on 1 node)."""
    for name in ("scale_up_efficiency", "nvls_allreduce_efficiency", "scale_out_efficiency", *FITTED):
        print(f"  {name}: {getattr(c, name):.4g}")
    for rid, n in ((B200_1, 8), (B200_4, 32)):
        print(f"  {rid}: payload MiB, measured GB/s, model GB/s, error (1 node: ring only)")
        for s, bw in table(recs[rid]):
            model, ring = busbw(c, "b200-180gb", n, s), busbw(ring_only(c), "b200-180gb", n, s)
            extra = f"  {ring / bw - 1:+7.1%}" if n == 8 else ""
            print(f"    {s / 2**20:>10.3f} {bw / GBPS:8.2f} {model / GBPS:8.2f} {model / bw - 1:+7.1%}{extra}")


def report_others() -> None:
    """The single-number records, with the YAML's constants."""
    cases = [  # record, measured GB/s, modelled GB/s
        ("allreduce-h100-8gpu-4gib-stas", 480, busbw(None, "h100-sxm-80gb", 8, 4 * GIB)),
        ("allreduce-h100-8gpu-nvls-peak (ring, all-gather)", 370,
         busbw(None, "h100-sxm-80gb", 8, 4 * GIB, "all_gather")),
        ("allreduce-h200-8gpu-stas (payload unknown; 4 GiB)", 376, busbw(None, "h200-sxm-141gb", 8, 4 * GIB)),
        ("allreduce-a100-8gpu-stas (4 GiB)", 235, busbw(None, "a100-sxm-80gb", 8, 4 * GIB)),
        ("allreduce-a100-2gpu-nv12 (4 GiB)", 208, busbw(None, "a100-sxm-80gb", 2, 4 * GIB)),
        ("p2p-h200-nvbandwidth (4 GiB)", 396.4,
         4 * GIB / p2p_time(4 * GIB, False, Cluster.build("h200-sxm-141gb", 8))),
    ]
    for rid, measured, model in cases:
        model = model / GBPS
        print(f"  {rid}: measured {measured} model {model:.1f} GB/s ({model / measured - 1:+.1%})")


def main() -> None:
    recs = load(Path(sys.argv[1]) if len(sys.argv) > 1 else RECORDS)
    c, res = fit_blackwell(recs)
    rms = np.sqrt(np.mean(res.fun[: -len(FITTED)] ** 2))
    print(f"nvidia-blackwell (rms log error {rms:.3f}):")
    report_tables(c, recs)
    base = dataclasses.replace(family_constants("nvidia-ampere"), **{k: getattr(c, k) for k in FITTED})
    a, k, (avg, peak) = fit_ampere(recs, base)
    print(f"nvidia-ampere: latency scale {k:.3g}: latency_intra_s {a.latency_intra_s:.4g}, "
          f"latency_inter_s {a.latency_inter_s:.4g}, scale_out_efficiency "
          f"{a.scale_out_efficiency:.4g}; avg/peak busbw errors {avg:+.1%} / {peak:+.1%}")
    print("other records (constants as in the YAML):")
    report_others()


if __name__ == "__main__":
    main()
