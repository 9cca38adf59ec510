"""Goodput at scale: interruptions (failures), checkpoints, restarts and stragglers of a long
synchronous training run, and the effective wall clock, days and cost they lead to."""

from meshplan.goodput.options import Resilience
from meshplan.goodput.summary import Goodput, goodput

__all__ = ["Goodput", "Resilience", "goodput"]
