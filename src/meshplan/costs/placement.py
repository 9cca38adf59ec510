"""Where one communication group's ranks sit on the cluster: nodes, scale-up domains, NICs.

Ranks are numbered by a rank order, innermost dimension first, as in Megatron-Core's default
"tp-cp-ep-dp-pp": rank = i_tp + tp*(i_cp + cp*(i_ep + ep*(i_dp + dp*i_pp))), and likewise for
any permutation of any dimension names. Nodes hold `gpus_per_node` consecutive ranks and
scale-up (NVLink/xGMI) domains `scale_up_domain` consecutive ranks.

A group is named by the dimensions its members vary in, the others held fixed. In meshplan's
convention "ep" splits the data-parallel dimension: the dense data-parallel group of a rank
varies ("ep", "dp") together (plus "cp" when context-parallel ranks share weights), the
expert-parallel group varies only ("ep",), the tensor-parallel group ("tp",).

The placement comes from the strides, without listing ranks: when a node (or domain) boundary
falls on a boundary of the mixed-radix order -- block = stride(d) * c with c dividing size(d) --
every group of the kind sits the same way and each count is a product of sizes. Layouts whose
odd sizes straddle blocks (tp=3 on 8-GPU nodes) fall back to enumerating the ranks once
(cached) and report the worst group.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
"""Megatron-Core's default rank order (tensor-parallel innermost)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlacement:
    """How the ranks of one group (every group of that kind alike, or the worst one) sit."""

    size: int
    """Ranks in the group."""
    nodes: int
    """Distinct nodes the group spans."""
    domains: int
    """Distinct scale-up (NVLink/xGMI) domains the group spans."""
    ranks_per_node: int
    """Group members on one node (the maximum over nodes)."""
    ranks_per_domain: int
    """Group members in one scale-up domain (the maximum over domains)."""
    nic_sharing: int
    """Groups of this kind with members on one node, hence sharing that node's NICs when they
    all communicate at once: the node's GPUs / ranks_per_node (maximum over nodes). A group gets
    (GPUs on the node / nic_sharing) GPUs' worth of the node's NIC bandwidth -- one NIC share
    per member rank on rail-aligned nodes; 1 means the group has the node's NICs to itself."""


def group_placement(
    sizes: Mapping[str, int], order: str, members: tuple[str, ...], cluster: Cluster
) -> GroupPlacement:
    """Placement of the group whose ranks vary in `members` under rank `order` on `cluster`.

    `sizes` maps every dimension of `order` (names joined by "-", innermost first) to its
    degree; their product must equal cluster.num_gpus. ConfigError names every factor if not.
    """
    return _placement(tuple(sizes.items()), order, tuple(members), cluster.num_gpus,
                      cluster.gpus_per_node, cluster.scale_up_domain)


@functools.lru_cache(maxsize=8192)
def _placement(items: tuple, order: str, members: tuple[str, ...], world: int, gpn: int,
               domain: int) -> GroupPlacement:
    """`group_placement` on hashable arguments: a search places the same groups many times."""
    sizes = dict(items)
    names = parse_order(sizes, order, world)
    unknown = [m for m in members if m not in sizes]
    if unknown:
        raise ConfigError(
            f"group members {', '.join(unknown)} are not dimensions of rank order "
            f"{order!r}; use some of {', '.join(names)}"
        )
    dims = tuple(int(sizes[n]) for n in names)
    member = tuple(n in members for n in names)
    return _place(dims, member, world, gpn, domain)


def parse_order(sizes: Mapping[str, int], order: str, num_gpus: int) -> tuple[str, ...]:
    """The dimension names of `order`, innermost first, checked against `sizes` and num_gpus."""
    names = tuple(part.strip() for part in order.split("-"))
    if sorted(names) != sorted(sizes) or len(set(names)) != len(names):
        raise ConfigError(
            f"rank order {order!r} must name each parallel dimension exactly once, joined by "
            f"'-' innermost first (e.g. {'-'.join(sizes)!r}); the sizes given are "
            f"{_factors(sizes, tuple(sizes), ', ')}"
        )
    bad = [n for n in names if not isinstance(sizes[n], int) or sizes[n] < 1]
    if bad:
        raise ConfigError(
            f"parallel sizes must be whole numbers of at least 1: {_factors(sizes, names)}"
        )
    total = math.prod(sizes[n] for n in names)
    if total != num_gpus:
        raise ConfigError(
            f"{_factors(sizes, names)} = {total} GPUs, but the cluster has num_gpus "
            f"{num_gpus}; the parallel sizes must multiply to the number of GPUs"
        )
    return names


def _factors(sizes: Mapping[str, int], names: tuple[str, ...], sep: str = " × ") -> str:
    """"tp 8 × dp 4 × pp 2" for the error messages."""
    return sep.join(f"{n} {sizes[n]!r}" for n in names)


@functools.lru_cache(maxsize=4096)
def _place(
    dims: tuple[int, ...], member: tuple[bool, ...], world: int, gpn: int, domain: int
) -> GroupPlacement:
    """Placement from strides when blocks are aligned with the order, else by enumeration."""
    node = _blocks(dims, member, min(gpn, world))
    dom = _blocks(dims, member, min(domain, world))
    if node is None or dom is None:
        return _enumerate(dims, member, world, gpn, domain)
    size = math.prod(d for d, m in zip(dims, member) if m)
    return GroupPlacement(
        size=size, nodes=node[0], domains=dom[0], ranks_per_node=node[1],
        ranks_per_domain=dom[1], nic_sharing=min(gpn, world) // node[1],
    )


def _blocks(
    dims: tuple[int, ...], member: tuple[bool, ...], block: int
) -> tuple[int, int] | None:
    """(blocks spanned, members per block) for blocks of `block` consecutive ranks, or None
    when the block boundary is not a mixed-radix boundary of the order (block = stride * c,
    c dividing that dimension's size)."""
    stride, spanned, per_block = 1, 1, 1
    for i, (d, m) in enumerate(zip(dims, member)):
        if stride * d <= block:  # the whole dimension lies inside one block
            stride *= d
            per_block *= d if m else 1
            continue
        if block % stride or d % (block // stride):
            return None
        inside = block // stride
        per_block *= inside if m else 1
        spanned *= d // inside if m else 1
        spanned *= math.prod(e for e, n in zip(dims[i + 1 :], member[i + 1 :]) if n)
        return spanned, per_block
    return spanned, per_block


def _enumerate(
    dims: tuple[int, ...], member: tuple[bool, ...], world: int, gpn: int, domain: int
) -> GroupPlacement:
    """The worst group's placement, listing every rank (odd layouts only; cached by _place)."""
    groups = [_group_id(rank, dims, member) for rank in range(world)]
    nodes, per_node, sharing = _block_stats(groups, gpn)
    domains, per_domain, _ = _block_stats(groups, domain)
    size = math.prod(d for d, m in zip(dims, member) if m)
    return GroupPlacement(
        size=size, nodes=nodes, domains=domains, ranks_per_node=per_node,
        ranks_per_domain=per_domain, nic_sharing=sharing,
    )


def _group_id(rank: int, dims: tuple[int, ...], member: tuple[bool, ...]) -> int:
    """Mixed-radix index of the non-member coordinates of `rank` (equal within a group)."""
    gid, scale = 0, 1
    for d, m in zip(dims, member):
        rank, coord = divmod(rank, d)
        if not m:
            gid += coord * scale
            scale *= d
    return gid


def _block_stats(groups: list[int], block: int) -> tuple[int, int, int]:
    """(max blocks a group spans, max members of a group in one block, max groups per block)."""
    counts: dict[tuple[int, int], int] = {}
    for rank, gid in enumerate(groups):
        key = (gid, rank // block)
        counts[key] = counts.get(key, 0) + 1
    spans: dict[int, int] = {}
    per_block: dict[int, int] = {}
    for gid, b in counts:
        spans[gid] = spans.get(gid, 0) + 1
        per_block[b] = per_block.get(b, 0) + 1
    return max(spans.values()), max(counts.values()), max(per_block.values())
