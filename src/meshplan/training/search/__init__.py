"""The training plan search: enumerate, prune, estimate, rank.

- plans.py      the search: candidates the framework supports, ranked by the objective
- sweep.py      resolve, deduplicate, check memory and bound each candidate (in-process or forked)
- forked.py     share numbered parts of a job with forked children
- economics.py  dollars, GPU-hours and days of a plan
- grid.py       the best plan for every cell of a grid (models x GPUs x sizes x lengths)
"""
