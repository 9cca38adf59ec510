"""What the serving exporters share: instance layout, dtype facts, shell rendering.

Engine spellings do not live here: each engine module owns its flags and their sources. This
module knows where each engine instance runs (GPUs, port), how a plan is summarised in the
script header, and how a command is written as shell text.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.export.shell import Raw, comment_text, word
from meshplan.serving.engine.placement import place
from meshplan.serving.plan import ServingPlan

Flags = list[tuple[str, object]]
"""(flag, value) pairs in order; value None for a bare switch."""

FIRST_SIDE_PORT = {"nixl": 5600, "bootstrap": 8998, "ray": 6379, "dist_init": 20000}
"""First of the per-instance side ports (vLLM NIXL handshake, SGLang PD bootstrap defaults, the
Ray head of a multi-node vLLM instance, SGLang's --dist-init-addr of a multi-node instance)."""
DEFAULT_GPUS_PER_NODE = 8
"""Host size when the caller names none (HGX/DGX servers)."""
NODE_RANK, NODE_ADDR = "NODE_RANK", "NODE_ADDR"
"""Shell variables of a multi-host script: this host's rank, and the hosts' addresses."""

PREQUANTIZED_HINTS = {
    "fp8": ("fp8",),
    "int8": ("int8", "w8a8", "w8a16"),
    "int4": ("awq", "gptq", "int4", "w4a16"),
    "fp4": ("fp4", "nvfp4", "mxfp4"),
}
"""Name fragments that mark a checkpoint as already quantized to that weight dtype."""

DRAFT_VARIABLE = "DRAFT_MODEL"
LORA_VARIABLE = "LORA_ADAPTERS"
STOP_ALL = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # stop the servers with the script"


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    """One engine process: its role, GPUs and HTTP port."""

    role: str
    """"server" (colocated prefill and decode), "prefill" or "decode"."""
    index: int
    """Position among the instances of its role, from 0."""
    tp: int
    """Tensor-parallel size of this instance (the pool's tp when disaggregated)."""
    gpus: tuple[int, ...]
    """Host-local GPU indices, written as CUDA_VISIBLE_DEVICES (on each of its nodes)."""
    port: int
    node: int = 0
    """The host it runs on (its first host when it spans several), from 0."""
    nodes: int = 1
    """Hosts it spans: more than one for a multi-node engine (whole hosts each)."""
    hosts: int = 1
    """Hosts of the whole deployment: addresses come from NODE_ADDR when more than one."""


def _check_launchable(plan: ServingPlan) -> None:
    """Refuse plans no launch script can express."""
    dis = plan.disaggregated
    if dis is not None and dis.phase is not None:
        raise ConfigError(f"the plan deploys only a {dis.phase} pool (a phase-pool measurement); "
                          f"a launchable deployment needs both prefill_gpus and decode_gpus")
    if dis is not None and plan.dp > 1:
        raise ConfigError(f"dp={plan.dp} with disaggregated pools: the pools size each instance as "
                          f"its tp x pp GPUs; set dp=1 or serve without disaggregation")


def layout(plan: ServingPlan, port: int, gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> list[Instance]:
    """Every instance of `plan` on hosts of `gpus_per_node` GPUs (meshplan.serving.engine.placement:
    one host, or whole hosts); with several instances, the entry `port` is left to the router or
    proxy and the instances take the ports after it."""
    _check_launchable(plan)
    slots = place(plan, gpus_per_node)
    hosts = max(s.node + s.nodes for s in slots)
    if plan.dp > 1 and any(s.nodes > 1 for s in slots):
        raise ConfigError(f"dp={plan.dp} in an instance spanning {slots[0].nodes} hosts: a multi-host "
                          f"data-parallel engine is not exported; use replicas (dp=1) instead")
    first = port + 1 if len(slots) > 1 else port
    out = [Instance(role=s.role, index=s.index, tp=s.tp, gpus=s.gpus, port=first + k, node=s.node,
                    nodes=s.nodes, hosts=hosts) for k, s in enumerate(slots)]
    if not 1 <= port <= 65535 or out[-1].port > 65535:
        raise ConfigError(f"port={port}: the script needs ports {port}..{out[-1].port}, "
                          f"which must lie within 1..65535")
    return out


def address(inst: Instance, node: int | None = None) -> str:
    """The address of an instance's (first) host as shell text: 127.0.0.1 on one host."""
    if inst.hosts == 1:
        return "127.0.0.1"
    return f"${{{NODE_ADDR}[{inst.node if node is None else node}]}}"


def host_lines(instances: list[Instance], gpus_per_node: int) -> list[str]:
    """The header of a multi-host script: which host runs what, read from NODE_RANK/NODE_ADDRS."""
    hosts = instances[0].hosts
    if hosts == 1:
        return []
    last = hosts - 1
    return [f"# Hosts: {hosts} nodes of {gpus_per_node} GPUs. Run this same script on each of them with "
            f"{NODE_RANK}=0..{last} and the",
            f"# hosts' addresses in rank order, e.g. {NODE_RANK}=0 NODE_ADDRS=\"10.0.0.1 10.0.0.2\" bash launch.sh;",
            f"# each host starts its own engines (host-local CUDA_VISIBLE_DEVICES); host 0 also runs the entry point.",
            f'{NODE_RANK}="${{{NODE_RANK}:?set {NODE_RANK} to this host\'s rank, 0..{last}}}"',
            f'read -r -a {NODE_ADDR} <<< "${{NODE_ADDRS:?set NODE_ADDRS to the {hosts} hosts\' addresses, in rank order}}"']


def per_host(hosts: int, blocks: dict[int, list[str]]) -> list[str]:
    """Each host's lines under `if [ "$NODE_RANK" = k ]` (as they are on a single host)."""
    if hosts == 1:
        return [line for k in sorted(blocks) for line in blocks[k]]
    out: list[str] = []
    for k in range(hosts):
        block = blocks.get(k, [])
        out += ["", f'if [ "${NODE_RANK}" = {k} ]; then'] + block[1 if block[:1] == [""] else 0:] + ["fi"]
    return out


def plural(n: int, word: str) -> str:
    """ "1 GPU", "4 GPUs"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def gpu_words(inst: Instance, node: int | None = None) -> str:
    """ "GPU 3" or "GPUs 0-3" for a comment (", host 1" or ", hosts 2-3" on several hosts)."""
    first, last = inst.gpus[0], inst.gpus[-1]
    words = f"GPU {first}" if first == last else f"GPUs {first}-{last}"
    if inst.hosts == 1:
        return words
    if inst.nodes == 1:
        return f"{words} of host {inst.node}"
    here = f" (this is host {node})" if node is not None else ""
    return f"{words} of each of hosts {inst.node}-{inst.node + inst.nodes - 1}{here}"


def check_model(model: str) -> str:
    """The model id or path, stripped; raise if empty. Any other text is kept: every use of it in
    a script is quoted (`arg`) or, in a comment, escaped (`comment_text`)."""
    if not model or not model.strip():
        raise ConfigError("model is empty; give a Hugging Face repo id "
                          "(e.g. meta-llama/Llama-3.1-8B-Instruct) or a local checkpoint path")
    return model.strip()


def activation_dtype(plan: ServingPlan) -> str:
    """The dtype activations (and an "auto" KV cache) run in: fp16 for fp16 weights, else bf16."""
    return "fp16" if plan.weights_dtype == "fp16" else "bf16"


def looks_prequantized(model: str, weights_dtype: str) -> bool:
    """Whether the checkpoint's name says it is already quantized to `weights_dtype`."""
    name = model.lower().replace("_", "-")
    return any(hint in name for hint in PREQUANTIZED_HINTS.get(weights_dtype, ()))


arg = word
"""`value` as one shell word (meshplan.export.shell.word)."""


def double_quoted(text: str) -> Raw:
    """`text` in double quotes, so ${VARIABLES} in it expand (used for JSON naming $DRAFT_MODEL)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return Raw(f'"{escaped}"')


def command(program: list[str], flags: Flags, *, env: dict[str, object] | None = None,
            background: bool = False) -> list[str]:
    """A command as lines joined by backslash continuations, one flag per line."""
    head = " ".join([f"{k}={arg(v)}" for k, v in (env or {}).items()] + [arg(word) for word in program])
    parts = [name if value is None else f"{name} {arg(value)}" for name, value in flags]
    if not parts:
        return [head + (" &" if background else "")]
    lines = [head + " \\"] + [f"    {p} \\" for p in parts[:-1]] + [f"    {parts[-1]}"]
    if background:
        lines[-1] += " &"
    return lines


def set_knobs(plan: ServingPlan) -> str:
    """The engine knobs the plan sets, as `name=value` words ("none" when all are defaults)."""
    names = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "chunked_prefill",
             "prefix_caching", "block_size", "scheduler_policy")
    words = [f"{n}={getattr(plan, n)}" for n in names if getattr(plan, n) is not None]
    return ", ".join(words) or "none"


def plan_lines(model: str, plan: ServingPlan, instances: list[Instance], engine: str) -> list[str]:
    """Comment lines describing the plan (what the script launches and why)."""
    shape = f"pp={plan.pp}, dp={plan.dp}, ep={plan.ep}"
    dis = plan.disaggregated
    if dis is None:
        n = plan.replicas
        layout_text = (f"{plural(n, 'replica')} x {plural(plan.gpus_per_replica, 'GPU')} "
                       f"(tp={plan.tp}, {shape})")
    else:
        counts = {r: sum(1 for i in instances if i.role == r) for r in ("prefill", "decode")}
        layout_text = (f"disaggregated: prefill {dis.prefill_gpus} GPUs as {counts['prefill']} x "
                       f"tp={dis.prefill_tp}, decode {dis.decode_gpus} GPUs as {counts['decode']} x "
                       f"tp={dis.decode_tp} ({shape})")
    lines = [f"# Model: {comment_text(model)}",
             f"# Plan: {layout_text} = {plural(plan.num_gpus, 'GPU')}; weights {plan.weights_dtype}, "
             f"KV cache {plan.kv_cache_dtype}, router {plan.router}",
             f"# Knobs set by the plan: {set_knobs(plan)}; the rest keep the engine's defaults."]
    if plan.engine != engine:
        lines.append(f"# Note: the plan was modelled for {plan.engine}; its knobs are passed on "
                     f"under {engine}'s meaning of them.")
    if len(instances) > 1 and instances[0].hosts == 1:
        lines.append(f"# All {plan.num_gpus} GPUs sit on one host (CUDA_VISIBLE_DEVICES numbers them from 0); "
                     f"a deployment wider than a host takes whole hosts.")
    return lines


def speculative_lines(plan: ServingPlan, method: str) -> list[str]:
    """Comment and variable lines that make the user choose the drafter."""
    if plan.mtp_drafts:
        return ["", f"# Speculative decoding: the model's own MTP module drafts {plan.speculative_tokens} "
                f"tokens per step, each accepted with p={plan.acceptance_rate:g} (the plan's assumption)."]
    return ["", f"# Speculative decoding: the plan drafts {plan.speculative_tokens} tokens per step, each "
            f"accepted with p={plan.acceptance_rate:g}.",
            "# The drafter is a choice the plan does not make, and it sets the real acceptance rate.",
            f"# Below: {method}, which needs a draft model trained for this model; set {DRAFT_VARIABLE}.",
            f'{DRAFT_VARIABLE}="${{{DRAFT_VARIABLE}:?set {DRAFT_VARIABLE} to a draft model '
            f'trained for the served model}}"']


def lora_lines(plan: ServingPlan, slots: int, flag: str) -> list[str]:
    """Comment and variable lines of a multi-LoRA plan: the adapters are the user's to name."""
    return [f"# LoRA: the plan serves {plan.lora_adapters} adapters of rank <= {plan.lora_rank}, at most "
            f"{slots} in one batch (resident on the GPUs).",
            f"# {flag} takes them as NAME=PATH words; set {LORA_VARIABLE}, e.g. "
            f'{LORA_VARIABLE}="a1=/adapters/a1 a2=/adapters/a2".',
            f'{LORA_VARIABLE}="${{{LORA_VARIABLE}:?set {LORA_VARIABLE} to the adapters as NAME=PATH words}}"']


def quantization_note(model: str, plan: ServingPlan, engine: str) -> tuple[bool, list[str]]:
    """(whether to pass `--quantization fp8`, comment lines) for the plan's weight dtype."""
    dtype = plan.weights_dtype
    if dtype in ("auto", "bf16", "fp16"):  # auto: the engine reads the checkpoint's quantization_config
        return False, []
    pre = looks_prequantized(model, dtype)
    if dtype == "fp8" and not pre:
        return True, [f"# fp8 weights: --quantization fp8 quantizes this bf16/fp16 checkpoint when "
                      f"{engine} loads it. A pre-quantized",
                      "# FP8 checkpoint needs no flag: the engine reads quantization_config from "
                      "its config.json."]
    if pre:
        return False, [f"# {dtype} weights: the checkpoint's name marks it as pre-quantized, so no "
                       f"--quantization flag: {engine}",
                       "# reads quantization_config from its config.json."]
    need = {"int8": "an INT8 (W8A8 or GPTQ 8-bit) checkpoint",
            "int4": "an AWQ or GPTQ (4-bit) checkpoint",
            "fp4": "an NVFP4 or MXFP4 checkpoint (FP4 kernels need Blackwell GPUs)"}[dtype]
    return False, [f"# {dtype} weights need {need}; {engine} detects its quantization from",
                   "# config.json. This model's name does not look quantized: point the script at "
                   "such a checkpoint."]


def kv_dtype_error(plan: ServingPlan, engine: str, valid: str) -> ConfigError:
    """The error for a KV-cache dtype the engine cannot store with these weights."""
    return ConfigError(f"kv_cache_dtype={plan.kv_cache_dtype!r} with weights_dtype="
                       f"{plan.weights_dtype!r}: {engine} stores the KV cache in the activation "
                       f"dtype ({activation_dtype(plan)}) or {valid}; use kv_cache_dtype='auto'")
