"""Calibration: the few constants fitted on measured runs.

- training.py  fit the training engines' constants on training run records (packaged fit)
- serving.py   fit the serving engines' constants on serving benchmarks (packaged fit)
- site.py      site profiles: a user's multipliers applied on top of the packaged model
- site_fit.py  fit a site profile on a few of the user's own runs
"""
