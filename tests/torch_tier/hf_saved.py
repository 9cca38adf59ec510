"""PyTorch / transformers ground truth for ACTIVATION memory: bytes saved for backward.

:func:`measure_saved_bytes` builds the causal LM of an HF config dict on CPU with
real (small, randomly initialised) weights in ``dtype`` (bf16 by default),
training mode, every dropout probability 0, router jitter 0, no auxiliary
router loss, ``use_cache=False``; runs ONE forward of random ``input_ids`` of
shape ``(b, s)`` with ``labels=input_ids`` (so the loss is computed exactly as
in training) inside ``torch.autograd.graph.saved_tensors_hooks`` and reports
what autograd keeps for the backward pass.

Counting rules
--------------
* One count per STORAGE (``untyped_storage().data_ptr()``): a tensor saved by
  several ops (the norm output saved by q/k/v projections, ``x`` saved by
  ``pow`` and ``mul``), or several views of one storage, count once, with the
  size of the whole storage.  A small view pins its whole storage: e.g. gpt_neox
  at b=1 saves ``v`` as a view of the fused qkv output and so keeps 3x its size
  alive; ``SavedItem.is_view`` / ``tensor_bytes`` show it.
* Parameters and buffers are excluded by storage (a saved ``W.t()`` or an
  expert slice ``W[e]`` is a view of a parameter storage and is excluded; a
  COPY derived from a parameter, e.g. deepseek's ``router.weight.float()`` or
  gemma's ``1 + weight``, is an activation and is counted).  Excluded storages
  are listed in ``SavedReport.excluded``.
* Only tensors held by autograd nodes reachable from the loss count (found by
  walking ``loss.grad_fn`` and unpacking every ``_saved_*`` attribute); saved
  tensors of dead branches (deepseek's group-limited routing scores) are freed
  during the forward and reported as ``unreachable_bytes`` only.  Every saved
  tensor is kept referenced while measuring, so a freed address is never reused
  and the storage de-duplication is exact.
* Attribution: to the module running when the storage is FIRST saved (module
  stack from forward pre/post hooks; innermost module, and the decoder layer
  ``layers[i]`` if inside one).  Hence a tensor produced in one place and
  saved in another belongs to its first SAVER: the layer input (= previous
  layer's output, or the embedding output for layer 0) belongs to the layer
  whose first norm saves it (LayerNorm saves its bf16 input; RMSNorm saves its
  fp32 copy, the bf16 input itself is not saved at all), the last layer's
  output to ``final_norm``, the final-norm output to ``lm_head``.  So layer 0
  costs the same as any other layer (the embedding output is saved by layer 0
  exactly as layer i-1's output is saved by layer i).
* Exception, region ``"shared"``: a storage produced OUTSIDE the decoder layers
  and saved by two or more layers (the rotary ``cos`` / ``sin``, shape
  ``(1, s, rotary_dim)``, computed once per forward and saved by the ``q*cos``,
  ``k*cos`` ... of every layer).  It is not charged to layer 0, so per-layer
  numbers are comparable across layers (a 1-layer model keeps it in layer 0).
* Outside regions: ``embedding`` (token / position ids), ``rotary``,
  ``model`` (other ops of the base model), ``shared``, ``final_norm``,
  ``lm_head`` (its input), ``loss`` (ops run by the CausalLM after lm_head).
  The returned bf16 logits (alive in the output, not saved) are reported as
  ``logits_bytes``.
* Producer ops come from a ``TorchDispatchMode`` (the aten op that allocated the
  storage; view / in-place / ``_unsafe_view`` results keep their producer);
  saver ops are the autograd node names.  ``SavedItem.op`` = ``"producer -> savers"``.

Measured formulas (torch 2.13 CPU, transformers 5.23, bf16, exact to the byte)
------------------------------------------------------------------------------
Symbols: b batch, s seq, T = b*s, h hidden, a heads, k kv heads, d head dim,
i intermediate, V vocab, E experts, K top-k, P = T*K (token, expert) pairs,
I expert width, Is shared-expert width.  All in BYTES.

Building blocks (per occurrence):

* RMSNorm (llama style, ``x.to(fp32)``, ``w * x.to(bf16)``) over width w:
  ``6*T*w + 4*T`` = fp32 copy of the input ``4Tw`` (saved by pow and mul) +
  fp32 rsqrt ``4T`` + bf16 normalised x ``2Tw`` (saved for the weight grad).
  Its OUTPUT ``2Tw`` is saved by the next projection(s) (one storage for q/k/v,
  for gate/up, for router + experts + shared experts).
* nn.LayerNorm (gpt2, gpt_neox): input ``2Th`` + mean + rstd ``4T`` (bf16 on
  CPU; on CUDA they are fp32: ``8T``).  Output ``2Th`` saved by the consumer.
* Gemma RMSNorm (all fp32, ``x * (1 + w)``): ``8Th + 4T + 4h``.
* SwiGLU / GeGLU MLP (input counted with the norm): ``8Ti`` (gate out, up out,
  act out, product).
* Eager attention, llama style (softmax in fp32 then ``.to(bf16)``):
  ``8Tad + 6bas^2`` = q ``2Tad`` + repeat_kv'ed k ``2Tad`` + v ``2Tad`` (GQA
  copies have a heads, never k heads) + softmax fp32 ``4bas^2`` + bf16 probs
  ``2bas^2`` + o_proj input ``2Tad``.  The additive causal mask is not saved.
* SDPA attention (CPU ``_scaled_dot_product_flash_attention_for_cpu``; no mask
  so ``enable_gqa=True``, k and v NOT repeated): ``4Tad + 4Tkd + 4Ta`` =
  q ``2Tad`` + k ``2Tkd`` + v ``2Tkd`` + output ``2Tad`` (also the o_proj
  input, same storage) + logsumexp fp32 ``4Ta``.  (With a padding mask
  transformers repeat_kv's k, v: ``2Tad`` each.)

Per decoder layer:

* llama / mistral / qwen2 (biases change nothing):
  ``16Th + 8T + 8Ti + ATTN``  with ATTN = ``8Tad + 6bas^2`` (eager) or
  ``4Tad + 4Tkd + 4Ta`` (sdpa).
* qwen3: llama + q_norm ``6Tad + 4Ta`` + k_norm ``6Tkd + 4Tk`` (per-head
  RMSNorm; q_proj / k_proj outputs themselves are not saved).
* gemma2 (eager only: transformers refuses sdpa): 4 gemma norms, 2 pre-norm
  outputs, logit soft-capping saves ``tanh`` (bf16 ``2bas^2``):
  ``36Th + 16T + 16h + 8Tad + 8bas^2 + 8Ti``.
* gpt2 (a*d = h, i = n_inner or 4h, gelu_new is 4 saved tensors of Ti, c_proj
  input Ti; softmax stays bf16 and is saved once):
  eager ``16Th + 8T + 2bas^2 + 10Ti``; sdpa ``16Th + 8T + 4Ta + 10Ti``
  (sdpa: q/k/v are views pinning the fused c_attn output ``6Th``).
* gpt_neox (parallel residual: x saved once for both norms; exact gelu):
  eager ``14Th + 8T + 6bas^2 + 4Ti``, PLUS ``4Th`` when b == 1 (v stays a view
  of the fused qkv output ``6Th`` instead of a ``2Th`` copy);
  sdpa ``20Th + 8T + 4Ta + 4Ti`` (v always pins the fused qkv output).
* mixtral (experts_implementation="eager"): ``16Th + 8T + ATTN + T(4E + 12K + 4)
  + P(20 + 6h + 8I)``; router: softmax fp32 ``4TE``, topk indices ``8TK``,
  renormalisation sum ``4T`` + clone of the top values ``4TK`` (in-place div);
  per (token, expert) pair: ``torch.where`` indices 16, fp32 routing weight 4,
  gathered x ``2h``, gate_up out ``4I``, act out ``2I``, product ``2I``, down
  out ``2h``, bf16 copy saved by ``index_add_`` ``2h``.
* qwen2_moe MoE layer: ``16Th + 8T + ATTN + 8T*Is + 2T + 2Th + T(4E + 8K)
  [+ T(4 + 4K) if norm_topk_prob] + P(18 + 6h + 8I)`` (shared expert MLP,
  sigmoid gate output ``2T``, shared-expert output ``2Th`` saved by the gating
  mul; routing weights are bf16 so 2 bytes per pair and no fp32 product).
  Dense (mlp_only_layers) layers: the llama formula.
* deepseek_v3 (MLA with q_lora_rank rq, kv_lora_rank rkv, dq = nope + rope,
  dv; dense layer): ``16Th + 16T + 8T(rq + rkv) + 4Ta(dq + dv) + 6bas^2 + 8Ti``
  (eager; +``2Ta*d_nope`` when b == 1: v pins kv_b_proj's output).  MoE layer:
  replace ``2Th + 8Ti`` (post-norm output + MLP) by ``2Th + 8T*Is + 4Th + 4Eh +
  4TE + 8TK [+ 4T + 4TK if norm_topk_prob] + P(20 + 6h + 8I)`` (router runs in
  fp32: fp32 copy of x ``4Th`` and of its weight ``4Eh``, sigmoid ``4TE``).
  sdpa: dq != dv so CPU SDPA falls back to the MATH kernel, which upcasts to
  fp32: replace ``4Ta(dq + dv) + 6bas^2`` by ``8Ta*dq + 6Ta*dv + 4bas^2``.

MoE experts implementation: "eager" (default here; per-expert loop over the
routed tokens, exact and routing-independent in total) vs "grouped_mm" (the
transformers 5 default, also runs on CPU): per pair ``24 + w + 4h + 8I`` plus
``4E`` (offsets), w = routing-weight bytes (4 mixtral / deepseek, 2 qwen2_moe):
no index_add_ copy but sort / inverse-permutation indices.  "batched_mm" GATHERS
the expert weights per pair and saves them: ``P(4 + 4h + 8I + 6Ih)``, an
artifact (memory x weight size), unusable as ground truth.

Outside the layers:

* embedding: input ids int64 ``8T`` (gpt2 also position ids ``8s``).
* shared: rotary cos + sin, bf16, batch-independent: ``4*s*r`` (r = rotary
  dim: d, gpt_neox ``d*rotary_pct``, deepseek ``qk_rope_head_dim``; gpt2 0).
* final_norm: its norm formula; lm_head: its input ``2Th``.
* loss: log_softmax output fp32 ``4TV`` (the ``logits.float()`` upcast is
  NOT saved, but is alive during the loss) + shifted labels int64 ``8T``
  (``8b(s+1)`` at b == 1: the contiguous slice is a view of the padded labels)
  + total_weight fp32 4; gemma2 also the final soft-cap tanh ``2TV``.
  The returned logits are bf16 (``logits_bytes = 2TV``), not saved.

The module imports torch and transformers at import time: test modules must
``pytest.importorskip("torch")`` and ``pytest.importorskip("transformers")``
before importing it.
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

    def layer_breakdown(self, layer: int) -> dict[str, int]:
        """Bytes of layer ``layer`` per module path relative to the layer (``"self_attn"``, ``"mlp.act_fn"``)."""
        out: dict[str, int] = defaultdict(int)
        for it in self.layer_items(layer):
            parts = it.module.split(".")
            rel = parts[parts.index(str(layer)) + 1 :] if str(layer) in parts else parts
            out[".".join(rel) or "<layer>"] += it.bytes
        return dict(out)


# --------------------------------------------------------------------------- measurement machinery


class _Record:
    """Book-keeping for one saved storage."""

    __slots__ = ("key", "storage_nbytes", "saves", "producer", "producer_stack", "reached", "tensor")

    def __init__(self, key, storage_nbytes, tensor, producer, producer_stack):
        self.key = key
        self.storage_nbytes = storage_nbytes
        self.tensor = tensor  # strong ref: keeps the storage alive so its data_ptr is never reused
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
                with contextlib.suppress(Exception):  # a failing unpack still reported its handles
                    getattr(node, a)
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
    track_producers: bool = True,
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
    producers = _ProducerMode(h) if track_producers else contextlib.nullcontext()
    with h.module_hooks(), producers, torch.autograd.graph.saved_tensors_hooks(h.pack, h.unpack):
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
