"""The public API (`meshplan.__all__`) given odd numbers and custom GPUs raises the library's own
error (MeshplanError), never ZeroDivisionError, TypeError or OverflowError from deep inside
(issue #34). Deterministic hypothesis runs; the case counts are the `max_examples`."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import meshplan as mp
from meshplan.errors import ConfigError, MeshplanError

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None)
H100 = mp.get_gpu("h100-sxm-80gb")
MODEL = mp.load_model("llama-3.2-1b")
PLAN = mp.TrainingPlan(global_batch_size=16, seq_len=2048, tp=1, pp=1, micro_batch_size=1)
ODD = st.one_of(st.sampled_from([0, -1, 0.0, -0.0, -1.0, 1e-300, 1e300, math.nan, math.inf, -math.inf, None, "8"]),
                st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**12))
GPU_FIELDS = ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "sm_count", "boost_clock_hz", "tdp_w",
              "scale_up_bandwidth_bytes_per_s_per_direction", "nic_bandwidth_bytes_per_s_per_direction",
              "default_gpus_per_node", "default_scale_up_domain")


def custom_gpu(field: str, value):
    if field == "peak_flops_per_s":
        return dataclasses.replace(H100, peak_flops_per_s={**H100.peak_flops_per_s, "bf16": value})
    return dataclasses.replace(H100, **{field: value})


@pytest.mark.parametrize("field", ["hbm_bytes", "hbm_bandwidth_bytes_per_s", "sm_count", "tdp_w",
                                   "boost_clock_hz", "peak_flops_per_s", "default_gpus_per_node"])
@pytest.mark.parametrize("value", [0, -1, -1.0, math.nan, math.inf])
def test_gpuspec_refuses_what_no_gpu_has(field, value):
    with pytest.raises(ConfigError, match=field):
        custom_gpu(field, value)


def _library_error_or_answer(call) -> None:
    try:
        call()
    except MeshplanError:
        pass


@FUZZ
@given(field=st.sampled_from([*GPU_FIELDS, "peak_flops_per_s"]), value=ODD)
def test_estimate_training_with_a_custom_gpu(field, value):
    def call():
        cluster = mp.Cluster(gpu=custom_gpu(field, value), num_gpus=8)
        mp.estimate_training(MODEL, cluster, PLAN)

    _library_error_or_answer(call)


SEARCH_ARGS = st.fixed_dictionaries({}, optional={
    "top": ODD, "workers": st.sampled_from([0, -1, 1, None, 2.5]), "price_per_gpu_hour": ODD,
    "train_tokens": ODD, "pin": st.dictionaries(st.sampled_from(["tp", "pp", "micro_batch_size", "cp",
                                                                  "recompute", "nosuch"]), ODD, max_size=2)})


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(kwargs=SEARCH_ARGS)
def test_search_training_plans_with_odd_arguments(kwargs):
    kwargs.setdefault("workers", 1)
    cluster = mp.Cluster.build("h100-sxm-80gb", 8)
    _library_error_or_answer(lambda: mp.search_training_plans(MODEL, cluster, PLAN, **kwargs))


WORKLOAD = mp.synthesize(mp.WorkloadSpec(arrival="poisson", request_rate=1.0, num_requests=30,
                                         input_len=64, output_len=8), seed=0)


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(rate=ODD, ttft=ODD, extra=st.fixed_dictionaries({}, optional={
    "top": st.sampled_from([0, -1, 1]), "max_gpus": st.sampled_from([0, -1, 1, 2]),
    "percentile": st.sampled_from([0.0, 50.0, 150.0, math.nan]), "prices": st.just({"h100-sxm-80gb": -1.0})}))
def test_search_serving_plans_with_odd_arguments(rate, ttft, extra):
    _library_error_or_answer(lambda: mp.search_serving_plans(MODEL, "h100-sxm-80gb", WORKLOAD, rate,
                                                             ttft_ms=ttft, workers=1, **extra))


@pytest.mark.parametrize("call", [
    lambda: mp.estimate_training(MODEL, mp.Cluster(gpu=dataclasses.replace(H100, sm_count=1), num_gpus=8),
                                 PLAN),
    lambda: mp.search_training_plans(MODEL, mp.Cluster.build("h100-sxm-80gb", 8), PLAN, pin={"tp": "8"},
                                     workers=1, top=1),
])
def test_the_odd_but_valid_inputs_still_answer(call):
    assert call() is not None
