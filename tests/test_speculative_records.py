"""Speculative decoding in run records: the `serving.speculative` key, its acceptance given as a
probability or as a published mean accepted length, and its way into the simulated plan."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.engine.scheduler import acceptance_for_length, expected_tokens_per_step
from meshplan.validate.records import parse_record
from meshplan.validate.serving_records import serving_case

runner = CliRunner()
EAGLE = {"method": "eagle", "tokens": 3, "accepted_length": 2.82}
RECORD = {
    "id": "spec1", "kind": "serving", "source": {"name": "test"}, "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 1},
    "serving": {"engine": "vllm", "tp": 1, "speculative": EAGLE,
                "workload": {"mode": "concurrency", "concurrency": 1, "input_len": 128,
                             "output_len": 256, "num_requests": 2}},
    "measured": {"tpot_ms_mean": 4.0},
}


def with_speculative(spec: dict | None, rid: str = "spec1") -> dict:
    return {**RECORD, "id": rid, "serving": {**RECORD["serving"], "speculative": spec}}


@pytest.mark.parametrize("k, length", [(1, 1.92), (2, 2.58), (3, 2.82), (4, 2.99), (5, 3.01), (3, 1.0)])
def test_accepted_length_inverts_the_simulators_tokens_per_step(k, length):
    p = acceptance_for_length(k, length)
    assert 0 <= p < 1
    assert expected_tokens_per_step(k, p) == pytest.approx(length, abs=1e-9)


def test_one_draft_accepted_length_is_one_plus_the_probability():
    assert acceptance_for_length(1, 1.92) == pytest.approx(0.92)


def test_a_length_no_chain_of_drafts_can_reach_is_refused():
    with pytest.raises(ValueError, match=r"\[1, 4\)"):
        acceptance_for_length(3, 4.0)


def test_a_speculative_record_becomes_a_plan_with_its_drafts():
    plan = serving_case(parse_record(RECORD, "test")).plan
    assert (plan.speculative_method, plan.speculative_tokens) == ("eagle", 3)
    assert expected_tokens_per_step(3, plan.acceptance_rate) == pytest.approx(2.82)


def test_a_stated_probability_is_used_as_it_is():
    spec = {"method": "eagle", "tokens": 2, "acceptance_rate": 0.7}
    plan = serving_case(parse_record(with_speculative(spec), "test")).plan
    assert (plan.speculative_tokens, plan.acceptance_rate) == (2, 0.7)


def test_without_the_key_the_plan_has_no_drafts():
    plan = serving_case(parse_record(with_speculative(None), "test")).plan
    assert plan.speculative_tokens == 0 and plan.acceptance_rate is None


@pytest.mark.parametrize("spec, message", [
    ({"method": "eagle", "tokens": 3}, "give exactly one of acceptance_rate"),
    ({**EAGLE, "acceptance_rate": 0.8}, "give exactly one of acceptance_rate"),
    ({**EAGLE, "accepted_length": 4.0}, "give a value below 4"),
    ({**EAGLE, "method": "medusa"}, "serving.speculative.method: Input should be 'mtp' or 'eagle'"),
    ({**EAGLE, "tokens": 0}, "serving.speculative.tokens: Input should be greater than or equal to 1"),
    ({"method": "eagle", "tokens": 3, "acceptance_rate": 1.0},
     "serving.speculative.acceptance_rate: Input should be less than 1"),
    ({**EAGLE, "draft_tokens": 3}, "serving.speculative.draft_tokens: Extra inputs"),
])
def test_a_malformed_block_gives_one_error_naming_the_field(spec, message):
    with pytest.raises(ConfigError) as caught:
        parse_record(with_speculative(spec), "f.yaml")
    text = str(caught.value)
    assert text.startswith("f.yaml: record 'spec1': serving.speculative")
    assert message in text and text.count("; ") == 0  # one error, not a cascade


def test_speculative_record_round_trips_through_validate(tmp_path):
    """Written to a file, read by `meshplan validate`, simulated with its drafts: three drafts at
    2.82 tokens per step must predict a shorter time per output token than the same run without."""
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "records": [RECORD, with_speculative(None, "plain")]}))
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["skipped"] == []
    tpot = {r["id"]: r["predicted"] for r in data["records"] if r["metric"] == "tpot_ms_mean"}
    assert set(tpot) == {"spec1", "plain"}
    assert tpot["spec1"] < 0.6 * tpot["plain"]


def test_tensorrt_llm_mtp_speedups_follow_from_the_published_accepted_lengths():
    """Held-out source E of serving-engines-2025.yaml (TensorRT-LLM tech blog 1: DeepSeek-R1 on
    eight B200s at concurrency 1, ISL 1k / OSL 2k) measured the same deployment without MTP and
    with 1 to 5 MTP drafts at published accepted lengths 1.92-3.01. Whatever the error of the
    step time itself (about +50% at EP4 x expert-TP2), the speedup over no drafts must follow from
    the drafts' cost and the accepted lengths: within 15% of the measured ratio for every draft
    count (the ratio depends on how much of the step the expert reads are, which the step's own
    error moves), and more drafts than one must pay off."""
    from meshplan.records import HELD_OUT
    from meshplan.validate.records import load_records
    from meshplan.validate.serving_records import predict_serving

    records = {r.id: r for r in load_records(HELD_OUT / "serving-engines-2025.yaml")}
    prefix = "trtllm-blog1-b200-dsr1-c1-"

    def tpot(rid):
        record = records[prefix + rid]
        return record.measured.tpot_ms_mean, predict_serving(serving_case(record))["tpot_ms_mean"]

    base_measured, base_predicted = tpot("without-mtp-ep4")
    predicted = {}
    for k in range(1, 6):
        measured_k, predicted_k = tpot(f"mtp{k}-ep4")
        assert records[f"{prefix}mtp{k}-ep4"].serving.speculative.tokens == k
        predicted[k] = base_predicted / predicted_k
        assert predicted[k] == pytest.approx(base_measured / measured_k, rel=0.15), k
    assert min(predicted[2], predicted[3], predicted[4], predicted[5]) > predicted[1]
