"""A Goodput in the user's units: days, GPU-hours and dollars with and without failures, and the
text lines `train estimate` and `train plan` print."""

from __future__ import annotations

from meshplan.goodput.summary import SECONDS_PER_DAY, Goodput

WATERFALL_LABELS = {"training": "training", "stragglers": "stragglers",
                    "checkpoints": "checkpoint stalls", "lost_work": "lost work",
                    "restarts": "restarts + checkpoint reads"}


def run_money(g: Goodput, gpus: int, price_per_gpu_hour: float | None) -> dict[str, float | None]:
    """GPU-hours and USD of the run without and with failures (the spares are paid for); None
    where the token budget or the price that sets them is missing."""
    names = ("gpu_hours_without_failures", "gpu_hours", "usd_without_failures", "usd")
    if not g.has_budget:
        return dict.fromkeys(names)
    ideal_h = g.training_s * gpus / 3600.0
    real_h = g.wall_s * (gpus + g.spare_gpus) / 3600.0
    price = price_per_gpu_hour
    return dict(zip(names, (ideal_h, real_h, ideal_h * price if price else None,
                            real_h * price if price else None)))


def goodput_lines(g: Goodput, gpus: int, mode: str, price_per_gpu_hour: float | None = None) -> list[str]:
    """Interruptions, the checkpoint, time lost by kind, the effective ratio, and (with a token
    budget) days, GPU-hours and cost without and with failures."""
    c, d = g.checkpoint, g.detail_dict()
    per_day = d["interruptions_per_day"]
    mtbf = f"MTBF {g.mtbf_s / 3600:.1f} h" if d["mtbf_s"] else "no failures expected"
    head = (f"{g.expected_interruptions:,.0f} in the run, " if g.has_budget else "")
    lines = [f"goodput: expected interruptions {head}{per_day:.1f} / day ({mtbf})",
             f"  checkpoint {c.total_bytes / 1e12:.2f} TB ({c.bytes_per_rank / 1e6:,.0f} MB per GPU), "
             f"write {c.write_s:.1f} s, {mode}: the step waits {c.stall_s:.2f} s, every "
             f"{_interval(g.checkpoint_interval_s)}",
             "  time lost per training hour: " + ", ".join(
                 f"{WATERFALL_LABELS[k]} {v / g.training_s * 60:.1f} min"
                 for k, v in g.waterfall().items() if k != "training"),
             f"  effective training time ratio {g.effective_training_time_ratio:.1%}"]
    if g.has_budget:
        m = run_money(g, gpus, price_per_gpu_hour)
        lines.append(f"  days to train {g.training_s / SECONDS_PER_DAY:.1f} without failures, "
                     f"{g.wall_s / SECONDS_PER_DAY:.1f} with; GPU-hours "
                     f"{m['gpu_hours_without_failures'] / 1e6:.2f}M / {m['gpu_hours'] / 1e6:.2f}M"
                     + (f"; USD {m['usd_without_failures']:,.0f} / {m['usd']:,.0f}" if m["usd"] else ""))
    return lines


def _interval(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "never (no failures expected)"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def goodput_json(g: Goodput, gpus: int, price_per_gpu_hour: float | None) -> dict:
    """The `goodput` and `goodput_detail` JSON blocks (SI units)."""
    return {"goodput": g.to_dict(),
            "goodput_detail": {**g.detail_dict(), **run_money(g, gpus, price_per_gpu_hour)}}
