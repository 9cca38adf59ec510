"""CPU optimizer offload (ZeRO-Offload): the time the host adds to a step.

ZeRO-Offload (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC
2021, arXiv 2101.06840, section 4.1 "single GPU schedule" and Figure 5; DeepSpeed's
`zero_optimization.offload_optimizer`) keeps fp32 master weights and Adam moments in host memory:

- each micro-batch's gradients (this rank's shard, 16-bit) are copied GPU->host during the
  backward pass on a side stream, so only the copy that outlasts the backward is exposed;
- the Adam step runs on the host CPUs (DeepSpeed's CPU-Adam: SIMD, multi-threaded) after the
  last backward, over the fp32 shard: it is bound by host DRAM bandwidth or by the cores;
- the updated 16-bit parameters are copied host->GPU before the next forward. Without the
  optional one-step delayed parameter update (not modelled) the step and the copy back are exposed.

ZeRO-Infinity (Rajbhandari et al., "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale
Deep Learning", SC'21, arXiv 2104.07857; DeepSpeed `offload_optimizer.device: nvme`) keeps the
fp32 states on NVMe instead: before CPU-Adam updates them they are read from the node's drives
into pinned host buffers and written back after, the node's GPUs sharing the drives' bandwidth.
DeepSpeed runs the swap and the update one after the other unless `pipeline_read` /
`pipeline_write` are set (both default false), so the swap time adds to the step. With
`offload_param` the updated 16-bit parameters stay in the host tier (written to NVMe there) and
are fetched layer by layer in the next forward (`training.time.offload_copies`) instead of copied
back.

Deep Optimizer States (arXiv 2410.21316: part of the update interleaved on the GPU) is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.hardware import Cluster
from meshplan.hardware.host import host_for

HOST_BYTES_PER_PARAM = 34.0
"""CPU-Adam DRAM traffic per parameter: write the arriving fp32 gradient (4) and read it (4),
read and write the fp32 master weight (8) and both moments (16), write the 16-bit copy sent back
(2)."""
ADAM_FLOPS_PER_PARAM = 14.0
"""Element-wise Adam(W): two moment updates, bias corrections, sqrt, divide, weight decay, update."""
HOST_DRAM_EFFICIENCY = 0.6
"""Share of peak DRAM bandwidth a many-stream element-wise kernel sustains (STREAM triad reaches
~70-80% of peak on Xeon/EPYC; CPU-Adam streams six arrays at once). Assumption, not fitted."""
CORE_FLOPS_PER_S = 32e9
"""Sustained fp32 FLOP/s of one server core in CPU-Adam (AVX-512/AVX2 at ~2 GHz, a quarter of
the two-FMA-unit peak). Assumption, not fitted; the DRAM bound dominates on every catalog host."""
HOST_LINK_EFFICIENCY = 0.8
"""Share of the PCIe/C2C link a pinned-memory cudaMemcpyAsync sustains (~25 of 31.5 GB/s on Gen4
x16, ~50 of 63 GB/s on Gen5)."""
HOST_GRAD_BYTES = 4.0
"""fp32 gradient kept beside each offloaded parameter's master copy: CPU-Adam reads gradients in
fp32 (ZeRO-Offload section 4.1 keeps fp32 gradients, parameters and optimizer states on the host)."""


@dataclass(frozen=True, slots=True)
class OffloadTime:
    """Seconds the host adds to one step for one GPU's optimizer shard."""

    cpu_step_s: float
    """CPU-Adam over the shard (exposed: nothing runs on the GPU meanwhile)."""
    grads_exposed_s: float
    """GPU->host gradient copies not hidden behind the backward passes."""
    params_s: float
    """Host->GPU copy of the updated 16-bit parameters (exposed), or with the parameters offloaded
    to NVMe, their write to the drives."""
    nvme_s: float = 0.0
    """NVMe read and write of the swapped fp32 states (ZeRO-Infinity), exposed."""

    @property
    def total_s(self) -> float:
        return self.cpu_step_s + self.grads_exposed_s + self.params_s + self.nvme_s


NVME_OPTIMIZER_BUFFER_BYTES = 4 * 1e8 * 4.0
"""Pinned host buffers of DeepSpeed's optimizer swapper: offload_optimizer.buffer_count 4 of
buffer_size 1e8 fp32 elements (the config defaults)."""
NVME_PARAM_BUFFER_BYTES = 5 * 1e8 * 2.0
"""Pinned host buffers of DeepSpeed's parameter swapper: offload_param.buffer_count 5 of
buffer_size 1e8 16-bit elements (the config defaults)."""


def swapped_bytes(per_param) -> float:
    """Bytes per parameter the offloaded optimizer keeps outside the GPU (a `StateBytes`): fp32
    master weight (where the precision has one), optimizer states and the fp32 gradient."""
    return per_param.master + per_param.optimizer + HOST_GRAD_BYTES


def offloaded_bytes(plan, per_param, local: float) -> tuple[float, float]:
    """(host DRAM, NVMe) bytes per GPU of offloaded model states of its `local` (shard of)
    parameters: the optimizer's (`swapped_bytes`) and the parameters' own copy (16-bit, or the
    fp32 master where the framework trains on fp32 parameters); with target nvme they sit on the
    drives, and the swap buffers in host memory."""
    states = swapped_bytes(per_param) * local if plan.offload_optimizer else 0.0
    weights = (per_param.weights or per_param.master) * local if plan.offload_params else 0.0
    if plan.offload_target != "nvme":
        return states + weights, 0.0
    buffers = (NVME_OPTIMIZER_BUFFER_BYTES * plan.offload_optimizer
               + NVME_PARAM_BUFFER_BYTES * plan.offload_params)
    return buffers, states + weights


def host_link_bytes_per_s(cluster: Cluster) -> float:
    """What one GPU's pinned host<->GPU copies sustain, one direction."""
    return cluster.host_link_bandwidth_bytes_per_s_per_gpu * HOST_LINK_EFFICIENCY  # type: ignore[operator]


def nvme_share(cluster: Cluster) -> tuple[float, float]:
    """(read, write) bytes/s of a node's NVMe drives one GPU gets while the job's GPUs on the node
    all swap at once."""
    n = cluster.gpus_on_node
    return (cluster.nvme_read_bandwidth_bytes_per_s_per_node / n,  # type: ignore[operator]
            cluster.nvme_write_bandwidth_bytes_per_s_per_node / n)  # type: ignore[operator]


def offload_time(cluster: Cluster, params: float, microbatches: int, backward_s: float,
                 grad_bytes: float = 2.0, floor: float = 0.0, *, swapped_bytes: float = 0.0,
                 target: str = "cpu", params_offloaded: bool = False) -> OffloadTime:
    """The host's share of a step: `params` parameters of this GPU's shard, `microbatches`
    backward passes of `backward_s` each to hide the gradient copies under (`floor` of each copy
    stays exposed, as for other overlapped traffic). With `target` nvme, `swapped_bytes` per
    parameter are read from and written back to the drives around the update."""
    host = host_for(cluster.gpu.name)
    dram, cores = host.share(cluster.gpus_on_node)
    cpu = max(params * HOST_BYTES_PER_PARAM / (dram * HOST_DRAM_EFFICIENCY),
              params * ADAM_FLOPS_PER_PARAM / (cores * CORE_FLOPS_PER_S))
    link = host_link_bytes_per_s(cluster)
    copy = params * grad_bytes / link
    exposed = microbatches * (max(0.0, copy - backward_s) + floor * min(copy, backward_s))
    read, write = nvme_share(cluster)
    nvme = params * swapped_bytes * (1 / read + 1 / write) if target == "nvme" else 0.0
    if not params_offloaded:
        back = params * 2.0 / link
    else:
        back = params * 2.0 / write if target == "nvme" else 0.0
    return OffloadTime(cpu, exposed, back, nvme)
