"""A stand-in workload for `tune --submit-top` on the test cluster: each process does WORK seconds of
work split over the devices it sees (CUDA_VISIBLE_DEVICES), then prints the metric line `compare` reads.

    python metric_driver.py WORK ITERATIONS
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    work, iterations = float(sys.argv[1]), int(sys.argv[2])
    devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    share = max(1, len(devices))
    for step in range(iterations):
        start = time.monotonic()
        time.sleep(work / share)
        print(f"hpcplace-metric iteration_s={time.monotonic() - start:.4f} step={step} devices={share}", flush=True)


if __name__ == "__main__":
    main()
