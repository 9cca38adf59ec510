"""Serving exporters: turn a ServingPlan into the launch script a real serving engine accepts.

One module per engine, each a pure `export(model, plan, *, port, host, gpus_per_node) -> str` returning a bash
script, with the engine version it was checked against in `TARGET_VERSION` and the source of
every flag in its docstring. `model` is what the engine loads: a Hugging Face repo id or a local
checkpoint path. Adding an engine is one module and one line in `SERVING_EXPORTERS`.
"""

from __future__ import annotations

from collections.abc import Callable

from meshplan.errors import UnknownNameError
from meshplan.export.serving import sglang, vllm
from meshplan.serving.plan import ServingPlan

ServingExporter = Callable[..., str]
"""`export(model, plan, *, port, host, gpus_per_node) -> str`."""

SERVING_EXPORTERS: dict[str, ServingExporter] = {
    "vllm": vllm.export,
    "sglang": sglang.export,
}

__all__ = ["SERVING_EXPORTERS", "export_serving"]


def export_serving(target: str, model: str, plan: ServingPlan, *, port: int = 8000,
                   host: str = "0.0.0.0", gpus_per_node: int = 8) -> str:
    """The launch script of `plan` serving `model` on engine `target` (a key of SERVING_EXPORTERS);
    the entry point (the single server, or the router/proxy in front of several) listens on
    `host:port`. The instances are placed on hosts of `gpus_per_node` GPUs (one host, or whole
    hosts: meshplan.serving.engine.placement), one block of commands per host."""
    if target not in SERVING_EXPORTERS:
        raise UnknownNameError("export target", target, SERVING_EXPORTERS)
    return SERVING_EXPORTERS[target](model, plan, port=port, host=host, gpus_per_node=gpus_per_node)
