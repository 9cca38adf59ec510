"""Load on the web app (`meshplan ui`): a loopback server process, 50 concurrent step-estimate
requests (50 different plans, so no answer is a repeat), then 5 concurrent training plan searches
as background jobs, with estimates sent while they run. Prints and saves latency percentiles,
the jobs' queueing and run times, and whether every request and job completed; saves
benchmarks/results/ui_load.json and re-renders the page block that quotes it.

The load generator shares the server's two cores, so its own CPU per request is added to every
latency it measures. The timed requests therefore go through a minimal HTTP/1.1 client (one
fresh connection per request, connect time included), as wrk or hey would send them; httpx's
async client spends more CPU per request than the server's whole answer, and the same burst
through it is reported beside it, for comparison.
Run: python benchmarks/ui_load.py"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

import readme_blocks  # benchmarks/readme_blocks.py

ESTIMATES = 50
SEARCHES = 5
DURING = 20
"""Estimates sent one after another while the plan searches run."""
TARGET_P99_S = 0.2
"""The issue's target for the estimate endpoint's p99 latency on this machine."""
MODELS = ("llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "llama-3.1-70b")
SEARCH_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "llama-3.2-1b", "mistral-7b", "llama-3.1-8b")


def estimate_bodies() -> list[dict]:
    """ESTIMATES distinct (model, GPUs, tp, recompute) plans."""
    grid = itertools.product(MODELS, (8, 16, 32, 64, 128), (1, 2), ("full",))
    return [{"model": m, "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": n},
             "plan": {"tp": tp, "recompute": r, "global_batch_size": 2 * n}}
            for m, n, tp, r in itertools.islice(grid, ESTIMATES)]


def search_bodies() -> list[dict]:
    return [{"model": m, "gpu": "h100-sxm-80gb", "num_gpus": n, "global_batch_size": 256}
            for m, n in zip(SEARCH_MODELS, (8, 16, 32, 64, 16))][:SEARCHES]


def start_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "meshplan", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/api/gpus").status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("the server did not start")


async def timed_post(client: httpx.AsyncClient, path: str, body: dict) -> tuple[float, int, dict]:
    start = time.perf_counter()
    response = await client.post(path, json=body)
    return time.perf_counter() - start, response.status_code, response.json()


async def lean_post(url: str, path: str, body: dict) -> tuple[float, int, dict]:
    """POST `body` as JSON on a new connection; (seconds from connect to the last byte, status, JSON)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head + data)
    raw = await reader.read()  # the server closes after the answer
    seconds = time.perf_counter() - start
    writer.close()
    header, _, payload = raw.partition(b"\r\n\r\n")
    return seconds, int(header.split(b" ", 2)[1]), json.loads(payload)


def percentiles(seconds: list[float]) -> dict:
    a = np.asarray(seconds)
    return {"n": len(a), "p50_s": float(np.percentile(a, 50)), "p99_s": float(np.percentile(a, 99)),
            "max_s": float(a.max())}


async def burst(url: str) -> dict:
    """The same ESTIMATES requests one at a time (each one's own cost, models loaded), then all at
    once, then all at once again through httpx."""
    alone = [(await lean_post(url, "/api/train/estimate", b))[0] for b in estimate_bodies()]
    start = time.perf_counter()
    done = await asyncio.gather(*(lean_post(url, "/api/train/estimate", b) for b in estimate_bodies()))
    wall = time.perf_counter() - start
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await timed_post(client, "/api/train/estimate", estimate_bodies()[0])  # its pool and imports
        via_httpx = await asyncio.gather(*(timed_post(client, "/api/train/estimate", b)
                                           for b in estimate_bodies()))
    ok = sum(code == 200 for _, code, _ in done)
    return {**percentiles([s for s, _, _ in done]), "ok": ok, "wall_s": wall, "one_at_a_time": percentiles(alone),
            "httpx": {**percentiles([s for s, _, _ in via_httpx]),
                      "ok": sum(code == 200 for _, code, _ in via_httpx)}}


async def searches(url: str) -> dict:
    """SEARCHES plan searches at once; estimates while they run; every job followed to its end."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        start = time.perf_counter()
        posted = await asyncio.gather(*(timed_post(client, "/api/train/plan", b) for b in search_bodies()))
        jobs = [job for _, code, job in posted if code == 202]
        during = [(await lean_post(url, "/api/train/estimate", b))[0] for b in estimate_bodies()[:DURING]]
        views = {}
        while len(views) < len(jobs):
            for job in jobs:
                view = (await client.get(f"/api/jobs/{job['id']}")).json()
                if view["state"] in ("done", "failed", "cancelled"):
                    views[job["id"]] = view
            await asyncio.sleep(0.25)
        wall = time.perf_counter() - start
    finished = list(views.values())
    return {"submitted": len(posted), "accepted": len(jobs),
            "done_with_plans": sum(v["state"] == "done" and bool(v["result"]["plans"]) for v in finished),
            "failed_or_cancelled": sum(v["state"] != "done" for v in finished),
            "queued_s": [v["started_s"] - v["created_s"] for v in finished],
            "run_s": [v["finished_s"] - v["started_s"] for v in finished], "wall_s": wall,
            "estimates_during": percentiles(during)}


def main() -> None:
    load = os.getloadavg()[0]
    proc, url = start_server()
    try:
        first = asyncio.run(burst(url))
        second = asyncio.run(searches(url))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"{ESTIMATES} concurrent estimates: p50 {first['p50_s'] * 1e3:.0f} ms, p99 {first['p99_s'] * 1e3:.0f} ms, "
          f"max {first['max_s'] * 1e3:.0f} ms, {first['ok']}/{ESTIMATES} answered, {first['wall_s']:.2f} s wall "
          f"(target p99 < {TARGET_P99_S * 1e3:.0f} ms); one at a time p50 "
          f"{first['one_at_a_time']['p50_s'] * 1e3:.0f} ms; load average {load:.1f} on {os.cpu_count()} cores")
    h = first["httpx"]
    print(f"the same burst through httpx: p50 {h['p50_s'] * 1e3:.0f} ms, p99 {h['p99_s'] * 1e3:.0f} ms, "
          f"{h['ok']}/{ESTIMATES} answered")
    d = second["estimates_during"]
    print(f"{SEARCHES} concurrent plan searches: {second['done_with_plans']}/{SEARCHES} done with plans, "
          f"{second['failed_or_cancelled']} failed or cancelled, runs {min(second['run_s']):.1f}-"
          f"{max(second['run_s']):.1f} s, longest queue {max(second['queued_s']):.1f} s, "
          f"{second['wall_s']:.1f} s wall; estimates meanwhile p50 {d['p50_s'] * 1e3:.0f} ms, "
          f"p99 {d['p99_s'] * 1e3:.0f} ms")
    readme_blocks.save("ui_load", {"cores": os.cpu_count(), "load_average": load, "estimates": first,
                                   "searches": second,
                                   "target_p99_s": TARGET_P99_S})


if __name__ == "__main__":
    main()
