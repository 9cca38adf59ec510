"""`serve plan` and `serve sweep`: the cheapest deployment within the SLOs.

- candidates.py  enumerate deployments and rank them
- bounds.py      analytical bounds that prune candidates before simulating
- capacity.py    the highest request rate at which a deployment meets the SLOs
- trials.py      how many requests a capacity trial simulates (sized by duration)
- screening.py   short trials for every candidate, sized ones only where the ranking needs them
- run.py         the search: enumerate, bound, simulate survivors in parallel, verify
- report.py      what `serve plan` prints (table, why the winner wins, misses)
- rate_sweep.py  one deployment simulated at several request rates
"""
