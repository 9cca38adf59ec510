"""A checkpoint's weight precision per module group, read from its `quantization_config`.

Hugging Face checkpoints that ship quantized weights say so in `config.json`: which method
(`quant_method`), its parameters, and which modules stay in 16 bits (`modules_to_not_convert`,
compressed-tensors' `ignore`). meshplan reads that into a `WeightPrecision`: one `WeightFormat`
per group of decoder weights (attention projections, dense and shared-expert MLPs, routed
experts, routers, and the rest: norms and biases). The token embedding and the LM head stay in
16 bits for every method read here (the engines and the quantizers leave them unquantized).

Stored bits per weight include the scales the format keeps beside the values:

- fp8 (`quant_method: fp8`, DeepSeek-V3/R1, Qwen3-FP8): e4m3 values; with `weight_block_size`
  [bn, bk] an fp32 inverse scale per bn x bk block (128 x 128: 8.002 bits); activations are
  quantized to fp8 as well (`activation_scheme` dynamic per token-group, or static): W8A8.
- mxfp4 (gpt-oss): e2m1 values with an e8m0 (8-bit) scale per 32: 4.25 bits. Only the MoE
  experts use it (transformers' Mxfp4 integration and vLLM's Mxfp4Config quantize FusedMoE
  layers only). Weight-only: vLLM's default kernels keep bf16 activations on Hopper (Triton
  matmul_ogs or Marlin) and on Blackwell (FlashInfer's MXFP4 x BF16 unless
  VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 is set; vllm-project/vllm
  vllm/model_executor/layers/quantization/mxfp4.py, get_mxfp4_backend), so the math runs at
  the 16-bit rate and only the bytes drop.
- awq / gptq: `bits`-bit integers with a 16-bit scale and a packed `bits`-bit zero point per
  `group_size` weights (4-bit, group 128: 4.156 bits); weight-only (dequantized in the GEMM).
- bitsandbytes: 4-bit NF4/FP4 with an absmax per 64 (double quantization: 8-bit absmax plus an
  fp32 scale per 256 of those, the QLoRA layout), or LLM.int8 (8 bits and a row scale).
- compressed-tensors: each of `config_groups` gives `weights` (num_bits, type int/float,
  strategy tensor/channel/group/tensor_group/block, group_size, block_structure, symmetric) and
  `input_activations` (null: weight-only; 8-bit float: fp8 math; 4-bit float: fp4 math), for the
  modules its `targets` name (`Linear`, or `re:` patterns); `ignore` lists 16-bit modules.

An unknown `quant_method` is priced in 16 bits with a note naming the field and the methods
read here (a serving estimate in bf16 is still an estimate; an error would stop it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from meshplan.errors import ConfigError

NF4_BLOCK = 64
"""Weights per NF4 quantization block, each with one absmax scale (Dettmers et al. 2023,
QLoRA, arXiv 2305.14314, section 3; bitsandbytes' default blocksize)."""
DOUBLE_QUANT_BLOCK = 256
"""Absmax scales per second-level block under double quantization (QLoRA, section 3)."""
NF4_BYTES_PER_PARAM = (4 + 8 / NF4_BLOCK + 32 / (NF4_BLOCK * DOUBLE_QUANT_BLOCK)) / 8
"""4-bit value + an 8-bit absmax per 64 weights + an fp32 scale per 256 of those: 0.127 bits of
constants per weight (QLoRA section 3, "Double Quantization"), 0.5159 bytes per weight."""

MXFP4_BLOCK = 32
"""Values sharing one e8m0 scale in the OCP microscaling formats (MX spec v1.0, section 5)."""

METHODS = ("fp8", "mxfp4", "compressed-tensors", "awq", "gptq", "bitsandbytes")
"""quant_method values read here."""

GROUPS = ("attention", "mlp", "experts", "router", "other")
"""Groups of decoder weights that may differ in precision (other: norms, biases, sinks)."""

REPRESENTATIVES = {
    "attention": ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"),
    "mlp": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"),
    "experts": ("model.layers.0.mlp.experts.0.gate_proj", "model.layers.0.mlp.experts",
                "model.layers.0.block_sparse_moe.experts.0.w1"),
    "router": ("model.layers.0.mlp.gate", "model.layers.0.mlp.router",
               "model.layers.0.block_sparse_moe.gate"),
}
"""Module names (Hugging Face spelling) a pattern is matched against to decide a group's
precision; a group is excluded when a pattern names any of them."""

MAX_PATTERNS = 4096
MAX_PATTERN_CHARS = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightFormat:
    """How one group of weights is stored and multiplied."""

    name: str
    """Format as the checkpoint names it (bf16, fp8 block 128x128, mxfp4, awq int4 g128, ...)."""
    dtype: str
    """Nearest of meshplan's weight dtypes: bf16, fp16, fp8, int8, int4, fp4."""
    bits: float
    """Stored bits per weight, scales and zero points included."""
    activations: str | None = None
    """Dtype the activations are quantized to for the GEMM (fp8, int8, fp4: W8A8 / W4A4);
    None: weight-only, the GEMM runs in 16 bits after dequantizing."""


BF16 = WeightFormat(name="bf16", dtype="bf16", bits=16.0)
FP16 = WeightFormat(name="fp16", dtype="fp16", bits=16.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightPrecision:
    """Precision of each group of decoder weights (embedding and LM head: 16 bits)."""

    method: str
    """quant_method of the checkpoint, or `flag` when a user's weights dtype set every group."""
    attention: WeightFormat = BF16
    mlp: WeightFormat = BF16
    """Dense MLPs and shared experts."""
    experts: WeightFormat = BF16
    """Routed experts."""
    router: WeightFormat = BF16
    other: WeightFormat = BF16
    """Norms, biases, attention sinks."""
    notes: tuple[str, ...] = ()
    """What was assumed (an unknown method priced in 16 bits)."""

    def format(self, group: str) -> WeightFormat:
        """The format of `group` (one of GROUPS)."""
        return getattr(self, group)

    @property
    def dtype(self) -> str:
        """The headline weight dtype: the routed experts' when quantized, else the attention's
        or the MLPs' (what a user would pass as the weights dtype for this checkpoint)."""
        for group in ("experts", "mlp", "attention"):
            if self.format(group).bits < 16:
                return self.format(group).dtype
        return self.attention.dtype

    def describe(self) -> str:
        """One line: each group's format (e.g. `experts mxfp4 (4.25 bits), attention bf16`)."""
        parts = [f"{g} {self.format(g).name} ({self.format(g).bits:.3g} bits)" for g in GROUPS[:4]]
        return f"{self.method}: " + ", ".join(parts)


def uniform(fmt: WeightFormat, method: str = "flag") -> WeightPrecision:
    """Every decoder weight in `fmt`."""
    return WeightPrecision(method=method, attention=fmt, mlp=fmt, experts=fmt, router=fmt, other=fmt)


def matches(pattern: str, name: str) -> bool:
    """Whether a module pattern names module `name`: `re:` patterns as a regular expression
    matched from the start (compressed-tensors), others as dot-separated components with `*`
    globs that must equal a run of the name's components (`lm_head`, `gate`,
    `model.layers.*.self_attn`); `gate` names a router, not `gate_proj`."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], name) is not None
        except re.error:
            return False
    parts, pat = name.split("."), pattern.split(".")
    span = len(pat)
    return any(all(fnmatchcase(parts[i + j], pat[j]) for j in range(span))
               for i in range(len(parts) - span + 1))


def _group_named(group: str, patterns: list[str]) -> bool:
    return any(matches(p, name) for p in patterns for name in REPRESENTATIVES[group])


def _patterns(config: Mapping[str, Any], keys: tuple[str, ...], where: str) -> list[str]:
    """The module patterns of the first present key among `keys` (null: none)."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if (not isinstance(value, list | tuple) or len(value) > MAX_PATTERNS
                or not all(isinstance(p, str) and len(p) <= MAX_PATTERN_CHARS for p in value)):
            raise ConfigError(f"{where}: quantization_config.{key} = {value!r:.80} is invalid; "
                              f"expected a list of module names or patterns")
        return list(value)
    return []


def _number(config: Mapping[str, Any], key: str, default: Any, where: str, valid: tuple = ()) -> Any:
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (valid and value not in valid):
        expected = "one of " + ", ".join(map(str, valid)) if valid else "a number"
        raise ConfigError(f"{where}: quantization_config.{key} = {value!r} is invalid; expected {expected}")
    return value


def _with_skips(formats: dict[str, WeightFormat], skip: list[str], method: str) -> WeightPrecision:
    """`formats` per group, with the groups `skip` names back in 16 bits; routers and the rest
    always 16-bit (the quantizers leave routers unquantized)."""
    kept = {g: (BF16 if _group_named(g, skip) else f) for g, f in formats.items()}
    return WeightPrecision(method=method, **kept)


def _all_linear(fmt: WeightFormat) -> dict[str, WeightFormat]:
    return {"attention": fmt, "mlp": fmt, "experts": fmt}


def _block(block: Any, key: str, where: str) -> tuple[int, int]:
    """A [rows, columns] block shape of two positive integers."""
    if (not isinstance(block, list | tuple) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 2**20 for b in block)):
        raise ConfigError(f"{where}: quantization_config {key} = {block!r:.80} is invalid; "
                          f"expected two positive integers such as [128, 128]")
    return block[0], block[1]


def _fp8(config: Mapping[str, Any], where: str) -> WeightPrecision:
    block = config.get("weight_block_size")
    if block is None:
        fmt = WeightFormat(name="fp8 per-tensor", dtype="fp8", bits=8.0, activations="fp8")
    else:
        block = _block(block, "weight_block_size", where)
        fmt = WeightFormat(name=f"fp8 block {block[0]}x{block[1]}", dtype="fp8",
                           bits=8.0 + 32.0 / (block[0] * block[1]), activations="fp8")
    skip = _patterns(config, ("modules_to_not_convert", "ignored_layers"), where)
    return _with_skips(_all_linear(fmt), skip, "fp8")


def _mxfp4(config: Mapping[str, Any], where: str) -> WeightPrecision:
    fmt = WeightFormat(name="mxfp4", dtype="fp4", bits=4.0 + 8.0 / MXFP4_BLOCK)
    skip = _patterns(config, ("modules_to_not_convert",), where)
    return _with_skips({"experts": fmt}, skip, "mxfp4")


def _integer(config: Mapping[str, Any], where: str, method: str) -> WeightPrecision:
    """AWQ and GPTQ: `bits` integers, a 16-bit scale and a packed zero point per group."""
    bits = _number(config, "bits", 4, where, (2, 3, 4, 8))
    group = _number(config, "group_size", 128, where)
    if group != -1 and not 1 <= group <= 2**20:
        raise ConfigError(f"{where}: quantization_config.group_size = {group!r} is invalid; "
                          f"expected a positive group size or -1 (one group per row)")
    zero = config.get("zero_point", True) is not False or method == "gptq"
    extra = 0.0 if group == -1 else (16 + (bits if zero else 0)) / group
    label = f"{method} int{bits}" + ("" if group == -1 else f" g{group}")
    fmt = WeightFormat(name=label, dtype="int8" if bits == 8 else "int4", bits=bits + extra)
    skip = _patterns(config, ("modules_to_not_convert",), where)
    return _with_skips(_all_linear(fmt), skip, method)


def _bitsandbytes(config: Mapping[str, Any], where: str) -> WeightPrecision:
    if config.get("load_in_4bit"):
        kind = config.get("bnb_4bit_quant_type") or "nf4"
        if kind not in ("nf4", "fp4"):
            raise ConfigError(f"{where}: quantization_config.bnb_4bit_quant_type = {kind!r} is invalid; "
                              f"expected nf4 or fp4")
        double = config.get("bnb_4bit_use_double_quant") is True
        bits = NF4_BYTES_PER_PARAM * 8 if double else 4.0 + 32.0 / NF4_BLOCK
        fmt = WeightFormat(name=f"bnb {kind}" + (" double-quant" if double else ""), dtype="int4", bits=bits)
    elif config.get("load_in_8bit"):
        fmt = WeightFormat(name="bnb int8", dtype="int8", bits=8.0)
    else:
        raise ConfigError(f"{where}: quantization_config (bitsandbytes) sets neither load_in_4bit "
                          f"nor load_in_8bit; expected one of them true")
    skip = _patterns(config, ("llm_int8_skip_modules", "modules_to_not_convert"), where)
    return _with_skips(_all_linear(fmt), skip, "bitsandbytes")


CT_DTYPES = {("float", 8): "fp8", ("float", 4): "fp4", ("int", 8): "int8", ("int", 4): "int4"}
"""compressed-tensors (type, num_bits) -> meshplan dtype."""


def _ct_weights(args: Mapping[str, Any], acts: Mapping[str, Any] | None, where: str) -> WeightFormat:
    """One compressed-tensors scheme: stored bits from `weights`, the GEMM dtype from
    `input_activations` (null: weight-only)."""
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}: quantization_config.config_groups.*.weights = {args!r:.80} is "
                          f"invalid; expected a mapping with num_bits, type and strategy")
    kind = args.get("type", "int")
    bits = _number(args, "num_bits", 8, where, (2, 3, 4, 8))
    dtype = CT_DTYPES.get((kind, bits), "int4" if bits < 8 else "int8")
    strategy = args.get("strategy") or "tensor"
    scale_bits = 8 if (kind, bits) == ("float", 4) else 16  # NVFP4/MXFP4 keep 8-bit scales
    zero_bits = 0 if args.get("symmetric", True) is not False else bits
    if strategy in ("group", "tensor_group"):
        group = _number(args, "group_size", 128, where)
        if not 1 <= group <= 2**20:
            raise ConfigError(f"{where}: quantization_config weights group_size = {group!r} is invalid; "
                              f"expected a positive group size")
        extra = (scale_bits + zero_bits) / group
        name = f"{'nvfp4' if (kind, bits, group) == ('float', 4, 16) else f'{kind}{bits}'} g{group}"
    elif strategy == "block":
        block = _block(args.get("block_structure") or [128, 128], "block_structure", where)
        extra = (scale_bits + zero_bits) / (block[0] * block[1])
        name = f"{kind}{bits} block {block[0]}x{block[1]}"
    elif strategy in ("tensor", "channel"):
        extra, name = 0.0, f"{kind}{bits} per-{strategy}"
    else:
        raise ConfigError(f"{where}: quantization_config weights strategy {strategy!r} is invalid; "
                          f"expected tensor, channel, group, tensor_group or block")
    act = None
    if isinstance(acts, Mapping) and acts.get("num_bits") is not None:
        act = CT_DTYPES.get((acts.get("type", "int"), acts.get("num_bits")))
    return WeightFormat(name=name, dtype=dtype, bits=bits + extra, activations=act)


def _ct_targets(targets: list[str], group: str) -> bool:
    """Whether a config group's `targets` cover `group`: the class name `Linear` covers every
    linear layer; other entries are module patterns."""
    return any(t == "Linear" or (t[:1].islower() or t.startswith("re:")) and _group_named(group, [t])
               for t in targets)


def _compressed_tensors(config: Mapping[str, Any], where: str) -> WeightPrecision:
    groups = config.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError(f"{where}: quantization_config.config_groups is missing or empty; expected "
                          f"a mapping of schemes (targets, weights, input_activations)")
    formats: dict[str, WeightFormat] = {}
    for label, scheme in groups.items():
        if not isinstance(scheme, Mapping):
            raise ConfigError(f"{where}: quantization_config.config_groups.{label} is invalid; expected a mapping")
        targets = _patterns(scheme, ("targets",), where)
        if scheme.get("weights") is None:
            continue
        fmt = _ct_weights(scheme["weights"], scheme.get("input_activations"), where)
        for group in ("attention", "mlp", "experts"):
            if group not in formats and _ct_targets(targets, group):
                formats[group] = fmt
    return _with_skips(formats, _patterns(config, ("ignore",), where), "compressed-tensors")


PARSERS = {"fp8": _fp8, "mxfp4": _mxfp4, "awq": lambda c, w: _integer(c, w, "awq"),
           "gptq": lambda c, w: _integer(c, w, "gptq"), "bitsandbytes": _bitsandbytes,
           "compressed-tensors": _compressed_tensors}


def read_quantization(config: Mapping[str, Any], where: str = "model config") -> WeightPrecision | None:
    """The checkpoint's weight precision from `config["quantization_config"]`; None when the
    config has none (weights in the checkpoint's 16-bit dtype)."""
    quant = config.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, Mapping):
        raise ConfigError(f"{where}: field 'quantization_config' = {quant!r:.80} is invalid; expected a mapping")
    method = quant.get("quant_method")
    parser = PARSERS.get(method) if isinstance(method, str) else None
    if parser is None:
        note = (f"{where}: quantization_config.quant_method {method!r} is not modeled (read: "
                f"{', '.join(METHODS)}); its weights are priced in bf16")
        return WeightPrecision(method=str(method), notes=(note,))
    return parser(quant, where)


def headline_dtype(weights: WeightPrecision | None, flag: str) -> str:
    """The weight dtype a deployment serves: `flag` when it names one, else (`auto`) the
    checkpoint's headline dtype, bf16 for a checkpoint without quantization_config."""
    if flag != "auto":
        return flag
    return weights.dtype if weights is not None else "bf16"


def with_sixteen(precision: WeightPrecision, sixteen: WeightFormat) -> WeightPrecision:
    """`precision` with its 16-bit groups in `sixteen` (fp16 for a float16 deployment)."""
    kept = {g: (sixteen if precision.format(g).bits >= 16 else precision.format(g)) for g in GROUPS}
    return replace(precision, **kept)
