"""Bad model input gets one clear ConfigError naming the field and what would be valid."""

from __future__ import annotations

import json

import pytest

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.model import from_config, load_model


def _base(**over):
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
           "vocab_size": 1000}
    cfg.update(over)
    return cfg


def test_unsupported_family_lists_supported_ones():
    with pytest.raises(ConfigError, match=r"model_type 'mamba' is not supported; supported: .*llama"):
        from_config(_base(model_type="mamba"))


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_attention_heads"])
def test_missing_core_field_is_named(field):
    cfg = _base()
    del cfg[field]
    with pytest.raises(ConfigError, match=f"required field '{field}'"):
        from_config(cfg)


def test_family_fills_omitted_fields_as_transformers_does():
    # Gemma 3's published text_config omits vocab_size; Gemma3TextConfig defaults it to 262,208.
    cfg = _base(model_type="gemma3_text", head_dim=32)
    del cfg["vocab_size"]
    assert from_config(cfg).vocab_size == 262_208


@pytest.mark.parametrize("field", ["intermediate_size", "vocab_size"])
def test_missing_field_without_family_default_is_named(field):
    cfg = _base()
    del cfg["model_type"]  # the run-record mapping has no family defaults
    del cfg[field]
    with pytest.raises(ConfigError, match=f"required field '{field}'"):
        from_config(cfg)


@pytest.mark.parametrize("value", [0, -4])
def test_zero_or_negative_size_is_rejected(value):
    with pytest.raises(ConfigError, match=rf"'intermediate_size' = {value} is invalid; expected an integer >= 1"):
        from_config(_base(intermediate_size=value))


def test_non_integer_size_is_rejected():
    with pytest.raises(ConfigError, match="'num_hidden_layers' = '2' is invalid; expected an integer"):
        from_config(_base(num_hidden_layers="2"))


def test_kv_heads_must_divide_heads():
    with pytest.raises(ConfigError, match="num_attention_heads=8 is not divisible by num_key_value_heads=3"):
        from_config(_base(num_key_value_heads=3))


def test_hidden_must_divide_by_heads_without_head_dim():
    with pytest.raises(ConfigError, match="hidden_size=250 is not divisible by num_attention_heads=8"):
        from_config(_base(hidden_size=250))
    # an explicit head_dim makes the same shape valid (as Mistral-Nemo and Gemma do)
    assert from_config(_base(hidden_size=250, head_dim=32)).params_total > 0


def test_top_k_cannot_exceed_experts():
    cfg = _base(model_type="mixtral", num_local_experts=4, num_experts_per_tok=6)
    with pytest.raises(ConfigError, match="num_experts_per_tok=6 exceeds num_local_experts=4"):
        from_config(cfg)


def test_layer_types_length_is_checked():
    with pytest.raises(ConfigError, match="layer_types has 1 entries but num_hidden_layers is 2"):
        from_config(_base(model_type="qwen3", layer_types=["full_attention"]))


def test_unknown_layer_type_is_named():
    cfg = _base(model_type="qwen3", layer_types=["full_attention", "linear_attention"])
    with pytest.raises(ConfigError, match=r"layer_types\[1\] = 'linear_attention' is not supported"):
        from_config(cfg)


def test_malformed_json_reports_line_and_column(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}')
    with pytest.raises(ConfigError, match=r"not valid JSON at line 3, column 23"):
        load_model(path)


def test_truncated_json_is_reported(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_base())[:40])
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(path)


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="model config .*nope.json. does not exist"):
        load_model(tmp_path / "nope.json")


def test_unknown_catalog_name_suggests_closest():
    with pytest.raises(UnknownNameError, match="unknown model 'llama-3.1-7b'; closest: .*llama-3.1-70b"):
        load_model("llama-3.1-7b")
