"""The MLPerf v5.1 held-out records state the engine settings their submitters ran, read from the
submitters' code by scripts/mlperf_engine_settings.py (checked here on synthetic files shaped as
the originals), and keep the settings the schema cannot state in their notes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

from meshplan.validate.records import load_records

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = ROOT / "src/meshplan/records/held-out"


def _script():
    spec = importlib.util.spec_from_file_location("mlperf_engine_settings", ROOT / "scripts/mlperf_engine_settings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mlperf_engine_settings"] = module
    spec.loader.exec_module(module)
    return module


NVIDIA_CONFIG = '''
import code.common.constants as C
import code.llmlib.fields as llm_fields
import code.fields.models as model_fields
import code.fields.harness as harness_fields

base = {
    llm_fields.trtllm_build_flags: {'max_num_tokens': 2048 * 2, 'tokens_per_block': 32},
    harness_fields.use_graphs: False,
}
EXPORTS = {
    C.WorkloadSetting(C.HarnessType.Custom, C.AccuracyTarget(0.99), C.PowerSetting.MaxP): {
        **base,
        model_fields.gpu_batch_size: {'llama2-70b': 896},
        model_fields.precision: 'fp8',
        llm_fields.tensor_parallelism: 2,
        llm_fields.pipeline_parallelism: 1,
        llm_fields.trtllm_runtime_flags: {'kvcache_free_gpu_mem_frac': 0.9, 'enable_chunked_context': True},
        llm_fields.trtllm_checkpoint_flags: {'kv_cache_dtype': 'fp8'},
    },
    C.WorkloadSetting(C.HarnessType.Custom, C.AccuracyTarget(0.999), C.PowerSetting.MaxP): {
        **base,
        model_fields.gpu_batch_size: {'llama2-70b': 512},
        llm_fields.tensor_parallelism: 1,
        llm_fields.trtllm_runtime_flags: {'max_batch_size': 256, 'batch_scheduler_policy': 'no_evict'},
    },
}
'''


def _row(model: str, scenario: str, system: str = "H200-SXM-141GBx8_TRT", submitter: str = "NVIDIA",
         software: str = "TensorRT 10.11") -> dict:
    return {"Submitter": submitter, "Platform": system, "Scenario": scenario, "Model": model, "Software": software}


def test_nvidia_harness_config_by_accuracy_target_with_harness_defaults():
    mod = _script()
    path = "closed/NVIDIA/configs/H200-SXM-141GBx8/Server/llama2-70b.py"
    files = [path]
    show = {path: NVIDIA_CONFIG}.get
    s99 = mod.engine_settings(show, files, _row("llama2-70b-99", "Server"), "llama2-70b", "h200-sxm-141gb",
                              "tensorrt-llm", 8)
    assert s99.path == path and s99.precision == "fp8"
    assert s99.knobs == {"tp": 2, "pp": 1, "replicas": 4, "router": "least-outstanding", "max_num_seqs": 896,
                         "max_num_batched_tokens": 4096, "chunked_prefill": True,
                         "scheduler_policy": "max-utilization", "gpu_memory_utilization": 0.9,
                         "block_size": 32, "kv_cache_dtype": "fp8", "enforce_eager": True}
    s999 = mod.engine_settings(show, files, _row("llama2-70b-99.9", "Server"), "llama2-70b", "h200-sxm-141gb",
                               "tensorrt-llm", 8)
    # runtime max_batch_size wins over gpu_batch_size; the harness's defaults fill the rest
    assert s999.knobs["max_num_seqs"] == 256 and s999.knobs["scheduler_policy"] == "guaranteed-no-evict"
    assert s999.knobs["gpu_memory_utilization"] == 0.8 and s999.knobs["chunked_prefill"] is False
    assert s999.engine_version.startswith("TensorRT-LLM 1.0") and "C++ executor" in s999.engine_version


def test_amd_harness_yaml_over_its_common_config():
    mod = _script()
    base = "closed/AMD/code/llama2-70b-99/harness_llm"
    files = {f"{base}/models/llama2-70b/server_mi300x.yaml": yaml.safe_dump({
                 "engine_version": "sync",
                 "vllm_env_config": {"VLLM_LLAMA2_MLPERF_SCHED": 1},
                 "vllm_engine_config": {"tensor_parallel_size": 1, "num_scheduler_steps": 9, "max_num_seqs": 650,
                                        "max_num_batched_tokens": 40960, "enable_chunked_prefill": False,
                                        "block_size": 32, "enforce_eager": True},
                 "harness_config": {"schedule_algo": "shortest_queue_with_tokens"}}),
             f"{base}/common/config.yaml": yaml.safe_dump({
                 "vllm_env_config": {"VLLM_USE_V1": 0},
                 "vllm_engine_config": {"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9}})}
    s = mod.engine_settings(files.get, list(files), _row("llama2-70b-99", "Server", "8xMI300X", "AMD", "vLLM 0.9"),
                            "llama2-70b", "mi300x-192gb", "vllm", 8)
    assert s.knobs == {"tp": 1, "pp": 1, "replicas": 8, "max_num_seqs": 650, "max_num_batched_tokens": 40960,
                       "chunked_prefill": False, "block_size": 32, "gpu_memory_utilization": 0.9,
                       "enforce_eager": True, "kv_cache_dtype": "fp8", "num_scheduler_steps": 9,
                       "router": "least-outstanding"}
    assert "VLLM_LLAMA2_MLPERF_SCHED" in s.note  # the custom scheduler: notes only


def test_records_state_the_submitters_settings():
    records = load_records(HELD_OUT / "mlperf-inference-v5.1.yaml")
    stated = [r for r in records if "config_path" in r.source]
    assert len(stated) >= 230
    for r in stated:
        s = r.serving
        assert "source.config_path" in r.notes or r.source["config_path"] in r.notes, r.id
        if "/configs/" in r.source["config_path"]:  # NVIDIA's harness
            assert None not in (s.tp, s.pp, s.replicas, s.max_num_seqs, s.max_num_batched_tokens,
                                s.chunked_prefill, s.scheduler_policy, s.router), r.id
        if "harness_llm" in r.source["config_path"] and "VLLM_USE_V1=0" in r.notes:
            assert s.num_scheduler_steps and s.num_scheduler_steps > 1 and s.chunked_prefill is False, r.id
