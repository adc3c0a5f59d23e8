"""Runs in a child started with torch_memory_saver's LD_PRELOAD (GPU machines only): pause frees
memory per NVML, resume restores the backed-up contents, a captured CUDA graph replays after a
pause/resume. Prints one JSON line of measurements."""

import json
import sys
import time

import pynvml
import torch

from hpcplace.runtime.memory import MemoryBackendError, MemoryStateError, TorchMemorySaverBackend

GIB = 1 << 30
METER = {"used_by": "nvml"}


def step(text: str) -> None:
    """Progress on stderr: torch_memory_saver exit(1)s without a Python traceback; this says where."""
    print(f"tms_child: {text}", file=sys.stderr, flush=True)


def used_bytes() -> int:
    """Device memory in use on the GPU torch uses, found by its UUID (NVML indices ignore
    CUDA_VISIBLE_DEVICES, and other GPUs may belong to other jobs or be closed to this one); where NVML
    cannot find it (a MIG instance), CUDA's own count for the device (cudaMemGetInfo)."""
    torch.cuda.synchronize()
    handle = nvml_handle(torch.cuda.current_device())
    if handle is None:
        METER["used_by"] = "cudaMemGetInfo"
        free, total = torch.cuda.mem_get_info()
        return total - free
    return pynvml.nvmlDeviceGetMemoryInfo(handle).used


def nvml_handle(device: int):
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
    for name in names:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(name)
        except pynvml.NVMLError:
            continue
    return None


def main() -> None:
    pynvml.nvmlInit()
    memory = TorchMemorySaverBackend()
    step("backend made")
    memory.add_tag("weights", backup=True)
    memory.add_tag("kv_cache", backup=False)
    memory.add_tag("cuda_graph", backup=False)
    weights = memory.empty("weights", (GIB // 2,), torch.bfloat16)  # 1 GiB
    torch.cuda.manual_seed(0)
    weights.uniform_()
    expected = weights.cpu()
    kv_cache = memory.empty("kv_cache", (2 * GIB,), torch.uint8)  # 2 GiB
    kv_cache.fill_(3)
    w = memory.empty("weights", (1024, 1024), torch.float32)
    w.copy_(torch.randn(1024, 1024, device="cuda"))
    x = memory.empty("weights", (64, 1024), torch.float32)
    x.copy_(torch.randn(64, 1024, device="cuda"))
    step("weights and kv cache allocated")

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.relu(x @ w + 1)  # warm up (cuBLAS handles, workspaces) before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with memory.cuda_graph(graph, tag="cuda_graph"):
        y = torch.relu(x @ w + 1)
    graph.replay()
    before_graph = y.clone()
    step("graph captured and replayed")

    used_before = used_bytes()
    t0 = time.perf_counter()
    memory.pause()
    pause_s = time.perf_counter() - t0
    step("paused")
    used_paused = used_bytes()
    try:
        memory.pause("weights")
        double_pause_refused = False
    except MemoryStateError:
        double_pause_refused = True
    t0 = time.perf_counter()
    memory.resume()
    torch.cuda.synchronize()
    resume_s = time.perf_counter() - t0
    step("resumed")
    used_resumed = used_bytes()

    memory.pause("kv_cache")
    try:
        memory.empty("kv_cache", (16,), torch.uint8)
        paused_region_refused = False
    except MemoryStateError:
        paused_region_refused = True
    memory.resume("kv_cache")
    try:
        TorchMemorySaverBackend()
        second_backend_refused = False
    except MemoryBackendError:
        second_backend_refused = True
    restored = bool(torch.equal(weights.cpu(), expected))
    graph.replay()
    graph_same = bool(torch.equal(y, before_graph))
    x.mul_(2)
    graph.replay()
    graph_tracks_input = bool(torch.allclose(y, torch.relu(x @ w + 1), rtol=1e-3, atol=1e-3))
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(0),
                "torch": torch.__version__,
                "used_before_gib": used_before / GIB,
                "used_paused_gib": used_paused / GIB,
                "used_resumed_gib": used_resumed / GIB,
                "freed_gib": (used_before - used_paused) / GIB,
                "pause_ms": pause_s * 1e3,
                "resume_ms": resume_s * 1e3,
                "restored": restored,
                "graph_replays_after_resume": graph_same,
                "graph_tracks_input": graph_tracks_input,
                "double_pause_refused": double_pause_refused,
                "paused_region_refused": paused_region_refused,
                "second_backend_refused": second_backend_refused,
                "kv_cache_len": kv_cache.numel(),
                **METER,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
