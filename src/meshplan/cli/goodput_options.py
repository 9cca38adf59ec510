"""Command-line options of goodput at scale (failures, restarts, checkpoints, stragglers), shared
by `train estimate` and `train plan`, and the Resilience they build."""

from __future__ import annotations

import typer

from meshplan.goodput import Resilience

RESTART = typer.Option(None, "--restart-minutes", help="Detection + restart + re-scheduling of the "
                       "job after an interruption, minutes (default 10: Meta, synchronous training "
                       "at O(100K) GPUs).")
RESCHEDULE = typer.Option(None, "--reschedule-minutes", help="Extra wait for a replacement node "
                          "after a hardware failure when no hot spare is ready, minutes (default 0).")
HOT_SPARES = typer.Option(None, "--hot-spare-nodes", help="Idle nodes ready to replace a failed "
                          "one: hardware failures skip --reschedule-minutes; the spares are paid for.")
CKPT_WRITE = typer.Option(None, "--checkpoint-write-gb-per-s", help="Aggregate write bandwidth of "
                          "the checkpoint storage, GB/s (default 2,000: Llama 3's Tectonic, sustained).")
CKPT_READ = typer.Option(None, "--checkpoint-read-gb-per-s", help="Aggregate read bandwidth of the "
                         "checkpoint storage when a restart loads it, GB/s (default 2,000).")
CKPT_MODE = typer.Option(None, "--checkpoint-mode", help="sync (the step waits for the write) or "
                         "async (it waits only for the device-to-host copy); default sync.")
CKPT_INTERVAL = typer.Option(None, "--checkpoint-interval-minutes", help="Minutes of training "
                             "between checkpoints (default: the Young/Daly optimum).")
STRAGGLER_CV = typer.Option(None, "--straggler-cv", help="Coefficient of variation of per-GPU "
                            "speed (default 0.02, from an 8% spread across same-SKU GPUs).")

FLAGS = {
    "restart_minutes": (float, RESTART), "reschedule_minutes": (float, RESCHEDULE),
    "hot_spare_nodes": (int, HOT_SPARES), "checkpoint_write_gb_per_s": (float, CKPT_WRITE),
    "checkpoint_read_gb_per_s": (float, CKPT_READ), "checkpoint_mode": (str, CKPT_MODE),
    "checkpoint_interval_minutes": (float, CKPT_INTERVAL), "straggler_cv": (float, STRAGGLER_CV),
}
"""Parameter name -> (annotation, typer option), for `with_plan_flags` extras."""

_SI = {"restart_minutes": ("restart_s", 60.0), "reschedule_minutes": ("reschedule_s", 60.0),
       "hot_spare_nodes": ("hot_spare_nodes", None),
       "checkpoint_write_gb_per_s": ("checkpoint_write_bytes_per_s", 1e9),
       "checkpoint_read_gb_per_s": ("checkpoint_read_bytes_per_s", 1e9),
       "checkpoint_mode": ("checkpoint_mode", None),
       "checkpoint_interval_minutes": ("checkpoint_interval_s", 60.0),
       "straggler_cv": ("straggler_cv", None)}


def pop_resilience(flags: dict) -> Resilience:
    """The Resilience of the goodput flags in `flags` (removed from it); unset flags keep the
    cited defaults."""
    fields = {}
    for name, (field, scale) in _SI.items():
        value = flags.pop(name, None)
        if value is not None:
            fields[field] = value * scale if scale else value
    return Resilience(**fields)
