"""A no-crash grid: catalog models x GPUs x a sample of the plan space (valid and invalid) through
resolve, memory and step time. Every case is a ConfigError or an estimate whose numbers are
finite and not negative."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from meshplan import Cluster, TrainingPlan, list_gpus, list_models, load_model, resolve_plan
from meshplan.errors import ConfigError
from meshplan.training.estimate import estimate_step

MODELS = sorted(entry.name for entry in list_models())
GPUS = sorted(gpu.name for gpu in list_gpus())
PLANS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 3, 8, 16]), "pp": st.sampled_from([1, 2, 4, 7, 16]),
    "vpp": st.sampled_from([None, 1, 2, 5]), "cp": st.sampled_from([1, 2, 4]),
    "ep": st.sampled_from([1, 2, 8, 64]), "micro_batch_size": st.sampled_from([None, 1, 3]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "dp_sharding": st.sampled_from([None, "none", "optimizer", "gradients", "full"]),
    "offload_optimizer": st.booleans(), "offload_params": st.booleans(),
    "offload_activations": st.booleans(), "offload_target": st.sampled_from(["cpu", "nvme"]),
    "seq_len": st.sampled_from([128, 4096, 32768]),
    "precision": st.sampled_from(["bf16", "fp8", "fp4", "fp16"]),
    "framework": st.sampled_from(["megatron", "torchtitan", "deepspeed", "hf"]),
})


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) and v >= 0 for v in values)


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS),
       gpus=st.sampled_from([1, 8, 64, 512]), fields=PLANS)
def test_every_plan_is_an_estimate_or_one_clear_error(model, gpu, gpus, fields):
    spec = load_model(model)
    try:
        cluster = Cluster.build(gpu, gpus)
        plan = resolve_plan(TrainingPlan(**{k: v for k, v in fields.items() if v is not None}),
                            spec, cluster)
    except ConfigError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    est = estimate_step(spec, cluster, plan)
    assert _finite(est.step_time_s, est.tokens_per_s_per_gpu, est.mfu, est.memory.peak_bytes)
    assert est.step_time_s > 0
    assert all(_finite(v) for v in est.breakdown.values()), est.breakdown
