"""Speed of the serving simulator (the issue's bound: 100,000 requests of llama-3.1-8b on one
h100-sxm-80gb, random 1024 in / 256 out, Poisson at ~80% of capacity, <= 20 s wall on one core).
With the default request count, saves benchmarks/results/serving_speed.json and re-renders the page
block that quotes it. Run: python benchmarks/serving_speed.py [--requests N]"""

from __future__ import annotations

import argparse
import time

from meshplan import Cluster, load_model
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

import readme_blocks  # benchmarks/readme_blocks.py

DEFAULT_REQUESTS = 100_000


def capacity_requests_per_s(model, cluster, plan) -> float:
    """Saturated throughput: an offline run of the same lengths."""
    spec = WorkloadSpec(arrival="offline", num_requests=3000, dataset="random", input_len=1024,
                        output_len=256, range_ratio=0.0)
    return simulate(model, cluster, plan, synthesize(spec, seed=1)).metrics.requests_per_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    args = parser.parse_args()
    model, cluster, plan = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 1), ServingPlan()
    rate = 0.8 * capacity_requests_per_s(model, cluster, plan)
    spec = WorkloadSpec(arrival="poisson", request_rate=rate, num_requests=args.requests,
                        dataset="random", input_len=1024, output_len=256)
    start = time.perf_counter()
    workload = synthesize(spec, seed=0)
    made = time.perf_counter() - start
    result = simulate(model, cluster, plan, workload)
    wall = time.perf_counter() - start
    busy = result.log.busy_s() / result.simulated_s
    m = result.metrics
    print(f"llama-3.1-8b on 1 x h100-sxm-80gb, vLLM defaults, {args.requests:,} requests, random 1024/256, "
          f"Poisson {rate:.2f} req/s (80% of the offline capacity)")
    print(f"  wall {wall:.2f} s (workload {made:.2f} s, simulation {result.wall_s:.2f} s incl. metrics); "
          f"{result.iterations:,} iterations; simulated {result.simulated_s:,.0f} s")
    print(f"  {result.simulated_s / wall:,.0f} simulated s per wall s; {args.requests / wall:,.0f} requests per wall s; "
          f"engine busy {busy:.0%} of the time; mean running batch {result.log.column('num_seqs').mean():.0f}")
    print(f"  TTFT p50 {m.ttft_ms.p50:.0f} ms p99 {m.ttft_ms.p99:.0f} ms; TPOT p50 {m.tpot_ms.p50:.1f} ms; "
          f"{m.output_tokens_per_s:,.0f} output tok/s")
    if args.requests == DEFAULT_REQUESTS:
        readme_blocks.save("serving_speed", {
            "case": "llama-3.1-8b on one H100, random 1024 in / 256 out, Poisson at 80% of capacity",
            "requests": args.requests, "iterations": result.iterations,
            "simulated_s": result.simulated_s, "wall_s": wall})


if __name__ == "__main__":
    main()
