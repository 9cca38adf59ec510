"""Serving metrics as vLLM's benchmark reports them, and the files a simulation writes.

- summary.py      TTFT, TPOT, ITL, E2E percentiles, throughput and goodput under SLOs
- itl.py          inter-token latency without sorting every gap
- token_times.py  token times of simulated requests, built when first read
- outputs.py      per-request CSV and Chrome trace of iterations
"""
