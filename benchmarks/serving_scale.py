"""A day of traffic in bounded memory (#32 item 7): wall time and peak RSS of streamed simulations
of 10^5 and 10^6 requests (and 10^7 with --full), next to the exact (per-request) mode at 10^5,
with Poisson arrivals and offline (every request at t=0, each replica's queue built as it is
reached: meshplan.serving.engine.backlog). Case: llama-3.1-8b on one h100-sxm-80gb, vLLM
defaults, random 1024 in / 256 out, Poisson at 80% of the offline capacity
(benchmarks/serving_speed.py's case). Each run has its own process, so its peak RSS is its own.
With --full, saves benchmarks/results/serving_scale.json and re-renders the page block that
quotes it (docs/speed.md); --sizes runs other request counts (streamed, both arrival modes) and
only prints them.

    python benchmarks/serving_scale.py [--full | --sizes 20000,200000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SIZES = (100_000, 1_000_000)
FULL = 10_000_000
ARRIVALS = ("poisson", "offline")
CASE_ARRIVALS = "Poisson at 80% of capacity or offline (every request at t=0)"


def one(requests: int, exact: bool, arrival: str) -> dict:
    """Simulate `requests` requests arriving by `arrival` (poisson or offline) in this process;
    wall time, peak RSS and headline metrics."""
    from meshplan import Cluster, load_model
    from meshplan.serving.plan import ServingPlan
    from meshplan.serving.simulate import simulate
    from meshplan.serving.traffic.stream import stream_workload
    from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

    sys.path.insert(0, str(Path(__file__).parent))
    from serving_speed import capacity_requests_per_s

    model, cluster, plan = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 1), ServingPlan()
    timed = {"request_rate": 0.8 * capacity_requests_per_s(model, cluster, plan)} if arrival == "poisson" else {}
    spec = WorkloadSpec(arrival=arrival, num_requests=requests, dataset="random", input_len=1024, output_len=256,
                        **timed)
    start = time.perf_counter()
    workload = synthesize(spec, seed=0) if exact else stream_workload(spec, seed=0)
    result = simulate(model, cluster, plan, workload)
    wall = time.perf_counter() - start
    m = result.metrics
    return {"requests": requests, "mode": "exact" if exact else "streamed", "arrival": arrival, "wall_s": wall,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "simulated_s": result.simulated_s, "iterations": result.iterations, "completed": m.completed,
            "ttft_p99_ms": m.ttft_ms.p99, "tpot_p50_ms": m.tpot_ms.p50}


def run(requests: int, exact: bool = False, arrival: str = "poisson") -> dict:
    """`one` in a fresh process (its own peak RSS)."""
    args = [sys.executable, __file__, "--one", str(requests), "--arrival", arrival] + (["--exact"] if exact else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true", help="also 10^7 requests (about an hour)")
    parser.add_argument("--sizes", help="comma-separated request counts to run instead (printed, not saved)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--exact", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arrival", default="poisson", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.exact, args.arrival)))
        return
    if args.sizes:
        sizes = [int(n) for n in args.sizes.split(",")]
        rows = [run(n, arrival=a) for n in sizes for a in ARRIVALS]
    else:
        sizes = (*SIZES, *((FULL,) if args.full else ()))
        rows = [run(SIZES[0], exact=True)] + [run(n, arrival=a) for n in sizes for a in ARRIVALS]
    print(f"llama-3.1-8b on 1 x h100-sxm-80gb, vLLM defaults, random 1024/256, {CASE_ARRIVALS}")
    for r in rows:
        print(f"  {r['requests']:>11,} requests {r['mode']:>8} {r['arrival']:>7}: wall {r['wall_s']:8.1f} s, peak RSS "
              f"{r['peak_rss_mib']:7.0f} MiB, {r['requests'] / r['wall_s']:8,.0f} requests per wall s; "
              f"simulated {r['simulated_s'] / 3600:7.2f} h; TTFT p99 {r['ttft_p99_ms']:.0f} ms")
    if args.full and not args.sizes:
        import readme_blocks  # benchmarks/readme_blocks.py

        readme_blocks.save("serving_scale", {
            "case": f"llama-3.1-8b on one H100, random 1024 in / 256 out, {CASE_ARRIVALS}", "rows": rows})


if __name__ == "__main__":
    main()
