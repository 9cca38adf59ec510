"""Speed of `serve plan` (the issue's bound: llama-3.1-70b on up to 16 h100-sxm-80gb, Poisson
20 req/s with ShareGPT-like lengths, SLOs P90 TTFT 2 s / P90 TPOT 100 ms: <= 60 s wall on 2
cores). Saves benchmarks/results/serving_plan_speed.json and re-renders the page block that quotes it.
Run: python benchmarks/serving_plan_speed.py"""

from __future__ import annotations

import time

from meshplan import Cluster, load_model
from meshplan.serving.search.candidates import Space
from meshplan.serving.search.capacity import Targets
from meshplan.serving.search.report import layout
from meshplan.serving.search.run import search
from meshplan.serving.search.trials import sized_unit
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

import readme_blocks  # benchmarks/readme_blocks.py

WORKERS = 2


def main() -> None:
    start = time.perf_counter()
    model = load_model("llama-3.1-70b")
    targets = Targets(ttft_ms=2000, tpot_ms=100)

    def make(n: int):
        return synthesize(WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=n, dataset="sharegpt"),
                          seed=0), 20.0

    unit, rate, window = sized_unit(make, targets, None)  # trials sized by duration, as the CLI does
    result = search(model, [Cluster.build("h100-sxm-80gb", 16)], unit, rate, targets, max_gpus=16,
                    workers=WORKERS, space=Space(quantize=True), window=window)  # fp8 allowed, as the case says
    wall = time.perf_counter() - start
    print(f"serve plan llama-3.1-70b, <= 16 x h100-sxm-80gb, Poisson 20 req/s ShareGPT-like, "
          f"P90 TTFT 2 s / P90 TPOT 100 ms: {wall:.1f} s wall (2 workers)")
    low, high = result.requests_per_trial
    print(f"  {low}-{high} requests per trial (arrivals over {window:.0f} s at the target rate)")
    print(f"  simulated {result.simulated} plans ({result.simulations} simulations); pruned "
          f"{sum(result.pruned.values())} analytically: {result.pruned}")
    for i, c in enumerate(result.ranked, 1):
        print(f"  {i}. {layout(c)} x{c.replicas} = {c.gpus} GPUs, capacity {c.capacity.rate * c.replicas:.1f} req/s, "
              f"{c.goodput_per_gpu():.2f} req/s per GPU")
    readme_blocks.save("serving_plan_speed", {
        "case": "llama-3.1-70b, up to 16 H100, Poisson 20 req/s ShareGPT-like, P90 TTFT 2 s / TPOT 100 ms, fp8 allowed",
        "wall_s": wall, "workers": WORKERS, "simulated": result.simulated,
        "simulations": result.simulations, "pruned": sum(result.pruned.values()),
        "requests_per_trial": list(result.requests_per_trial)})


if __name__ == "__main__":
    main()
