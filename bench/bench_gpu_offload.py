"""Offload/onload on a real GPU with torch_memory_saver, next to a plain device<->host copy of the same bytes.

    python bench/bench_gpu_offload.py [--gib 4] [--cycles 5] [--compare-cycles 0] [--cpu-backup pinned|mmap]
                                      [--json OUT.json] [--device cuda|cpu]

Run in a process started with torch_memory_saver's preload (scripts/gpu-tier.sh does it). Per cycle: bytes
freed on the GPU torch uses (NVML, by that device's UUID), offload (pause with CPU backup) and onload (resume)
seconds and GB/s, and a fingerprint of the weights (equal across cycles = the contents came back). The
baseline is a plain copy of the same bytes GPU -> pinned host -> GPU. `ratio` = copy seconds /
(offload + onload seconds), over the cycles after the first (the first pause allocates the host backup):
the goal is >= 0.8. The backend runs as hpcplace makes it (the host backup kept between turns);
`--compare-cycles N` then runs N more cycles with torch_memory_saver's own default (a new backup at every
pause, freed at every resume). `--cpu-backup mmap` takes the library's reclaimable host backup instead of
pinned memory. `--device cpu` runs the same loop on the CPU backend (RSS instead of NVML, pageable copies):
a smoke test of this script on machines without a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from typing import Any

GIB = 1 << 30


def fingerprint(tensors: list[Any]) -> str:
    """Cheap and content-sensitive: the int64 sum of every 32-bit word, and the bytes of both ends."""
    import torch

    digest = hashlib.sha256()
    for t in tensors:
        words = t.view(torch.int32)
        digest.update(str(int(words.sum(dtype=torch.int64))).encode())
        digest.update(words[:4096].cpu().numpy().tobytes() + words[-4096:].cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


class Meter:
    """Memory in use where the weights live: NVML on the device torch uses (found by its UUID), CUDA's own
    count for the device where NVML cannot find it (a MIG instance), else this process's RSS."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.handle = None
        self.kind = "rss"
        if device == "cuda":
            import pynvml
            import torch

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            self.kind = "cudaMemGetInfo"
            for name in [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]:
                try:
                    self.handle = pynvml.nvmlDeviceGetHandleByUUID(name)
                    self.kind = "nvml"
                    break
                except pynvml.NVMLError:
                    continue

    def used(self) -> int:
        import torch

        if self.handle is not None:
            import pynvml

            torch.cuda.synchronize()
            return int(pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        if self.device == "cuda":
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            return int(total - free)
        with open("/proc/self/smaps_rollup") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Rss:"))


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def plain_copy_s(nbytes: int, device: str, repeats: int = 3) -> float:
    """Best of `repeats`: device -> host -> device of `nbytes` (pinned host memory on CUDA)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.fill_(7)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(device == "cuda"))
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        host.copy_(src, non_blocking=True)
        sync(device)
        src.copy_(host, non_blocking=True)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    del src, host
    return best


def write(result: dict[str, Any], path: str | None) -> None:
    text = json.dumps(result, indent=1)
    print(text, flush=True)
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0, help="GiB of weights to offload (default 4)")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument(
        "--compare-cycles",
        type=int,
        default=0,
        help="then as many cycles with torch_memory_saver's default: a new host backup every pause (GPU only)",
    )
    parser.add_argument("--cpu-backup", choices=("pinned", "mmap"), default="pinned", help="the host backup (GPU only)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    import torch

    from hpcplace.runtime import gpu_checks
    from hpcplace.runtime.memory import CpuBackend, TorchMemorySaverBackend

    nbytes = int(args.gib * GIB) // 4 * 4
    memory = TorchMemorySaverBackend(cpu_backup_backend=args.cpu_backup) if args.device == "cuda" else CpuBackend()
    memory.add_tag("weights", nbytes=nbytes, backup=True)
    chunk = 256 << 20  # like a model: many tensors, not one
    weights = [
        memory.empty("weights", (min(chunk, nbytes - off) // 4,), torch.float32) for off in range(0, nbytes, chunk)
    ]
    generator = torch.Generator(device=args.device).manual_seed(0)
    for w in weights:
        w.uniform_(generator=generator)
    meter = Meter(args.device)
    first = fingerprint(weights)

    def run_cycles(count: int) -> list[dict[str, Any]]:
        done = []
        for i in range(count):
            sync(args.device)
            before = meter.used()
            t0 = time.perf_counter()
            memory.pause("weights")
            sync(args.device)
            offload_s = time.perf_counter() - t0
            paused = meter.used()
            t0 = time.perf_counter()
            memory.resume("weights")
            sync(args.device)
            onload_s = time.perf_counter() - t0
            done.append(
                {
                    "cycle": i,
                    "freed_bytes": before - paused,
                    "offload_s": offload_s,
                    "onload_s": onload_s,
                    "offload_gbps": nbytes / offload_s / 1e9,
                    "onload_gbps": nbytes / onload_s / 1e9,
                    "fingerprint": fingerprint(weights),
                }
            )
        return done

    def steady_s(cycles: list[dict[str, Any]]) -> float:
        return statistics.median(c["offload_s"] + c["onload_s"] for c in cycles[1:] or cycles)

    cycles = run_cycles(args.cycles)
    copy_s = plain_copy_s(nbytes, args.device)
    cycle_s = steady_s(cycles)
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "driver": (lambda d: d and {"version": d.version, "cuda": d.cuda_text})(gpu_checks.driver_info()),
        "backend": memory.name,
        "retain_cpu_backup": getattr(memory, "retain_cpu_backup", None),
        "cpu_backup": args.cpu_backup if args.device == "cuda" else "memfd",
        "meter": meter.kind,
        "bytes": nbytes,
        "cycles": cycles,
        "fingerprint_before": first,
        "fingerprints_equal": all(c["fingerprint"] == first for c in cycles),
        "min_freed_fraction": min(c["freed_bytes"] for c in cycles) / nbytes,
        "offload_onload_s_median": cycle_s,
        "plain_copy_s": copy_s,
        "plain_copy_gbps": 2 * nbytes / copy_s / 1e9,
        "ratio": copy_s / cycle_s,
        "goal_ratio": 0.8,
    }
    write(result, args.json)
    # torch_memory_saver's own default: a new host backup at every pause, freed at every resume
    # (csrc/cpu_backup.h), measured in the same run for comparison (written again after).
    if args.compare_cycles and isinstance(memory, TorchMemorySaverBackend):
        memory._tms.retain_cpu_backup = not memory.retain_cpu_backup
        other = run_cycles(args.compare_cycles)
        result["compared"] = {
            "retain_cpu_backup": not memory.retain_cpu_backup,
            "cycles": other,
            "fingerprints_equal": all(c["fingerprint"] == first for c in other),
            "offload_onload_s_median": steady_s(other),
            "ratio": copy_s / steady_s(other),
        }
        write(result, args.json)
    weights.clear()  # the tensors go before the backend closes
    memory.close()
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
