"""Serving exporters: golden scripts per engine, real flag names, layout and unexpressible plans.

Regenerate the golden files with
MESHPLAN_UPDATE_GOLDEN=1 python -m pytest tests/test_serving_export.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.export.serving import SERVING_EXPORTERS, export_serving, sglang, vllm
from meshplan.serving.plan import Disaggregation, ServingPlan

GOLDEN = Path(__file__).parent / "golden" / "serving_export"

# Every `vllm serve` flag the vLLM exporter may write, transcribed from
# vllm-project/vllm vllm/engine/arg_utils.py @ 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b
# (EngineArgs.add_cli_args: ParallelConfig, ModelConfig, CacheConfig, SchedulerConfig and
# VllmConfig groups; bool | None fields get argparse.BooleanOptionalAction, hence --no-...) and
# vllm/entrypoints/openai/cli_args.py (FrontendArgs: host, port).
VLLM_FLAGS = {
    "--host", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
    "--data-parallel-size", "--enable-expert-parallel", "--dtype", "--quantization",
    "--kv-cache-dtype", "--block-size", "--gpu-memory-utilization", "--enable-prefix-caching",
    "--no-enable-prefix-caching", "--max-num-batched-tokens", "--max-num-seqs",
    "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--speculative-config",
    "--kv-transfer-config", "--enforce-eager", "--distributed-executor-backend",
    "--enable-dbo",  # ParallelConfig.enable_dbo (vllm/config/parallel.py @00193b82), registered in add_cli_args
}
# `ray start` (ray-project/ray python/ray/scripts/scripts.py: --head, --port, --address, --block),
# as vLLM's multi-node docs (docs/serving/parallelism_scaling.md, v0.11) start the cluster.
RAY_START_FLAGS = {"--head", "--port", "--address", "--block"}
# tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, as used in
# docs/features/nixl_connector_usage.md (vLLM v0.11 docs).
VLLM_PROXY_FLAGS = {"--port", "--prefiller-hosts", "--prefiller-ports", "--decoder-hosts",
                    "--decoder-ports"}
VLLM_KV_CACHE_DTYPES = {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}
VLLM_SPEC_METHODS = {"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model",
                     "deepseek_mtp", "ernie_mtp", "qwen3_next_mtp", "mimo_mtp",
                     "longcat_flash_mtp", "mtp"}

# Every `python -m sglang.launch_server` flag the SGLang exporter may write, transcribed from
# sgl-project/sglang docs/advanced_features/server_arguments.md @
# 004813e1dd464844bd92ddbca5cab8c024a75f78 (tables: Model and tokenizer, HTTP server,
# Quantization and data type, Memory and scheduling, Runtime options, Data parallelism,
# Speculative decoding, MoE, Optimization/debug options, PD disaggregation).
SGLANG_FLAGS = {
    "--model-path", "--host", "--port", "--tp-size", "--pp-size", "--dp-size",
    "--enable-dp-attention", "--ep-size", "--dtype", "--quantization", "--kv-cache-dtype",
    "--mem-fraction-static", "--max-running-requests", "--chunked-prefill-size",
    "--max-prefill-tokens", "--page-size", "--disable-radix-cache", "--speculative-algorithm",
    "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--disaggregation-mode", "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port", "--disable-cuda-graph", "--nnodes", "--node-rank", "--dist-init-addr",
    "--enable-two-batch-overlap",  # ServerArgs.enable_two_batch_overlap (arg_groups/fields/exec_.py, ExecOverlap)
}
# sgl-router/py_src/sglang_router/router_args.py @ 083d601378d0baaef6191e7f2d40fb70d06518af.
SGLANG_ROUTER_FLAGS = {"--worker-urls", "--policy", "--pd-disaggregation", "--prefill",
                       "--decode", "--host", "--port"}
SGLANG_KV_CACHE_DTYPES = {"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"}
SGLANG_POLICIES = {"random", "round_robin", "cache_aware", "power_of_two"}
SGLANG_SPEC_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}
SGLANG_TRANSFER_BACKENDS = {"mooncake", "nixl", "ascend", "fake"}

LLAMA_8B, LLAMA_70B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"
SPLIT = Disaggregation(prefill_gpus=4, decode_gpus=4, prefill_tp=4, decode_tp=2)

# name -> (target, model, plan fields)
CASES = {
    "vllm_llama8b_tp1": ("vllm", LLAMA_8B, {}),
    "vllm_llama70b_tp4_fp8_prefix": ("vllm", LLAMA_70B, dict(
        tp=4, weights_dtype="fp8", kv_cache_dtype="fp8", prefix_caching=True, max_num_seqs=256,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.92, block_size=32)),
    "vllm_2replicas": ("vllm", LLAMA_8B, dict(tp=2, replicas=2, router="prefix-affinity",
                                               chunked_prefill=False, max_num_batched_tokens=16384)),
    "vllm_disaggregated": ("vllm", LLAMA_70B, dict(disaggregated=SPLIT, max_num_seqs=128)),
    "vllm_spec_decode": ("vllm", LLAMA_8B, dict(speculative_tokens=3, acceptance_rate=0.7)),
    "vllm_dp_ep": ("vllm", QWEN_MOE, dict(dp=4, ep=4, weights_dtype="fp16",
                                          prefix_caching=False)),
    "sglang_llama70b_tp4": ("sglang", LLAMA_70B, dict(
        engine="sglang", tp=4, kv_cache_dtype="fp8", max_num_seqs=256,
        max_num_batched_tokens=8192, gpu_memory_utilization=0.85, block_size=16)),
    "sglang_dp_attention_ep": ("sglang", QWEN_MOE, dict(
        engine="sglang", dp=4, ep=4, max_num_seqs=128, prefix_caching=False)),
    "sglang_2replicas": ("sglang", LLAMA_8B, dict(engine="sglang", tp=2, replicas=2,
                                                   router="prefix-affinity")),
    "sglang_disaggregated": ("sglang", LLAMA_70B, dict(engine="sglang", disaggregated=SPLIT,
                                                        router="least-outstanding")),
    "sglang_spec_decode": ("sglang", LLAMA_8B, dict(engine="sglang", speculative_tokens=4,
                                                     acceptance_rate=0.75, chunked_prefill=False)),
}
KNOWN = {"vllm": VLLM_FLAGS | VLLM_PROXY_FLAGS | RAY_START_FLAGS, "sglang": SGLANG_FLAGS | SGLANG_ROUTER_FLAGS}
MULTI_HOST = {"replicas-on-two-hosts": dict(tp=2, replicas=8),
              "engine-over-two-hosts": dict(tp=8, pp=2),
              "disaggregated-on-two-hosts": dict(disaggregated=Disaggregation(prefill_gpus=4, decode_gpus=12,
                                                                             prefill_tp=2, decode_tp=4))}


def build(name: str, **overrides) -> tuple[str, str, ServingPlan]:
    target, model, fields = CASES[name]
    return target, model, ServingPlan(**(fields | overrides))


def commands(text: str) -> list[list[str]]:
    """The shell words of each command of a script (comments and blank lines dropped)."""
    joined = text.replace("\\\n", " ")
    lines = [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [[w for w in shlex.split(line) if w != "&"] for line in lines]


def option(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def servers(target: str, text: str) -> list[list[str]]:
    program = {"vllm": "serve", "sglang": "sglang.launch_server"}[target]
    return [w for w in commands(text) if program in w]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    target, model, plan = build(name)
    text = export_serving(target, model, plan)
    path = GOLDEN / f"{name}.sh"
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs; MESHPLAN_UPDATE_GOLDEN=1 rewrites it"


def test_registry_and_versions() -> None:
    assert set(SERVING_EXPORTERS) == {"vllm", "sglang"}
    for module in (vllm, sglang):
        assert module.TARGET_VERSION and "https://github.com/" in module.__doc__


def test_unknown_target_names_the_close_ones() -> None:
    with pytest.raises(UnknownNameError, match="vllm"):
        export_serving("vlm", LLAMA_8B, ServingPlan())


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_flag_is_real(name: str) -> None:
    target, model, plan = build(name)
    text = export_serving(target, model, plan)
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9_-]*)", text))
    assert flags and flags <= KNOWN[target], flags - KNOWN[target]
    for words in servers(target, text):
        used = [w for w in words if w.startswith("--")]
        assert len(used) == len(set(used)), f"a flag is repeated in {words}"


@pytest.mark.parametrize("name, flag", [("vllm_dp_ep", "--enable-dbo"),
                                        ("sglang_dp_attention_ep", "--enable-two-batch-overlap")])
def test_two_batch_overlap_flag_is_real(name: str, flag: str) -> None:
    target, model, plan = build(name, enable_two_batch_overlap=True)
    text = export_serving(target, model, plan)
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9_-]*)", text))
    assert flag in flags and flags <= KNOWN[target], flags - KNOWN[target]
    assert flag not in export_serving(*build(name))


@pytest.mark.parametrize("target", sorted(SERVING_EXPORTERS))
@pytest.mark.parametrize("name", sorted(MULTI_HOST))
def test_multi_host_flags_are_real_and_scripts_valid_bash(target: str, name: str) -> None:
    text = export_serving(target, LLAMA_70B, ServingPlan(engine=target, **MULTI_HOST[name]), gpus_per_node=8)
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9_-]*)", text))
    assert flags <= KNOWN[target], flags - KNOWN[target]
    assert 'if [ "$NODE_RANK" = 1 ]; then' in text
    if shutil.which("bash"):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)


@pytest.mark.parametrize("target", sorted(SERVING_EXPORTERS))
def test_only_set_fields_appear(target: str) -> None:
    text = export_serving(target, LLAMA_8B, ServingPlan(engine=target))
    for flag in ("--max-num-seqs", "--max-running-requests", "--max-num-batched-tokens",
                 "--chunked-prefill-size", "--gpu-memory-utilization", "--mem-fraction-static",
                 "--block-size", "--page-size", "--kv-cache-dtype", "--quantization",
                 "--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-radix-cache",
                 "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--tensor-parallel-size",
                 "--tp-size", "--speculative-config", "--speculative-algorithm"):
        assert flag not in text
    [words] = servers(target, text)
    assert option(words, "--port") == "8000" and option(words, "--host") == "0.0.0.0"


def test_vllm_knobs_use_vllm_spelling() -> None:
    text = export_serving("vllm", LLAMA_70B, ServingPlan(
        tp=4, max_num_seqs=64, max_num_batched_tokens=4096, gpu_memory_utilization=0.8,
        chunked_prefill=True, prefix_caching=False, block_size=16, kv_cache_dtype="fp8"))
    [words] = servers("vllm", text)
    assert option(words, "--max-num-seqs") == "64"
    assert option(words, "--max-num-batched-tokens") == "4096"
    assert option(words, "--gpu-memory-utilization") == "0.8"
    assert option(words, "--kv-cache-dtype") in VLLM_KV_CACHE_DTYPES
    assert {"--enable-chunked-prefill", "--no-enable-prefix-caching"} <= set(words)


def test_sglang_knobs_use_sglang_spelling() -> None:
    _, model, plan = build("sglang_llama70b_tp4")
    [words] = servers("sglang", export_serving("sglang", model, plan))
    assert option(words, "--max-running-requests") == "256"
    assert option(words, "--chunked-prefill-size") == "8192"
    assert option(words, "--mem-fraction-static") == "0.85"
    assert option(words, "--page-size") == "16"
    assert option(words, "--kv-cache-dtype") in SGLANG_KV_CACHE_DTYPES
    off = export_serving("sglang", LLAMA_8B, ServingPlan(chunked_prefill=False, prefix_caching=False))
    [words] = servers("sglang", off)
    assert option(words, "--chunked-prefill-size") == "-1" and "--disable-radix-cache" in words


def test_vllm_speculative_config_is_json() -> None:
    target, model, plan = build("vllm_spec_decode")
    text = export_serving(target, model, plan)
    [words] = servers(target, text)
    config = json.loads(option(words, "--speculative-config"))
    assert config["num_speculative_tokens"] == 3
    assert config["method"] in VLLM_SPEC_METHODS
    assert config["model"] == "${DRAFT_MODEL}"
    assert 'DRAFT_MODEL="${DRAFT_MODEL:?' in text


def test_sglang_speculative_flags() -> None:
    target, model, plan = build("sglang_spec_decode")
    [words] = servers(target, export_serving(target, model, plan))
    assert option(words, "--speculative-algorithm") in SGLANG_SPEC_ALGORITHMS
    assert option(words, "--speculative-num-steps") == "4"
    assert option(words, "--speculative-eagle-topk") == "1"
    assert option(words, "--speculative-num-draft-tokens") == "5"
    assert option(words, "--speculative-draft-model-path") == "${DRAFT_MODEL}"


def test_vllm_kv_transfer_config_is_json() -> None:
    target, model, plan = build("vllm_disaggregated")
    text = export_serving(target, model, plan)
    launched = servers(target, text)
    assert len(launched) == 3  # 1 prefill instance of tp 4, 2 decode instances of tp 2
    for words in launched:
        config = json.loads(option(words, "--kv-transfer-config"))
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    side_ports = [w for words in launched for w in words if w.startswith("VLLM_NIXL_SIDE_CHANNEL_PORT=")]
    assert len(set(side_ports)) == 3
    assert "toy_proxy_server.py --port 8000" in text


def test_sglang_disaggregation_and_router() -> None:
    target, model, plan = build("sglang_disaggregated")
    text = export_serving(target, model, plan)
    launched = servers(target, text)
    modes = [option(w, "--disaggregation-mode") for w in launched]
    assert modes == ["prefill", "decode", "decode"]
    assert {option(w, "--disaggregation-transfer-backend") for w in launched} <= SGLANG_TRANSFER_BACKENDS
    [router] = [w for w in commands(text) if "sglang_router.launch_router" in w]
    assert "--pd-disaggregation" in router and option(router, "--policy") in SGLANG_POLICIES
    prefill = router.index("--prefill")
    assert router[prefill + 2] == option(launched[0], "--disaggregation-bootstrap-port")
    assert router.count("--decode") == 2 and option(router, "--port") == "8000"


@pytest.mark.parametrize("name", ["vllm_2replicas", "sglang_2replicas", "vllm_disaggregated",
                                  "sglang_disaggregated", "vllm_dp_ep"])
def test_instances_get_distinct_ports_and_disjoint_gpus(name: str) -> None:
    target, model, plan = build(name)
    launched = servers(target, export_serving(target, model, plan, port=9000))
    ports = [int(option(w, "--port")) for w in launched]
    gpus = [int(g) for w in launched for g in w[0].removeprefix("CUDA_VISIBLE_DEVICES=").split(",")]
    assert len(set(ports)) == len(ports) and (len(ports) == 1 or 9000 not in ports)
    assert sorted(gpus) == list(range(plan.num_gpus))


def test_replicas_name_the_routing_policy() -> None:
    text = export_serving("vllm", LLAMA_8B, ServingPlan(replicas=3, router="least-outstanding"))
    assert len(servers("vllm", text)) == 3
    assert "load balancer on port 8000" in text and "least-outstanding" in text
    text = export_serving("sglang", LLAMA_8B, ServingPlan(replicas=3, router="prefix-affinity"))
    [router] = [w for w in commands(text) if "sglang_router.launch_router" in w]
    assert option(router, "--policy") == "cache_aware"
    assert len(router[router.index("--worker-urls") + 1:router.index("--policy")]) == 3


def test_sglang_dp_attention_sizes_tp_group() -> None:
    target, model, plan = build("sglang_dp_attention_ep")
    [words] = servers(target, export_serving(target, model, plan))
    assert option(words, "--tp-size") == "4" and option(words, "--dp-size") == "4"
    assert "--enable-dp-attention" in words and option(words, "--ep-size") == "4"


def test_quantization_flag_only_for_unquantized_checkpoints() -> None:
    plan = ServingPlan(weights_dtype="fp8")
    for target in SERVING_EXPORTERS:
        [words] = servers(target, export_serving(target, LLAMA_8B, plan))
        assert option(words, "--quantization") == "fp8"
        text = export_serving(target, "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", plan)
        assert "--quantization" not in servers(target, text)[0] and "pre-quantized" in text
        text = export_serving(target, LLAMA_8B, ServingPlan(weights_dtype="int4"))
        assert "AWQ or GPTQ" in text and "--quantization" not in servers(target, text)[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_scripts_are_valid_bash(name: str) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    target, model, plan = build(name)
    text = export_serving(target, model, plan)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


# Records its arguments; a router waits (up to 10 s) for the servers to record theirs, as the
# real one waits for its workers, so the script's exit trap cannot stop them first.
STUB = """#!/bin/sh
if [ "$2" = sglang_router.launch_router ]; then
  for _ in $(seq 100); do [ "$(ls "$STUB_OUT" | wc -l)" -ge "$STUB_SERVERS" ] && break; sleep 0.1; done
fi
printf '%s\\0' "$(basename "$0")" "$@" > "$STUB_OUT/$$.args"
"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_scripts_run_with_stub_engines(name: str, tmp_path: Path) -> None:
    """Run each script with fake `vllm` and `python`: every argument, JSON included, arrives intact."""
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    target, model, plan = build(name)
    text = export_serving(target, model, plan)
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir(), out.mkdir()
    for program in ("vllm", "python"):
        (bin_dir / program).write_text(STUB)
        (bin_dir / program).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_OUT": str(out), "DRAFT_MODEL": "org/draft",
           "STUB_SERVERS": str(len(servers(target, text)))}
    subprocess.run(["bash", "-c", text], env=env, check=True, timeout=30)
    received = sorted(f.read_text().split("\0")[:-1] for f in out.iterdir())
    expected = sorted([w[w.index(p):] for w in commands(text) for p in ("vllm", "python") if p in w])
    expected = [[a.replace("${DRAFT_MODEL}", "org/draft") for a in words] for words in expected]
    assert received == sorted(expected)
    for words in received:
        for flag in ("--speculative-config", "--kv-transfer-config"):
            if flag in words:
                config = json.loads(option(words, flag))
                assert config.get("model", "org/draft") == "org/draft"


def test_missing_draft_model_stops_the_script(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    text = export_serving("vllm", LLAMA_8B, ServingPlan(speculative_tokens=2, acceptance_rate=0.6))
    run = subprocess.run(["bash", "-c", text], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, timeout=30)
    assert run.returncode != 0 and "set DRAFT_MODEL" in run.stderr


UNEXPRESSIBLE = [
    ("vllm", dict(block_size=48)),
    ("vllm", dict(kv_cache_dtype="fp16")),  # fp16 KV with bf16 activations
    ("vllm", dict(weights_dtype="fp16", kv_cache_dtype="bf16")),
    ("sglang", dict(kv_cache_dtype="fp16")),
    ("vllm", dict(disaggregated=Disaggregation(prefill_gpus=3, decode_gpus=4, prefill_tp=2))),
    ("sglang", dict(dp=2, disaggregated=SPLIT)),
]


@pytest.mark.parametrize("fields", [dict(tp=2, ep=4), dict(tp=2, dp=2, ep=3)])
def test_an_ep_that_does_not_divide_tp_x_dp_is_refused_by_the_plan(fields: dict) -> None:
    """Before any exporter: ep must divide the tp x dp GPUs of a stage (vLLM's EP size is tp x dp;
    SGLang and TensorRT-LLM split what is left over the experts' matrices)."""
    with pytest.raises(ValueError, match="ep must divide"):
        ServingPlan(**fields)


@pytest.mark.parametrize(("target", "fields"), UNEXPRESSIBLE)
def test_unexpressible_plans_raise(target: str, fields: dict) -> None:
    with pytest.raises(ConfigError):
        export_serving(target, LLAMA_8B, ServingPlan(**fields))


@pytest.mark.parametrize("target", sorted(SERVING_EXPORTERS))
def test_bad_model_and_port_raise(target: str) -> None:
    with pytest.raises(ConfigError, match="model"):
        export_serving(target, "  ", ServingPlan())
    with pytest.raises(ConfigError, match="port"):
        export_serving(target, LLAMA_8B, ServingPlan(replicas=2), port=65535)
