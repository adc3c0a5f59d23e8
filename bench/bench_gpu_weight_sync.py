"""Weight sync on a real GPU through the /dev/shm weight store: trainer GPU -> shm -> inference GPU.

    python bench/bench_gpu_weight_sync.py [--gib 4] [--repeat 5] [--dir /dev/shm] [--json OUT.json]

The collocated path (runtime/weight_store.py) as the demo uses it: `publish` a state dict of GPU tensors
(each copied device -> the store's mapped slot), then `consume` it and `copy_into` GPU model tensors (mapped
slot -> device). Baselines with the same tensors: device -> host and host -> device copies into a pageable
and into a pinned buffer. GB/s, best of `--repeat` (steady state: both slots already written once), whether
the store's mappings were page-locked (runtime/cuda_host.py), and the first write and read of each slot.
bf16, Llama-7B-like shapes (bench_weight_store.llm_state_dict). scripts/gpu-tier.sh runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from bench_weight_store import llm_state_dict, nbytes  # bench/, this script's folder, is on sys.path

from hpcplace.runtime import cuda_host
from hpcplace.runtime import weight_store as ws


def best_s(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default="/dev/shm")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    source = {n: t.to("cuda") for n, t in llm_state_dict(args.gib).items()}  # the trainer's weights
    model = {n: torch.empty_like(t) for n, t in source.items()}  # the inference side's parameters
    total = nbytes(source)
    job = tempfile.mkdtemp(prefix="hpcplace-bench-", dir=args.dir)
    publisher = ws.WeightPublisher(job, "bench")
    reader = ws.WeightReader(job, "bench")

    def consume() -> None:
        with reader.consume() as snap:
            snap.copy_into(model)

    first = {}
    for i in (1, 2):  # both slots written, mapped (and page-locked) once: the publisher maps both at once
        first[f"publish {i}" + (" (maps + pins both slots)" if i == 1 else "")] = best_s(
            lambda: publisher.publish(source), 1
        )
        first[f"consume {i} (maps + pins slot {i - 1})"] = best_s(consume, 1)
    pinning = {
        "publisher": [bool(s.pinned) for s in publisher._slots],  # the store's internals: a bench
        "reader": [bool(s.pinned) for s in reader._slots.values()],
        "why_not": cuda_host.unavailable_reason(),
    }
    assert all(torch.equal(model[n], source[n]) for n in source), "the inference side got other weights"
    flat = torch.empty(total, dtype=torch.uint8)
    pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    flat.fill_(0), pinned.fill_(0)

    def to_host(buffer: torch.Tensor) -> None:
        offset = 0
        for t in source.values():
            n = t.numel() * t.element_size()
            buffer[offset : offset + n].view(t.dtype).view(t.shape).copy_(t)
            offset += n

    def to_device(buffer: torch.Tensor) -> None:
        offset = 0
        for t in model.values():
            n = t.numel() * t.element_size()
            t.copy_(buffer[offset : offset + n].view(t.dtype).view(t.shape))
            offset += n

    seconds = {
        "publish (GPU -> shm slot)": best_s(lambda: publisher.publish(source), args.repeat),
        "consume + copy_into (shm slot -> GPU)": best_s(consume, args.repeat),
        "device -> pageable host": best_s(lambda: to_host(flat), args.repeat),
        "device -> pinned host": best_s(lambda: to_host(pinned), args.repeat),
        "pageable host -> device": best_s(lambda: to_device(flat), args.repeat),
        "pinned host -> device": best_s(lambda: to_device(pinned), args.repeat),
    }
    reader.close()
    publisher.remove()
    publisher.close()
    ws.cleanup(job)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "bytes": total,
        "tensors": len(source),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "pinned": pinning,
        "gbps": {k: round(total / s / 1e9, 2) for k, s in seconds.items()},
        "seconds": {k: round(s, 4) for k, s in seconds.items()},
        "first_seconds": {k: round(s, 4) for k, s in first.items()},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
