"""Turn what a user names (catalog name, config.json path, `hf:ORG/NAME`, a mapping) into a ModelSpec."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from importlib import resources
from typing import Any

from meshplan.yamlread import load_packaged

from meshplan.userfiles import parse_json, read_text
from meshplan.errors import ConfigError
from meshplan.model import catalog_index
from meshplan.model.config_view import ConfigView
from meshplan.model.families import PARSERS
from meshplan.model.quant import read_quantization
from meshplan.model.spec import ModelSpec

TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
"""Multimodal wrappers whose nested `text_config` may omit its own model_type."""


def text_part(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a nested `text_config` when present, else the config itself."""
    nested = config.get("text_config")
    if not isinstance(nested, Mapping):
        return dict(config)
    text = dict(nested)
    outer = config.get("model_type")
    if "model_type" not in text and isinstance(outer, str) and outer:
        text["model_type"] = TEXT_MODEL_TYPES.get(outer, outer)
    for key in ("tie_word_embeddings",):  # some wrappers keep it on the outer config only
        if key not in text and key in config:
            text[key] = config[key]
    return text


DEFAULTS_ALIASES = {"kimi_k2": "deepseek_v3"}


@functools.cache
def family_defaults() -> dict[str, dict[str, Any]]:
    """transformers' config-class defaults per model_type (see families/defaults.yaml)."""
    text = resources.files("meshplan.model.families").joinpath("defaults.yaml").read_text()
    return load_packaged(text)["defaults"]


CORE_FIELDS = (("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer"),
               ("num_attention_heads", "n_head"))
"""Shape fields a config must state itself (aliases per row); the rest may take family defaults."""


def with_family_defaults(text: dict[str, Any], where: str) -> dict[str, Any]:
    """Fill fields a config.json omits with the values transformers would use for its family."""
    for keys in CORE_FIELDS:
        if all(text.get(k) is None for k in keys):
            raise ConfigError(f"{where}: required field {keys[0]!r} is missing")
    family = text.get("model_type")
    if family is not None and not isinstance(family, str):
        raise ConfigError(f"{where}: field 'model_type' = {family!r} is invalid; expected a family "
                          f"name such as 'llama' (supported: {', '.join(supported_families())})")
    defaults = family_defaults().get(DEFAULTS_ALIASES.get(family, family), {})
    return {**defaults, **text}


def supported_families() -> list[str]:
    """Hugging Face model_types meshplan can read."""
    return sorted(k for k in PARSERS if k != "generic")


def from_config(config: Mapping[str, Any], name: str | None = None,
                where: str = "model config") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json mapping or a run-record model mapping."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: expected a mapping of config fields, got {type(config).__name__}")
    text = text_part(config)
    family = text.get("model_type") or "generic"
    parser = PARSERS.get(family) if isinstance(family, str) else None
    if parser is None:
        raise ConfigError(
            f"{where}: model_type {family!r} is not supported; supported: "
            + ", ".join(supported_families())
        )
    text = with_family_defaults(text, where)
    display = name or config.get("name") or config.get("_name_or_path") or family
    spec = parser(ConfigView(text, where), str(display))
    weights = read_quantization(config, where)
    return spec if weights is None else replace(spec, weights=weights)


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a config.json file, reporting malformed JSON by line and column."""
    data = parse_json(read_text(path, "model config"), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of config fields")
    return data


def load_model(source: str | Path | Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """A ModelSpec from a catalog name, a config.json path, `hf:ORG/NAME`, or a config mapping."""
    if isinstance(source, Mapping):
        return from_config(source, name)
    text = str(source)
    if text.startswith("hf:"):
        from meshplan.model.hub import fetch_config

        repo = text[3:]
        return from_config(fetch_config(repo), name or repo, where=text)
    path = Path(text)
    if isinstance(source, Path) or path.suffix == ".json" or path.exists():
        if path.is_dir():
            path = path / "config.json"
        return from_config(read_config_file(path), name or path.parent.name, where=str(path))
    return _catalog_model(text, name)


@functools.lru_cache(maxsize=64)
def _catalog_model(text: str, name: str | None) -> ModelSpec:
    """A catalog model, parsed once per process (ModelSpec is immutable; the web app and
    validate ask for the same few models again and again)."""
    entry = catalog_index.get_entry(text)
    return from_config(catalog_index.catalog_config(text), name or entry.name, where=entry.name)
