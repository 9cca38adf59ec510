"""Serving traffic: the requests a deployment receives.

- request.py   a request, and the record of how it was served
- workload.py  workloads: arrivals and lengths, synthetic or from a trace
- lengths.py   prompt and output length distributions (fixed, random, ShareGPT-like, ...)
- traces.py    public trace readers (BurstGPT, Azure LLM inference, Mooncake)
"""
