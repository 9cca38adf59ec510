"""Engine defaults: the rules read from vLLM, SGLang and TensorRT-LLM, and their sources."""

from __future__ import annotations

import pytest

from meshplan.errors import UnknownNameError
from meshplan.hardware import get_gpu
from meshplan.serving.engine.defaults import (
    ENGINES, engine_defaults, knobs, sglang_max_running_requests, sglang_mem_fraction_static,
    trtllm_bench_settings,
)

H100 = get_gpu("h100-sxm-80gb")
L40S = get_gpu("l40s-48gb")
A100 = get_gpu("a100-sxm-80gb")
H200 = get_gpu("h200-sxm-141gb")
B200 = get_gpu("b200-180gb")
A100_40 = get_gpu("a100-sxm-40gb")


def defaults(engine, gpu, **kw):
    return engine_defaults(engine, gpu.hbm_bytes, gpu_name=gpu.name, **kw)


# --- vLLM V1 -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "offline", "seqs", "tokens"), [
    (H100, False, 1024, 8192),    # vllm serve on >= 70 GiB
    (H100, True, 1024, 16384),    # LLM class on >= 70 GiB
    (L40S, False, 256, 2048),     # < 70 GiB
    (L40S, True, 256, 8192),
    (H200, False, 1024, 8192),
    (A100, False, 256, 2048),     # 80 GiB but an A100: small defaults (vLLM PR #17885)
    (A100, True, 256, 8192),
])
def test_vllm_budgets_by_memory_and_usage_context(gpu, offline, seqs, tokens):
    d = defaults("vllm", gpu, offline=offline)
    assert (d.max_num_seqs, d.max_num_batched_tokens) == (seqs, tokens)


def test_vllm_fixed_defaults():
    d = defaults("vllm", H100)
    assert d.gpu_memory_utilization == 0.9 and d.memory_fraction_of == "total"
    assert d.block_size == 16 and d.chunked_prefill and d.prefix_caching
    assert d.scheduler_policy == "fcfs"
    assert d.cuda_graph_max_batch == 512  # min(2 * max_num_seqs, 512, max_num_batched_tokens)
    assert "arg_utils.py" in d.source_note and "vllm serve" in d.source_note
    assert "LLM class" in defaults("vllm", H100, offline=True).source_note


def test_vllm_a100_exception_needs_the_name():
    assert engine_defaults("vllm", A100.hbm_bytes).max_num_batched_tokens == 8192  # name unknown
    assert engine_defaults("vllm", A100.hbm_bytes, gpu_name="NVIDIA A100-SXM4-80GB").max_num_batched_tokens == 2048


def test_vllm_threshold_is_70_gib():
    assert engine_defaults("vllm", 70 * 2**30).max_num_seqs == 1024
    assert engine_defaults("vllm", 70 * 2**30 - 1).max_num_seqs == 256


def test_vllm_scheduler_facts_recorded():
    k = knobs("vllm")
    assert k["max_num_partial_prefills"]["value"] == 1
    assert k["long_prefill_token_threshold"]["value"] == 0
    assert k["preemption"]["value"] == "recompute"
    assert "running-first" in k["scheduling_order"]["value"]


# --- SGLang --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "tp", "chunk", "graph_bs"), [
    (L40S, 1, 4096, 32),
    (L40S, 4, 4096, 160),
    (A100_40, 1, 4096, 32),
    (H100, 1, 8192, 256),
    (H100, 8, 8192, 512),
    (H200, 1, 8192, 256),
    (B200, 1, 16384, 512),
])
def test_sglang_by_memory_band_and_tp(gpu, tp, chunk, graph_bs):
    d = defaults("sglang", gpu, tp=tp)
    assert d.max_num_batched_tokens == min(chunk, 16384)
    assert d.cuda_graph_max_batch == graph_bs
    assert d.block_size == 1 and d.prefix_caching and d.chunked_prefill and d.scheduler_policy == "fcfs"


def test_sglang_small_gpus():
    d = engine_defaults("sglang", 16 * 2**30)
    assert (d.max_num_batched_tokens, d.cuda_graph_max_batch) == (2048, 8)
    assert engine_defaults("sglang", 32 * 2**30, tp=2).cuda_graph_max_batch == 48


def test_sglang_mem_fraction_static():
    # H100: reserved = 512 + 8192*1.5 + 128 + 256*2 + 8*58 prefill graph sizes = 13904 MiB of 81559
    assert defaults("sglang", H100).gpu_memory_utilization == pytest.approx(0.830, abs=1e-3)
    assert sglang_mem_fraction_static(H100.hbm_bytes, 8192, 256) == pytest.approx((81559 - 13904) / 81559, abs=1e-3)
    # below 60 GiB there is no 10 GiB floor; more memory leaves a larger fraction
    assert 0.8 < defaults("sglang", L40S).gpu_memory_utilization < defaults("sglang", H200).gpu_memory_utilization
    # a larger TP reserves more
    assert defaults("sglang", H100, tp=8).gpu_memory_utilization < defaults("sglang", H100).gpu_memory_utilization


def test_sglang_max_running_requests():
    assert defaults("sglang", H100).max_num_seqs == 2048  # pool floor when the KV pool is unknown
    assert sglang_max_running_requests(450_000, 131_072) == 2048
    assert sglang_max_running_requests(450_000, 8_192) == 4096
    assert sglang_max_running_requests(3_000, 8_192) == 1500  # kv_tokens // 2
    assert defaults("sglang", H100, kv_tokens=450_000, context_len=8_192).max_num_seqs == 4096


# --- TensorRT-LLM --------------------------------------------------------------------------------

def test_trtllm_server_defaults():
    d = defaults("tensorrt-llm", H100)
    assert (d.max_num_seqs, d.max_num_batched_tokens) == (2048, 8192)
    assert d.gpu_memory_utilization == 0.9 and d.memory_fraction_of == "free_after_weights"
    assert d.block_size == 32 and d.prefix_caching and not d.chunked_prefill
    assert d.scheduler_policy == "guaranteed-no-evict"
    assert d.cuda_graph_max_batch == 128


def test_trtllm_bench_heuristic_llama8b():
    # Llama-3-8B bf16 on one H100, ISL=OSL=1024: ~233 requests fit in 0.9 of the free memory
    kw = dict(tp=1, input_len=1024, output_len=1024, weights_bytes=int(8.03e9 * 2),
              kv_bytes_per_token=2 * 32 * 8 * 128 * 2)
    assert trtllm_bench_settings(H100.hbm_bytes, **kw) == (256, 2048)
    d = defaults("trtllm", H100, offline=True, **{k: v for k, v in kw.items() if k != "tp"})
    assert (d.max_num_seqs, d.max_num_batched_tokens, d.cuda_graph_max_batch) == (256, 2048, 256)
    assert d.chunked_prefill and d.scheduler_policy == "guaranteed-no-evict"
    assert "heuristic" in d.source_note


def test_trtllm_bench_heuristic_caps_and_ladders():
    # tiny KV per token: requests capped at 4096, tokens at 32768
    tiny = dict(tp=1, weights_bytes=2**30, kv_bytes_per_token=1024)
    assert trtllm_bench_settings(H100.hbm_bytes, input_len=128, output_len=128, **tiny) == (4096, 8192)
    assert trtllm_bench_settings(H100.hbm_bytes, input_len=1024, output_len=128, **tiny) == (4096, 32768)
    # long prompts: ~877 requests of 8704 tokens fit; batch rounded to 128, tokens (x17) to 1024
    assert trtllm_bench_settings(H100.hbm_bytes, tp=1, input_len=8192, output_len=512, weights_bytes=int(16e9),
                                 kv_bytes_per_token=8192) == (896, 15360)
    # few requests: the batch never goes below 64 nor the token budget below 2048
    assert trtllm_bench_settings(H100.hbm_bytes, tp=1, input_len=8192, output_len=512, weights_bytes=int(16e9),
                                 kv_bytes_per_token=131072) == (64, 2048)


def test_trtllm_bench_without_model_sizes_falls_back():
    d = defaults("tensorrt-llm", H100, offline=True, input_len=1024, output_len=1024)
    assert (d.max_num_seqs, d.max_num_batched_tokens) == (2048, 8192)
    assert "not applied" in d.source_note


def test_trtllm_model_that_does_not_fit():
    from meshplan.errors import ConfigError
    with pytest.raises(ConfigError):
        trtllm_bench_settings(L40S.hbm_bytes, tp=1, input_len=1024, output_len=1024,
                              weights_bytes=70 * 2**30, kv_bytes_per_token=131072)


# --- names and sources ---------------------------------------------------------------------------

def test_unknown_engine_lists_choices():
    with pytest.raises(UnknownNameError) as e:
        engine_defaults("vllmm", H100.hbm_bytes)
    assert "vllm" in str(e.value) and "engine" in str(e.value)


def test_engine_aliases():
    for alias in ("trtllm", "TensorRT-LLM", "trt-llm", "tensorrt_llm"):
        assert engine_defaults(alias, H100.hbm_bytes).engine == "tensorrt-llm"


def _entries(engine):
    """(name, entry) of every knob, one per version item when the knob varies by version."""
    for name, entry in knobs(engine).items():
        for item in entry.get("versions", [entry]):
            yield name, item


@pytest.mark.parametrize("engine", ENGINES)
def test_every_knob_has_a_source(engine):
    for name, entry in _entries(engine):
        src = entry.get("source")
        assert src, f"{engine}.{name} has no source"
        for field in ("repo", "path", "version_or_commit", "note"):
            assert str(src.get(field, "")).strip(), f"{engine}.{name}.source.{field} is empty"
        assert "value" in entry or "rules" in entry or "formula" in entry or "kv_fraction" in entry, name
        if entry.get("verified") is False:
            assert entry.get("reason"), f"{engine}.{name} is unverified without a reason"


def test_rules_end_with_a_catch_all():
    for engine in ENGINES:
        for name, entry in _entries(engine):
            if "rules" in entry:
                assert "when" not in entry["rules"][-1], f"{engine}.{name}"


def test_defaults_module_stays_light():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, meshplan.serving.engine.defaults; "
                          "print([m for m in ('torch', 'transformers', 'pandas') if m in sys.modules])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
