"""Which engine iterations replay a CUDA graph, and the host floor of those that do not.

An engine launches every kernel of an iteration from its host runtime. Eagerly, each launch
costs host time (the Python module call, PyTorch's dispatcher and the CUDA launch API); the GPU
runs ahead of the host only while its kernels take longer than their launches, so a small batch
runs at max(device time, kernels x host time per launch). A captured CUDA graph launches the
whole forward at once, so a replayed iteration pays its device time alone.

Which iterations the engines replay (engine_defaults.yaml, `cuda_graph_max_batch`, has the
sources of the sizes):
- vLLM V1: piecewise graphs over every batch of at most the largest capture size in tokens
  (decode and mixed), `--enforce-eager` turns them off;
- SGLang: decode-only batches of at most `--cuda-graph-max-bs` requests, and from the release
  that made breakable prefill graphs the default on CUDA, prefill batches of at most
  `prefill_graph_max_tokens` tokens; `--disable-cuda-graph` turns them off;
- TensorRT-LLM's PyTorch backend (1.0+): decode-only batches up to `cuda_graph_config`'s
  max_batch_size;
- TensorRT-LLM's C++ runtime (before 1.0) enqueues a built TensorRT engine from C++: a few
  microseconds of host time per layer, never the bound.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from meshplan.costs.host import HOST_OP_S, OPS_PER_KERNEL
from meshplan.model.spec import LayerSpec, MoEMLP
from meshplan.yamlread import load_packaged

GRAPH_SCOPE = {"vllm": "tokens", "sglang": "decode", "tensorrt-llm-pytorch": "decode", "tensorrt-llm": None}
"""What a captured graph covers per engine generation: batches of up to N scheduled tokens
("tokens"), decode-only batches of up to N requests ("decode"), or nothing (None)."""

HOST_LAUNCH_S = {"python": HOST_OP_S * OPS_PER_KERNEL, "c++": 1.0e-6}
"""Host time per kernel launched eagerly: Python runtimes dispatch OPS_PER_KERNEL ops per kernel
at HOST_OP_S each (costs/host.py); C++ runtimes (TensorRT's enqueue) pay the launch API alone.
An engine with a measured eager forward (data/eager_host.yaml) uses its own figure instead."""

RUNTIME = {"vllm": "python", "sglang": "python", "tensorrt-llm-pytorch": "python", "tensorrt-llm": "c++"}


@functools.cache
def measured_launch_s() -> dict[str, float]:
    """Host seconds per counted kernel of the engines with a measured eager forward."""
    path = resources.files("meshplan.serving").joinpath("data").joinpath("eager_host.yaml")
    return {name: float(row["per_kernel_s"]) for name, row in load_packaged(path.read_text())["engines"].items()}


def launch_s(engine_key: str) -> float:
    """Host seconds per kernel that `engine_key` (a constants key) launches eagerly."""
    measured = measured_launch_s().get(engine_key)
    return measured if measured is not None else HOST_LAUNCH_S[RUNTIME.get(engine_key, "python")]


@dataclass(frozen=True, slots=True)
class GraphPolicy:
    """When one replica's iterations replay a graph, and the host floor when they do not."""

    scope: str | None
    """"tokens", "decode" or None (see GRAPH_SCOPE)."""
    max_batch: int
    """Largest captured batch (tokens or requests by scope); 0: graphs off."""
    host_floor_s: float
    """Host seconds to launch one eager iteration's kernels on one pipeline stage."""
    prefill_max_tokens: int = 0
    """With scope "decode": largest iteration with prefill tokens that replays a prefill graph
    (SGLang's breakable prefill graphs); 0: every iteration with prefill runs eagerly."""

    def graphed(self, tokens: float, seqs: float, prefill_tokens: float) -> bool:
        """Whether an iteration of `tokens` scheduled tokens over `seqs` requests replays a graph."""
        if self.scope == "tokens":
            return tokens <= self.max_batch
        if self.scope == "decode":
            if prefill_tokens:
                return tokens <= self.prefill_max_tokens
            return seqs <= self.max_batch
        return False


def layer_kernels(layer: LayerSpec, tp: int, ep: int) -> int:
    """Kernels a fused serving engine launches for one decoder layer's forward, from the module
    structure of vLLM's/SGLang's decoder layers: fused residual-add + RMSNorm before attention
    and before the MLP, the QKV projection (MLA: down, norm and up projections), rotary, the
    KV-cache write, attention, the output projection, a TP all-reduce after each of the two
    blocks; a gated MLP's gate-up GEMM, activation and down GEMM; a MoE block's router GEMM,
    top-k, token sort/align, two grouped GEMMs, activation and combine (plus an expert-parallel
    dispatch and combine, and the shared expert's three)."""
    attn = layer.attention
    count = 2 + (3 if attn.mla is not None else 1) + 4
    count += 2 if tp > 1 else 0
    mlp = layer.mlp
    if isinstance(mlp, MoEMLP):
        count += 7 + (2 if ep > 1 else 0) + (3 if mlp.shared is not None else 0)
    else:
        count += 3 if mlp.gated else 2
    return count


def graph_policy(engine_key: str, max_batch: int, layers: dict[LayerSpec, int], tp: int, ep: int,
                 enforce_eager: bool, prefill_max_tokens: int = 0) -> GraphPolicy:
    """The policy of a replica of `engine_key` (a constants key) whose stage holds `layers`;
    `prefill_max_tokens` as GraphPolicy's (the caller has applied the engine's exclusions)."""
    kernels = sum(n * layer_kernels(layer, tp, ep) for layer, n in layers.items()) + 3  # + head, sample
    host = kernels * launch_s(engine_key)
    scope = None if enforce_eager else GRAPH_SCOPE.get(engine_key)
    on = scope is not None
    return GraphPolicy(scope=scope, max_batch=max_batch if on else 0, host_floor_s=host,
                       prefill_max_tokens=prefill_max_tokens if on and scope == "decode" else 0)
