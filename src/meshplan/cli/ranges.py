"""The physical range of every numeric command-line flag, in one table: `check` refuses a value
outside it (or NaN, or infinite) with one sentence naming the flag, and `document` writes the
range into the flag's help. A numeric flag missing from the table is an error a test catches."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from meshplan.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Range:
    """Valid values of one flag: low <= value <= high (value < high when `open_high`)."""

    low: float
    high: float
    noun: str
    """What the value is, with its article: "a tensor-parallel size"."""
    unit: str = ""
    open_high: bool = False

    def text(self) -> str:
        """`1 to 65,536 GB/s` or `0 to below 1`."""
        high = f"below {number(self.high)}" if self.open_high else number(self.high)
        return f"{number(self.low)} to {high}{' ' + self.unit if self.unit else ''}"

    def problem(self, value: float) -> str | None:
        """What is wrong with `value` (None when it lies in the range)."""
        unit = f" {self.unit}" if self.unit else ""
        if not math.isfinite(value):
            return f"give a finite number: {self.noun} from {self.text()}"
        if value < self.low:
            return f"give {self.noun} of {number(self.low)}{unit} or more"
        if value > self.high or (self.open_high and value >= self.high):
            return (f"give {self.noun} below {number(self.high)}{unit}" if self.open_high
                    else f"give {self.noun} of at most {number(self.high)}{unit}")
        return None


def number(x: float) -> str:
    """A bound as people write it: 65,536, 0.5, 1e-06."""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"


R = Range
PARALLEL = R(1, 65_536, "a parallel size")
GPU_COUNT = R(1, 1_000_000, "a GPU count")
TOKENS = R(1, 2**22, "a token count")
SLO_MS = R(0.01, 86_400_000, "a latency objective", "ms")

RANGES: dict[str, Range] = {
    # hardware
    "num_gpus": GPU_COUNT, "max_gpus": GPU_COUNT, "prefill_gpus": GPU_COUNT, "decode_gpus": GPU_COUNT,
    "gpus_per_node": R(1, 1024, "a GPU count per node"),
    "scale_up_domain": R(1, 100_000, "a scale-up domain size"),
    "inter_node_gbps_per_gpu": R(1, 100_000, "a scale-out bandwidth per GPU", "Gb/s"),
    "gpu_power_limit_w": R(50, 10_000, "a GPU power cap", "W"),
    "host_memory_gb": R(1, 100_000, "a host memory size per node", "GB"),
    "host_link_gb_per_s": R(0.1, 10_000, "a host link bandwidth per GPU", "GB/s"),
    "nvme_read_gb_per_s": R(0.01, 10_000, "an NVMe read bandwidth per node", "GB/s"),
    "nvme_write_gb_per_s": R(0.01, 10_000, "an NVMe write bandwidth per node", "GB/s"),
    "nvme_tb": R(0.01, 10_000, "an NVMe capacity per node", "TB"),
    "memory_headroom": R(0, 1024, "a GPU memory headroom", "GiB"),
    # training layout and batch
    "tp": R(1, 65_536, "a tensor-parallel size"), "pp": R(1, 65_536, "a pipeline-parallel size"),
    "cp": R(1, 65_536, "a context-parallel size"), "ep": R(1, 65_536, "an expert-parallel size"),
    "etp": R(1, 65_536, "an expert tensor-parallel size"),
    "vpp": R(1, 1024, "a virtual pipeline size"), "dp": R(1, 1_000_000, "a data-parallel size"),
    "dp_shard_size": R(1, 1_000_000, "a sharding group size"),
    "prefill_tp": PARALLEL, "decode_tp": PARALLEL, "replicas": R(1, 1_000_000, "a replica count"),
    "micro_batch_size": R(1, 65_536, "a micro-batch size"),
    "global_batch_size": R(1, 100_000_000, "a global batch size"),
    "global_batch_tokens": R(1, 1e12, "a token count per step"),
    "seq_len": R(1, 2**24, "a sequence length"), "seq_lens": R(1, 2**24, "a sequence length"),
    "recompute_num_layers": R(0, 100_000, "a layer count"),
    "lora_rank": R(1, 65_536, "a LoRA rank"),
    "price_per_gpu_hour": R(0.0001, 10_000, "a price per GPU-hour", "USD"),
    "price": R(0.0001, 10_000, "a price per GPU-hour", "USD"),
    "train_tokens": R(1, 1e17, "a token budget"),
    # goodput at scale: failures, restarts, checkpoints, stragglers
    "restart_minutes": R(0, 10_080, "a restart time", "minutes"),
    "reschedule_minutes": R(0, 10_080, "a re-scheduling time", "minutes"),
    "hot_spare_nodes": R(0, 100_000, "a spare node count"),
    "checkpoint_write_gb_per_s": R(0.001, 1_000_000, "a storage write bandwidth", "GB/s"),
    "checkpoint_read_gb_per_s": R(0.001, 1_000_000, "a storage read bandwidth", "GB/s"),
    "checkpoint_interval_minutes": R(0.01, 1_000_000, "a checkpoint interval", "minutes"),
    "straggler_cv": R(0, 1, "a coefficient of variation", open_high=True),
    # serving workload, engine and objectives
    "request_rate": R(0.001, 1_000_000, "a request rate", "requests/s"),
    "rates": R(0.001, 1_000_000, "a request rate", "requests/s"),
    "input_len": TOKENS, "output_len": TOKENS, "shared_prefix_len": R(0, 2**22, "a token count"),
    "num_prefixes": R(1, 1_000_000, "a prefix count"), "turns": R(1, 1000, "a turn count"),
    "range_ratio": R(0, 1, "a range ratio", open_high=True),
    "burstiness": R(0.01, 100, "a gamma shape"),
    "concurrency": R(1, 1_000_000, "a client count"),
    "num_requests": R(1, 100_000_000, "a request count"),
    "time_scale": R(1e-6, 1e6, "a time scale"),
    "seed": R(0, 2**63 - 1, "a seed"),
    "max_num_seqs": R(1, 1_000_000, "a batch size"),
    "max_num_batched_tokens": R(1, 100_000_000, "a token budget"),
    "gpu_memory_utilization": R(0.01, 1, "a memory fraction"),
    "speculative_tokens": R(0, 64, "a draft token count"),
    "num_scheduler_steps": R(1, 256, "a step count"),
    "acceptance_rate": R(0, 1, "an acceptance rate", open_high=True),
    "kv_cpu_gib": R(0.01, 100_000, "a host KV size", "GiB"),
    "kv_hit_rate": R(0, 1, "a hit rate"),
    "lora_adapters": R(0, 100_000, "an adapter count"), "max_loras": R(1, 100_000, "an adapter count"),
    "lora_zipf_exponent": R(0.01, 100, "a zipf exponent"),
    "slo_ttft_ms": SLO_MS, "slo_tpot_ms": SLO_MS, "slo_e2e_ms": SLO_MS,
    "slo_percentile": R(1, 100, "a percentile", "%"),
    # run records
    "tokens_per_s_per_gpu": R(0.001, 1e9, "a throughput", "tokens/s"),
    "step_time_s": R(1e-6, 1e7, "a step time", "s"),
    "peak_memory_gib": R(0.001, 100_000, "a memory size", "GiB"),
    # how a command runs
    "top": R(1, 1000, "a plan count"), "workers": R(1, 1024, "a worker count"),
    "chunk": R(1, 1_000_000, "a chunk size"), "max_nfev": R(1, 100_000, "an evaluation count"),
    "index": R(1, 1_000_000, "a plan index"), "jobs": R(1, 64, "a job count"),
    "port": R(1, 65_535, "a TCP port"),
}
"""Flag (parameter name) -> its range."""


def check(name: str, value: Any) -> None:
    """Refuse `value` of flag `name` outside its range (booleans, strings and None pass)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or name not in RANGES:
        return
    problem = RANGES[name].problem(value)
    if problem is not None:
        raise ConfigError(f"{flag(name)} {shown(value)}: {problem}")


def check_all(values: dict[str, Any]) -> None:
    """`check` every (name, value) of a command's keyword arguments."""
    for name, value in values.items():
        check(name, value)


def flag(name: str) -> str:
    """The flag of a parameter: seq_len -> --seq-len."""
    return "--" + name.replace("_", "-")


def shown(value: float) -> str:
    """A value as the user typed it, kept short (a 20-digit number stays whole, 1e300 too)."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def document(command: Any) -> Any:
    """Append each numeric option's range to its help (recursing into groups); returns it."""
    for sub in getattr(command, "commands", {}).values():
        document(sub)
    for param in getattr(command, "params", ()):
        rng = RANGES.get(param.name)
        if rng is not None and hasattr(param, "help") and "[range" not in (param.help or ""):
            param.help = f"{param.help or ''} [range: {rng.text()}]".strip()
    return command
