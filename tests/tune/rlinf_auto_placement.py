"""Run RLinf's own auto placement (toolkits/auto_placement of an RLinf checkout) on reasoning cases.

Usage: python rlinf_auto_placement.py RLINF_SRC < cases.json > results.json. A separate process: the
toolkit imports its modules by bare names (node, util, placement) and keeps a global config.
Each case: {total_gpus, actor_cost, rollout_cost, inference_cost, recompute_logprobs, actor_mp,
rollout_mp, group_size, n_minibatches, rollout_batch_size, max_running_requests}. Each result:
RLinf's best total cost, its GPUs per component, and the per-count cost tables its model derives
from the profile (seconds per group batch; null where RLinf has none).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS


def main() -> None:
    src = Path(sys.argv[1]) / "toolkits" / "auto_placement"
    sys.path.insert(0, str(src))
    try:
        import scipy.optimize  # noqa: F401  (only the embodied env profiler fits curves)
    except ImportError:  # a library boundary: the reasoning path never calls curve_fit
        fake = types.ModuleType("scipy.optimize")
        fake.curve_fit = None  # type: ignore[attr-defined]
        sys.modules["scipy"] = types.ModuleType("scipy")
        sys.modules["scipy"].optimize = fake  # type: ignore[attr-defined]
        sys.modules["scipy.optimize"] = fake
    from auto_placement_worker import AutoPlacementWorker, get_workflow_graph
    from util import init_global_config

    out = []
    for case in json.load(sys.stdin):
        g = case["total_gpus"]
        cfg = NS(
            runner=NS(task_type="reasoning", seq_length=4096),
            algorithm=NS(
                recompute_logprobs=case["recompute_logprobs"],
                group_size=case["group_size"],
                n_minibatches=case["n_minibatches"],
            ),
            data=NS(rollout_batch_size=case["rollout_batch_size"]),
            rollout=NS(max_running_requests=case["max_running_requests"], gpu_memory_utilization=0.5),
            profile_data=NS(
                actor_cost=case["actor_cost"], rollout_cost=case["rollout_cost"], inference_cost=case["inference_cost"]
            ),
        )
        comps = ["actor", "rollout"] + (["inference"] if case["recompute_logprobs"] else [])
        mp = {"actor": case["actor_mp"], "rollout": case["rollout_mp"], "inference": case["actor_mp"]}
        placement = NS(_cluster_num_gpus=g, _components=comps)
        for c in comps:
            setattr(placement, f"{c}_world_size", g)
            setattr(placement, f"{c}_dp_size", g // mp[c])
        init_global_config(cfg, placement, NS(num_accelerators=g))
        worker = AutoPlacementWorker(cfg, placement, get_workflow_graph(cfg))
        res = worker.run()
        names = ["rollout", "inference", "actor"] if case["recompute_logprobs"] else ["rollout", "actor"]
        out.append(
            {
                "total_cost": None if res is None else res.total_cost,
                "mode": None if res is None else res.mode.value,
                "gpus": {} if res is None else {n.role: len(r) for n, r in res.placement.items()},
                "tables": {n: {str(k): v for k, v in worker.get_node(n)._gpu_num_to_cost.items()} for n in names},
            }
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
