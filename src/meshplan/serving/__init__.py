"""Serving: workloads, the engine simulator, cluster routing and serving metrics."""
