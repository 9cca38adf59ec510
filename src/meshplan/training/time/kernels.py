"""The host floor of one decoder layer in training: ops dispatched per pass x host time per op.

Per framework, a kernel profile says how its layers are built:
- pytorch-eager (torchtitan, DeepSpeed, FSDP, Hugging Face, llm-foundry): module-level PyTorch,
  every op dispatched from Python; counts per pass measured with TorchDispatchMode on the
  Hugging Face modules of two archetypes (data/kernel_profiles.yaml);
- te-fused (Megatron-LM, NeMo): Transformer Engine's fused modules; kernels counted from their
  structure, ops per kernel as measured for PyTorch;
- compiled (MaxText on XLA): one compiled program per step, no per-op host time.
The plan's `implementation` can override the framework's eager profile:
- inductor (implementation compiled on a PyTorch framework): torch.compile's generated code
  launches each fused Triton kernel and extern GEMM from its Python wrapper, without the
  dispatcher: fewer kernels (pointwise chains fused), one launch each;
- native-fused (implementation fused, llm.c): a few hand-fused kernels per layer launched from C,
  cudaLaunchKernel alone.
A layer pass then costs max(its device time, its host floor) (training/time/layer.py): small
models and micro-batches wait on the host, large ones never see the floor.
"""

from __future__ import annotations

import functools
from importlib import resources

from meshplan.yamlread import load_packaged

from meshplan.costs.host import HOST_OP_S, OPS_PER_KERNEL
from meshplan.model.spec import LayerSpec, ModelSpec, MoEMLP

PROFILE_OF = {"megatron": "te-fused", "nemo": "te-fused", "maxtext": "compiled",
              "torchtitan": "pytorch-eager", "deepspeed": "pytorch-eager", "fsdp": "pytorch-eager",
              "hf": "pytorch-eager", "llm-foundry": "pytorch-eager"}
"""Kernel profile of each framework; others fall back to pytorch-eager (said in `chosen`)."""


@functools.cache
def _profiles() -> dict:
    text = resources.files("meshplan.training").joinpath("data", "kernel_profiles.yaml").read_text()
    return load_packaged(text)["profiles"]


def profile_for(framework: str, implementation: str = "eager") -> tuple[str, str | None]:
    """(profile name, a note when the framework has none of its own) of a framework run
    eagerly, compiled or as a hand-fused native trainer (see TrainingPlan.implementation)."""
    if PROFILE_OF.get(framework) == "compiled":  # XLA: compiled whatever the plan says
        return "compiled", None
    if implementation in IMPLEMENTATION_PROFILE:
        return IMPLEMENTATION_PROFILE[implementation], None
    if framework in PROFILE_OF:
        return PROFILE_OF[framework], None
    return "pytorch-eager", f"no kernel profile for {framework!r}: pytorch-eager's host floor used"


IMPLEMENTATION_PROFILE = {"compiled": "inductor", "fused": "native-fused"}
"""Kernel profile of a non-eager implementation on a PyTorch (or native) trainer."""


def archetype(model: ModelSpec) -> str:
    """Which measured layer a model's dense layers resemble: "llama" (RMSNorm, rotary, gated MLP)
    or "gpt2" (LayerNorm, learned positions or none, plain MLP)."""
    return "llama" if model.norm == "rmsnorm" else "gpt2"


def layer_host_s(profile: str, model: ModelSpec, layer: LayerSpec, tp: int, sp: bool,
                 ep: int) -> tuple[float, float]:
    """(forward, backward) host seconds of one layer pass under `profile`."""
    if profile == "compiled":
        return 0.0, 0.0
    row = _profiles()[profile]
    if "host_s_per_kernel" in row:
        return _launched_host_s(row, model, layer, tp, sp, ep)
    if profile == "pytorch-eager":
        forward, backward = row["dense_layer_ops"][archetype(model)]
    else:
        forward = backward = row["dense_layer_kernels"] * OPS_PER_KERNEL
        backward *= row["backward_kernel_ratio"]
    collectives = (4 if sp else 2) if tp > 1 else 0
    forward, backward = forward + collectives, backward + collectives
    mlp = layer.mlp
    if isinstance(mlp, MoEMLP):  # the MoE block joins; a shared expert keeps the dense MLP's kernels
        extra = row["moe_block_kernels"] + (2 if ep > 1 else 0) - (0 if mlp.shared else DENSE_MLP_KERNELS)
        forward += extra * OPS_PER_KERNEL
        backward += extra * OPS_PER_KERNEL * row["backward_kernel_ratio"]
    return forward * HOST_OP_S, backward * HOST_OP_S


def _launched_host_s(row: dict, model: ModelSpec, layer: LayerSpec, tp: int, sp: bool,
                     ep: int) -> tuple[float, float]:
    """(forward, backward) host seconds of a layer whose kernels are launched one by one without
    a per-op dispatcher (torch.compile's wrapper code, a C trainer): kernels x launch time."""
    forward = row["dense_layer_kernels"][archetype(model)] + ((4 if sp else 2) if tp > 1 else 0)
    if isinstance(layer.mlp, MoEMLP):
        forward += row["moe_block_kernels"] + (2 if ep > 1 else 0) - (0 if layer.mlp.shared else DENSE_MLP_KERNELS)
    host = row["host_s_per_kernel"]
    return forward * host, forward * row["backward_kernel_ratio"] * host


def lora_host_s(profile: str, adapters: int, host: tuple[float, float]) -> tuple[float, float]:
    """`host` (a layer's forward and backward host seconds) with a frozen base and `adapters`
    LoRA adapters: PyTorch-eager dispatches fewer backward ops for the frozen layer and a
    measured number per adapter; other profiles are left as they are (no measurement)."""
    if profile != "pytorch-eager":
        return host
    row = _profiles()[profile]
    forward_ops, backward_ops = row["lora_adapter_ops"]
    return (host[0] + adapters * forward_ops * HOST_OP_S,
            host[1] * row["lora_frozen_backward_share"] + adapters * backward_ops * HOST_OP_S)


DENSE_MLP_KERNELS = 4
"""Kernels of the measured layer's dense MLP (gate/up GEMMs, activation, down GEMM)."""
