"""Wall time of `meshplan validate` on both calibration files (the speed issue's bound: <= 60 s
together), with the default workers (the CPU count) and with one process. Saves
benchmarks/results/validate_speed.json and re-renders the page block that quotes it.
Run: python benchmarks/validate_speed.py"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from meshplan.records import CALIBRATION

import readme_blocks  # benchmarks/readme_blocks.py

FILES = CALIBRATION


def wall(path: Path, workers: int) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "meshplan", "validate", str(path), "--quiet", "--json",
                    "--workers", str(workers)], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    cores = os.cpu_count() or 1
    data = {"cores": cores, "wall_s": {}}
    for workers in sorted({cores, 1}, reverse=True):
        times = {kind: wall(path, workers) for kind, path in FILES.items()}
        data["wall_s"][str(workers)] = times
        print(f"{workers} worker(s): " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
              + f", together {sum(times.values()):.1f} s")
    readme_blocks.save("validate_speed", data)


if __name__ == "__main__":
    main()
