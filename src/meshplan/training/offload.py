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
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class OffloadTime:
    """Seconds the host adds to one step for one GPU's optimizer shard."""

    cpu_step_s: float
    """CPU-Adam over the shard (exposed: nothing runs on the GPU meanwhile)."""
    grads_exposed_s: float
    """GPU->host gradient copies not hidden behind the backward passes."""
    params_s: float
    """Host->GPU copy of the updated 16-bit parameters (exposed)."""

    @property
    def total_s(self) -> float:
        return self.cpu_step_s + self.grads_exposed_s + self.params_s


def offload_time(gpu_name: str, gpus_per_node: int, num_gpus: int, params: float,
                 microbatches: int, backward_s: float, grad_bytes: float = 2.0,
                 floor: float = 0.0) -> OffloadTime:
    """The host's share of a step: `params` parameters of this GPU's shard, `microbatches`
    backward passes of `backward_s` each to hide the gradient copies under (`floor` of each copy
    stays exposed, as for other overlapped traffic)."""
    host = host_for(gpu_name)
    dram, cores = host.share(min(gpus_per_node, num_gpus))
    cpu = max(params * HOST_BYTES_PER_PARAM / (dram * HOST_DRAM_EFFICIENCY),
              params * ADAM_FLOPS_PER_PARAM / (cores * CORE_FLOPS_PER_S))
    link = host.link_bytes_per_s * HOST_LINK_EFFICIENCY
    copy = params * grad_bytes / link
    exposed = microbatches * (max(0.0, copy - backward_s) + floor * min(copy, backward_s))
    return OffloadTime(cpu, exposed, params * 2.0 / link)
