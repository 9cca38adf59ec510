"""Prediction intervals and the out-of-regime flag.

Every predicted training number is a band: the p10-p90 range of what comparable published runs
measured against what meshplan predicted for them, each source's records predicted by constants
fitted without that source (leave-one-source-out). Comparable is decided by the question's
regime (`regime.Regime`: dense or MoE, GPU generation, framework, precision, model width, tokens
per micro-batch per GPU, scale). A question outside what the records span says so
(`extrapolating`, with the reasons) and gets a wider band.

The residuals and the band's constants come from `scripts/fit_bands.py`
(`data/residuals.yaml`); `benchmarks/band_coverage.py` measures the promise: 80% of held-out
records inside their band. Serving answers get the same machinery with a serving regime
(`serving_regime.ServingRegime`) and a pool per quantity (`serving`: throughput, TTFT, TPOT and
their tails), from `scripts/fit_serving_bands.py` (`data/serving_residuals.yaml`).
"""

from meshplan.bands.band import Band, memory_band, step_time_band, throughput_band, tie_gap
from meshplan.bands.regime import Regime, regime_of

__all__ = ["Band", "Regime", "memory_band", "regime_of", "step_time_band", "throughput_band", "tie_gap"]
