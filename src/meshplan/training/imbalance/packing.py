"""Documents packed into sequences, and the attention work each rank of a step gets.

With document masking (Megatron/TE THD packing, torchtitan's document mask) a query sees only
the earlier tokens of its own document, so a sequence's attention work is the sum over its
documents of l (l + 1) / 2 query-key pairs, not S (S + 1) / 2. That work is uneven: data-parallel
ranks get different sequences and wait for the slowest, and the ranks of a context-parallel
group split each sequence into 2 cp chunks (chunk r and 2 cp - 1 - r to rank r, the
load-balanced causal "zig-zag" split), which balances one long causal document but not several.

`attention_imbalance` returns the busiest rank's attention work relative to today's model (one
full causal sequence per sequence, split evenly over cp): the factor the attention time of a
layer is multiplied by. The pipeline simulation takes one time per micro-batch and stage, so
a DP rank's time is the sum over its micro-batches of the busiest CP rank's work (the expected
step, not a per-micro-batch schedule).

Balancing strategies (`TrainingPlan.balance`):
- none: sequences go to micro-batches in packing order, micro-batches round-robin to DP ranks.
- sort: sequences sorted by attention work (of their busiest CP rank), heaviest first, each to
  the DP rank with the least work so far (longest-processing-time), in the spirit of
  ByteScale's balance scheduler, which assigns data to ranks by their work (arXiv 2502.21231).
- per-doc-cp: every document split into 2 cp pieces over the CP ranks (chunk r and 2 cp - 1 - r
  of each document), WLB-LLM's per-document sharding (arXiv 2503.17924): CP ranks get equal
  work up to rounding.
- reassign: documents re-packed, heaviest first, each into the sequence with the least
  attention work that still has room, then sequences spread over DP ranks as in `sort`
  (after WLB-LLM's workload-aware variable-length packing, with fixed-length sequences here).
Zeppelin (arXiv 2509.21841) goes further, partitioning attention and the linear modules
differently and remapping between them; that is not modelled.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshplan.training.imbalance.doclengths import documents_for

if TYPE_CHECKING:
    import numpy as np

BALANCE = ("none", "sort", "per-doc-cp", "reassign")


def triangle(n):
    """Causal query-key pairs of a document of n tokens: n (n + 1) / 2."""
    return n * (n + 1) / 2


@dataclass(frozen=True, slots=True)
class Packed:
    """Document pieces in sequence order: lengths[i] tokens of sequence seq[i]."""

    lengths: np.ndarray
    seq: np.ndarray
    num_sequences: int
    seq_len: int


def _pieces(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """Documents longer than a sequence cut into seq_len pieces (and the remainder)."""
    import numpy as np
    out = []
    for n in lengths.tolist():
        out += [seq_len] * (n // seq_len) + ([n % seq_len] if n % seq_len else [])
    return np.asarray(out, dtype=np.int64)


def first_fit(pieces: np.ndarray, seq_len: int, num_sequences: int) -> Packed:
    """Greedy first-fit: each piece into the first sequence with room, a new sequence when
    none has; stops when a piece would open sequence num_sequences + 1."""
    import numpy as np
    room = np.full(num_sequences, seq_len, dtype=np.int64)
    opened = 0
    lengths, seqs = [], []
    for n in pieces.tolist():
        fits = np.flatnonzero(room[:opened] >= n)
        if fits.size:
            s = int(fits[0])
        elif opened < num_sequences:
            s, opened = opened, opened + 1
        else:
            break
        room[s] -= n
        lengths.append(n)
        seqs.append(s)
    return _in_sequence_order(np.asarray(lengths), np.asarray(seqs), num_sequences, seq_len)


def _in_sequence_order(lengths, seqs, num_sequences: int, seq_len: int) -> Packed:
    import numpy as np
    order = np.argsort(seqs, kind="stable")
    return Packed(lengths[order].astype(np.int64), seqs[order].astype(np.int64), num_sequences, seq_len)


def repack_by_work(packed: Packed) -> Packed:
    """Documents re-packed heaviest first, each into the sequence with the least attention work
    that still has room (a piece that fits nowhere is left out)."""
    import numpy as np
    n, cap = packed.num_sequences, packed.seq_len
    room = np.full(n, cap, dtype=np.int64)
    work = np.zeros(n)
    lengths, seqs = [], []
    for size in sorted(packed.lengths.tolist(), reverse=True):
        open_work = np.where(room >= size, work, np.inf)
        s = int(np.argmin(open_work))
        if open_work[s] == np.inf:
            continue
        room[s] -= size
        work[s] += triangle(size)
        lengths.append(size)
        seqs.append(s)
    return _in_sequence_order(np.asarray(lengths), np.asarray(seqs), n, cap)


@functools.lru_cache(maxsize=32)
def packed_step(spec: str, seq_len: int, num_sequences: int, repack: bool) -> Packed:
    """The documents of one optimizer step (`num_sequences` sequences), first-fit packed, and
    re-packed by attention work when `repack`."""
    docs = documents_for(spec, 2 * seq_len * num_sequences)
    packed = first_fit(_pieces(docs, seq_len), seq_len, num_sequences)
    return repack_by_work(packed) if repack else packed


def zigzag_rank_work(packed: Packed, cp: int) -> np.ndarray:
    """(sequences, cp) attention work of each CP rank under the zig-zag split of each sequence:
    rank r holds chunks r and 2 cp - 1 - r. A chunk's work is W(end) - W(start), W(x) being the
    query-key pairs of the sequence's first x queries (whole documents before x plus a
    triangle of the document x falls in)."""
    import numpy as np
    seq_len, n = packed.seq_len, packed.num_sequences
    starts_local = np.cumsum(packed.lengths) - packed.lengths
    first = np.searchsorted(packed.seq, np.arange(n))
    starts_local = starts_local - starts_local[first][packed.seq]
    starts = packed.seq * seq_len + starts_local
    before = np.cumsum(triangle(packed.lengths)) - triangle(packed.lengths)
    bounds = (np.arange(2 * cp + 1) * seq_len) // (2 * cp)
    x = (np.arange(n)[:, None] * seq_len + bounds[None, :]).ravel()
    d = np.clip(np.searchsorted(starts, x, side="right") - 1, 0, None)
    inside = np.clip(x - starts[d], 0, packed.lengths[d])
    w = np.where(x >= starts[d], before[d] + triangle(inside), 0.0).reshape(n, 2 * cp + 1)
    chunks = np.diff(w, axis=1)
    return chunks[:, :cp] + chunks[:, ::-1][:, :cp]


def per_document_rank_work(packed: Packed, cp: int) -> np.ndarray:
    """(sequences, cp) attention work per CP rank when each document is split on its own into
    2 cp pieces, piece r and 2 cp - 1 - r to rank r (per-document sharding)."""
    import numpy as np
    j = np.arange(2 * cp + 1)
    bounds = (packed.lengths[:, None] * j[None, :]) // (2 * cp)
    pieces = np.diff(triangle(bounds), axis=1)
    per_doc = pieces[:, :cp] + pieces[:, ::-1][:, :cp]
    out = np.zeros((packed.num_sequences, cp))
    np.add.at(out, packed.seq, per_doc)
    return out


@dataclass(frozen=True, slots=True)
class DocImbalance:
    """Attention work of one step's documents on the plan's ranks."""

    attention_load: float
    """Busiest DP rank's attention work (summing each micro-batch's busiest CP rank) over
    today's full-causal work per GPU: the factor on attention time."""
    imbalance: float
    """Busiest rank's attention work / the mean over all DP x CP ranks."""
    dp_imbalance: float
    """Busiest DP rank / the mean DP rank (each counting its busiest CP rank per micro-batch)."""
    cp_imbalance: float
    """Busiest CP rank's work summed over micro-batches / the mean CP rank's."""
    masked_share: float
    """Document-masked attention work / full-causal work of the same sequences."""

    def to_dict(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _dp_groups(work: np.ndarray, dp: int) -> list[list[int]]:
    """Sequence indices of each DP rank by longest-processing-time: the heaviest sequence to
    the least-loaded rank that still has room."""
    import numpy as np
    per_rank = len(work) // dp
    heap = [(0.0, r) for r in range(dp)]
    groups: list[list[int]] = [[] for _ in range(dp)]
    for i in np.argsort(-work, kind="stable").tolist():
        load, r = heapq.heappop(heap)
        groups[r].append(i)
        if len(groups[r]) < per_rank:
            heapq.heappush(heap, (load + float(work[i]), r))
    return groups


def _microbatches(n: int, mbs: int, dp: int,
                  groups: list[list[int]] | None) -> list[list[np.ndarray]]:
    """Per DP rank, its micro-batches as arrays of sequence indices: from `groups`, or in
    packing order with micro-batches dealt round-robin (None)."""
    import numpy as np
    if groups is not None:
        return [[np.asarray(g[k:k + mbs]) for k in range(0, len(g), mbs)] for g in groups]
    mb = np.arange(n).reshape(-1, mbs)
    return [[mb[j] for j in range(r, len(mb), dp)] for r in range(dp)]


@functools.lru_cache(maxsize=512)
def attention_imbalance(spec: str, seq_len: int, global_batch: int, mbs: int, dp: int, cp: int,
                        balance: str) -> DocImbalance:
    """The step's attention work per rank for documents drawn from `spec` under `balance`."""
    packed = packed_step(spec, seq_len, global_batch, balance == "reassign")
    per_doc = balance == "per-doc-cp"
    ranks = per_document_rank_work(packed, cp) if per_doc else zigzag_rank_work(packed, cp)
    groups = _dp_groups(ranks.max(axis=1), dp) if balance in ("sort", "reassign") else None
    busiest, mean_cp = [], 0.0
    for batches in _microbatches(global_batch, mbs, dp, groups):
        per_mb = [ranks[b].sum(axis=0) for b in batches]
        busiest.append(sum(float(w.max()) for w in per_mb))
        mean_cp += sum(float(w.mean()) for w in per_mb)
    m = global_batch // (mbs * dp)
    reference = m * mbs * triangle(seq_len) / cp
    total = float(ranks.sum())
    mean_rank = total / (dp * cp)
    return DocImbalance(
        attention_load=max(busiest) / reference,
        imbalance=max(busiest) / mean_rank if mean_rank else 1.0,
        dp_imbalance=max(busiest) / (sum(busiest) / dp) if sum(busiest) else 1.0,
        cp_imbalance=sum(busiest) / mean_cp if mean_cp else 1.0,
        masked_share=total / (global_batch * triangle(seq_len)))


def doc_imbalance(plan) -> DocImbalance | None:
    """The attention imbalance of a resolved plan's documents (None without doc_lengths)."""
    if plan.doc_lengths is None:
        return None
    return attention_imbalance(plan.doc_lengths, plan.seq_len, plan.global_batch_size,
                               plan.micro_batch_size, plan.dp, plan.cp, plan.balance)
