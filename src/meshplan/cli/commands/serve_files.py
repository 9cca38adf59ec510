"""Serving plan files: `serve plan --json` output or a hand-written plan file, as read by
`serve simulate --plan` and `serve export --plan`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshplan.errors import ConfigError
from meshplan.serving.plan import ServingPlan
from meshplan.userfiles import parse_yaml, read_text

DEFAULT_GPUS_PER_NODE = 8
"""Hosts assumed by an export whose plan names no GPU type and no --gpus-per-node (HGX/DGX)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanEntry:
    """One deployment from a plan file and what `serve plan` judged it with."""

    model: str
    plan: ServingPlan
    gpu: str | None = None
    """GPU catalog name (`serve plan --json` entries carry it)."""
    request_rate: float | None = None
    """The rate `serve plan` verified it at."""
    workload: dict | None = None
    """The workload flags `serve plan` simulated (dataset, lengths, num_requests, seed, trace)."""
    slo: dict | None = None
    """The objectives: ttft_ms, tpot_ms, e2e_ms, percentile."""


def read_plan_entry(path: Path, index: int = 1) -> PlanEntry:
    """The `index`-th plan (from 1) of `serve plan --json` output, or a plan file (YAML/JSON
    with `model` and ServingPlan fields, optionally `gpu`)."""
    data = parse_yaml(read_text(path, "--plan file"), f"--plan {path}")
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        raise ConfigError(f"--plan {path}: expected a mapping with `model` and a plan (or `plans`)")
    extra: dict = {}
    if "plans" in data:
        plans = data["plans"]
        if not isinstance(plans, list) or not plans:
            raise ConfigError(f"--plan {path}: `plans` holds no plan to export")
        if not 1 <= index <= len(plans):
            raise ConfigError(f"--plan-index {index}: {path} holds {len(plans)} plans; give 1..{len(plans)}")
        entry = plans[index - 1] if isinstance(plans[index - 1], dict) else {}
        fields, gpu = entry.get("plan"), entry.get("gpu")
        extra = {"request_rate": data.get("request_rate"), "workload": data.get("workload"),
                 "slo": data.get("slo_ms")}
    else:
        gpu = data.get("gpu")
        fields = {k: v for k, v in data.items() if k not in ("model", "gpu")}
    if not isinstance(fields, dict):
        raise ConfigError(f"--plan {path}: the plan must be a mapping of ServingPlan fields")
    try:
        plan = ServingPlan(**fields)
    except ValueError as exc:
        raise ConfigError(f"--plan {path}: {exc}".splitlines()[0]) from None
    return PlanEntry(model=data["model"], plan=plan, gpu=gpu if isinstance(gpu, str) else None, **extra)


def gpus_per_node(gpu: str | None, given: int | None) -> int:
    """Hosts' size for placing a plan: --gpus-per-node, else the GPU's usual server, else 8."""
    if given is not None:
        if given < 1:
            raise ConfigError(f"--gpus-per-node {given}: give a whole number of at least 1")
        return given
    if gpu is None:
        return DEFAULT_GPUS_PER_NODE
    from meshplan.hardware import get_gpu

    return get_gpu(gpu).default_gpus_per_node
