"""NCCL's algorithm choice across the network: tree all-reduce and PAT all-gather/reduce-scatter
beside the ring (meshplan.costs.comm, figures in costs/data/nccl_algorithms.yaml from
NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from meshplan.costs.comm import (
    _ring,
    _tree,
    bus_bandwidth,
    collective_choice,
    collective_time,
    load_constants,
)
from meshplan.costs.placement import GroupPlacement, group_placement
from meshplan.hardware import Cluster

REPO = Path(__file__).resolve().parents[1]
MICROBENCH = REPO / "src" / "meshplan" / "records" / "hardware-microbench.yaml"
KIB, MIB, GIB, GB = 2**10, 2**20, 2**30, 1e9
ROCE_5NODES = {"ring_busbw_GBps": 190, "tree_busbw_GBps": 150}
"""allreduce-h100-5nodes-roce-tree-vs-ring: forced-algorithm peak busbw, 40 H100, 4x400G RoCE."""


def whole(gpu: str, n: int, **over) -> tuple[GroupPlacement, Cluster]:
    """One group of all `n` GPUs (and its cluster)."""
    cluster = Cluster.build(gpu, n, **over)
    return group_placement({"dp": n}, "dp", ("dp",), cluster), cluster


def ring_rate(cluster: Cluster) -> float:
    """The ring's bytes/s on 8-GPU NVSwitch nodes with rail NICs: the slower of NVLink and the
    node's NICs (8 members per node)."""
    c = load_constants(cluster.gpu.name)
    nvlink = cluster.scale_up_bandwidth_bytes_per_s_per_direction * c.scale_up_efficiency
    return min(nvlink, 8 * cluster.inter_node_bandwidth_bytes_per_s_per_gpu * c.scale_out_efficiency)


def nccl_simple_model_us(nodes: int, ppn: int, size: float, bus_gbps: float) -> dict[str, float]:
    """NCCL 2.27's own Simple-protocol times (us) of ring and tree all-reduce, tuning.cc figures:
    baseLat 8.4, hwLat ring NVLink 3.4 / tree 4.0, network 14 (IB: no extra latencyInter),
    the ring's x1.4 multi-node plateau (line 572), tree bw x0.92 x0.5 x correction."""
    n = nodes * ppn
    ring = (8.4 + (2 * (n - 1) - 2 * (nodes - 1)) * 3.4 + 2 * (nodes - 1) * 14.0) * 1.4
    ring += size / (1000 * bus_gbps * n / (2 * (n - 1)))
    tree = 8.4 + 2 * ((ppn - 1) * 4.0 + (nodes.bit_length() - 1) * 14.0)
    correction = yaml.safe_load((REPO / "src/meshplan/costs/data/nccl_algorithms.yaml").read_text())
    factor = correction["tree"]["simple_correction"]["value"][(int(size) >> 6).bit_length() - 1]
    tree += size / (1000 * bus_gbps * 0.92 * 0.5 * factor)
    return {"ring/simple": ring, "tree/simple": tree}


def test_two_node_1mib_all_reduce_picks_what_nccl_picks_at_the_formula_value() -> None:
    """2 x 8 H100: NCCL's Simple-protocol model prefers the tree at 1 MiB (~105 us vs ~190 us
    for the ring); meshplan picks it too, at 2 x (7 chain steps x 4.0/3.4 + 1 network step)
    + 2 x (S + h) / (rate x 0.92 x 0.5), 0.5 being NCCL's correction factor at 1 MiB."""
    group, cluster = whole("h100-sxm-80gb", 16)
    rate = ring_rate(cluster)
    nccl = nccl_simple_model_us(2, 8, MIB, rate / GB)
    assert min(nccl, key=nccl.get) == "tree/simple"
    c = load_constants("h100-sxm-80gb")
    seconds, algo = collective_choice("all_reduce", MIB, group, cluster)
    assert algo == "tree/simple"
    formula = 2 * (7 * c.latency_intra_s * 4.0 / 3.4 + c.latency_inter_s)
    formula += 2 * (MIB + c.half_bandwidth_bytes) / (rate * 0.92 * 0.5)
    assert seconds == pytest.approx(formula, rel=1e-3)
    assert seconds == collective_time("all_reduce", MIB, group, cluster)


def test_512_nodes_4mib_all_reduce_is_a_tree_far_below_the_ring_latency() -> None:
    """4096 H100 (512 nodes): a ring pays 2 x 4095 steps, 1022 across the network (~16 ms of
    latency alone); the tree 2 x 7 chain steps and 2 x log2(512) = 18 network steps."""
    group, cluster = whole("h100-sxm-80gb", 4096)
    c = load_constants("h100-sxm-80gb")
    seconds, algo = collective_choice("all_reduce", 4 * MIB, group, cluster)
    ring_latency = 2 * (4096 - 512) * c.latency_intra_s + 2 * 511 * c.latency_inter_s
    assert algo == "tree/simple"
    assert seconds < ring_latency / 20
    tree_latency = 2 * (7 * c.latency_intra_s * 4.0 / 3.4 + 9 * c.latency_inter_s)
    assert tree_latency < seconds < 2 * tree_latency
    dp = group_placement({"tp": 8, "dp": 512}, "tp-dp", ("dp",), cluster)  # one rank per node
    seconds, algo = collective_choice("all_reduce", 4 * MIB, dp, cluster)
    assert algo == "tree/simple" and seconds < 2 * 511 * c.latency_inter_s / 10


@pytest.mark.parametrize("gpu,n", [("b200-180gb", 32), ("h100-sxm-80gb", 128)])
def test_large_messages_stay_on_the_ring(gpu: str, n: int) -> None:
    """1 GiB over 4 and 16 nodes: bandwidth-bound, the ring (2(n-1)/n x S per rank) beats the
    tree (2 S at 0.92 of the rate), and its time is the ring formula."""
    group, cluster = whole(gpu, n)
    c = load_constants(gpu)
    seconds, algo = collective_choice("all_reduce", GIB, group, cluster)
    nodes = n // 8
    ring = 2 * (n - nodes) * c.latency_intra_s + 2 * (nodes - 1) * c.latency_inter_s
    ring += 2 * (n - 1) / n * GIB * (1 + c.half_bandwidth_bytes / GIB) / ring_rate(cluster)
    assert algo == "ring/simple"
    assert seconds == pytest.approx(ring, rel=1e-9)


def test_roce_5nodes_tree_and_ring_bus_bandwidth_twin() -> None:
    """allreduce-h100-5nodes-roce-tree-vs-ring (NVIDIA/nccl#1368, NCCL 2.20, forced algorithms):
    ring 190, tree 150 GB/s peak busbw on 5 x 8 H100 with 25 GB/s of RoCE per GPU. Model at
    1 GiB: ring within 5%, tree within 15% (NCCL's 0.92 tree factor; the measurement is lower
    still), the ring faster, and the ring is what the model picks there."""
    records = {r["id"]: r for r in yaml.safe_load(MICROBENCH.read_text())["records"]}
    assert records["allreduce-h100-5nodes-roce-tree-vs-ring"]["measured"] == ROCE_5NODES
    group, cluster = whole("h100-sxm-80gb", 40, inter_node_gbps_per_gpu=200)
    c = load_constants("h100-sxm-80gb")
    tree = bus_bandwidth("all_reduce", GIB, 40, _tree(GIB, group, cluster, c)[0]) / GB
    ring = bus_bandwidth("all_reduce", GIB, 40, _ring(2, 2 * 39 / 40 * GIB, GIB, group, cluster, c)[0]) / GB
    assert ring == pytest.approx(ROCE_5NODES["ring_busbw_GBps"], rel=0.05)
    assert tree == pytest.approx(ROCE_5NODES["tree_busbw_GBps"], rel=0.15)
    assert collective_choice("all_reduce", GIB, group, cluster)[1] == "ring/simple"


def test_pat_for_one_rank_per_node_gathers() -> None:
    """TP8 x DP64 on 512 H100: the DP group has one rank per node, where NCCL 2.23+ has PAT:
    log2(64) steps of 1/3.5 and 0.2 step per rank instead of 63 ring steps. Small gathers take
    it; large ones stay on the ring (PAT moves the whole buffer at 0.75 of the NIC rate)."""
    cluster = Cluster.build("h100-sxm-80gb", 512)
    c = load_constants("h100-sxm-80gb")
    dp = group_placement({"tp": 8, "dp": 64}, "tp-dp", ("dp",), cluster)
    for op in ("all_gather", "reduce_scatter"):
        seconds, algo = collective_choice(op, MIB, dp, cluster)
        assert algo == "pat"
        latency = c.latency_inter_s * (6 / 3.5 + 64 * 0.2)
        nic = cluster.inter_node_bandwidth_bytes_per_s_per_gpu * c.scale_out_efficiency
        assert seconds == pytest.approx(latency + (MIB + c.half_bandwidth_bytes) / (nic * 0.75), rel=1e-3)
        assert seconds < 63 * c.latency_inter_s / 3
        assert collective_choice(op, GIB, dp, cluster)[1] == "ring/simple"
    full = group_placement({"dp": 512}, "dp", ("dp",), cluster)  # 8 ranks per node: no PAT
    assert collective_choice("all_gather", MIB, full, cluster)[1] == "ring/simple"


def test_one_node_keeps_its_protocols_and_nvls() -> None:
    """Inside one node nothing changes: LL for small all-reduces, NVLS for large ones on
    NVSwitch, a ring (no PAT) for gathers."""
    group, cluster = whole("h100-sxm-80gb", 8)
    assert collective_choice("all_reduce", 64 * KIB, group, cluster)[1] == "ring/ll"
    assert collective_choice("all_reduce", GIB, group, cluster)[1] == "nvls"
    assert collective_choice("all_gather", 64 * KIB, group, cluster)[1].startswith("ring/")
    assert collective_choice("all_to_all", MIB, group, cluster)[1] == "direct"
    assert collective_choice("all_reduce", MIB, dataclasses.replace(group, size=1), cluster) == (0.0, "")


def test_pcie_nodes_chain_with_nccls_pcie_hop_ratio() -> None:
    """4 x 8 L40S (PCIe inside the node): NCCL's PCIe tree/ring Simple hop latencies are 4.0 and
    5.7 us (tuning.cc line 149), so a chain step is 0.70 of a ring step there (1.18 on NVLink)."""
    group, cluster = whole("l40s-48gb", 32)
    c = load_constants("l40s-48gb")
    seconds, algo = collective_choice("all_reduce", 8 * KIB, group, cluster)
    assert algo == "tree/simple"
    rate = min(cluster.scale_up_bandwidth_bytes_per_s_per_direction * c.pcie_efficiency,
               8 * cluster.inter_node_bandwidth_bytes_per_s_per_gpu * c.scale_out_efficiency)
    formula = 2 * (7 * c.latency_intra_s * 4.0 / 5.7 + 2 * c.latency_inter_s)
    formula += 2 * (8 * KIB + c.half_bandwidth_bytes) / (rate * 0.92 * 0.8)  # factor at 8 KiB
    assert seconds == pytest.approx(formula, rel=1e-3)
