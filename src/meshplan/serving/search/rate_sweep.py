"""`serve sweep`: one deployment simulated at several request rates, in parallel (a process
pool or Ray, meshplan.parallel), each rate's row handed over as it finishes."""

from __future__ import annotations

from collections.abc import Callable

from meshplan.parallel import run_tasks
from meshplan.serving.search.capacity import at_rate
from meshplan.calibration.site import active_site

PERCENTILES = ("p50", "p90", "p99")


def rate_row(model: str, gpu: str, num_gpus: int, plan, unit, rate: float, site=None) -> dict:
    """The curve's row at `rate`: throughput and TTFT/TPOT/E2E percentiles. Takes names, not
    built objects, so it runs in any worker (the site profile travels with the task)."""
    from meshplan import Cluster, load_model
    from meshplan.serving.simulate import simulate
    from meshplan.calibration.site import use_site

    use_site(site)
    m = simulate(load_model(model), Cluster.build(gpu, num_gpus), plan, at_rate(unit, rate)).metrics
    return {"request_rate": rate, "requests_per_s": m.requests_per_s, "steady_requests_per_s": m.steady_requests_per_s,
            "output_tokens_per_s": m.output_tokens_per_s,
            **{f"{k}_{p}": getattr(getattr(m, k), p) for k in ("ttft_ms", "tpot_ms", "e2e_ms") for p in PERCENTILES}}


def sweep_rates(model: str, gpu: str, plan, unit, rates: list[float], *, backend: str = "local", workers: int = 1,
                address: str | None = None, progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Rows of the latency-throughput curve, in rate order; a rate whose simulation fails twice
    raises (one deployment: there is nothing to report without it)."""
    rows: list[dict] = []

    def take(row: dict) -> None:
        rows.append(row)
        if progress:
            progress(len(rows), len(rates))

    def fail(task: tuple, exc: Exception) -> None:
        raise exc

    site = active_site()
    run_tasks(rate_row, [(model, gpu, plan.num_gpus, plan, unit, r, site) for r in rates], take, fail,
              backend=backend, workers=workers, address=address)
    return sorted(rows, key=lambda r: r["request_rate"])
