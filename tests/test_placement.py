"""Group placement from strides, checked against listing every rank on small clusters."""

from __future__ import annotations

import itertools
import math

import pytest

from meshplan.costs.placement import GroupPlacement, group_placement
from meshplan.errors import ConfigError
from meshplan.hardware import Cluster

DEFAULT = "tp-cp-ep-dp-pp"


def brute_force(
    sizes: dict[str, int], order: str, members: tuple[str, ...], cluster: Cluster
) -> GroupPlacement:
    """The worst group's placement by listing ranks: rank = i0 + s0*(i1 + s1*(...))."""
    names = order.split("-")
    gpn, dom = cluster.gpus_per_node, cluster.scale_up_domain
    groups: dict[tuple, list[int]] = {}
    for coords in itertools.product(*(range(sizes[n]) for n in reversed(names))):
        coords = dict(zip(reversed(names), coords))
        rank, stride = 0, 1
        for n in names:
            rank += coords[n] * stride
            stride *= sizes[n]
        key = tuple(coords[n] for n in names if n not in members)
        groups.setdefault(key, []).append(rank)

    def per_block(block: int) -> tuple[int, int]:
        spans, most = 0, 0
        for ranks in groups.values():
            blocks = [r // block for r in ranks]
            spans = max(spans, len(set(blocks)))
            most = max(most, max(blocks.count(b) for b in blocks))
        return spans, most

    nodes, rpn = per_block(gpn)
    domains, rpd = per_block(dom)
    node_of = {r: r // gpn for ranks in groups.values() for r in ranks}
    sharing = max(len({k for k, ranks in groups.items() if any(node_of[r] == node for r in ranks)})
                  for node in set(node_of.values()))
    size = math.prod(sizes[m] for m in members)
    return GroupPlacement(size=size, nodes=nodes, domains=domains, ranks_per_node=rpn,
                          ranks_per_domain=rpd, nic_sharing=sharing)


CASES = [  # (gpu, num_gpus, overrides, sizes, order)
    ("h100-sxm-80gb", 64, {}, {"tp": 8, "cp": 1, "ep": 1, "dp": 8, "pp": 1}, DEFAULT),
    ("h100-sxm-80gb", 128, {}, {"tp": 4, "cp": 2, "ep": 2, "dp": 4, "pp": 2}, DEFAULT),
    ("h100-sxm-80gb", 128, {}, {"tp": 4, "cp": 2, "ep": 2, "dp": 4, "pp": 2}, "tp-dp-pp-cp-ep"),
    ("h100-sxm-80gb", 64, {}, {"tp": 2, "cp": 1, "ep": 4, "dp": 2, "pp": 4}, "pp-tp-ep-dp-cp"),
    ("gb200-186gb", 144, {}, {"tp": 4, "cp": 1, "ep": 9, "dp": 2, "pp": 2}, DEFAULT),
    ("gb200-186gb", 144, {}, {"tp": 2, "cp": 2, "ep": 3, "dp": 6, "pp": 2}, DEFAULT),
    ("h100-sxm-80gb", 24, {}, {"tp": 3, "dp": 8}, "tp-dp"),  # tp straddles nodes
    ("h100-sxm-80gb", 48, {}, {"tp": 2, "cp": 3, "dp": 8}, "tp-cp-dp"),
    ("h100-nvl-94gb", 16, {}, {"tp": 4, "dp": 4}, "tp-dp"),  # NVLink pairs in 8-GPU nodes
    ("h100-sxm-80gb", 4, {}, {"tp": 2, "dp": 2}, "tp-dp"),  # part of one node
    ("b200-180gb", 32, {"gpus_per_node": 4, "scale_up_domain": 16}, {"tp": 8, "dp": 4}, "tp-dp"),
]


def _member_sets(names: list[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of the dimensions, in order."""
    return [c for k in range(1, len(names) + 1) for c in itertools.combinations(names, k)]


@pytest.mark.parametrize("gpu,num,over,sizes,order", CASES)
def test_matches_brute_force(gpu, num, over, sizes, order) -> None:
    cluster = Cluster.build(gpu, num, **over)
    for members in _member_sets(order.split("-")):
        expected = brute_force(sizes, order, members, cluster)
        assert group_placement(sizes, order, members, cluster) == expected, members


def test_every_order_of_five_dims_matches_brute_force() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 32, gpus_per_node=4, scale_up_domain=8)
    sizes = {"tp": 2, "cp": 2, "ep": 2, "dp": 2, "pp": 2}
    for perm in itertools.permutations(sizes):
        order = "-".join(perm)
        for members in (("tp",), ("ep", "dp"), ("cp", "ep", "dp"), ("pp",), ("tp", "pp")):
            expected = brute_force(sizes, order, members, cluster)
            assert group_placement(sizes, order, members, cluster) == expected


def test_tp_innermost_stays_inside_a_node() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 256)
    for tp in (2, 4, 8):
        sizes = {"tp": tp, "cp": 1, "ep": 1, "dp": 256 // tp // 2, "pp": 2}
        g = group_placement(sizes, DEFAULT, ("tp",), cluster)
        assert (g.nodes, g.domains, g.ranks_per_node) == (1, 1, tp)
        assert g.nic_sharing == 8 // tp


def test_dp_spans_nodes_one_rank_each() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 16384)
    sizes = {"tp": 8, "cp": 1, "ep": 1, "dp": 128, "pp": 16}
    g = group_placement(sizes, DEFAULT, ("ep", "dp"), cluster)
    assert g == GroupPlacement(size=128, nodes=128, domains=128, ranks_per_node=1,
                               ranks_per_domain=1, nic_sharing=8)


def test_ep_lies_inside_the_data_parallel_group() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 256)
    sizes = {"tp": 2, "cp": 1, "ep": 8, "dp": 4, "pp": 4}
    ep = group_placement(sizes, DEFAULT, ("ep",), cluster)
    dp = group_placement(sizes, DEFAULT, ("ep", "dp"), cluster)
    assert (ep.size, dp.size) == (8, 32)
    assert (ep.nodes, ep.ranks_per_node) == (2, 4)  # ep stride 2: 8 ranks over 16 GPUs
    assert (dp.nodes, dp.ranks_per_node) == (8, 4)


def test_nvl72_domain_spans_18_nodes_of_4() -> None:
    cluster = Cluster.build("gb200-186gb", 144)
    assert (cluster.gpus_per_node, cluster.scale_up_domain) == (4, 72)
    sizes = {"tp": 4, "cp": 1, "ep": 18, "dp": 1, "pp": 2}
    ep = group_placement(sizes, DEFAULT, ("tp", "ep"), cluster)
    assert (ep.size, ep.nodes, ep.domains, ep.ranks_per_domain) == (72, 18, 1, 72)
    pp = group_placement(sizes, DEFAULT, ("pp",), cluster)
    assert (pp.nodes, pp.domains, pp.ranks_per_domain, pp.nic_sharing) == (2, 2, 1, 4)


def test_large_cluster_is_computed_without_listing_ranks() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 2**20)
    sizes = {"tp": 8, "cp": 2, "ep": 8, "dp": 1024, "pp": 8}
    g = group_placement(sizes, DEFAULT, ("cp", "ep", "dp"), cluster)
    assert (g.size, g.nodes, g.ranks_per_node) == (16384, 16384, 1)


BAD_ORDERS = ["tp-dp", "tp-cp-ep-dp-pp-xx", "tp-tp-ep-dp-pp", "tp,cp,ep,dp,pp"]


@pytest.mark.parametrize("order", BAD_ORDERS)
def test_bad_order_names_every_factor(order: str) -> None:
    cluster = Cluster.build("h100-sxm-80gb", 64)
    sizes = {"tp": 8, "cp": 1, "ep": 1, "dp": 4, "pp": 2}
    with pytest.raises(ConfigError) as err:
        group_placement(sizes, order, ("tp",), cluster)
    for factor in ("tp 8", "cp 1", "ep 1", "dp 4", "pp 2"):
        assert factor in str(err.value)


def test_sizes_not_matching_num_gpus_names_every_factor() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 128)
    sizes = {"tp": 8, "cp": 1, "ep": 2, "dp": 3, "pp": 2}
    with pytest.raises(ConfigError) as err:
        group_placement(sizes, DEFAULT, ("tp",), cluster)
    message = str(err.value)
    for factor in ("tp 8", "cp 1", "ep 2", "dp 3", "pp 2", "= 96", "128"):
        assert factor in message


def test_bad_size_and_unknown_member() -> None:
    cluster = Cluster.build("h100-sxm-80gb", 8)
    with pytest.raises(ConfigError, match="whole numbers"):
        group_placement({"tp": 0, "dp": 8}, "tp-dp", ("tp",), cluster)
    with pytest.raises(ConfigError, match="sp"):
        group_placement({"tp": 8, "dp": 1}, "tp-dp", ("sp",), cluster)
