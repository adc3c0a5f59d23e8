"""A Ray driver that runs RLinf 0.3.0's own scheduler on the Ray cluster hpcplace started.

Run it as RLinf runs its drivers (on the head, `python rlinf_driver.py --config-path DIR
--config-name NAME`): it loads the config with OmegaConf, builds RLinf's `Cluster` from
`cfg.cluster` (which attaches to the running Ray cluster with `ray.init(address="auto")`),
RLinf's `ComponentPlacement` from the config, asks each component's placement strategy for its
placements, then launches one trivial RLinf `WorkerGroup` per component with that strategy and
has every worker report where it runs. Everything is written to
$HPCPLACE_RUN_DIR/rlinf-report.json for the tests to compare with plan.json. No RLinf code is
copied or changed here: it is imported from the installed `rlinf` package.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path


def _stage(report: dict, name: str) -> None:
    report["stages"].append(name)
    print(f"rlinf-driver: {name}", flush=True)


def _node(node) -> dict:
    return {
        "node_rank": node.node_rank,
        "node_labels": list(node.node_labels),
        "node_ip": node.node_ip,
        "ray_id": node.ray_id,
        "num_cpus": node.num_cpus,
        "num_accelerators": node.num_accelerators,
        "accelerator_type": str(getattr(node.accelerator_type, "value", node.accelerator_type)),
        "accelerator_model": node.accelerator_model,
        "env_node_rank": node.default_env_vars.get("RLINF_NODE_RANK"),
        "env_cuda_visible_devices": node.default_env_vars.get("CUDA_VISIBLE_DEVICES"),
    }


def _placement(p) -> dict:
    return {
        "rank": p.rank,
        "cluster_node_rank": p.cluster_node_rank,
        "placement_node_rank": p.placement_node_rank,
        "local_accelerator_rank": p.local_accelerator_rank,
        "accelerator_type": str(getattr(p.accelerator_type, "value", p.accelerator_type)),
        "local_rank": p.local_rank,
        "local_world_size": p.local_world_size,
        "visible_accelerators": [str(v) for v in p.visible_accelerators],
        "isolate_accelerator": p.isolate_accelerator,
        "local_hardware_ranks": list(p.local_hardware_ranks),
    }


def _worker_class():
    from rlinf.scheduler import Worker

    class ReportWorker(Worker):
        """Says where RLinf put it: host, Ray node, RLinf ranks and the GPUs it may see."""

        def where(self) -> dict:
            import ray

            return {
                "rank": self._rank,
                "world_size": self._world_size,
                "host": socket.gethostname(),
                "ray_node_id": ray.get_runtime_context().get_node_id(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "local_rank": os.environ.get("LOCAL_RANK"),
                "node_rank_env": os.environ.get("RLINF_NODE_RANK"),
                "pid": os.getpid(),
            }

    return ReportWorker


def run(config_path: str, config_name: str, out: Path, launch_workers: bool) -> int:
    report: dict = {"stages": [], "error": None, "driver_host": socket.gethostname()}
    t0 = time.monotonic()
    try:
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(Path(config_path) / f"{config_name}.yaml")
        _stage(report, "config loaded")

        from rlinf.scheduler import Cluster
        from rlinf.scheduler.placement import ComponentPlacement

        cluster = Cluster(cluster_cfg=cfg.cluster)
        report["cluster_attach_s"] = round(time.monotonic() - t0, 3)
        _stage(report, "cluster attached")
        import ray

        report["ray_nodes"] = len([n for n in ray.nodes() if n["Alive"]])
        report["num_nodes"] = cluster.num_nodes
        report["num_accelerators"] = cluster.num_accelerators
        report["nodes"] = [_node(cluster.get_node_info(r)) for r in range(cluster.num_nodes)]
        report["node_groups"] = {
            label: {
                "node_ranks": cluster.get_node_group(label).node_ranks,
                "hardware_type": cluster.get_node_group(label).hardware_type,
            }
            for label in [g.label for g in cfg.cluster.get("node_groups", [])]
        }

        placement = ComponentPlacement(cfg, cluster)
        _stage(report, "component placement built")
        report["placements"] = {
            name: [_placement(p) for p in placement.get_strategy(name).get_placement(cluster)]
            for name in placement.components
        }
        _stage(report, "placements computed")

        if launch_workers:
            worker_cls = _worker_class()
            report["workers"] = {}
            for name in placement.components:
                group = worker_cls.create_group().launch(
                    cluster, placement_strategy=placement.get_strategy(name), name=f"probe_{name}"
                )
                report["workers"][name] = group.where().wait()
            _stage(report, "worker groups launched")
        report["ray_node_hosts"] = {n["NodeID"]: n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]}
        status = 0
    except BaseException as exc:  # noqa: BLE001 - the report says where RLinf stopped
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()
        traceback.print_exc()
        status = 1
    report["elapsed_s"] = round(time.monotonic() - t0, 3)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"rlinf-driver: report written to {out}", flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-path", required=True)
    parser.add_argument("--config-name", required=True)
    parser.add_argument("--no-workers", action="store_true", help="stop after the placements")
    parser.add_argument("--report", default=None, help="default: $HPCPLACE_RUN_DIR/rlinf-report.json")
    args = parser.parse_args(argv)
    out = Path(args.report or Path(os.environ.get("HPCPLACE_RUN_DIR", ".")) / "rlinf-report.json")
    return run(args.config_path, args.config_name, out, not args.no_workers)


if __name__ == "__main__":
    sys.exit(main())
