"""LoRA adapters on a `ModelSpec`: which linear layers a target name means, and how many
parameters the adapters add, counted the way PEFT creates them.

LoRA (Hu et al. 2021, arXiv 2106.09685) adds to a frozen linear W (out x in) a trainable
product B A, A of r x in and B of out x r, without biases (PEFT's `LoraConfig(bias="none")`).

Target names are meshplan's short names for a decoder layer's linear layers; each family maps
them to its real module names (`MODULES`):
- q, k, v, o: the attention projections; qkv where the family fuses them (GPT-2, GPT-NeoX, Phi-3).
- MLA (DeepSeek-V2/V3, Kimi K2): q (q_proj, or q_a_proj and q_b_proj with a query LoRA rank),
  kv (kv_a_proj_with_mqa and kv_b_proj), o. There are no separate key and value projections.
- gate, up, down: the MLP projections (gate_up where Phi-3 fuses gate and up; up and down only
  for plain MLPs). In mixture-of-experts layers these are the shared expert's. Routed experts
  are 3-D expert tensors in `transformers` 5, not linear modules, so PEFT's `target_modules`
  does not reach them (its `target_parameters` would): they stay frozen and unadapted.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.model.counts import attention_matmul_params, layer_kinds, mlp_matmul_params
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec, MoEMLP

DEFAULT_RANK = 8
"""PEFT's `LoraConfig.r` default (peft/tuners/lora/config.py)."""
DEFAULT_TARGETS = ("q", "v")
"""PEFT's default target modules for Llama-style models (q_proj, v_proj:
TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING in peft/utils/constants.py); MLA models
default to q and kv, fused-QKV families to qkv."""
FUSED_QKV = frozenset({"gpt2", "gpt_neox", "phi3"})
"""Families whose query, key and value projections are one linear layer."""
FUSED_GATE_UP = frozenset({"phi3"})
"""Families whose gate and up projections are one linear layer."""
MODULES = {
    "default": {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj",),
                "gate": ("gate_proj",), "up": ("up_proj",), "down": ("down_proj",)},
    "mla": {"q": ("q_proj",), "q_lora": ("q_a_proj", "q_b_proj"),
            "kv": ("kv_a_proj_with_mqa", "kv_b_proj"), "o": ("o_proj",),
            "gate": ("gate_proj",), "up": ("up_proj",), "down": ("down_proj",)},
    "phi3": {"qkv": ("qkv_proj",), "o": ("o_proj",), "gate_up": ("gate_up_proj",),
             "down": ("down_proj",)},
    "gpt2": {"qkv": ("c_attn",), "o": ("attn.c_proj",), "up": ("c_fc",), "down": ("mlp.c_proj",)},
    "gpt_neox": {"qkv": ("query_key_value",), "o": ("attention.dense",),
                 "up": ("dense_h_to_4h",), "down": ("dense_4h_to_h",)},
    "starcoder2": {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj",),
                   "up": ("c_fc",), "down": ("c_proj",)},
}
"""Per family, each target name's module names in `transformers` (suffixes PEFT matches)."""


@dataclass(frozen=True, slots=True)
class Linear:
    """One adaptable linear layer of a decoder layer."""

    fan_in: int
    fan_out: int
    split: str
    """How tensor parallelism splits it: col (output), row (input) or rep (replicated)."""

    def adapter_params(self, rank: int, tp: int = 1) -> float:
        """LoRA A (rank x fan_in) plus B (fan_out x rank), per GPU of a tp group: a column-
        parallel layer splits B, a row-parallel one splits A (the adapter follows its layer)."""
        a, b = rank * self.fan_in, self.fan_out * rank
        if self.split == "col":
            return a + b / tp
        if self.split == "row":
            return a / tp + b
        return float(a + b)


def _attention_linears(layer: LayerSpec, model: ModelSpec) -> dict[str, tuple[Linear, ...]]:
    a, h = layer.attention, model.hidden_size
    o = (Linear(a.num_heads * a.v_head_dim, h, "row"),)
    if a.mla is not None:
        m = a.mla
        q_out = a.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        q = ((Linear(h, q_out, "col"),) if m.q_lora_rank is None else
             (Linear(h, m.q_lora_rank, "rep"), Linear(m.q_lora_rank, q_out, "col")))
        kv = (Linear(h, m.kv_lora_rank + m.qk_rope_head_dim, "rep"),
              Linear(m.kv_lora_rank, a.num_heads * (m.qk_nope_head_dim + m.v_head_dim), "col"))
        return {"q": q, "kv": kv, "o": o}
    q = a.num_heads * a.head_dim
    k, v = a.num_kv_heads * a.head_dim, a.num_kv_heads * a.v_head_dim
    if model.family in FUSED_QKV:
        return {"qkv": (Linear(h, q + k + v, "col"),), "o": o}
    return {"q": (Linear(h, q, "col"),), "k": (Linear(h, k, "col"),),
            "v": (Linear(h, v, "col"),), "o": o}


def _mlp_linears(layer: LayerSpec, model: ModelSpec) -> dict[str, tuple[Linear, ...]]:
    mlp = layer.mlp
    if isinstance(mlp, MoEMLP):
        mlp = mlp.shared  # routed experts are not linear modules (see the module docstring)
    if mlp is None:
        return {}
    h, i = model.hidden_size, mlp.intermediate_size
    down = {"down": (Linear(i, h, "row"),)}
    if not mlp.gated:
        return {"up": (Linear(h, i, "col"),), **down}
    if model.family in FUSED_GATE_UP:
        return {"gate_up": (Linear(h, 2 * i, "col"),), **down}
    return {"gate": (Linear(h, i, "col"),), "up": (Linear(h, i, "col"),), **down}


def layer_linears(layer: LayerSpec, model: ModelSpec) -> dict[str, tuple[Linear, ...]]:
    """The adaptable linear layers of `layer`, by target name."""
    return {**_attention_linears(layer, model), **_mlp_linears(layer, model)}


def target_names(model: ModelSpec) -> tuple[str, ...]:
    """Every target name some layer of `model` has, in a stable order."""
    order = ("q", "k", "v", "qkv", "kv", "o", "gate", "up", "gate_up", "down")
    found = {name for k in set(layer_kinds(model)) for name in layer_linears(model.layers[k], model)}
    return tuple(n for n in order if n in found)


def default_targets(model: ModelSpec) -> tuple[str, ...]:
    """PEFT's usual default for the family: q and v, else q and kv (MLA), else qkv."""
    names = target_names(model)
    for pick in (DEFAULT_TARGETS, ("q", "kv"), ("qkv",)):
        if all(n in names for n in pick):
            return pick
    return names[:1]


def check_targets(model: ModelSpec, targets: tuple[str, ...]) -> None:
    """A ConfigError naming the valid targets when `model` lacks one of `targets`."""
    valid = target_names(model)
    missing = [t for t in targets if t not in valid]
    if not targets or missing:
        what = f"{model.name} has no {', '.join(missing)} linear layer" if missing else "no targets"
        raise ConfigError(f"lora_targets: {what} to adapt; valid for {model.name}: "
                          f"{','.join(valid)}")


def fuse_targets(model: ModelSpec, targets: tuple[str, ...]) -> tuple[str, ...]:
    """Targets as a framework with fused QKV and gate/up layers (Megatron-Core, NeMo) adapts
    them: q, k, v become one qkv adapter and gate, up one gate_up adapter; a group given in
    part is a ConfigError (NeMo's LoRA targets linear_qkv and linear_fc1 whole)."""
    out = list(targets)
    names = target_names(model)
    for group, fused in ((("q", "k", "v"), "qkv"), (("gate", "up"), "gate_up")):
        if not all(n in names for n in group):
            continue
        given = [n for n in group if n in out]
        if given and len(given) < len(group):
            raise ConfigError(f"lora_targets: {','.join(given)} without {','.join(set(group) - set(given))}"
                              f": the framework adapts {','.join(group)} as one fused layer; "
                              f"give all of them or none")
        if given:
            out = [n for n in out if n not in group] + [fused]
    return tuple(out)


def _fused_linears(layer: LayerSpec, model: ModelSpec) -> dict[str, tuple[Linear, ...]]:
    """`layer_linears` with q, k, v and gate, up fused into one layer each."""
    found = layer_linears(layer, model)
    for group, fused in ((("q", "k", "v"), "qkv"), (("gate", "up"), "gate_up")):
        if all(n in found for n in group):
            parts = [found.pop(n)[0] for n in group]
            found[fused] = (Linear(parts[0].fan_in, sum(p.fan_out for p in parts), "col"),)
    return found


def adapted_linears(layer: LayerSpec, model: ModelSpec, targets: tuple[str, ...],
                    fused: bool = False) -> list[Linear]:
    """The linear layers of `layer` that `targets` adapt (fused: the `fuse_targets` layout)."""
    found = _fused_linears(layer, model) if fused else layer_linears(layer, model)
    return [lin for t in targets for lin in found.get(t, ())]


def layer_adapter_params(layer: LayerSpec, model: ModelSpec, targets: tuple[str, ...],
                         rank: int, tp: int = 1, fused: bool = False) -> float:
    """LoRA parameters of `layer` per GPU of a tp group (fused: `fuse_targets` layout)."""
    return sum(lin.adapter_params(rank, tp) for lin in adapted_linears(layer, model, targets, fused))


def adapter_params(model: ModelSpec, targets: tuple[str, ...], rank: int,
                   fused: bool = False) -> int:
    """Every LoRA parameter of `model` (what PEFT's `print_trainable_parameters` reports)."""
    return int(sum(layer_adapter_params(layer, model, targets, rank, 1, fused)
                   for layer in model.layers))


def peft_target_modules(model: ModelSpec, targets: tuple[str, ...]) -> list[str]:
    """The `LoraConfig(target_modules=...)` that adapts `targets` in `transformers`."""
    if model.uses_mla:
        table = dict(MODULES["mla"])
        if any(l.attention.mla.q_lora_rank for l in model.layers):
            table["q"] = table["q_lora"]
    else:
        table = MODULES.get(model.family, MODULES["default"])
    return [module for t in targets for module in table[t]]


def quantized_params(layer: LayerSpec, model: ModelSpec) -> tuple[int, int]:
    """(dense, routed-expert) weights of `layer` that 4-bit loading quantizes: every linear
    weight of attention, dense MLP, shared and routed experts. Biases, norms and the router stay
    16-bit (bitsandbytes replaces linear weights only; the tiny router is kept by assumption)."""
    h = model.hidden_size
    dense = attention_matmul_params(layer.attention, h)
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        return dense + mlp_matmul_params(mlp, h), 0
    shared = mlp_matmul_params(mlp.shared, h) if mlp.shared else 0
    return dense + shared, mlp.num_experts * mlp_matmul_params(mlp.expert, h)
