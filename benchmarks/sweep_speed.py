"""Searches per second of `train sweep` with the process pool and with Ray (a local Ray on this
machine's cores; on a cluster pass --address): the same grid of small-model cells on both.
Saves benchmarks/results/sweep_speed.json and re-renders the page block that quotes it.
Run: python benchmarks/sweep_speed.py [--cells N] (the issue asks for 10,000, about 20 minutes
per backend on a two-core machine; the default is what runs in a minute)."""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

import readme_blocks  # benchmarks/readme_blocks.py

from meshplan.training.search.grid import run_sweep

MODELS = ["llama-3.2-1b", "llama-3.2-3b", "gpt2", "gpt2-xl", "qwen2.5-7b", "llama-3.1-8b",
          "mistral-7b", "gemma-2-9b", "phi-3-mini", "olmo-2-7b", "llama-3-8b", "llama-2-7b",
          "llama-2-13b", "qwen2.5-14b", "qwen3-8b", "granite-3.1-8b", "mistral-nemo-12b", "gemma-3-1b",
          "megatron-gpt-1.7b", "megatron-gpt-3.6b", "megatron-gpt-7.5b", "pythia-12b", "starcoder2-15b",
          "phi-4", "mistral-7b-v0.1"]
GPUS = ["h100-sxm-80gb", "a100-sxm-80gb", "b200-180gb", "h200-sxm-141gb", "l40s-48gb", "a100-sxm-40gb",
        "h100-pcie-80gb", "mi300x-192gb", "gh200-96gb", "h800-sxm-80gb"]
SIZES = [8, 16, 32, 64, 128, 256, 512, 1024]
SEQS = [2048, 4096, 8192, 1024, 16384]
"""25 x 10 x 8 x 5 = 10,000 cells; smaller grids take a prefix of each axis (the first 240
cells are the grid earlier figures were measured on)."""


def grid(cells: int) -> tuple[list, list, list, list]:
    """The first grid of MODELS x GPUS x SIZES x SEQS with at least `cells` cells."""
    for m, g, s, q in itertools.product(range(1, len(MODELS) + 1), range(1, len(GPUS) + 1),
                                        range(1, len(SIZES) + 1), range(1, len(SEQS) + 1)):
        if m * g * s * q >= cells:
            return MODELS[:m], GPUS[:g], SIZES[:s], SEQS[:q]
    return MODELS, GPUS, SIZES, SEQS


def timed(backend: str, axes: tuple, workers: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        rows = run_sweep(*axes, global_batch_tokens=2**21, framework="megatron", out=Path(tmp) / "s.csv",
                         workers=workers, backend=backend)
        return time.perf_counter() - start, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=240)
    args = parser.parse_args()
    axes = grid(args.cells)
    workers = os.cpu_count() or 1
    data = {"workers": workers, "results": {}}
    for backend in ("local", "ray"):
        seconds, cells = timed(backend, axes, workers)
        data["results"][backend] = {"cells": cells, "seconds": seconds}
        print(f"{backend}: {cells} searches in {seconds:.1f} s = {cells / seconds:.1f} searches/s")
    readme_blocks.save("sweep_speed", data)


if __name__ == "__main__":
    main()
