"""PyTorch / transformers ground truth for ACTIVATION memory (bytes saved for backward).

(docstring with the measured formulas is filled in below)
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import AutoConfig, AutoModelForCausalLM

from .hf_truth import _DROP_KEYS, _is_moe, text_config

__all__ = [
    "SavedItem",
    "SavedReport",
    "build_train_config",
    "build_train_model",
    "measure_saved_bytes",
    "format_report",
]

#: regions outside the decoder layers (keys of ``SavedReport.outside_layers``).
OUTSIDE_REGIONS = ("embedding", "rotary", "model", "shared", "final_norm", "lm_head", "loss")

_EMBED_NAMES = ("embed_tokens", "wte", "wpe", "embed_in", "embed_positions")
_FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_norm", "final_layernorm")
_LM_HEAD_NAMES = ("lm_head", "embed_out")
_ROTARY_NAMES = ("rotary_emb", "rotary_embedding", "rotary_emb_local")


# --------------------------------------------------------------------------- config / model


def _zero_dropouts(hf) -> list[str]:
    """Set every float ``*dropout*`` / ``*pdrop*`` attribute (and MoE router jitter) of ``hf`` to 0."""
    changed = []
    for key, val in list(vars(hf).items()):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            continue
        low = key.lower()
        if ("dropout" in low or "pdrop" in low or low == "router_jitter_noise") and val != 0:
            setattr(hf, key, 0.0)
            changed.append(key)
    return changed


def build_train_config(
    config: dict[str, Any],
    attn_implementation: str = "eager",
    experts_implementation: str = "eager",
    dtype: torch.dtype = torch.bfloat16,
):
    """Transformers config for a training-mode measurement of the text part of ``config``.

    ``attn_implementation`` as given, ``experts_implementation`` for MoE families,
    ``use_cache=False``, every dropout probability 0, router jitter 0,
    ``output_router_logits=False`` (no auxiliary load-balancing loss), ``dtype``.
    """
    cfg = text_config(config)
    for key in _DROP_KEYS:
        cfg.pop(key, None)
    model_type = cfg.pop("model_type")
    cfg.pop("text_config", None)
    cfg.update({"attn_implementation": attn_implementation, "use_cache": False})
    if _is_moe(cfg):
        cfg["experts_implementation"] = experts_implementation
    hf = AutoConfig.for_model(model_type, **cfg)
    _zero_dropouts(hf)
    if hasattr(hf, "output_router_logits"):
        hf.output_router_logits = False
    hf.dtype = dtype
    return hf


def build_train_model(
    config: dict[str, Any],
    attn_implementation: str = "eager",
    experts_implementation: str = "eager",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
):
    """Instantiate the causal LM on CPU with real (randomly initialised) weights, training mode."""
    hf = build_train_config(config, attn_implementation, experts_implementation, dtype)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype)
    model.train()
    return model


# --------------------------------------------------------------------------- report types


@dataclass
class SavedItem:
    """One storage saved for backward (counted once, however many ops / views save it).

    ``where``: decoder layer index (int) or an outside region (``OUTSIDE_REGIONS``).
    ``module``: qualified name of the innermost module running when the storage
    was FIRST saved.  ``op``: ``"<producer aten op> -> <saving autograd nodes>"``.
    ``shape`` / ``dtype`` / ``is_view``: of the first saved tensor (a view when it
    does not cover its storage from offset 0 with the storage's full size).
    ``bytes``: the storage's size (what is kept alive), ``tensor_bytes``: numel x
    itemsize of the first saved view (smaller when a small view pins a big storage).
    """

    where: int | str
    module: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    is_view: bool
    tensor_bytes: int
    producer: str
    producer_module: str
    savers: tuple[str, ...]
    saver_modules: tuple[str, ...]
    n_saves: int

    def as_row(self) -> tuple:
        return (self.where, self.module, self.op, self.shape, self.dtype, self.bytes, self.is_view)


@dataclass
class SavedReport:
    """Bytes saved for backward by one training forward (parameters / buffers excluded)."""

    total_bytes: int
    per_layer_bytes: list[int]
    outside_layers: dict[str, int]
    items: list[SavedItem]
    model_type: str = ""
    attn_implementation: str = ""
    experts_implementation: str | None = None
    batch: int = 0
    seq_len: int = 0
    dtype: str = ""
    #: bytes of the returned logits tensor (alive in the output, not saved for backward).
    logits_bytes: int = 0
    logits_dtype: str = ""
    #: saved storages that belong to parameters / buffers (not counted), one entry per storage.
    excluded: list[SavedItem] = field(default_factory=list)
    #: bytes of storages saved by autograd nodes not reachable from the loss (freed during forward).
    unreachable_bytes: int = 0

    def layer_items(self, layer: int) -> list[SavedItem]:
        return [it for it in self.items if it.where == layer]

    def region_items(self, region: str) -> list[SavedItem]:
        return [it for it in self.items if it.where == region]


# --------------------------------------------------------------------------- measurement machinery


class _Record:
    """Book-keeping for one saved storage."""

    __slots__ = ("key", "storage_nbytes", "first", "saves", "producer", "producer_stack", "reached", "tensor")

    def __init__(self, key, storage_nbytes, tensor, producer, producer_stack):
        self.key = key
        self.storage_nbytes = storage_nbytes
        self.tensor = tensor  # strong ref: keeps the storage alive so its data_ptr is never reused
        self.first = None  # (stack, shape, dtype, is_view, tensor_bytes) of the first save
        self.saves: list[_Handle] = []
        self.producer = producer
        self.producer_stack = producer_stack
        self.reached = False


class _Handle:
    """What the pack hook returns; the autograd graph keeps it until backward."""

    __slots__ = ("tensor", "record", "stack", "savers")

    def __init__(self, tensor, record, stack):
        self.tensor = tensor
        self.record = record
        self.stack = stack
        self.savers: list[str] = []


def _storage_key(t: torch.Tensor):
    st = t.untyped_storage()
    ptr = st.data_ptr()
    nbytes = st.nbytes()
    if ptr == 0 or nbytes == 0:
        return ("empty", id(st)), 0
    return (t.device.type, ptr), nbytes


def _is_view(t: torch.Tensor, storage_nbytes: int) -> bool:
    return t.storage_offset() != 0 or t.numel() * t.element_size() != storage_nbytes or not t.is_contiguous()


class _ProducerMode(TorchDispatchMode):
    """Remembers, per storage, the aten op (and module stack) that allocated it."""

    def __init__(self, harness: _Harness):
        super().__init__()
        self.h = harness

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat_in, _ = tree_flatten((args, kwargs))
        inputs = {_storage_key(t)[0] for t in flat_in if isinstance(t, torch.Tensor)}
        flat, _ = tree_flatten(out)
        for t in flat:
            if not isinstance(t, torch.Tensor):
                continue
            key, _ = _storage_key(t)
            if key in inputs:
                continue  # view / in-place / _unsafe_view result: the storage keeps its producer
            self.h.producers[key] = (str(func.overloadpacket.__name__), self.h.stack_snapshot())
        return out


class _Harness:
    def __init__(self, model):
        self.model = model
        self.names = {}
        for name, mod in model.named_modules():
            self.names.setdefault(id(mod), name)
        self.stack: list[str] = []
        self.records: dict[Any, _Record] = {}
        self.order: list[_Record] = []
        self.producers: dict[Any, tuple[str, tuple[str, ...]]] = {}
        self.excluded_keys = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            self.excluded_keys.setdefault(_storage_key(p)[0], ("parameter", name))
        for name, b in model.named_buffers(remove_duplicate=False):
            self.excluded_keys.setdefault(_storage_key(b)[0], ("buffer", name))
        self.lm_head_done = False
        self.layers_prefix, self.n_layers = _find_layers(model)
        self._hooks = []

    # module stack --------------------------------------------------------
    def stack_snapshot(self) -> tuple[str, ...]:
        return tuple(self.stack)

    def _pre(self, mod, args):
        self.stack.append(self.names.get(id(mod), "?"))

    def _post(self, mod, args, out):
        name = self.stack.pop() if self.stack else None
        if name is not None and name.split(".")[-1] in _LM_HEAD_NAMES:
            self.lm_head_done = True

    @contextlib.contextmanager
    def module_hooks(self) -> Iterator[None]:
        for mod in self.model.modules():
            self._hooks.append(mod.register_forward_pre_hook(self._pre))
            self._hooks.append(mod.register_forward_hook(self._post, always_call=True))
        try:
            yield
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks.clear()

    # saved tensor hooks ---------------------------------------------------
    def pack(self, t: torch.Tensor):
        key, nbytes = _storage_key(t)
        stack = self.stack_snapshot()
        rec = self.records.get(key)
        if rec is None:
            producer, pstack = self.producers.get(key, ("input", ()))
            rec = _Record(key, nbytes, t, producer, pstack)
            rec.first = (stack, tuple(t.shape), t.dtype, _is_view(t, nbytes), t.numel() * t.element_size())
            self.records[key] = rec
            self.order.append(rec)
        handle = _Handle(t, rec, (stack, self.lm_head_done))
        rec.saves.append(handle)
        return handle

    @staticmethod
    def unpack(handle: _Handle) -> torch.Tensor:
        _Harness._current_unpack.append(handle)
        return handle.tensor

    _current_unpack: list = []

    # graph walk -----------------------------------------------------------
    def walk(self, root) -> None:
        """Mark every saved handle reachable from ``root`` with the autograd node(s) that hold it."""
        seen = set()
        todo = [root]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            attrs = [a for a in dir(node) if a.startswith("_saved_") and not a.endswith(("_sym_sizes", "_sym_strides"))]
            if hasattr(node, "saved_tensors") and not attrs:
                attrs = ["saved_tensors"]
            for a in attrs:
                _Harness._current_unpack.clear()
                try:
                    getattr(node, a)
                except Exception:  # noqa: BLE001 - e.g. freed buffers
                    continue
                for handle in _Harness._current_unpack:
                    handle.savers.append(node.name())
                    handle.record.reached = True
            _Harness._current_unpack.clear()
            for nxt, _ in getattr(node, "next_functions", ()):
                todo.append(nxt)


def _find_layers(model) -> tuple[str, int]:
    n = model.config.num_hidden_layers
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n and name.split(".")[-1] in ("layers", "h", "layer"):
            if best is None or len(name) < len(best):
                best = name
    if best is None:
        raise ValueError("cannot find the decoder layers ModuleList")
    return best, n


_LAYER_RE_CACHE: dict[str, re.Pattern] = {}


def _region_of(stack: tuple[str, ...], h: _Harness, after_lm_head: bool = False) -> tuple[int | str, str]:
    """(layer index or outside region, innermost module name) of a module stack."""
    pat = _LAYER_RE_CACHE.setdefault(h.layers_prefix, re.compile(rf"^{re.escape(h.layers_prefix)}\.(\d+)(\.|$)"))
    inner = stack[-1] if stack else ""
    for name in stack:
        m = pat.match(name)
        if m:
            return int(m.group(1)), inner
    for name in reversed(stack):
        last = name.split(".")[-1]
        if last in _LM_HEAD_NAMES:
            return "lm_head", inner
        if last in _EMBED_NAMES:
            return "embedding", inner
        if last in _ROTARY_NAMES:
            return "rotary", inner
        if last in _FINAL_NORM_NAMES:
            return "final_norm", inner
    if after_lm_head:
        return "loss", inner
    return "model", inner


# --------------------------------------------------------------------------- public API


def _random_batch(vocab: int, batch: int, seq_len: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq_len), generator=g)


def measure_saved_bytes(
    config: dict[str, Any],
    batch: int,
    seq_len: int,
    attn_implementation: str = "eager",
    dtype: torch.dtype = torch.bfloat16,
    experts_implementation: str = "eager",
    seed: int = 0,
    model=None,
) -> SavedReport:
    """Bytes saved for backward by one training forward (with loss) of the HF causal LM.

    See the module docstring for the attribution rules.  ``model`` may be passed
    to reuse an already built :func:`build_train_model` (it must match ``config``).
    """
    if model is None:
        model = build_train_model(config, attn_implementation, experts_implementation, dtype, seed)
    hf = model.config
    input_ids = _random_batch(hf.vocab_size, batch, seq_len, seed + 1)
    labels = input_ids.clone()
    h = _Harness(model)
    _Harness._current_unpack = []
    with h.module_hooks(), _ProducerMode(h), torch.autograd.graph.saved_tensors_hooks(h.pack, h.unpack):
        out = model(input_ids=input_ids, labels=labels, use_cache=False)
    loss = out.loss
    h.walk(loss.grad_fn)

    items: list[SavedItem] = []
    excluded: list[SavedItem] = []
    unreachable = 0
    for rec in h.order:
        if not rec.reached:
            if rec.key not in h.excluded_keys:
                unreachable += rec.storage_nbytes
            continue
        reached = [hd for hd in rec.saves if hd.savers]
        first = reached[0]
        stack, after = first.stack
        where, inner = _region_of(stack, h, after)
        saver_regions = []
        for hd in reached:
            r, _ = _region_of(hd.stack[0], h, hd.stack[1])
            if r not in saver_regions:
                saver_regions.append(r)
        prod_where, _ = _region_of(rec.producer_stack, h)
        layers_saving = [r for r in saver_regions if isinstance(r, int)]
        if not isinstance(prod_where, int) and len(layers_saving) >= 2:
            where = "shared"
        savers = tuple(dict.fromkeys(s for hd in reached for s in hd.savers))
        t = first.tensor
        item = SavedItem(
            where=where,
            module=inner,
            op=f"{rec.producer} -> {'/'.join(savers)}",
            shape=tuple(t.shape),
            dtype=str(t.dtype).replace("torch.", ""),
            bytes=rec.storage_nbytes,
            is_view=_is_view(t, rec.storage_nbytes),
            tensor_bytes=t.numel() * t.element_size(),
            producer=rec.producer,
            producer_module=rec.producer_stack[-1] if rec.producer_stack else "",
            savers=savers,
            saver_modules=tuple(dict.fromkeys(hd.stack[0][-1] if hd.stack[0] else "" for hd in reached)),
            n_saves=sum(len(hd.savers) for hd in reached),
        )
        if rec.key in h.excluded_keys:
            kind, pname = h.excluded_keys[rec.key]
            item.where = kind
            item.module = pname
            excluded.append(item)
        else:
            items.append(item)

    per_layer = [0] * h.n_layers
    outside: dict[str, int] = defaultdict(int)
    for it in items:
        if isinstance(it.where, int):
            per_layer[it.where] += it.bytes
        else:
            outside[it.where] += it.bytes
    logits = out.logits
    report = SavedReport(
        total_bytes=sum(it.bytes for it in items),
        per_layer_bytes=per_layer,
        outside_layers=dict(outside),
        items=items,
        model_type=hf.model_type,
        attn_implementation=attn_implementation,
        experts_implementation=getattr(hf, "_experts_implementation", None) if _is_moe(vars(hf)) else None,
        batch=batch,
        seq_len=seq_len,
        dtype=str(dtype).replace("torch.", ""),
        logits_bytes=logits.numel() * logits.element_size(),
        logits_dtype=str(logits.dtype).replace("torch.", ""),
        excluded=excluded,
        unreachable_bytes=unreachable,
    )
    del out, loss
    return report


def format_report(rep: SavedReport, layers: list[int] | None = None, outside: bool = True) -> str:
    """Human-readable table of the saved storages (per layer, then outside the layers)."""
    lines = [
        f"{rep.model_type} attn={rep.attn_implementation} experts={rep.experts_implementation} "
        f"b={rep.batch} s={rep.seq_len} dtype={rep.dtype}: total={rep.total_bytes:,} "
        f"per_layer={rep.per_layer_bytes} outside={rep.outside_layers} "
        f"logits(returned)={rep.logits_bytes:,} {rep.logits_dtype} unreachable={rep.unreachable_bytes}"
    ]
    wheres: list[int | str] = list(range(len(rep.per_layer_bytes))) if layers is None else list(layers)
    if outside:
        wheres += [r for r in OUTSIDE_REGIONS if r in rep.outside_layers]
    for w in wheres:
        its = [it for it in rep.items if it.where == w]
        lines.append(f"  [{w}] {sum(it.bytes for it in its):,} bytes")
        for it in its:
            view = f" view({it.tensor_bytes})" if it.is_view else ""
            lines.append(
                f"    {it.module:<40} {it.op:<60} {str(it.shape):<18} {it.dtype:<9} {it.bytes:>10,}{view}"
                f" x{it.n_saves}"
            )
    return "\n".join(lines)
