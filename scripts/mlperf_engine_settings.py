"""The engine settings an MLPerf Inference v5.1 submitter ran, read from its code in the results
repository (used by scripts/mlperf_serving_records.py; nothing is downloaded).

- NVIDIA's harness (TensorRT-LLM's C++ executor running TensorRT engines, also used by Dell,
  Supermicro, Nebius and the other partners): `closed/<sub>/configs/<system>/<scenario>/<model>.py`
  maps a workload setting (harness, accuracy target, power setting) to model, build, runtime and
  harness fields. Runtime defaults are the harness's own (code/llmlib/config.py,
  TrtllmHarnessConfig.DEFAULT_RUNTIME_FLAGS: max_util capacity scheduler, KV fraction 0.80, chunked
  context off, max_batch_size and max_num_tokens from the build), and the harness sends Server
  queries to the core with the fewest pending samples, other scenarios round-robin
  (code/llmlib/config.py, traffic_distribution_policy).
- AMD's vLLM harness (AMD, ASUSTeK, Dell, GigaComputing, MiTAC, Quanta, Vultr):
  `code/<benchmark>/harness_llm/models/llama2-70b/<scenario>_<gpu>.yaml` over
  `harness_llm/common/config.yaml` (vllm_engine_config, vllm_env_config, harness_config).
- MangoBoost's LLMBoost (MangoBoost, Dell_MangoBoost, Supermicro, Supermicro_MangoBoost): a closed
  engine; its server.py flags give the layout (tp 1, one worker per GPU) and Supermicro's
  server_online.sh its Server batch limit.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Callable

import yaml

DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")
TRT_ENGINE = "TensorRT-LLM 1.0 (1.0-mlpinf branch), C++ executor with TensorRT engines"
"""engine_version of NVIDIA-harness records: DEFAULT_CORE_TYPE = TRTLLM_EXECUTOR for Llama 2 70B and
Llama 3.1 405B (code/<model>/tensorrt/__init__.py); closed/NVIDIA/Makefile.build pins TensorRT-LLM
18c0333e96ea7a2c37caded8a310d05c5f095e88, "7/24/25 1.0-mlpinf side branch"."""
TRT_POLICY = {"max_util": "max-utilization", "no_evict": "guaranteed-no-evict"}
HARNESS_DEFAULTS = {"batch_scheduler_policy": "max_util", "kvcache_free_gpu_mem_frac": 0.80,
                    "enable_chunked_context": False}
"""TrtllmHarnessConfig.DEFAULT_RUNTIME_FLAGS (closed/NVIDIA/code/llmlib/config.py) that a config may leave out."""
AMD_GPU = {"mi300x-192gb": "mi300x", "mi325x-256gb": "mi325x", "mi355x-288gb": "mi355x"}
SHORTEST_QUEUE = ("shortest_queue", "shortest_queue_with_tokens")
ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv}
LLMBOOST = ("MangoBoost", "Dell_MangoBoost", "Supermicro", "Supermicro_MangoBoost")


@dataclass
class Settings:
    """What one result's engine ran: record keys, the file they came from, and a note."""

    knobs: dict = field(default_factory=dict)
    path: str | None = None
    note: str = ("No engine settings found in the submitter's code: layout and limits unstated "
                 "(engine defaults, layout to be chosen). ")
    precision: str | None = None
    engine_version: str | None = None


def engine_settings(show: Callable[[str], str | None], files: list[str], row: dict, stem: str,
                    gpu: str, engine: str, num_gpus: int) -> Settings:
    """The settings of one summary row (`show(path)` reads a file of the repository)."""
    if "llmboost" in row["Software"].lower() and row["Submitter"] in LLMBOOST:
        return _llmboost(show, row, num_gpus)
    if engine == "tensorrt-llm":
        path = _nvidia_config(files, row, stem)
        return _nvidia(show(path), path, row, num_gpus) if path else Settings()
    if engine == "vllm":
        return _amd(show, files, row, gpu, num_gpus)
    return Settings()


# ---------------------------------------------------------------- NVIDIA harness

def _nvidia_config(files: list[str], row: dict, stem: str) -> str | None:
    """The submitter's harness config of this system, scenario and model, if it has one."""
    prefix = f"closed/{row['Submitter']}/configs/"
    tail = f"/{row['Scenario']}/{stem}.py"
    hits = [f for f in files if f.startswith(prefix) and f.endswith(tail)]
    best = [f for f in hits if row["Platform"].startswith(f[len(prefix):-len(tail)])]
    return max(best, key=len) if best else None


def _literal(node: ast.AST, env: dict):
    """A config value: literals and dicts (with `**name` merges), module-level names from `env`,
    and `module.field` names or calls as their dotted text."""
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(_literal(v, env))
            else:
                out[_literal(k, env)] = _literal(v, env)
        return out
    if isinstance(node, ast.Attribute):
        return f"{_literal(node.value, env)}.{node.attr}"
    if isinstance(node, ast.Name):
        return env.get(node.id, node.id)
    if isinstance(node, ast.Call):
        return f"{_literal(node.func, env)}({', '.join(str(_literal(a, env)) for a in node.args)})"
    if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:  # e.g. 'max_num_tokens': 2048 * 8
        return ARITHMETIC[type(node.op)](_literal(node.left, env), _literal(node.right, env))
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # anything else (an environment look-up): kept as its text


def _exports(text: str) -> dict[str, dict]:
    """EXPORTS of a harness config: 'C.WorkloadSetting(...)' text -> {field name: value}, module-level
    dicts it names (a shared `base`) resolved."""
    env: dict = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            env[node.targets[0].id] = _literal(node.value, env)
    raw = env.get("EXPORTS", {})
    return {k: {f.split(".")[-1]: v for f, v in fields.items()} for k, fields in raw.items()}


def _setting(exports: dict[str, dict], row: dict) -> tuple[str, dict] | None:
    """The workload setting this result ran: its harness (Triton or custom), accuracy target and
    power setting, told from the system name and the benchmark."""
    system = row["Platform"]
    harness = "Triton" if "triton" in system.lower() else "Custom"
    power = "MaxQ" if "maxq" in system.lower() else "MaxP"
    target = "0.999" if row["Model"].endswith("99.9") else "0.99"
    want = f"C.WorkloadSetting(C.HarnessType.{harness}, C.AccuracyTarget({target}), C.PowerSetting.{power})"
    if want in exports:
        return want, exports[want]
    return None


def _nvidia(text: str, path: str, row: dict, num_gpus: int) -> Settings:
    found = _setting(_exports(text), row)
    if found is None:
        return Settings(path=path, note=f"The harness config {path} has no workload setting for this result's "
                                        "harness, accuracy target and power setting: limits unstated. ")
    key, f = found
    build, runtime = f.get("trtllm_build_flags", {}), HARNESS_DEFAULTS | f.get("trtllm_runtime_flags", {})
    tp, pp = f.get("tensor_parallelism", 1), f.get("pipeline_parallelism", 1)
    batch = runtime.get("max_batch_size") or next(iter(f.get("gpu_batch_size", {}).values()), None)
    kv = f.get("trtllm_checkpoint_flags", {}).get("kv_cache_dtype")
    knobs = {"tp": tp, "pp": pp, "replicas": num_gpus // (tp * pp),
             "router": "least-outstanding" if row["Scenario"] == "Server" else "round-robin",
             "max_num_seqs": batch, "max_num_batched_tokens": runtime.get("max_num_tokens") or build.get("max_num_tokens"),
             "chunked_prefill": bool(runtime["enable_chunked_context"]),
             "scheduler_policy": TRT_POLICY.get(runtime["batch_scheduler_policy"]),
             "gpu_memory_utilization": runtime["kvcache_free_gpu_mem_frac"],
             "block_size": build.get("tokens_per_block"), "kv_cache_dtype": kv if kv in DTYPES else None,
             "enforce_eager": not f.get("use_graphs", False)}
    extra = {k: f[k] for k in ("use_triton", "triton_num_servers", "triton_num_clients_per_frontend",
                               "power_limit", "vboost_slider") if k in f}
    note = (f"Engine settings from the harness config named in source.config_path, workload setting {key}: "
            f"tp x pp = tensor_parallelism x pipeline_parallelism, replicas = GPUs / (tp x pp) (one TensorRT-LLM "
            f"executor per instance); max_num_seqs = runtime max_batch_size or model gpu_batch_size; "
            f"max_num_batched_tokens = runtime (else build) max_num_tokens; chunked_prefill = enable_chunked_context; "
            f"scheduler_policy = batch_scheduler_policy ({runtime['batch_scheduler_policy']}); "
            f"gpu_memory_utilization = kvcache_free_gpu_mem_frac (TensorRT-LLM's free_gpu_memory_fraction); "
            f"block_size = tokens_per_block; enforce_eager = not use_graphs; KV block reuse off (MLPerf rule); "
            f"router: the harness sends Server queries to the executor with the fewest pending samples "
            f"(load_balancing), other scenarios round-robin (code/llmlib/config.py). Not expressible: context "
            f"chunking policy {runtime.get('context_chunking_policy')!r}, build max_input_len "
            f"{build.get('max_input_len')} / max_seq_len {build.get('max_seq_len')}"
            + (f", harness fields {extra}" if extra else "") + ". ")
    return Settings(knobs={k: v for k, v in knobs.items() if v is not None}, path=path, note=note,
                    precision=f.get("precision"), engine_version=TRT_ENGINE)


# ---------------------------------------------------------------- AMD vLLM harness

_SETS: dict[int, set] = {}


def _as_set(files: list[str]) -> set:
    """`files` as a set, built once per list."""
    return _SETS.setdefault(id(files), set(files))


def _amd_paths(files: list[str], row: dict, gpu: str) -> tuple[str, str] | None:
    """(scenario YAML, common YAML) of AMD's harness in this submitter's code, if present."""
    name, files = AMD_GPU.get(gpu), _as_set(files)
    scenario = row["Scenario"].lower()
    for code in ("code", "code_AMD"):
        base = f"closed/{row['Submitter']}/{code}/{row['Model']}/harness_llm"
        path = f"{base}/models/llama2-70b/{scenario}_{name}.yaml"
        if path in files:
            return path, f"{base}/common/config.yaml"
    return None


def _amd(show, files: list[str], row: dict, gpu: str, num_gpus: int) -> Settings:
    paths = _amd_paths(files, row, gpu)
    if paths is None:
        return Settings()
    own, common = (yaml.safe_load(show(p)) for p in paths)
    eng = common.get("vllm_engine_config", {}) | own.get("vllm_engine_config", {})
    env = common.get("vllm_env_config", {}) | own.get("vllm_env_config", {})
    harness = common.get("harness_config", {}) | own.get("harness_config", {})
    tp, pp = eng.get("tensor_parallel_size", 1), eng.get("pipeline_parallel_size", 1)
    v1 = str(env.get("VLLM_USE_V1", 0)) == "1"
    steps = 1 if v1 else eng.get("num_scheduler_steps", 1)
    kv = eng.get("kv_cache_dtype")
    knobs = {"tp": tp, "pp": pp, "replicas": num_gpus // (tp * pp),
             "max_num_seqs": eng.get("max_num_seqs"), "max_num_batched_tokens": eng.get("max_num_batched_tokens"),
             "chunked_prefill": eng.get("enable_chunked_prefill"), "prefix_caching": eng.get("enable_prefix_caching"),
             "block_size": eng.get("block_size"), "gpu_memory_utilization": eng.get("gpu_memory_utilization"),
             "enforce_eager": eng.get("enforce_eager"), "kv_cache_dtype": kv if kv in DTYPES else None,
             "num_scheduler_steps": steps if steps > 1 else None}
    if row["Scenario"] != "Offline" and harness.get("schedule_algo") in SHORTEST_QUEUE:
        knobs["router"] = "least-outstanding"
    mlperf = {k: v for k, v in env.items() if "MLPERF" in k}
    note = (f"Engine settings from AMD's harness YAML named in source.config_path over {paths[1]}: vLLM "
            f"{'V1' if v1 else 'V0'} engine (VLLM_USE_V1={env.get('VLLM_USE_V1', 0)}), tensor_parallel_size {tp}, "
            f"one engine per {tp * pp} GPU(s) behind the harness's {harness.get('schedule_algo')!r} router"
            + (" (least-outstanding is the nearest meshplan router)" if "router" in knobs else "")
            + f"; num_scheduler_steps {eng.get('num_scheduler_steps', 1)}; max_num_seqs, max_num_batched_tokens, "
            f"enable_chunked_prefill, enable_prefix_caching, block_size, gpu_memory_utilization, enforce_eager and "
            f"kv_cache_dtype as the YAML's vllm_engine_config. Not expressible: harness engine_version "
            f"{own.get('engine_version')!r}, load_balance_token_weight {harness.get('load_balance_token_weight')}, "
            f"max_model_len {eng.get('max_model_len')}"
            + (f", AMD's MLPerf scheduler in its vLLM fork (vllm/core/scheduler.py: prefill only while fewer than "
               f"MAX_TARGET_DECODE_BATCH run and at least MIN_REQUIRE_PREFILL_QUERY wait, else every other call; decode "
               f"batch capped at a target between MIN and MAX) with {mlperf}" if env.get("VLLM_LLAMA2_MLPERF_SCHED") else "")
            + ". ")
    return Settings(knobs={k: v for k, v in knobs.items() if v is not None}, path=paths[0], note=note)


# ---------------------------------------------------------------- MangoBoost LLMBoost

def _llmboost(show, row: dict, num_gpus: int) -> Settings:
    base = f"closed/{row['Submitter']}/code/{row['Model']}"
    server = show(f"{base}/server.py")
    if server is None:
        return Settings()
    knobs = {"tp": 1, "replicas": num_gpus}
    script = show(f"{base}/server_online.sh") if row["Scenario"] == "Server" else None
    seqs = None
    if script and "-max_num_seqs" in script:
        seqs = int(script.split("-max_num_seqs")[1].split()[0])
        knobs["max_num_seqs"] = seqs
    note = (f"LLMBoost (MangoBoost's closed engine over vLLM): layout from {base}/server.py's flag defaults "
            f"(tp 1, dp 8 workers per node, one per GPU)"
            + (f"; max_num_seqs {seqs} from {base}/server_online.sh" if seqs else "")
            + ". Not expressible: its request batcher (gpu_batch_size 48 queries per worker, sent after at most "
              "batcher_threshold 0.2 s), load_balancing_mode, and the engine's own scheduler settings (not published). ")
    return Settings(knobs=knobs, path=f"{base}/server.py", note=note)
