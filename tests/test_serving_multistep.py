"""vLLM V0 multi-step scheduling (`num_scheduler_steps`): a decode batch runs N steps per
scheduler call (vllm/engine/llm_engine.py `_has_remaining_steps`; vllm/sequence.py
`init_multi_step_from_lookahead_slots`: a whole-prompt prefill batch is one step, a decode batch
N), so arrivals wait for the run's last step and finished members stay in it until then."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from meshplan import Cluster, load_model
from meshplan.serving.engine.replica import Replica
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.request import Request
from meshplan.serving.traffic.workload import Workload, WorkloadSpec, synthesize


def run(plan: ServingPlan, workload):
    return simulate(load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", plan.num_gpus), plan, workload)


def poisson(n=400, rate=8.0, seed=1):
    spec = WorkloadSpec(arrival="poisson", request_rate=rate, num_requests=n, dataset="random",
                        input_len=512, output_len=200)
    return synthesize(spec, seed=seed)


def test_ttft_grows_with_the_steps_per_scheduler_call():
    """At moderate load an arrival waits for the running decode batch's remaining steps."""
    w = poisson()
    ttft = [run(ServingPlan(num_scheduler_steps=n), w).metrics.ttft_ms.mean for n in (1, 4, 8, 16)]
    assert ttft == sorted(ttft) and ttft[-1] > 2 * ttft[0], ttft


def test_decode_runs_are_whole_multiples_of_the_steps():
    """The scheduler runs only between runs: every stretch of decode iterations between two
    prefill iterations is a whole number of N-step runs."""
    n = 6
    log = run(ServingPlan(num_scheduler_steps=n), poisson()).log
    kinds = log.kinds()
    assert set(kinds) == {"prefill", "decode"}  # V0's default scheduler never mixes them
    runs, length = [], 0
    for kind in kinds:
        if kind == "decode":
            length += 1
        elif length:
            runs.append(length)
            length = 0
    assert runs and all(r % n == 0 for r in runs), [r for r in runs if r % n][:5]


def _two_requests(second_arrival_s: float) -> Workload:
    return Workload(requests=[Request(id=0, arrival_s=0.0, input_len=100, output_len=10),
                              Request(id=1, arrival_s=second_arrival_s, input_len=100, output_len=10)])


def test_finished_requests_stay_in_the_run_until_its_last_step():
    """One request of 10 tokens: its 9 decode steps end inside the second 8-step run, whose other 7
    steps still run; a request arriving after its last token is prefilled only after them."""
    alone = run(ServingPlan(num_scheduler_steps=8), _two_requests(1e6))
    log = alone.log
    first = alone.records[0]
    decode_ends = log.column("end_s")[log.kinds() == "decode"]
    assert first.finish_s == pytest.approx(decode_ends[8])  # token 10 = 1 (prefill) + 9 decode steps
    assert len(decode_ends) == 16 + 16  # two requests, each two whole runs
    late = run(ServingPlan(num_scheduler_steps=8), _two_requests(first.finish_s + 1e-6))
    second_prefill = late.log.column("start_s")[late.log.kinds() == "prefill"][1]
    assert second_prefill == pytest.approx(decode_ends[15])
    single = run(ServingPlan(), _two_requests(first.finish_s + 1e-6))
    assert single.records[1].first_token_s < late.records[1].first_token_s


def test_one_step_never_takes_the_multi_step_path(monkeypatch):
    """num_scheduler_steps=1 (the default) runs the unchanged scheduling: the multi-step
    hooks are never called."""
    def boom(*_):
        raise AssertionError("multi-step path taken with num_scheduler_steps=1")

    monkeypatch.setattr(Replica, "_start_group_step", boom)
    monkeypatch.setattr(Replica, "_end_group_step", boom)
    result = run(ServingPlan(), poisson(n=200))
    assert result.metrics.ttft_ms.mean > 0


def test_fast_forward_keeps_multi_step_exact(monkeypatch):
    """The decode fast-forward counts its steps into the runs: same log with it switched off."""
    plan, w = ServingPlan(num_scheduler_steps=5, replicas=2, router="least-outstanding"), poisson(n=300, rate=14)
    fast = run(plan, w)
    monkeypatch.setattr(Replica, "skip_decodes", lambda self, now, horizon: (now, 0))
    slow = run(plan, w)
    assert fast.metrics == slow.metrics and fast.iterations == slow.iterations
    for column in ("replica", "start_s", "end_s", "decode_seqs", "kind"):  # (kind: codes)
        assert np.array_equal(fast.log.column(column), slow.log.column(column)), column


@pytest.mark.parametrize("fields, words", [
    (dict(engine="sglang"), "vLLM V0"),
    (dict(chunked_prefill=True), "chunked_prefill=false"),
    (dict(engine_version="0.11.0"), "0.5.5 to 0.10.0"),
    (dict(engine_version="0.5.4"), "0.5.5 to 0.10.0"),
    (dict(speculative_tokens=2, acceptance_rate=0.7), "speculative"),
])
def test_refused_where_vllm_had_no_multi_step(fields, words):
    with pytest.raises(ValidationError, match=words):
        ServingPlan(num_scheduler_steps=4, **fields)


def test_versions_with_multi_step_are_accepted():
    for version in ("0.5.5", "0.6.3.post1", "0.9.0.2.dev108+g71faa1880", "0.10.0"):
        assert ServingPlan(num_scheduler_steps=8, engine_version=version).num_scheduler_steps == 8


def test_vllm_export_launches_multi_step_with_whole_prompts():
    from meshplan.export.serving.vllm import export

    script = export("meta-llama/Llama-3.1-8B-Instruct", ServingPlan(num_scheduler_steps=8))
    assert "--num-scheduler-steps 8" in script and "--no-enable-chunked-prefill" in script
    assert "--num-scheduler-steps" not in export("meta-llama/Llama-3.1-8B-Instruct", ServingPlan())
