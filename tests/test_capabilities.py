"""One capability table for what each framework can do: resolve refuses a feature the framework
lacks, so memory and time never price it, the search never ranks it and the CLI says what is valid."""

from __future__ import annotations

import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshplan import Cluster, TrainingPlan, load_model
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.training import resolve_plan
from meshplan.training.layout.capabilities import feature_problems, features, frameworks_for
from meshplan.training.plan import Framework, Method, Recompute, Schedule
from meshplan.training.search.plans import search

FRAMEWORKS = typing.get_args(Framework)
runner = CliRunner()


def test_hf_has_whole_layer_checkpointing_only():
    """transformers' gradient checkpointing recomputes whole layers: no selective policy."""
    assert features("hf").recompute == ("none", "full")
    assert "selective" in features("megatron").recompute
    model, cluster = load_model("llama-3.1-70b"), Cluster.build("h100-sxm-80gb", 8)
    plan = TrainingPlan(framework="hf", method="qlora", recompute="selective", seq_len=2048,
                        global_batch_size=8)
    with pytest.raises(ConfigError, match="recompute='selective': hf offers none, full"):
        resolve_plan(plan, model, cluster)


def test_the_70b_qlora_hf_search_never_ranks_selective_recompute():
    model, cluster = load_model("llama-3.1-70b"), Cluster.build("h100-sxm-80gb", 8)
    base = TrainingPlan(framework="hf", method="qlora", seq_len=4096, global_batch_size=16)
    result = search(model, cluster, base, {}, top=20, workers=1)
    assert result.ranked
    assert {e.plan.recompute for e in result.ranked} <= {"none", "full"}


@pytest.mark.parametrize("command", ["plan", "memory"])
def test_asking_hf_for_selective_recompute_exits_2_naming_the_choices(command):
    args = ["train", command, "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8",
            "--seq-len", "2048", "--global-batch-size", "8", "--framework", "hf",
            "--recompute", "selective"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "recompute='selective': hf offers none, full" in result.stderr


def test_methods_live_in_the_table():
    assert frameworks_for("lora") == ("hf", "deepspeed", "fsdp", "nemo")
    assert frameworks_for("qlora") == ("hf", "deepspeed", "fsdp")
    assert all("full" in features(f).methods for f in FRAMEWORKS)


def _uses_only_its_capabilities(plan) -> list[str]:
    cap = features(plan.framework)
    out = [] if plan.recompute in cap.recompute else [f"recompute {plan.recompute}"]
    out += [] if plan.method in cap.methods else [f"method {plan.method}"]
    out += [] if plan.pp == 1 or plan.schedule in cap.schedules else [f"schedule {plan.schedule}"]
    out += [f"offload_{k}" for k in ("optimizer", "activations", "params")
            if getattr(plan, f"offload_{k}") and k not in cap.offload_kinds]
    return out + feature_problems(plan.framework, plan)


PINS = st.fixed_dictionaries({}, optional={
    "recompute": st.sampled_from(typing.get_args(Recompute)),
    "schedule": st.sampled_from(typing.get_args(Schedule)),
    "offload_optimizer": st.booleans(), "offload_activations": st.booleans(),
    "offload_params": st.booleans(), "pp": st.sampled_from((1, 2))})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framework=st.sampled_from(FRAMEWORKS), method=st.sampled_from(typing.get_args(Method)),
       pins=PINS)
def test_every_ranked_plan_uses_only_its_frameworks_capabilities(framework, method, pins):
    """Frameworks x features: a pinned feature the framework lacks is refused up front; any
    other search ranks only plans whose every feature its framework has."""
    model, cluster = load_model("llama-3.2-1b"), Cluster.build("h100-sxm-80gb", 8)
    try:
        base = TrainingPlan(framework=framework, method=method, seq_len=2048, global_batch_size=32)
        result = search(model, cluster, base, {"tp": 1, "cp": 1, **pins}, top=10, workers=1)
    except ConfigError as error:  # only for a feature or method the framework lacks
        lacking = feature_problems(framework, TrainingPlan(framework=framework, **pins))
        assert lacking or method not in features(framework).methods, str(error)
        return
    for est in result.ranked:
        assert not _uses_only_its_capabilities(est.plan), est.plan
