"""Flags that contradict each other: each pair is refused with one sentence naming both flags
(issue #34: they were silently ignored). Checked on the flags as given, before any work."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from meshplan.errors import ConfigError, MeshplanError


def check_training_flags(flags: dict[str, Any], spec=None) -> None:
    """The `train memory|estimate|plan` conflicts (`spec`: the model, for the MoE-only flags)."""
    _batch(flags)
    _sharding(flags)
    _adapters(flags)
    if spec is not None:
        _experts(flags, spec)


def _given(flags: dict[str, Any], name: str) -> bool:
    return flags.get(name) not in (None, False)


def _batch(flags: dict[str, Any]) -> None:
    if _given(flags, "global_batch_size") and _given(flags, "global_batch_tokens"):
        raise ConfigError(f"--global-batch-size {flags['global_batch_size']} with --global-batch-tokens "
                          f"{flags['global_batch_tokens']}: give one of them")


def _sharding(flags: dict[str, Any]) -> None:
    from meshplan.training.layout.resolve import DEFAULT_SHARDING

    sharding = flags.get("dp_sharding")
    if sharding == "none" and _given(flags, "dp_shard_size"):
        raise ConfigError(f"--dp-shard-size {flags['dp_shard_size']} with --dp-sharding none: nothing "
                          f"is sharded; drop --dp-shard-size or shard (optimizer, gradients or full)")
    if _given(flags, "offload_params"):
        framework = flags.get("framework") or "megatron"
        effective = sharding or DEFAULT_SHARDING.get(framework, "none")
        if effective != "full":
            shown = sharding or f"{effective} ({framework}'s default)"
            raise ConfigError(f"--offload-params with --dp-sharding {shown}: parameter offload needs "
                              f"sharded parameters; add --dp-sharding full")


def _adapters(flags: dict[str, Any]) -> None:
    method = flags.get("method") or "full"
    for name in ("lora_rank", "lora_targets"):
        if method == "full" and _given(flags, name):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} {flags[name]} with --method full: adapters are trained only "
                              f"with --method lora or qlora; drop {flag} or choose one")


def _experts(flags: dict[str, Any], spec) -> None:
    if spec.is_moe:
        return
    for name in ("expert_skew", "moe_balance"):
        if _given(flags, name) and flags[name] != "none":
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} {flags[name]} with --model {spec.name}: a dense model has no "
                              f"experts to route; drop {flag}")


def check_names(flag: str, names: Iterable[str], lookup) -> list[str]:
    """The names of a comma-separated list flag, each known to `lookup` (which raises a
    MeshplanError on an unknown one); an empty or unknown item names the flag."""
    out = []
    for name in names:
        if not name.strip():
            raise ConfigError(f"{flag}: an empty name in the list; separate names by single commas")
        try:
            lookup(name.strip())
        except MeshplanError as exc:
            raise ConfigError(f"{flag} {name.strip()!r}: {exc}") from None
        out.append(name.strip())
    return out
