"""The function AReaL's RayLauncher runs in each task (it loads this file by path, as it loads a
trainer entry point): it says where the task landed."""

import os
import socket


def where(index: int) -> dict:
    import ray

    return {
        "index": index,
        "host": socket.gethostname(),
        "ray_node_id": ray.get_runtime_context().get_node_id(),
        "rlinf_node_rank": os.environ.get("RLINF_NODE_RANK"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
    }
