"""Start-up speed of the command line (the speed issue's bounds: `meshplan --help` <= 0.3 s,
`meshplan train estimate ...` <= 0.6 s wall): the median wall time of fresh processes. Saves
benchmarks/results/startup_speed.json and re-renders the page block that quotes it.
Run: python benchmarks/startup_speed.py"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import readme_blocks  # benchmarks/readme_blocks.py

RUNS = 9
CASES = {
    "import meshplan": [sys.executable, "-c", "import meshplan"],
    "meshplan --help": [sys.executable, "-m", "meshplan", "--help"],
    "meshplan gpus list": [sys.executable, "-m", "meshplan", "gpus", "list"],
    "meshplan train estimate (llama-3.1-8b on 8 H100, full recompute)": [
        sys.executable, "-m", "meshplan", "train", "estimate", "--model", "llama-3.1-8b", "--gpu",
        "h100-sxm-80gb", "--num-gpus", "8", "--global-batch-size", "64", "--seq-len", "8192",
        "--recompute", "full"],
}


# An installed package runs from compiled bytecode; a sandbox that sets PYTHONDONTWRITEBYTECODE
# would recompile every module on every start (about 0.15 s here), which no user pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(argv: list[str], repeats: int = RUNS) -> float:
    """Median wall seconds of `repeats` fresh processes (one warm-up run first: disk cache and
    bytecode written)."""
    subprocess.run(argv, check=True, capture_output=True, env=ENV)
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=ENV)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    results = {name: wall(argv) for name, argv in CASES.items()}
    for name, seconds in results.items():
        print(f"{name}: {seconds:.3f} s")
    readme_blocks.save("startup_speed", {"runs": RUNS, "median_wall_s": results})


if __name__ == "__main__":
    main()
