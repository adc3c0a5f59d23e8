"""slime's own placement (a THUDM/slime checkout: HPCPLACE_SLIME_SRC) on a local Ray cluster with fake GPUs and
one IP per node (127.0.0.2, .3, ...: slime sorts its bundles by node IP), to see where it puts every rank.

Run: slime's `create_placement_groups(args)` (its one PACK group, its InfoActors, its (IP, GPU id) sort), then
its `create_training_models`-path `allocate_train_group(...).create()` with a probe `actor_cls` (slime's own
parameter for the actor class; the probe records its node IP and GPU instead of starting Megatron). The SGLang
engines would start vLLM-free only with SGLang installed: for them the report lists the rollout group's slice
of slime's reordered bundles (`pgs["rollout"]`, slime's own), each with its node IP and GPU id.

    python slime_driver.py --report OUT.json --nodes 8,8 -- --actor-num-nodes 1 ... (the placement flags)

Without --nodes it attaches to RAY_ADDRESS (the cluster hpcplace started; the checkout on a path every node
sees) and reports each node's `hpcplace.node_rank` label (node_ranks: Ray node id -> node rank)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import ray


class ProbeTrainActor:
    """A stand-in for slime's MegatronTrainRayActor: the constructor and the calls RayTrainGroup makes."""

    def __init__(self, world_size: int, rank: int, master_addr: Any, master_port: Any) -> None:
        self.rank = rank

    def get_master_addr_and_port(self) -> tuple[str, int]:
        return "127.0.0.1", 29500

    def init(self, args: Any, role: str, **kwargs: Any) -> dict[str, Any]:
        return {
            "role": role,
            "rank": self.rank,
            "ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpus": [int(g) for g in ray.get_gpu_ids()],
        }


def slime_args(flags: list[str]) -> argparse.Namespace:
    """The attributes placement reads, from the placement flags (slime's defaults otherwise, and its
    slime_validate_args rules for the ones it derives)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--actor-num-nodes", type=int, default=1)
    parser.add_argument("--actor-num-gpus-per-node", type=int, default=8)
    parser.add_argument("--rollout-num-gpus", type=int, default=None)
    parser.add_argument("--rollout-num-gpus-per-engine", type=int, default=1)
    parser.add_argument("--num-gpus-per-node", type=int, default=8)
    parser.add_argument("--colocate", action="store_true")
    parser.add_argument("--advantage-estimator", default="grpo")
    parser.add_argument("--prefill-num-servers", type=int, default=None)
    parser.add_argument("--sglang-config", default=None)
    parser.add_argument("--sglang-pp-size", type=int, default=1)
    args = parser.parse_args(flags)
    args.debug_train_only = args.debug_rollout_only = args.rollout_external = False
    if args.colocate and args.rollout_num_gpus is None:
        args.rollout_num_gpus = args.actor_num_nodes * args.actor_num_gpus_per_node
    args.use_critic = args.advantage_estimator == "ppo"
    args.critic_num_nodes, args.critic_num_gpus_per_node = args.actor_num_nodes, args.actor_num_gpus_per_node
    args.train_env_vars, args.offload_train, args.train_backend = {}, False, "megatron"
    args.use_routing_replay, args.megatron_config_path = False, None
    args.kl_coef, args.use_kl_loss, args.use_opd, args.opd_type = 0.0, False, False, None
    args.update_weight_start_version = 0
    args.hf_checkpoint = "model"  # a model path for SglangConfig.resolve (--hf-checkpoint)
    return args


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--nodes", default="")
    ours, rest = sys.argv[1:], []
    if "--" in ours:
        cut = ours.index("--")
        ours, rest = ours[:cut], ours[cut + 1 :]
    opts = parser.parse_args(ours)
    entry = next((i for i, w in enumerate(rest) if w.endswith(("train.py", "train_async.py"))), None)
    rest = rest[entry + 1 :] if entry is not None else rest  # `-- python3 train.py FLAGS`: the command as planned
    report: dict[str, Any] = {"error": None, "argv": rest}
    cluster = None
    try:
        src = os.environ.get("HPCPLACE_SLIME_SRC") or os.environ["SLIME_SRC"]  # SLIME_SRC: in a job's launch.env
        sys.path.insert(0, src)
        path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        ips = []
        if opts.nodes:
            from ray.cluster_utils import Cluster

            cluster = Cluster()
            for i, gpus in enumerate(opts.nodes.split(",")):
                ips.append(f"127.0.0.{i + 2}")
                cluster.add_node(num_gpus=int(gpus), num_cpus=int(gpus) * 2 + 4, node_ip_address=ips[-1])
        ray.init(
            address=cluster.address if cluster is not None else None, runtime_env={"env_vars": {"PYTHONPATH": path}}
        )
        report["node_ranks"] = {
            n["NodeID"]: int((n.get("Labels") or {}).get("hpcplace.node_rank", -1)) for n in ray.nodes() if n["Alive"]
        }
        report["node_ips"] = ips
        from slime.ray.placement_group import allocate_train_group, create_placement_groups

        args = slime_args(rest)
        pgs = create_placement_groups(args)
        group = allocate_train_group(
            args, args.actor_num_nodes, args.actor_num_gpus_per_node, pgs["actor"], actor_cls=ProbeTrainActor
        )
        report["actor"] = group.create()
        pg, indices, gpu_ids = pgs["rollout"]
        nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        table = ray.util.placement_group_table(pg)["bundles_to_node_id"]
        report["rollout_bundles"] = [
            {"ip": nodes[table[b]], "node_id": table[b], "gpu": int(g)} for b, g in zip(indices, gpu_ids)
        ]
        if args.prefill_num_servers is not None or args.sglang_config is not None:
            # slime's own engine groups (SglangConfig: its YAML reader and its per-group defaults; no SGLang
            # needed), in the order start_rollout_servers (slime/ray/rollout.py, which imports SGLang) gives them
            # their GPUs: model by model, a model's encoder groups first
            from slime.backends.sglang_utils.sglang_config import SglangConfig

            config = (
                SglangConfig.from_yaml(args.sglang_config)
                if args.sglang_config is not None
                else SglangConfig.from_prefill_num_servers(args)
            )
            assert config.total_num_gpus == args.rollout_num_gpus  # slime's _resolve_sglang_config
            report["server_groups"] = []
            for model in config.models:
                model.resolve(args)
                encoders = [g for g in model.server_groups if g.worker_type == "encoder"]
                for g in encoders + [g for g in model.server_groups if g.worker_type != "encoder"]:
                    report["server_groups"].append(
                        {
                            "worker_type": g.worker_type,
                            "num_gpus": g.num_gpus,
                            "num_gpus_per_engine": g.num_gpus_per_engine,
                        }
                    )
    except Exception as exc:  # noqa: BLE001 - the report names any failure: the test reads it, not a traceback
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()
    finally:
        Path(opts.report).write_text(json.dumps(report, indent=1), encoding="utf-8")
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
