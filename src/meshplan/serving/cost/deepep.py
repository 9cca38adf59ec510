"""DeepEP's two dispatch modes in a serving iteration: what crosses the network, and how fast.

DeepEP (deepseek-ai/DeepEP, docs/legacy.md for V1, the kernels SGLang calls) has two kinds of
dispatch and combine kernels:

- normal (high-throughput) kernels: a token crosses the network ONCE per destination node that
  holds one of its experts (to the GPU of the same local index there), and that GPU forwards it
  over NVLink to the GPUs of its node that hold the experts: "asymmetric-domain bandwidth
  forwarding", aligned with DeepSeek-V3's node-limited routing (each token's 8 experts from at
  most `topk_group` = 4 of `n_group` = 8 groups, i.e. at most 4 nodes; DeepSeek-V3 report
  section 2.1.2 / 3.2.2). Its benchmark (tests/legacy/test_internode.py) counts as "RDMA bytes"
  one copy per token per distinct node its experts touch, its own node included.
- low-latency kernels: pure RDMA, one copy per (token, chosen expert), for small decode batches
  under CUDA graphs. That is the top-k all-to-all the cost model prices for every other
  dispatcher (meshplan.costs.comm), so it stays priced that way.

SGLang's `--deepep-mode auto` (its default) resolves per batch: normal when the batch holds
any extend (prefill) tokens, low_latency for a decode-only batch (DeepEPMode.resolve in
sgl-project/sglang@004813e1dd464844bd92ddbca5cab8c024a75f78 python/sglang/srt/layers/moe/utils.py);
a PD-disaggregated deployment thus runs normal kernels on its prefill pool and low-latency ones
on its decode pool, as the LMSYS large-scale EP write-up describes.

The normal kernels' rates come from DeepEP's own table (serving/data/kernel_rates.yaml,
`ep_dispatch_combine.normal`): the intranode NVLink row gives the NVLink efficiency and the
internode rows, once their logical bytes are reduced to the share that really leaves the node,
the RDMA efficiency.
"""

from __future__ import annotations

import functools
import statistics

from meshplan.costs.comm import CommConstants
from meshplan.costs.placement import GroupPlacement
from meshplan.costs.routing import touched_units
from meshplan.hardware import Cluster
from meshplan.hardware.catalog import get_gpu
from meshplan.model.spec import MoEMLP
from meshplan.serving.cost.kernels import rates

DEEPEP_ENGINES = ("sglang",)
"""Engines whose expert-parallel dispatch is DeepEP in `auto` mode: SGLang's wide-EP path (as
meshplan.serving.cost.kernels already assumes for its FP8 dispatch). SGLang runs DeepEP only
with `--moe-a2a-backend deepep` (default `none`); the plan has no field for that knob yet, so an
SGLang plan with ep > 1 is priced as a DeepEP deployment. vLLM (default all-to-all backend
allgather_reducescatter) and TensorRT-LLM (its own all-to-all) keep the top-k all-to-all.
DeepEP needs NVIDIA GPUs (NVLink, NVSHMEM: docs/legacy.md, Requirements), so `uses_deepep`
also asks for one."""


def uses_deepep(engine: str, ep: int, cluster: Cluster) -> bool:
    """Whether a replica's expert-parallel dispatch is DeepEP's (see DEEPEP_ENGINES)."""
    return engine in DEEPEP_ENGINES and ep > 1 and cluster.gpu.vendor == "nvidia"

BENCH_NIC_BYTES_PER_S = 50e9
"""The NIC of DeepEP's benchmark: "CX7 InfiniBand 400 Gb/s RDMA network card (~50 GB/s maximum
bandwidth)" (DeepEP docs/legacy.md, Performance)."""
BENCH_GPUS_PER_NODE = 8
"""GPUs per node of DeepEP's internode runs (EP16 = 2 nodes of 8 H800)."""
BENCH_TOPK_GROUPS = 4
"""Groups (one per node) each token may use in DeepEP's internode benchmark: min(nodes, 4)
(tests/legacy/test_internode.py, `--num-topk-groups` default)."""


NORMAL_KERNEL_SMS = 20
"""SMs DeepEP's normal (V1) dispatch and combine kernels occupy while they move data: the legacy
Buffer's class default `num_sms: int = 20` (deepseek-ai/DeepEP deep_ep/buffer.py since ebfe47e4,
2025-02; deep_ep/buffers/legacy.py:31 at dd758caf), which SGLang takes unless --deepep-config sets
it (DeepEPConfig: `self.num_sms = Buffer.num_sms`, sglang 0.5.6.post2 wheel,
srt/layers/moe/token_dispatcher/deepep.py). The low-latency kernels receive through a hook and
occupy no SM while another micro-batch computes (docs/legacy.md), so decode pays nothing."""


def normal_sm_share(sm_count: int) -> float:
    """Share of a GPU's SMs the normal kernels take from the compute they overlap."""
    return min(1.0, NORMAL_KERNEL_SMS / sm_count)


def _normal_rows() -> list[dict]:
    table = rates()["ep_dispatch_combine"]["normal"]
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


@functools.cache
def nvlink_efficiency() -> float:
    """Normal-kernel NVLink rate / the catalog's NVLink peak per direction of the benchmark GPU:
    the intranode rows' mean of dispatch and combine (153 and 158 GB/s at EP8 on an H800, whose
    NVLink the catalog lists at 200 GB/s per direction; DeepEP calls ~160 GB/s its maximum)."""
    table = rates()["ep_dispatch_combine"]["normal"]
    rows = [r for r in _normal_rows() if r["link"] == "nvlink"]
    gbs = statistics.mean(statistics.mean((r["dispatch_gb_per_s"], r["combine_gb_per_s"])) for r in rows)
    return gbs * 1e9 / get_gpu(table["gpu"]).scale_up_bandwidth_bytes_per_s_per_direction


@functools.cache
def rdma_efficiency() -> float:
    """Normal-kernel NIC rate / line rate: each internode row's "RDMA bandwidth" counts one copy
    per touched node including the sender's own (which moves over NVLink), so only
    (nodes - 1) / nodes of it crossed the NIC (uniform scores: every node equally likely);
    the median over rows of that physical rate, dispatch and combine averaged, over 50 GB/s.
    (EP32 58 GB/s -> 43.5, EP64 51 -> 44.6, EP16 43 -> 21.5: two nodes sit well below line rate.)"""
    physical = []
    for r in (r for r in _normal_rows() if r["link"] == "rdma"):
        nodes = r["ep"] // BENCH_GPUS_PER_NODE
        logical = statistics.mean((r["dispatch_gb_per_s"], r["combine_gb_per_s"])) * 1e9
        physical.append(logical * (nodes - 1) / nodes)
    return statistics.median(physical) / BENCH_NIC_BYTES_PER_S


def network_units(group: GroupPlacement, cluster: Cluster) -> tuple[int, int]:
    """(network units the EP group spans, its ranks per unit): NVLink domains that hold whole
    nodes (NVL72 racks: a token crosses the network only between racks), else nodes."""
    if cluster.scale_up_domain >= cluster.gpus_per_node:
        return group.domains, group.ranks_per_domain
    return group.nodes, group.ranks_per_node


def normal_copies(mlp: MoEMLP, group: GroupPlacement, cluster: Cluster) -> tuple[float, float]:
    """(network copies, NVLink copies) one token costs its sender under the normal kernels, on
    average: once per REMOTE unit its experts touch (`touched_units` with node-limited routing
    where the model has it); and once per GPU its experts touch, minus the forwarding GPU of
    each touched unit, which keeps its copy: (distinct GPUs) x (r - 1) / r, r = ranks per unit.
    Every GPU forwards as much as it sends, so that is also each GPU's NVLink egress."""
    units, per_unit = network_units(group, cluster)
    remote = touched_units(mlp, units) * (units - 1) / units if units > 1 else 0.0
    local = touched_units(mlp, group.size) * (per_unit - 1) / per_unit if per_unit > 1 else 0.0
    return remote, local


def normal_pass_s(token_bytes: float, copies: tuple[float, float], imbalance: tuple[float, float],
                  cluster: Cluster, c: CommConstants) -> float:
    """Seconds of one normal-kernel dispatch or combine moving `token_bytes` (one copy of every
    token of the rank): the network copies at DeepEP's RDMA efficiency of the GPU's NIC share and
    the NVLink copies at its NVLink efficiency run at once (the forwarding is pipelined), so the
    slower sets the time; `imbalance` scales each by its busiest receiver (node, GPU)."""
    remote, local = copies
    seconds = 0.0
    if remote > 0:
        nic = cluster.inter_node_bandwidth_bytes_per_s_per_gpu * rdma_efficiency()
        seconds = token_bytes * remote * imbalance[0] / nic + c.latency_inter_s
    if local > 0:
        link = cluster.scale_up_bandwidth_bytes_per_s_per_direction * nvlink_efficiency()
        seconds = max(seconds, token_bytes * local * imbalance[1] / link + c.latency_intra_s)
    return seconds
