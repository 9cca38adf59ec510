"""Default knobs of the serving engines (vLLM V1, SGLang, TensorRT-LLM) for a GPU.

The numbers and rules live in `data/engine_defaults.yaml`, each with the engine file and commit
it was read from, by release where a default changed between releases (`versions`); this module
only applies them, for the release serving.versions reads from the version string. `offline=True` models offline batch use (vLLM's
`LLM` class, `trtllm-bench throughput`); `offline=False` models the online server.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from importlib import resources

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.serving import versions
from meshplan.serving.versions import EngineVersion, in_range
from meshplan.yamlread import load_packaged

ENGINES = ("vllm", "sglang", "tensorrt-llm")
_ALIASES = {"trtllm": "tensorrt-llm", "trt-llm": "tensorrt-llm", "tensorrt_llm": "tensorrt-llm",
            "tensorrt": "tensorrt-llm"}
_GIB = 2**30


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineDefaults:
    """What an engine picks when the user sets nothing, for one GPU type and mode."""

    engine: str
    max_num_seqs: int
    """Most requests running at once (SGLang max_running_requests, TRT-LLM max_batch_size)."""
    max_num_batched_tokens: int
    """Token budget of one iteration (SGLang: of one prefill batch; TRT-LLM max_num_tokens)."""
    gpu_memory_utilization: float
    """Memory fraction; what it is a fraction of is `memory_fraction_of`."""
    block_size: int
    """Tokens per KV-cache block (SGLang page_size, TRT-LLM tokens_per_block)."""
    chunked_prefill: bool
    prefix_caching: bool
    scheduler_policy: str
    """"fcfs" (vLLM, SGLang) or "guaranteed-no-evict" / "max-utilization" (TRT-LLM)."""
    cuda_graph_max_batch: int
    """Largest decode batch replayed from a CUDA graph; bigger batches run eagerly."""
    prefill_graph_max_tokens: int = 0
    """Largest prefill batch (tokens) replayed from SGLang's prefill CUDA graphs (piecewise from
    0.5.10, breakable from 0.5.15); 0: prefill runs eagerly (vLLM's graphs cover tokens anyway)."""
    prefill_graph_mla_cap: int = 0
    """The same limit's cap for models with multi-head latent attention."""
    prefill_graph_off_with: tuple[str, ...] = ()
    """Deployments in which the engine turns its prefill graphs off: "pipeline_parallel",
    "two_batch_overlap", "deepep", "disaggregated"."""
    source_note: str
    two_batch_overlap: bool = False
    """Whether MoE layers run as two overlapping micro-batches (SGLang two-batch overlap, vLLM
    dual batch overlap); off by default in every documented release."""
    two_batch_above_tokens: tuple[int, int] = (1, 1)
    """(decode-only, with a prefill): the overlap splits only steps of more tokens than this
    (vLLM dbo_decode_token_threshold 32, dbo_prefill_token_threshold 512; SGLang any two)."""
    memory_fraction_of: str = "total"
    """"total": weights + KV (+ activations for vLLM) within that share of all memory;
    "free_after_weights": the share of memory left after weights that the KV cache takes."""
    release: str = "latest"
    """The release whose defaults these are ("0.13.0", or "latest" when none was readable)."""
    backend: str | None = None
    """TensorRT-LLM: "pytorch" (1.0+) or "cpp" (TensorRT engines, 0.x); None otherwise."""
    version_note: str | None = None
    """Set when the engine version could not be read: which defaults were used instead."""


@functools.cache
def _engines() -> dict:
    text = resources.files("meshplan.serving").joinpath("data").joinpath("engine_defaults.yaml").read_text()
    return load_packaged(text)["engines"]


def canonical_engine(name: str) -> str:
    """The catalog name of an engine (accepts a few aliases such as `trtllm`)."""
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in ENGINES:
        raise UnknownNameError("engine", name, ENGINES)
    return key


def knobs(engine: str) -> dict:
    """The YAML entries (value or rules, and source) of one engine's knobs."""
    return _engines()[canonical_engine(engine)]["knobs"]


def resolve_version(engine: str, version: str | None) -> EngineVersion:
    """`version` of `engine` read (see serving.engine.versions); its note, when it has no
    release number, names the latest documented defaults used instead."""
    return versions.resolve_version(canonical_engine(engine), version)


def _matches(when: dict, ctx: dict) -> bool:
    return ((when.get("offline") is None or when["offline"] == ctx["offline"])
            and ctx["gib"] >= when.get("min_gib", 0) and ctx["gib"] < when.get("max_gib", math.inf)
            and ctx["tp"] >= when.get("min_tp", 0) and ctx["tp"] < when.get("max_tp", math.inf)
            and not any(s in ctx["name"] for s in when.get("name_excludes", ()))
            and ("name_includes" not in when or any(s in ctx["name"] for s in when["name_includes"])))


def _variant(entry: dict, ctx: dict) -> dict:
    """The entry of a knob for the release (and backend) in `ctx`: a knob that varies by version
    lists `versions`, each with optional `since` (inclusive), `before` (exclusive) and `backend`;
    the first that matches wins."""
    if "versions" not in entry:
        return entry
    for v in entry["versions"]:
        if (in_range(ctx.get("release"), v.get("since"), v.get("before"), ctx.get("post", 0))
                and v.get("backend", ctx.get("backend")) == ctx.get("backend")):
            return v
    raise ValueError(f"no version entry matches release {ctx.get('release')} in {entry}")


def _pick(entry: dict, ctx: dict):
    entry = _variant(entry, ctx)
    if "value" in entry:
        return entry["value"]
    for rule in entry["rules"]:
        if _matches(rule.get("when", {}), ctx):
            return rule["value"]
    raise ValueError(f"no rule matches {ctx} in {entry}")


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's default running-request cap for a KV pool of `kv_tokens` and a context length."""
    pool = knobs("sglang")["max_running_requests"]["pool"]
    slots = min(max(int(kv_tokens / context_len * pool["per_context_len"]), pool["min"]), pool["max"])
    return min(kv_tokens // 2, slots)


def sglang_mem_fraction_static(gpu_memory_bytes: int, chunked_prefill_size: int, cuda_graph_max_bs: int,
                               tp: int = 1, pp: int = 1, version: str | None = None, gpu_name: str = "") -> float:
    """SGLang's default mem_fraction_static (dense model on CUDA, prefill graphs on): by TP
    and memory band up to 0.5.2 (a fraction, or a reserve in GiB by band), from the GPU's memory
    and the graph and chunk sizes since 0.5.3."""
    v = resolve_version("sglang", version)
    ctx = {"offline": False, "gib": gpu_memory_bytes / _GIB, "tp": tp * pp, "name": gpu_name.lower(),
           "release": v.release, "post": v.post, "backend": None}
    k = _variant(knobs("sglang")["mem_fraction_static"], ctx)
    gpu_mb = gpu_memory_bytes / 2**20
    if "rules" in k:
        picked = _pick(k, ctx)
        if not isinstance(picked, dict):
            return picked
        reserved = (picked["reserve_gib"] + picked.get("per_tp_pp_gib", 0) * tp * pp) * 1024
        return round((gpu_mb - reserved) / gpu_mb, 3)
    reserved = (k["base_mb"] + max(chunked_prefill_size, k["min_chunk_tokens"]) * k["per_chunk_token_mb"]
                + tp * pp * k["per_tp_pp_mb"] + cuda_graph_max_bs * k["per_graph_bs_mb"]
                + k["prefill_graph_mb_per_size"] * len(_prefill_graph_sizes(chunked_prefill_size)))
    if gpu_mb > k["floor_above_gib"] * 1024:
        reserved = max(reserved, k["floor_mb"])
    return round((gpu_mb - reserved) / gpu_mb, 3)


def _prefill_graph_sizes(max_bs: int) -> list[int]:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def _ladder(x: float, steps: list[dict]) -> int:
    for s in steps:
        if x < s.get("below", math.inf):
            return max(s.get("min", 0), s["step"] * math.ceil(x / s["step"]))
    raise ValueError("ladder has no open-ended step")


def trtllm_bench_settings(gpu_memory_bytes: int, *, tp: int, input_len: int, output_len: int,
                          weights_bytes: int, kv_bytes_per_token: int, pp: int = 1,
                          kv_fraction: float | None = None) -> tuple[int, int]:
    """trtllm-bench's (max_batch_size, max_num_tokens) heuristic for a model and average ISL/OSL.

    `weights_bytes` is the whole model; `kv_bytes_per_token` counts all layers and max(tp, kv
    heads) heads, K and V, as the heuristic does.
    """
    h = knobs("tensorrt-llm")["bench_heuristic"]
    fraction = h["kv_fraction"]["throughput"] if kv_fraction is None else kv_fraction
    total_gib = gpu_memory_bytes / _GIB * tp * pp
    cache_gib = (total_gib - weights_bytes / _GIB) * fraction
    requests = cache_gib / (kv_bytes_per_token / _GIB * (input_len + output_len))
    if requests < 1:
        raise ConfigError(f"the KV cache left on {tp * pp} GPU(s) holds {requests:.2f} requests of "
                          f"{input_len + output_len} tokens; trtllm-bench needs at least 1")
    raw_bs = min(requests, h["max_requests_cap"]) / pp
    raw_tokens = min(raw_bs * (1 + input_len / output_len), h["max_tokens_cap"])
    return _ladder(raw_bs, h["batch_ladder"]), _ladder(raw_tokens, h["token_ladder"])


def engine_defaults(engine: str, gpu_memory_bytes: int, *, tp: int = 1, pp: int = 1, input_len: int | None = None,
                    output_len: int | None = None, offline: bool = False, gpu_name: str = "",
                    kv_tokens: int | None = None, context_len: int | None = None,
                    weights_bytes: int | None = None, kv_bytes_per_token: int | None = None,
                    version: str | None = None) -> EngineDefaults:
    """The defaults `engine` release `version` picks on a GPU with `gpu_memory_bytes` of memory.

    `version` is read by serving.engine.versions; without a release number in it the latest
    documented defaults apply and `version_note` says so. `gpu_name` matters for vLLM (A100s
    keep the small budgets; 0.8 keyed on H100/H200 names); `kv_tokens`/`context_len` for
    SGLang's running-request cap; `weights_bytes`/`kv_bytes_per_token` with `input_len`/
    `output_len` (averages) for trtllm-bench's heuristic when `offline`.
    """
    key = canonical_engine(engine)
    k = knobs(key)
    v = resolve_version(key, version)
    ctx = {"offline": offline, "gib": gpu_memory_bytes / _GIB, "tp": tp, "name": gpu_name.lower(),
           "release": v.release, "post": v.post, "backend": v.backend}
    if key == "vllm":
        d = _vllm(k, ctx)
    elif key == "sglang":
        d = _sglang(k, ctx, gpu_memory_bytes, tp, kv_tokens, context_len, version)
    else:
        d = _trtllm(k, ctx, gpu_memory_bytes, tp, pp, (input_len, output_len, weights_bytes, kv_bytes_per_token))
    return replace(d, release=v.label(), backend=v.backend, version_note=v.note,
                   two_batch_overlap=_pick(k["two_batch_overlap"], ctx),
                   two_batch_above_tokens=_above_tokens(_variant(k["two_batch_overlap"], ctx)))


def _above_tokens(entry: dict) -> tuple[int, int]:
    above = entry.get("above_tokens", {})
    return above.get("decode", 1), above.get("prefill", 1)


def _at(source: dict) -> str:
    """Where a knob was read: a commit shortened to 8 hex digits, or the release text as written
    ("0.5.3, 0.5.6.post2 (PyPI wheels)")."""
    at = str(source["version_or_commit"])
    return at[:8] if re.fullmatch(r"[0-9a-f]{40}", at) else at


def _vllm(k: dict, ctx: dict) -> EngineDefaults:
    tokens = _pick(k["max_num_batched_tokens"], ctx)
    seqs = min(_pick(k["max_num_seqs"], ctx), tokens)
    graph = min(seqs * k["cuda_graph_max_batch"]["seqs_factor"], k["cuda_graph_max_batch"]["cap"], tokens)
    src = _variant(k["max_num_batched_tokens"], ctx)["source"]
    return EngineDefaults(
        engine="vllm", max_num_seqs=seqs, max_num_batched_tokens=tokens,
        gpu_memory_utilization=_pick(k["gpu_memory_utilization"], ctx), block_size=_pick(k["block_size"], ctx),
        chunked_prefill=_pick(k["chunked_prefill"], ctx), prefix_caching=_pick(k["prefix_caching"], ctx),
        scheduler_policy=_pick(k["scheduler_policy"], ctx), cuda_graph_max_batch=graph,
        source_note=f"vLLM V1 {'LLM class' if ctx['offline'] else 'vllm serve'} defaults, "
                    f"{src['path']} @{str(src['version_or_commit'])[:8]}")


def _sglang(k: dict, ctx: dict, gpu_memory_bytes: int, tp: int, kv_tokens: int | None,
            context_len: int | None, version: str | None) -> EngineDefaults:
    chunk = _pick(k["chunked_prefill_size"], ctx)
    graph = _pick(k["cuda_graph_max_bs"], ctx)
    known = kv_tokens is not None and context_len is not None
    seqs = sglang_max_running_requests(kv_tokens, context_len) if known else k["max_running_requests"]["default"]
    src = _variant(k["chunked_prefill_size"], ctx)["source"]
    return EngineDefaults(
        engine="sglang", max_num_seqs=seqs, max_num_batched_tokens=min(chunk, _pick(k["max_prefill_tokens"], ctx)),
        gpu_memory_utilization=sglang_mem_fraction_static(gpu_memory_bytes, chunk, graph, tp, version=version,
                                                          gpu_name=ctx["name"]),
        block_size=_pick(k["page_size"], ctx), chunked_prefill=_pick(k["chunked_prefill"], ctx),
        prefix_caching=_pick(k["radix_cache"], ctx), scheduler_policy=_pick(k["schedule_policy"], ctx),
        cuda_graph_max_batch=graph, **_prefill_graphs(_pick(k["prefill_cuda_graph_max_tokens"], ctx), chunk),
        source_note=f"SGLang memory defaults ({src['path']} @{_at(src)}); "
                    + ("max_running_requests from the KV pool" if known
                       else "max_running_requests = request-pool floor 2048 (KV pool unknown)"))


def _prefill_graphs(value, chunk: int) -> dict:
    """SGLang's prefill-graph knob as EngineDefaults fields (0: none)."""
    if not value:
        return {}
    tokens = chunk if value["tokens"] == "chunked_prefill_size" else int(value["tokens"])
    return {"prefill_graph_max_tokens": tokens, "prefill_graph_mla_cap": min(tokens, value["mla_cap"]),
            "prefill_graph_off_with": tuple(value.get("off_with", ()))}


def _trtllm(k: dict, ctx: dict, gpu_memory_bytes: int, tp: int, pp: int, sizes: tuple) -> EngineDefaults:
    """trtllm-serve's build defaults, or trtllm-bench's heuristic for offline throughput runs."""
    bs, tokens = _pick(k["max_batch_size"], ctx), _pick(k["max_num_tokens"], ctx)
    fraction = _pick(k["gpu_memory_utilization"], ctx)
    how = "trtllm-serve defaults (BuildConfig 2048/8192)"
    if bs == "bench_heuristic":
        input_len, output_len, weights_bytes, kv_bytes_per_token = sizes
        if None not in sizes:
            bs, tokens = trtllm_bench_settings(gpu_memory_bytes, tp=tp, pp=pp, input_len=input_len,
                                               output_len=output_len, weights_bytes=weights_bytes,
                                               kv_bytes_per_token=kv_bytes_per_token, kv_fraction=fraction)
            how = "trtllm-bench throughput heuristic (bench/build/tuning.py @a7e572fb)"
        else:
            bs, tokens = k["max_batch_size"]["rules"][-1]["value"], k["max_num_tokens"]["rules"][-1]["value"]
            how = "trtllm-bench throughput without model sizes: BuildConfig 2048/8192, heuristic not applied"
    graph = _pick(k["cuda_graph_max_batch"], ctx)
    mode = "offline" if ctx["offline"] else "server"
    path = "C++ runtime, TensorRT engines" if ctx["backend"] == "cpp" else "PyTorch backend"
    return EngineDefaults(
        engine="tensorrt-llm", max_num_seqs=bs, max_num_batched_tokens=tokens, gpu_memory_utilization=fraction,
        block_size=_pick(k["block_size"], ctx), chunked_prefill=_pick(k["chunked_prefill"], ctx),
        prefix_caching=_pick(k["prefix_caching"], ctx), scheduler_policy=_pick(k["scheduler_policy"], ctx),
        cuda_graph_max_batch=bs if graph == "max_batch_size" else graph,
        source_note=f"TensorRT-LLM {mode} ({path}): {how}", memory_fraction_of="free_after_weights")
