"""meshplan's analytic counts against the real transformers models (meta device, CPU).

Parameters: exact, to the single parameter (what `model.parameters()` holds).
Forward FLOPs: within 0.5% of `torch.utils.flop_counter.FlopCounterMode` on an eager-attention
forward (full S x S scores, so meshplan is asked for `causal=False`), MoE experts via
`experts_implementation="batched_mm"` (top-k per token). Llama 4 runs every expert densely in
transformers; its measurement is rescaled to top-k (hf_truth.measure_forward_flops_sparse).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from meshplan.model import from_config, list_entries  # noqa: E402
from meshplan.model.catalog_index import catalog_config  # noqa: E402
from tests.torch_tier import hf_truth  # noqa: E402
from tests.torch_tier.small_configs import SMALL_CONFIGS  # noqa: E402

FLOP_TOLERANCE = 0.005  # the bound: within 0.5% of FlopCounterMode
CATALOG = [entry.name for entry in list_entries()]


def _flops_error(config: dict, seq_len: int) -> float:
    measured = hf_truth.measure_forward_flops_sparse(config, seq_len)
    predicted = from_config(config).flops_per_token_forward(seq_len, causal=False) * seq_len
    return predicted / measured - 1


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_small_config_params_exact(name):
    config = SMALL_CONFIGS[name]
    assert from_config(config).params_total == hf_truth.count_params(config)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("seq_len", [16, 96])
def test_small_config_flops(name, seq_len):
    assert abs(_flops_error(SMALL_CONFIGS[name], seq_len)) < FLOP_TOLERANCE


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_params_exact(name):
    config = catalog_config(name)
    assert from_config(config).params_total == hf_truth.count_params(config)


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_flops(name):
    assert abs(_flops_error(catalog_config(name), 128)) < FLOP_TOLERANCE
