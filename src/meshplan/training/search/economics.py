"""A training plan's answer in the user's units: dollars per step, per million tokens and for the
whole run, GPU-hours, and days to train."""

from __future__ import annotations

SECONDS_PER_DAY = 86_400.0


def economics(tokens_per_s_per_gpu: float, step_time_s: float, gpus: int,
              price_per_gpu_hour: float | None, train_tokens: float | None) -> dict[str, float | None]:
    """Named figures with units in the names; None where the input that sets them is missing
    (a price for dollars, a token budget for the whole run)."""
    tokens_per_s = tokens_per_s_per_gpu * gpus
    out: dict[str, float | None] = {
        "tokens_per_s": tokens_per_s,
        "usd_per_step": None, "usd_per_million_tokens": None,
        "time_to_train_days": None, "run_gpu_hours": None, "run_usd": None,
    }
    if price_per_gpu_hour is not None:
        usd_per_s = price_per_gpu_hour * gpus / 3600.0
        out["usd_per_step"] = usd_per_s * step_time_s
        out["usd_per_million_tokens"] = usd_per_s / tokens_per_s * 1e6
    if train_tokens is not None:
        seconds = train_tokens / tokens_per_s
        out["time_to_train_days"] = seconds / SECONDS_PER_DAY
        out["run_gpu_hours"] = seconds * gpus / 3600.0
        if price_per_gpu_hour is not None:
            out["run_usd"] = out["run_gpu_hours"] * price_per_gpu_hour
    return out
