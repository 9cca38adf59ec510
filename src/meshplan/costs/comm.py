"""Time of one collective on a placed group of GPUs, and of one point-to-point copy.

Size convention (`size_bytes`, the "size" column of nccl-tests for each op):
  all_reduce      the buffer each rank holds (input and output);
  all_gather      the OUTPUT: the gathered tensor each rank ends with (n x its shard);
  reduce_scatter  the INPUT each rank holds (n x the shard it ends with);
  all_to_all      the bytes each rank sends in total, including the 1/n it keeps;
  broadcast       the buffer the root sends.
A group of one rank, or an empty buffer, takes no time.

Model: NCCL's ring (Simple protocol), the algorithm it runs for large messages; NCCL's own
tuning model (src/graph/tuning.cc) has the same form. Like NCCL, every call takes the fastest
algorithm the group allows (`collective_choice` names it): the ring in one of three protocols,
NVLS inside an NVSwitch domain, and across network units NCCL's tree (all-reduce) and PAT
(all-gather / reduce-scatter at one rank per unit), priced below.
  time = latency + bytes per rank / (achievable bandwidth x saturation(S))
  latency: per-step latency x steps, 2(n-1) steps for all-reduce and n-1 for the gathers and
    broadcast; of these 2(N-1) resp. N-1 cross between the N network units the group spans
    (scale-up domains that hold whole nodes, else nodes) and pay latency_inter_s, the rest
    latency_intra_s.
  bytes per rank (the algorithm factor): all-reduce 2(n-1)/n x S, all-gather and reduce-scatter
    (n-1)/n x S, broadcast S (pipelined chain).
  bandwidth: a ring orders ranks unit by unit and streams every hop at once, so the slowest
    link class it crosses sets the pace (the hierarchical collective NCCL effectively runs):
    - inside a scale-up domain: scale_up_bandwidth x scale_up_efficiency (PCIe parts:
      pcie_efficiency; AMD xGMI is a full mesh of point-to-point links, so r ranks of an
      8-GPU hive use (r-1)/7 of it);
    - between domains of one node (H100 NVL pairs): the GPUs' PCIe links to the host;
    - between network units: the unit's members' shares of the node NICs x scale_out_efficiency;
      the ring's bytes cross each unit boundary once, spread over the members' NICs, so a
      group with 8 ranks per node uses all 8 NICs and one with 1 rank per node uses one.
      (Intra-node reduce-scatter, inter-node all-reduce and intra-node all-gather run one after
      the other would cap a 4-node B200 all-reduce at 340 GB/s busbw even at line rate;
      allreduce-busbw-aws-p6-b200-4nodes measured 381.8: the phases overlap and the NICs set
      the pace, as in a ring.)
    All-reduce inside one NVSwitch domain on Hopper/Blackwell also has NVLink SHARP (NVLS):
    each rank sends and receives the buffer once, S / (link x nvls_allreduce_efficiency);
    the faster of ring and NVLS is taken.
  saturation(S) = S / (S + half_bandwidth_bytes), S the message size above (NCCL ramps its
    channels and protocols with the message). A per-rank-step chunk S/n would make this term
    exactly steps x half_bandwidth_bytes / bandwidth, a copy of the latency term.
  protocols: that is NCCL's Simple protocol; inside a node its LL and LL128 protocols
    (PROTOCOLS, from NCCL's own tuning model) have far lower per-step latency and lower
    bandwidth, and the fastest of the three is taken, so small messages are priced by latency
    as NCCL runs them (see _low_latency for why rings across the network stay Simple).
  tree (all-reduce across network units, Simple protocol; NCCL's figures in
    data/nccl_algorithms.yaml, v2.27.7-1 tuning.cc): a chain inside each unit and a double
    binary tree between units, reduce up then broadcast down: latency 2 x ((members per unit
    - 1) chain steps x 4.0/3.4 (PCIe: 4.0/5.7) of latency_intra_s + log2(units) x
    latency_inter_s), against the ring's 2(n-1) steps; each rank moves 2 S at 0.92 of the
    ring's rate, times NCCL's tree correction for 64 B-256 MiB (0.5-0.9). It wins for small
    and medium buffers and at scale (4 MiB on 512 nodes: ~0.2 ms instead of the ring's ~16 ms
    of latency).
  PAT (NCCL 2.23+, all-gather / reduce-scatter when every rank is alone on its unit):
    latency_inter_s x (log2(n) / 3.5 + 0.2 n), the whole buffer once at 0.75 of the NIC rate.
  all_to_all: every rank sends S/n to each peer at once; the peers in its domain over the
    scale-up links, the peers outside its unit over its NIC share; the busier link class sets
    the time; latency: one intra-node step per peer, plus one network latency.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from meshplan.costs.placement import GroupPlacement
from meshplan.errors import ConfigError
from meshplan.hardware import Cluster, get_gpu, get_interconnect
from meshplan.memo import MISS, IdentityMemo

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
"""The collectives collective_time knows."""

FAMILIES = {
    "ampere": "nvidia-ampere", "hopper": "nvidia-hopper", "blackwell": "nvidia-blackwell",
    "cdna2": "amd-cdna", "cdna3": "amd-cdna", "cdna4": "amd-cdna",
}
"""GPU architecture -> row of comm_constants.yaml; other architectures use `default`."""

_HOST_LINK = {"hopper": "pcie5", "blackwell": "pcie5", "cdna3": "pcie5", "cdna4": "pcie5"}
"""PCIe generation of a GPU's host link (other architectures: pcie4)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommConstants:
    """Fitted or measured-bounded communication constants of one GPU family."""

    scale_up_efficiency: float
    """Achievable ring bus bandwidth / link peak inside a scale-up domain (NVLink, xGMI)."""
    nvls_allreduce_efficiency: float
    """NVLink SHARP all-reduce algorithm bandwidth / link peak (each rank moves the buffer
    once); 0 where the family has no NVLS. busbw = 2(n-1)/n x this x peak."""
    scale_out_efficiency: float
    """Achievable bandwidth / NIC line rate across nodes."""
    latency_intra_s: float
    """Per-step latency of a ring step inside a node or scale-up domain, seconds."""
    latency_inter_s: float
    """Per-step latency of a ring step across the network, seconds."""
    half_bandwidth_bytes: float
    """Message size (bytes, as size_bytes) at which bandwidth reaches half its asymptote."""
    pcie_efficiency: float
    """Achievable ring bus bandwidth / PCIe link peak (GPUs whose scale-up link is PCIe)."""


PROTOCOLS: dict[str, dict[str, Any]] = {
    "ll": {"base_s": 6.6e-6, "hop_s": {"nvlink": 0.6e-6, "pcie": 1.0e-6}, "bandwidth_share": 0.25},
    "ll128": {"base_s": 14.0e-6, "hop_s": {"nvlink": 1.9e-6, "pcie": 2.5e-6}, "bandwidth_share": 0.92},
}
"""NCCL's low-latency ring protocols inside a node, from its own cost model (src/graph/tuning.cc,
NCCL 2.18+: baseLat and the NVLink/PCI hwLat of Ring/LL and Ring/LL128; LL's bus bandwidth x 1/4
for all-reduce (8-byte stores carrying 4 data bytes and a 4-byte flag), LL128's x 0.92 (120 data
bytes per 128-byte line)). NCCL picks the fastest protocol per call; for small messages that is
LL (a 64 KiB all-reduce over 8 NVLink GPUs: ~16 us instead of 14 Simple steps). The Simple
protocol is the fitted ring."""


@functools.cache
def _families() -> dict[str, Any]:
    """The rows of costs/data/comm_constants.yaml, read once."""
    from meshplan.yamlread import load_packaged

    data = resources.files("meshplan.costs").joinpath("data", "comm_constants.yaml")
    return load_packaged(data.read_text())["families"]


@functools.cache
def _algorithms() -> dict[str, dict[str, Any]]:
    """NCCL's tree and PAT figures (costs/data/nccl_algorithms.yaml): {algorithm: {name: value}}."""
    from meshplan.yamlread import load_packaged

    data = resources.files("meshplan.costs").joinpath("data", "nccl_algorithms.yaml")
    rows = load_packaged(data.read_text())
    return {
        algo: {k: v["value"] for k, v in rows[algo].items() if isinstance(v, dict)}
        for algo in ("tree", "pat")
    }


def _log2i(n: int) -> int:
    """floor(log2(n)) for n >= 1, as NCCL's log2i."""
    return n.bit_length() - 1


def _tree_correction(s: float) -> float:
    """NCCL's tree bandwidth factor for an `s`-byte buffer (1 outside 64 B..256 MiB)."""
    index = _log2i(int(s) >> 6) if s >= 64 else -1
    factors = _algorithms()["tree"]["simple_correction"]
    return factors[index] if 0 <= index < len(factors) else 1.0


@functools.cache
def family_constants(family: str) -> CommConstants:
    """The constants of one row of comm_constants.yaml (e.g. `nvidia-hopper`)."""
    rows = _families()
    if family not in rows:
        raise ConfigError(f"unknown communication family {family!r}; known: {', '.join(rows)}")
    row = rows[family]
    return CommConstants(**{f.name: float(row[f.name]["value"]) for f in fields(CommConstants)})


@functools.cache
def load_constants(gpu_name: str | None = None) -> CommConstants:
    """Constants of `gpu_name`'s family (see FAMILIES), or the `default` row for None."""
    if gpu_name is None:
        return family_constants("default")
    return family_constants(FAMILIES.get(get_gpu(gpu_name).architecture, "default"))


def collective_time(
    op: str,
    size_bytes: float,
    group: GroupPlacement,
    cluster: Cluster,
    consts: CommConstants | None = None,
) -> float:
    """Seconds for one `op` of `size_bytes` (see the module docstring) on `group`."""
    return collective_choice(op, size_bytes, group, cluster, consts)[0]


def collective_choice(
    op: str,
    size_bytes: float,
    group: GroupPlacement,
    cluster: Cluster,
    consts: CommConstants | None = None,
) -> tuple[float, str]:
    """(seconds, algorithm) of one `op`: the algorithm NCCL's cost model would run, named
    "ring/simple", "ring/ll", "ring/ll128", "tree/simple", "nvls", "pat" or, for all-to-all,
    "direct"; ("", 0 s) for a group of one rank or an empty buffer."""
    fn = _OPS.get(op)
    if fn is None:
        raise ConfigError(f"unknown collective {op!r}; use one of {', '.join(OPS)}")
    if group.size <= 1 or size_bytes <= 0:
        return 0.0, ""
    c = consts or load_constants(cluster.gpu.name)
    key = (op, size_bytes, id(group), id(cluster), id(c))
    hit = _CHOICES.find(key, group, cluster, c)
    if hit is not MISS:
        return hit
    return _CHOICES.keep(key, (group, cluster, c), fn(float(size_bytes), group, cluster, c))


_CHOICES = IdentityMemo(65536)
"""(op, size, group, cluster, constants) -> (seconds, algorithm): a plan search asks the same
collective of the same (cached) group placement for many candidates, and pricing every
algorithm costs more than the look-up."""


def p2p_time(
    size_bytes: float, cross_node: bool, cluster: Cluster, consts: CommConstants | None = None
) -> float:
    """Seconds to send `size_bytes` from one GPU to another: over the network when
    `cross_node` (pass whether the pair is in different scale-up domains on multi-node NVLink
    domains such as NVL72), else over one scale-up path."""
    if size_bytes <= 0:
        return 0.0
    c = consts or load_constants(cluster.gpu.name)
    sat = size_bytes / (size_bytes + c.half_bandwidth_bytes)
    if cross_node:
        rate = cluster.inter_node_bandwidth_bytes_per_s_per_gpu * c.scale_out_efficiency
        return c.latency_inter_s + size_bytes / (rate * sat)
    return c.latency_intra_s + size_bytes / (_scale_up_rate(2, cluster, c) * sat)


def bus_bandwidth(op: str, size_bytes: float, ranks: int, seconds: float) -> float:
    """nccl-tests bus bandwidth (bytes/s) of a collective that took `seconds`."""
    factor = {"all_reduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(op, (ranks - 1) / ranks)
    return size_bytes * factor / seconds


def _all_reduce(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """Ring all-reduce; across network units also NCCL's tree; inside one NVSwitch domain
    NVLS; the fastest is taken."""
    n = g.size
    ring = _ring(2, 2 * (n - 1) / n * s, s, g, cluster, c)
    units = _network_units(g, cluster)[0]
    if units > 1:
        return min(ring, _tree(s, g, cluster, c))
    if g.domains > 1 or not _has_nvls(cluster, c):
        return ring
    rate = cluster.scale_up_bandwidth_bytes_per_s_per_direction * c.nvls_allreduce_efficiency
    nvls = 2 * (n - 1) * c.latency_intra_s + (s + c.half_bandwidth_bytes) / rate
    return min(ring, (nvls, "nvls"))


def _tree(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """NCCL's tree all-reduce across network units (Simple protocol): a chain inside each unit
    and a double binary tree between units, reducing up and broadcasting down: 2 x (members - 1)
    chain steps and 2 log2(units) network steps, each rank moving twice the buffer at 0.92 of
    the ring's rate times NCCL's medium-size factor (figures in data/nccl_algorithms.yaml)."""
    units, unit_ranks = _network_units(g, cluster)
    tree = _algorithms()["tree"]
    pcie = cluster.gpu.scale_up_link.startswith("pcie") or g.domains > g.nodes
    intra = tree["intra_hop_ratio_pcie" if pcie else "intra_hop_ratio"]
    latency = 2 * ((unit_ranks - 1) * c.latency_intra_s * intra
                   + _log2i(units) * c.latency_inter_s * tree["inter_hop_ratio"])
    rate = _ring_rate(g, cluster, c) * tree["bandwidth_share"] * _tree_correction(s)
    return latency + 2 * (s + c.half_bandwidth_bytes) / rate, "tree/simple"


def _pat(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """NCCL's PAT all-gather / reduce-scatter (2.23+, one rank per node): log2(n) network
    steps of 1/3.5 of a ring step plus a linear 0.2 step per rank, every rank moving the whole
    buffer once at 0.75 of its NIC rate (figures in data/nccl_algorithms.yaml)."""
    pat = _algorithms()["pat"]
    steps = _log2i(g.size) * pat["log_hop_share"] + g.size * pat["rank_hop_share"]
    latency = c.latency_inter_s * steps
    rate = _nic_rate(g, cluster, c) * pat["bandwidth_share"]
    return latency + (s + c.half_bandwidth_bytes) / rate, "pat"


def _all_gather(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """Ring all-gather (or reduce-scatter) of an `s`-byte output; with one rank per network
    unit also NCCL's PAT, the faster taken."""
    ring = _ring(1, (g.size - 1) / g.size * s, s, g, cluster, c)
    if g.ranks_per_domain == 1 and _network_units(g, cluster)[0] == g.size:
        return min(ring, _pat(s, g, cluster, c))
    return ring


def _broadcast(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """Pipelined chain broadcast: every link carries the whole buffer once."""
    return _ring(1, s, s, g, cluster, c)


def _all_to_all(
    s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """Every rank sends s/n to each peer at once; the busier link class sets the time."""
    n = g.size
    units, unit_ranks = _network_units(g, cluster)
    per_peer = s / n
    seconds = 0.0
    if g.ranks_per_domain > 1:
        peers = g.ranks_per_domain - 1
        seconds = per_peer * peers / _scale_up_rate(g.ranks_per_domain, cluster, c)
    if g.domains > g.nodes:  # peers in other domains of the same node, over PCIe
        peers = g.ranks_per_node - g.ranks_per_domain
        seconds = max(seconds, per_peer * peers / _host_rate(cluster, c))
    if units > 1:
        seconds = max(seconds, per_peer * (n - unit_ranks) / _nic_rate(g, cluster, c))
    latency = (n - 1) * c.latency_intra_s + (c.latency_inter_s if units > 1 else 0.0)
    return latency + seconds * (1.0 + c.half_bandwidth_bytes / s), "direct"


def _ring(
    rounds: int, per_rank: float, s: float, g: GroupPlacement, cluster: Cluster, c: CommConstants
) -> tuple[float, str]:
    """A ring of `rounds` passes of n-1 steps moving `per_rank` bytes out of every rank, in the
    fastest of NCCL's three protocols (see `_low_latency`)."""
    n = g.size
    units = _network_units(g, cluster)[0]
    intra_steps, inter_steps = rounds * (n - units), rounds * (units - 1)
    latency = intra_steps * c.latency_intra_s + inter_steps * c.latency_inter_s
    rate = _ring_rate(g, cluster, c)
    simple = latency + per_rank * (1.0 + c.half_bandwidth_bytes / s) / rate
    if units > 1:
        return simple, "ring/simple"
    return min((simple, "ring/simple"), _low_latency(intra_steps, per_rank, rate, g, cluster))


def _ring_rate(g: GroupPlacement, cluster: Cluster, c: CommConstants) -> float:
    """Bytes/s a rank streams in a ring over `g`: the slowest link class the ring crosses."""
    rate = math.inf
    if g.ranks_per_domain > 1:
        rate = _scale_up_rate(g.ranks_per_domain, cluster, c)
    if g.domains > g.nodes:  # domains smaller than a node: the ring hops between them on PCIe
        rate = min(rate, g.ranks_per_domain * _host_rate(cluster, c))
    units, unit_ranks = _network_units(g, cluster)
    if units > 1:  # the unit's boundary traffic is spread over its members' NIC shares
        rate = min(rate, unit_ranks * _nic_rate(g, cluster, c))
    return rate


def _low_latency(steps: int, per_rank: float, rate: float, g: GroupPlacement,
                 cluster: Cluster) -> tuple[float, str]:
    """The ring inside one node or NVLink domain in NCCL's LL or LL128 protocol, whichever is
    faster: flags travel with the data, so a step costs a fraction of a Simple step's latency
    but a line carries less payload (see PROTOCOLS). LL128 needs NVLink end to end.

    Across the network the Simple protocol stays (ring and tree alike): the only multi-node
    small-message record (allreduce-busbw-aws-p6-b200-4nodes, AWS EFA) plateaus at ~370 us
    from 256 KiB to 2 MiB, which the Simple tree with the fitted network step gives, where LL
    would predict under 130 us."""
    pcie = cluster.gpu.scale_up_link.startswith("pcie") or g.domains > g.nodes
    best = (math.inf, "")
    for name, proto in PROTOCOLS.items():
        if name == "ll128" and pcie:
            continue
        latency = proto["base_s"] + steps * proto["hop_s"]["pcie" if pcie else "nvlink"]
        best = min(best, (latency + per_rank / (rate * proto["bandwidth_share"]), "ring/" + name))
    return best


def _network_units(g: GroupPlacement, cluster: Cluster) -> tuple[int, int]:
    """(units spanned, members per unit) at the network level: scale-up domains when they
    hold whole nodes (NVL72 racks, 8-GPU nodes), else nodes."""
    if cluster.scale_up_domain >= cluster.gpus_per_node:
        return g.domains, g.ranks_per_domain
    return g.nodes, g.ranks_per_node


def _scale_up_rate(ranks: int, cluster: Cluster, c: CommConstants) -> float:
    """Achievable scale-up bytes/s of one rank toward `ranks - 1` peers in its domain."""
    gpu, domain = cluster.gpu, cluster.scale_up_domain
    rate = cluster.scale_up_bandwidth_bytes_per_s_per_direction
    if gpu.scale_up_link.startswith("pcie"):
        return rate * c.pcie_efficiency
    if gpu.vendor == "amd" and domain > 2:  # full mesh: one link per peer
        rate *= (ranks - 1) / (domain - 1)
    return rate * c.scale_up_efficiency


def _nic_rate(g: GroupPlacement, cluster: Cluster, c: CommConstants) -> float:
    """Achievable NIC bytes/s per member: the node's NICs split over nic_sharing groups, then
    over the group's members on the node."""
    node_gpus = min(cluster.gpus_per_node, cluster.num_gpus)
    per_gpu = cluster.inter_node_bandwidth_bytes_per_s_per_gpu * c.scale_out_efficiency
    return per_gpu * node_gpus / (g.nic_sharing * g.ranks_per_node)


def _host_rate(cluster: Cluster, c: CommConstants) -> float:
    """Achievable bytes/s of one GPU's PCIe host link (between domains of one node)."""
    link = get_interconnect(_HOST_LINK.get(cluster.gpu.architecture, "pcie4"))
    return link.bandwidth_bytes_per_s_per_direction * c.pcie_efficiency


def _has_nvls(cluster: Cluster, c: CommConstants) -> bool:
    """NVLink SHARP needs NVSwitches: SXM baseboards, and superchips in NVL72-style domains
    larger than a node (GH200 nodes of 4 are wired point to point)."""
    gpu = cluster.gpu
    switched = gpu.form_factor == "sxm" or (
        gpu.form_factor == "superchip" and cluster.scale_up_domain > cluster.gpus_per_node
    )
    return c.nvls_allreduce_efficiency > 0 and switched and gpu.scale_up_link.startswith("nvlink")


_OPS = {
    "all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _all_gather,
    "all_to_all": _all_to_all, "broadcast": _broadcast,
}
