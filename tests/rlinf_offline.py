"""RLinf 0.3.0's own view of a planned cluster, computed in this process without starting Ray.

RLinf builds its cluster in `Cluster.__init__`: `NodeProbe` starts one `_RemoteNodeProbe` Ray actor
per node, each reads RLINF_NODE_RANK and enumerates the node's hardware (accelerators through NVML),
then NodeProbe sorts the nodes and assembles RLinf's node groups. Here all of that RLinf code runs
unchanged; only Ray's actor calls are made in-process (`.options().remote()` constructs the probe
class with the node's environment, `ray.get` returns the values) and NVML reports each node's planned
GPU count (the same detection fake the Ray tests put on the raylets). RLinf's placement classes
(`ComponentPlacement` and rlinf.utils.placement's subclasses) then run on that `Cluster` unchanged,
so tests compare hpcplace's plan with RLinf's own placements over many configs in milliseconds each;
tests/ray/test_frameworks_*.py check the same thing on a real Ray cluster.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

FAKE_NVML = Path(__file__).resolve().parent / "ray" / "fake_gpu" / "sitecustomize.py"
GPU_MODEL = "NVIDIA A800-SXM4-80GB"


@functools.cache
def _nvml_gpus() -> dict[str, int]:
    """Ray's NVML binding answers for the node being probed: returns the (mutable) GPU count it reports."""
    import ray._private.thirdparty.pynvml as pynvml

    spec = importlib.util.spec_from_file_location("hpcplace_fake_nvml", FAKE_NVML)
    fake = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(fake)  # type: ignore[union-attr]
    current = {"gpus": 0}
    fake.patch_nvml(pynvml, count=lambda: current["gpus"], model=lambda: GPU_MODEL)
    return current


@contextlib.contextmanager
def _in_process_ray(node_gpus: Sequence[int], order: Sequence[int]) -> Iterator[None]:
    """Ray's actor API as NodeProbe uses it, served in-process; `order` is the order in which Ray
    lists the nodes (by cluster node rank), so RLinf's own sorting is exercised."""
    import ray
    from rlinf.scheduler.cluster import node as node_mod
    from rlinf.scheduler.cluster.cluster import Cluster

    probe_cls = node_mod._RemoteNodeProbe.__ray_actor_class__
    gpus = _nvml_gpus()
    ray_id = {r: f"{r + 1:056x}" for r in range(len(node_gpus))}  # Ray node ids are 28-byte hex
    ray_nodes = [
        {
            "NodeID": ray_id[r],
            "NodeManagerAddress": f"10.0.0.{r + 1}",
            "Alive": True,
            "NodeManagerHostname": f"node-{r}",
            "Resources": {"CPU": 16.0},
        }
        for r in order
    ]

    class Handle:
        def __init__(self, probe: Any) -> None:
            self.get_node_info = mock.Mock(remote=probe.get_node_info)

    class Launcher:
        def remote(self, node_info: dict[str, Any], *args: Any) -> Handle:
            rank = int(node_info["NodeID"], 16) - 1
            gpus["gpus"] = node_gpus[rank]
            with mock.patch.dict(os.environ, {"RLINF_NODE_RANK": str(rank)}):
                return Handle(probe_cls(node_info, *args))

    context = mock.Mock(get_node_id=lambda: ray_id[0])  # the driver runs on the head, node rank 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(ray, "is_initialized", lambda: True))
        stack.enter_context(mock.patch.object(ray, "get", lambda handles: list(handles)))
        stack.enter_context(mock.patch.object(ray, "get_runtime_context", lambda: context))
        stack.enter_context(mock.patch.object(Cluster, "get_alive_nodes", staticmethod(lambda: ray_nodes)))
        stack.enter_context(mock.patch.object(node_mod._RemoteNodeProbe, "options", lambda **_: Launcher()))
        yield


def rlinf_cluster(cluster_cfg: Any, node_gpus: Sequence[int], order: Sequence[int] | None = None) -> Any:
    """RLinf's `Cluster` for `cluster_cfg` (an OmegaConf `cluster:` section) on nodes whose cluster
    node rank r has node_gpus[r] GPUs, built by RLinf's NodeProbe (the singleton is bypassed, so
    every call gives a fresh cluster)."""
    from rlinf.scheduler.cluster.cluster import Cluster
    from rlinf.scheduler.cluster.config import ClusterConfig
    from rlinf.scheduler.cluster.node import NodeProbe

    config = ClusterConfig.from_dict_cfg(cluster_cfg)
    num_nodes = len(node_gpus)
    with _in_process_ray(node_gpus, order if order is not None else range(num_nodes)):
        probe = NodeProbe(num_nodes, config)
    cluster = object.__new__(Cluster)  # as Cluster._init_and_launch_managers fills it, minus the managers
    cluster._cluster_cfg, cluster._num_nodes = config, num_nodes
    cluster._nodes, cluster._node_groups = probe.nodes, probe.node_groups
    cluster._has_initialized = True
    return cluster


def placement_report(
    cfg: Any, cluster: Any, placement_class: str = "ComponentPlacement", engines: Sequence[str] = ()
) -> dict[str, Any]:
    """What tests/ray/drivers/rlinf_driver.py reports on a real Ray cluster, from the offline one:
    nodes, node groups and every component's placements, in the shape framework_checks compares.
    `engines` are the multi-agent engines RLinf's drivers place with
    `get_strategy(name, PackedPlacementStrategy)` (rollout's process size and stride)."""
    from rlinf.scheduler import PackedPlacementStrategy
    from rlinf.scheduler.placement import ComponentPlacement

    sys.path.insert(0, str(Path(__file__).resolve().parent / "ray" / "drivers"))
    try:
        from rlinf_driver import _node, _placement
    finally:
        sys.path.pop(0)
    if placement_class == "ComponentPlacement":
        placement = ComponentPlacement(cfg, cluster)
    else:
        import rlinf.utils.placement as classes

        placement = getattr(classes, placement_class)(cfg, cluster)

    def strategy(name: str) -> Any:
        if name in engines:
            return placement.get_strategy(name, PackedPlacementStrategy)
        return placement.get_strategy(name)

    labels = [g.label for g in cfg.cluster.get("node_groups", None) or []]
    return {
        "error": None,
        "num_nodes": cluster.num_nodes,
        "ray_nodes": cluster.num_nodes,
        "nodes": [_node(cluster.get_node_info(r)) for r in range(cluster.num_nodes)],
        "node_groups": {
            label: {
                "node_ranks": cluster.get_node_group(label).node_ranks,
                "hardware_type": cluster.get_node_group(label).hardware_type,
            }
            for label in labels
        },
        "placements": {
            name: [_placement(p) for p in strategy(name).get_placement(cluster)] for name in placement.components
        },
    }
