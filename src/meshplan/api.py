"""Thin wrappers that give the public API (`meshplan.__all__`) user-facing signatures where the
internal ones are shaped for the CLI or the calibration: training step estimate, training plan
search, serving plan search and validation. Each only translates arguments and calls the module
that does the work; it is imported lazily by `meshplan/__init__.py`.
"""

from __future__ import annotations

from pathlib import Path

from meshplan.checks import optional, positive, whole
from meshplan.hardware import Cluster
from meshplan.model import ModelSpec, load_model
from meshplan.calibration.site import site_context
from meshplan.training.plan import TrainingPlan


def _model(model: ModelSpec | str) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def estimate_training(model: ModelSpec | str, cluster: Cluster, plan: TrainingPlan, *, site=None):
    """Predict one optimizer step of `plan` (a `StepEstimate`: step time, tokens/s per GPU, MFU,
    time breakdown, per-stage memory, the resolved plan).

    model: a `ModelSpec` or anything `load_model` takes (catalog name, config.json path, hf:ORG/NAME).
    cluster: the hardware, e.g. `Cluster.build("h100-sxm-80gb", 64)`.
    plan: the layout; fields left open (micro-batch size, virtual stages, dp, sharding, ...) are
    chosen as `meshplan train estimate` chooses them: the fastest candidate that fits, or, when
    none fits, the one needing the least memory (its `memory.fits` is then False).
    site: a site profile (name, file or `SiteProfile`) to apply; None: the packaged model alone.
    """
    from meshplan.training.choose import best_plan

    spec = _model(model)
    with site_context(site):
        return best_plan(plan, spec, cluster)


def search_training_plans(model: ModelSpec | str, cluster: Cluster, plan: TrainingPlan, *,
                          pin: dict | None = None, objective: str = "throughput", top: int = 5,
                          price_per_gpu_hour: float | None = None,
                          train_tokens: float | None = None, site=None, workers: int | None = None):
    """Search the parallel layout, as `meshplan train plan` does (a training `SearchResult`:
    `ranked` StepEstimates best first, `scores`, the counts of `evaluated`, `rejected_invalid` and
    `rejected_memory` plans, `seconds`, and the `closest` plans when nothing fits).

    model: a `ModelSpec` or anything `load_model` takes.
    cluster: the hardware; its GPU count is the one searched.
    plan: the workload and fixed choices: `seq_len`, `global_batch_size`, `framework`,
    `precision` (its layout fields are ignored; pin them with `pin`).
    pin: fields to hold fixed, e.g. `{"tp": 8, "recompute": "full"}` (the `train plan` flags).
    objective: "throughput" (tokens/s per GPU), "cost" (dollars per token, with
    `price_per_gpu_hour`) or "time-to-train" (with `train_tokens`).
    top: how many ranked plans to keep.
    site: a site profile (name, file or `SiteProfile`) to apply; None: the packaged model alone.
    workers: processes sharing a search of many candidates (forked; Linux and macOS), with the
    same result; 1 keeps it in this process; None: on Linux the CPUs this process may use, or 1
    when another thread runs in it (a web server, a notebook kernel); elsewhere 1.
    """
    from meshplan.errors import ConfigError
    from meshplan.training.search.plans import search

    if objective not in ("throughput", "cost", "time-to-train"):
        raise ConfigError(f"objective {objective!r}: use throughput, cost or time-to-train")
    whole("top", top)
    optional(whole, "workers", workers)
    optional(positive, "price_per_gpu_hour", price_per_gpu_hour)
    optional(positive, "train_tokens", train_tokens)
    pinned = _checked_pins(pin or {})
    with site_context(site):
        return search(_model(model), cluster, plan, pinned, objective=objective, top=top,
                      price_per_gpu_hour=price_per_gpu_hour, train_tokens=train_tokens,
                      workers=workers)


def _checked_pins(pin: dict) -> dict:
    """The pins as a plan holds them (`"8"` -> 8); a field that is not a TrainingPlan's, or a
    value a plan may not hold, is a ConfigError."""
    from pydantic import ValidationError

    from meshplan.errors import ConfigError

    unknown = sorted(set(pin) - set(TrainingPlan.model_fields))
    if unknown:
        raise ConfigError(f"pin {unknown[0]!r}: not a TrainingPlan field (e.g. tp, pp, recompute)")
    try:
        plan = TrainingPlan(**{k: v for k, v in pin.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"pin {err['loc'][0]}={err.get('input')!r}: {err['msg']}") from None
    return {k: getattr(plan, k) if v is not None else None for k, v in pin.items()}


RATE_RANGE = (0.001, 1_000_000.0)
"""Request rates (requests/s) a serving search takes, as `serve plan --request-rate`."""


def search_serving_plans(model: ModelSpec | str, gpus: str | list[str], workload, request_rate: float,
                         *, ttft_ms: float | None = None, tpot_ms: float | None = None,
                         e2e_ms: float | None = None, percentile: float = 90.0, max_gpus: int = 8,
                         objective: str = "min-gpus", prices: dict[str, float] | None = None,
                         engine: str = "vllm", quantize: bool = False, disaggregate: bool = True,
                         top: int = 5, workers: int = 2, site=None):
    """Find the deployments that serve `request_rate` within latency SLOs, as `meshplan serve plan`
    does (a serving `SearchResult`: `ranked` candidates best first, each with `gpu`, `plan`,
    `replicas`, `gpus`, `capacity.rate`; `infeasible` closest misses; `simulated`, `pruned`).
    `serving_deployment(result.ranked[0])` is the winner as one ServingPlan for the exporters.

    model: a `ModelSpec` or anything `load_model` takes.
    gpus: one GPU catalog name or several to compare.
    workload: a `Workload` (from `synthesize`) whose arrivals average 1 request/s; the search
    compresses it in time to each rate it tries (synthesize it with `request_rate=1`).
    request_rate: requests/s the deployment must sustain (0.001 to 1,000,000).
    ttft_ms, tpot_ms, e2e_ms: latency objectives (at least one) at `percentile` of requests.
    max_gpus: the most GPUs a deployment may use.
    objective: "min-gpus", "max-goodput-per-gpu" or "min-cost" (needs `prices`).
    prices: USD per GPU-hour by GPU name.
    engine: the engine whose scheduler and defaults are simulated ("vllm", "sglang", ...).
    quantize: also try fp8 weights and KV cache where the GPU has fp8 (changes the model's
    outputs, so off by default: plans keep the model's own bf16 weights and KV cache).
    disaggregate: also try prefill/decode disaggregation.
    workers: processes simulating candidates in parallel (1: in this process).
    site: a site profile (name, file or `SiteProfile`) to apply; None: the packaged model alone.
    """
    from meshplan.serving.search.capacity import Targets
    from meshplan.serving.search.run import search
    from meshplan.serving.search.candidates import Space

    positive("request_rate", request_rate, low=RATE_RANGE[0], high=RATE_RANGE[1])
    for name, value in (("top", top), ("max_gpus", max_gpus), ("workers", workers)):
        whole(name, value)
    for gpu, price in (prices or {}).items():
        positive(f"prices[{gpu!r}]", price)
    names = [gpus] if isinstance(gpus, str) else list(gpus)
    clusters = [Cluster.build(g, 1) for g in names]  # hardware only; the search sizes each plan
    targets = Targets(ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms, percentile=percentile)
    space = Space(engine=engine, quantize=quantize, disaggregate=disaggregate)
    with site_context(site):
        return search(_model(model), clusters, workload, request_rate, targets, max_gpus=max_gpus,
                      objective=objective, prices=prices, space=space, top=top, workers=workers)


def serving_deployment(candidate):
    """The whole deployment of a `search_serving_plans` candidate as one `ServingPlan` (the unit
    repeated `replicas` times), ready for `export_serving`."""
    from meshplan.serving.search.run import deployment_plan

    return deployment_plan(candidate)


def validate_records(records, *, site=None):
    """Predict every measured quantity of run records, as `meshplan validate` does; returns
    `(rows, skipped)`: one `Row` (id, kind, metric, measured, predicted, rel_error) per measured
    metric, and one `Skip` (id, reason) per record meshplan cannot represent.

    records: a list of records from `load_records`, or a path to a run-record YAML file.
    site: a site profile (name, file or `SiteProfile`) to apply; None: the packaged model alone.
    """
    from meshplan.validate.records import load_records
    from meshplan.validate.run import predict

    if isinstance(records, (str, Path)):
        records = load_records(records)
    with site_context(site):
        return predict(records)


def validation_report(rows, skipped) -> dict:
    """The `meshplan validate --json` object (meshplan/records/SCHEMA.md): every row, the skips and
    the median / p90 absolute error overall, per kind and per metric."""
    from meshplan.validate.run import report

    return report(rows, skipped)
