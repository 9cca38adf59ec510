"""PyTorch / transformers ground truth for parameter counts and forward FLOPs.

The analytic side of meshplan (pure Python, no torch) is checked against what
this module MEASURES on the real Hugging Face implementation:

* parameters: ``sum(p.numel() for p in model.parameters())`` of the causal-LM
  class instantiated from the config on the ``meta`` device (no memory, so
  full-size 405B / 671B configs are fine);
* FLOPs: one forward of ``input_ids`` of shape ``(batch, seq_len)`` on that
  meta model under ``torch.utils.flop_counter.FlopCounterMode``.

Recipe (transformers 5.x, torch 2.x):

* ``attn_implementation="eager"``: attention is two ``aten.bmm`` (QK^T and PV,
  full S x S, no causal halving) that ``FlopCounterMode`` counts; SDPA on CPU
  would be counted too (as ``_scaled_dot_product_*``) but eager is what every
  family supports.
* ``experts_implementation="batched_mm"`` (a config kwarg in transformers 5,
  passed to ``AutoConfig.for_model``; it lands on
  ``config._experts_implementation``).  Expert classes decorated with
  ``@use_experts_implementation`` (mixtral, qwen2_moe, qwen3_moe, deepseek_v2/v3,
  gpt_oss) then run ``integrations.moe.batched_mm_experts_forward``: gather
  the top-k expert weights per (token, k) pair and one ``aten.bmm`` per
  projection, i.e. exactly ``tokens * top_k`` expert evaluations and no
  data-dependent shapes.  The default ``grouped_mm`` has no FLOP formula in
  ``FlopCounterMode`` (counted as 0), and ``eager`` loops over
  ``nonzero()`` results (impossible on meta).
* meta tensors are declared "fake" to ``transformers.utils.import_utils.is_tracing``
  while measuring (see :func:`_meta_is_fake`), so that mask creation skips its
  data-dependent ``.all()`` / packed-sequence checks exactly as it does under
  ``torch.compile`` / ``FakeTensorMode``.

The module imports torch and transformers at import time: test modules must
``pytest.importorskip("torch")`` and ``pytest.importorskip("transformers")``
before importing it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.utils import import_utils as _hf_import_utils

__all__ = [
    "text_config",
    "build_hf_config",
    "build_model",
    "count_params",
    "count_params_by_module",
    "layer_param_shapes",
    "persistent_buffers",
    "measure_forward_flops",
    "measure_forward_flops_by_op",
    "measure_forward_flops_by_module",
    "measure_forward_flops_by_kind",
    "measure_forward_flops_sparse",
    "param_kind",
    "DENSE_EXPERTS_MODEL_TYPES",
]

#: model_type aliases for architectures transformers knows under another name.
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}

#: text model_type of multimodal wrappers (when ``text_config`` has none).
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "kimi_k25": "deepseek_v3"}

#: keys of a hub config.json that must not reach the config constructor.
_DROP_KEYS = (
    "quantization_config",
    "auto_map",
    "architectures",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "_name_or_path",
    "attn_implementation",
    "experts_implementation",
)


# --------------------------------------------------------------------------- config


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return the text (decoder) part of an HF config dict, as a new dict.

    Multimodal wrappers (gemma3, llama4, mistral3, kimi_k25, ...) keep the LM in
    a nested ``text_config``; it is returned with its ``model_type`` filled in
    (``gemma3 -> gemma3_text``, ``llama4 -> llama4_text``, else the class that
    transformers declares for the wrapper's ``text_config`` sub-config).  A
    top-level ``tie_word_embeddings`` is carried over when the text config has
    none.  ``kimi_k2`` is mapped to ``deepseek_v3``.  Plain configs are copied.
    """
    cfg = copy.deepcopy(dict(config))
    nested = cfg.get("text_config")
    if isinstance(nested, dict):
        parent = cfg.get("model_type")
        out = copy.deepcopy(nested)
        mt = out.get("model_type")
        if not mt or mt == parent:
            mt = TEXT_MODEL_TYPES.get(parent) or _sub_config_model_type(parent) or mt
        if not mt:
            raise ValueError(f"cannot tell the text model_type of {parent!r}")
        out["model_type"] = mt
        if "tie_word_embeddings" in cfg and "tie_word_embeddings" not in out:
            out["tie_word_embeddings"] = cfg["tie_word_embeddings"]
        cfg = out
    mt = cfg.get("model_type")
    if mt in MODEL_TYPE_ALIASES:
        cfg["model_type"] = MODEL_TYPE_ALIASES[mt]
    return cfg


def _sub_config_model_type(parent: str | None) -> str | None:
    """model_type of the ``text_config`` sub-config class declared by a wrapper's config class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not parent or parent not in CONFIG_MAPPING:
        return None
    sub = getattr(CONFIG_MAPPING[parent], "sub_configs", {}).get("text_config")
    return getattr(sub, "model_type", None) or None


def _is_moe(cfg: dict[str, Any]) -> bool:
    keys = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
    return any(cfg.get(k) for k in keys)


def build_hf_config(config: dict[str, Any]):
    """Build the transformers config object for the text part of ``config``.

    Forces ``attn_implementation="eager"``, ``experts_implementation="batched_mm"``
    (MoE families; it is a plain config kwarg in transformers 5), float32, and
    ``use_cache=False``; drops ``quantization_config`` (an fp8/mxfp4 config would
    make the model swap in quantized layers), ``auto_map`` (remote code) and
    other loader-only keys.
    """
    cfg = text_config(config)
    for key in _DROP_KEYS:
        cfg.pop(key, None)
    model_type = cfg.pop("model_type")
    cfg.pop("text_config", None)
    kwargs: dict[str, Any] = {"attn_implementation": "eager", "use_cache": False}
    if _is_moe(cfg):
        kwargs["experts_implementation"] = "batched_mm"
    cfg.update(kwargs)  # hub configs often carry use_cache / attn settings of their own
    hf = AutoConfig.for_model(model_type, **cfg)
    hf.dtype = torch.float32
    return hf


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def _cached_model(key: str):
    config = json.loads(key)
    hf = build_hf_config(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32)
    model.eval()
    return model


def build_model(config: dict[str, Any]):
    """Instantiate the causal-LM class of ``config`` on the meta device, eval mode.

    Models are cached (by config content) so that counting params and measuring
    FLOPs of one config builds it once; do not mutate the returned model.
    """
    return _cached_model(_config_key(config))


# --------------------------------------------------------------------------- params

_KIND_ORDER = (
    "embedding",
    "lm_head",
    "attention",
    "mlp",
    "router",
    "experts",
    "shared_experts",
    "norms",
    "other",
)


def param_kind(name: str) -> str:
    """Coarse kind of a parameter (or module) path of an HF causal LM.

    ``embedding`` (token and learned position embeddings), ``lm_head``,
    ``norms`` (every norm incl. qk-norm and MLA's q_a/kv_a layernorms),
    ``router`` (MoE gate / router, its bias, qwen2_moe ``shared_expert_gate``),
    ``experts`` (routed experts), ``shared_experts``, ``attention``
    (projections, biases, gpt_oss sinks), ``mlp`` (dense FFN), ``other``.
    """
    parts = name.split(".")
    leafmods = parts[:-1] if parts[-1] in ("weight", "bias") else parts
    last = leafmods[-1] if leafmods else ""
    if last in ("lm_head", "embed_out"):
        return "lm_head"
    if last in ("embed_tokens", "wte", "wpe", "embed_in", "embed_positions"):
        return "embedding"
    if re.search(r"(norm|^ln_|^ln$)", last):
        return "norms"
    if any(p in ("router", "gate", "shared_expert_gate") for p in parts):
        return "router"
    if any(p in ("shared_expert", "shared_experts") for p in parts):
        return "shared_experts"
    if "experts" in parts:
        return "experts"
    if any(p in ("self_attn", "attn", "attention", "self_attention") for p in parts):
        return "attention"
    if any(p in ("mlp", "feed_forward", "block_sparse_moe", "ffn") for p in parts):
        return "mlp"
    return "other"


def count_params(config: dict[str, Any]) -> int:
    """Number of parameters of the HF causal LM (tied weights counted once)."""
    return sum(p.numel() for p in build_model(config).parameters())


def count_params_by_module(config: dict[str, Any]) -> dict[str, int]:
    """Parameter count grouped by :func:`param_kind` (only non-empty kinds).

    Tied weights appear once (under ``embedding``); the values sum to
    :func:`count_params`.
    """
    out: dict[str, int] = defaultdict(int)
    for name, p in build_model(config).named_parameters():
        out[param_kind(name)] += p.numel()
    return {k: out[k] for k in _KIND_ORDER if out.get(k)}


def layer_param_shapes(config: dict[str, Any], layer: int = 0) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the parameters of decoder layer ``layer`` (name relative to the layer)."""
    pat = re.compile(rf"^(?:.*\.)?(?:layers|h)\.{layer}\.(.*)$")
    out = {}
    for name, p in build_model(config).named_parameters():
        m = pat.match(name)
        if m:
            out[m.group(1)] = tuple(p.shape)
    return out


def persistent_buffers(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Persistent buffers (saved in checkpoints, e.g. deepseek_v3 ``e_score_correction_bias``)."""
    model = build_model(config)
    state = set(model.state_dict().keys())
    return {n: tuple(b.shape) for n, b in model.named_buffers() if n in state}


# --------------------------------------------------------------------------- flops


def _meta_aware_is_fake_tensor(orig):
    def is_fake_tensor(x) -> bool:
        return orig(x) or (isinstance(x, torch.Tensor) and x.is_meta)

    return is_fake_tensor


@contextlib.contextmanager
def _meta_is_fake() -> Iterator[None]:
    """Make ``transformers.utils.import_utils.is_tracing(t)`` true for meta tensors.

    Mask creation (``masking_utils.find_packed_sequence_indices``,
    ``_ignore_causal_mask_sdpa``, padding checks) guards its data-dependent
    ``.all()`` with ``is_tracing(tensor)``, true for FakeTensors; meta tensors
    cannot answer ``.item()`` either, so they are given the same treatment.
    """
    orig = _hf_import_utils.is_fake_tensor
    _hf_import_utils.is_fake_tensor = _meta_aware_is_fake_tensor(orig)
    try:
        yield
    finally:
        _hf_import_utils.is_fake_tensor = orig


def _count(config: dict[str, Any], seq_len: int, batch: int) -> FlopCounterMode:
    model = build_model(config)
    input_ids = torch.zeros((batch, seq_len), dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with _meta_is_fake(), torch.no_grad(), counter:
        model(input_ids=input_ids, use_cache=False)
    return counter


@functools.lru_cache(maxsize=64)
def _cached_counts(key: str, seq_len: int, batch: int) -> dict[str, dict[str, int]]:
    counter = _count(json.loads(key), seq_len, batch)
    return {
        mod: {str(op): int(v) for op, v in ops.items()} for mod, ops in counter.get_flop_counts().items()
    }


def _counts(config, seq_len, batch) -> dict[str, dict[str, int]]:
    return _cached_counts(_config_key(config), int(seq_len), int(batch))


def measure_forward_flops(config: dict[str, Any], seq_len: int, batch: int = 1) -> int:
    """Total FLOPs (``FlopCounterMode`` convention: 2 per multiply-add) of one forward.

    The forward is ``model(input_ids=(batch, seq_len), use_cache=False)`` with
    logits for every position (LM head over all tokens).  Only matmul-like ops
    are counted (mm / addmm / bmm / baddbmm / sdpa / conv); norms, softmax,
    activations, rotary and bias adds count 0.
    """
    return sum(_counts(config, seq_len, batch).get("Global", {}).values())


def measure_forward_flops_by_op(config: dict[str, Any], seq_len: int, batch: int = 1) -> dict[str, int]:
    """FLOPs per aten op (e.g. ``{"aten.mm": ..., "aten.bmm": ...}``) of one forward."""
    return dict(_counts(config, seq_len, batch).get("Global", {}))


def measure_forward_flops_by_module(
    config: dict[str, Any], seq_len: int, batch: int = 1, exclusive: bool = True
) -> dict[str, dict[str, int]]:
    """FLOPs per module path and op.

    Paths are ``FlopCounterMode``'s (``"LlamaForCausalLM.model.layers.0.mlp.up_proj"``).
    With ``exclusive`` (default) a module's entry holds only the FLOPs of ops it
    runs itself, not those of its children (so the attention module's entry is
    the QK^T / PV ``bmm`` and its projections appear under their own paths);
    entries then sum to the total.  ``"Global"`` is omitted.
    """
    counts = {m: ops for m, ops in _counts(config, seq_len, batch).items() if m != "Global"}
    if not exclusive:
        return {m: dict(ops) for m, ops in counts.items()}
    names = sorted(counts)
    out: dict[str, dict[str, int]] = {}
    for name in names:
        excl = dict(counts[name])
        for child in _direct_children(name, names):
            for op, v in counts[child].items():
                excl[op] = excl.get(op, 0) - v
        excl = {op: v for op, v in excl.items() if v}
        if excl:
            out[name] = excl
    return out


def _direct_children(name: str, names: list[str]) -> list[str]:
    desc = [n for n in names if n.startswith(name + ".")]
    return [n for n in desc if not any(n.startswith(d + ".") for d in desc if d != n)]


def measure_forward_flops_by_kind(config: dict[str, Any], seq_len: int, batch: int = 1) -> dict[str, int]:
    """Forward FLOPs grouped by :func:`param_kind` of the module that runs the op.

    Ops run by an attention module itself (not one of its projections) are
    reported as ``attention_core`` (the QK^T and PV matmuls); everything else
    under attention is ``attention`` (projections).  Values sum to the total.
    """
    out: dict[str, int] = defaultdict(int)
    for path, ops in measure_forward_flops_by_module(config, seq_len, batch).items():
        parts = path.split(".")[1:]  # drop the class name of the root module
        kind = param_kind(".".join(parts)) if parts else "other"
        if kind == "attention" and parts[-1] in ("self_attn", "attn", "attention", "self_attention"):
            kind = "attention_core"
        out[kind] += sum(ops.values())
    return dict(out)


#: model_types whose HF expert module evaluates EVERY expert on EVERY token
#: (llama4: ``hidden.repeat(num_experts, 1)`` then a dense ``bmm`` over
#: ``(num_experts, tokens, hidden)``, routing weights zero out the unselected).
#: Their measured expert FLOPs are ``num_local_experts / num_experts_per_tok``
#: times what a sparse (top-k) implementation does.
DENSE_EXPERTS_MODEL_TYPES = frozenset({"llama4_text"})


def measure_forward_flops_sparse(config: dict[str, Any], seq_len: int, batch: int = 1) -> int:
    """:func:`measure_forward_flops` with experts counted for the top-k tokens only.

    Identical to the raw measurement for every family except
    :data:`DENSE_EXPERTS_MODEL_TYPES`, whose measured ``experts`` FLOPs are
    rescaled by ``num_experts_per_tok / num_local_experts`` (exact: the dense
    bmm covers ``num_local_experts * tokens`` rows).  This is what an analytic
    model of a top-k MoE should reproduce.
    """
    total = measure_forward_flops(config, seq_len, batch)
    cfg = text_config(config)
    if cfg.get("model_type") not in DENSE_EXPERTS_MODEL_TYPES:
        return total
    hf = build_hf_config(config)
    experts = measure_forward_flops_by_kind(config, seq_len, batch).get("experts", 0)
    n_exp, top_k = hf.num_local_experts, hf.num_experts_per_tok
    if (experts * top_k) % n_exp:
        raise AssertionError("dense expert FLOPs not a multiple of num_local_experts")
    return total - experts + experts * top_k // n_exp


def versions() -> dict[str, str]:
    """torch / transformers versions the ground truth was measured with."""
    return {"torch": torch.__version__, "transformers": transformers.__version__}
