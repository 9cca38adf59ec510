"""Serving metrics as vLLM's benchmark reports them (the files a simulation writes are
meshplan.report.serving_outputs).

- summary.py      TTFT, TPOT, ITL, E2E percentiles, throughput and goodput under SLOs
- itl.py          inter-token latency without sorting every gap
- token_times.py  token times of simulated requests, built when first read
"""
