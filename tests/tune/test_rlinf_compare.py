"""hpcplace tune against RLinf's own auto placement on homogeneous reasoning cases.

RLinf's toolkit (toolkits/auto_placement) is not in the rlinf wheel: set HPCPLACE_RLINF_SRC to an RLinf
checkout (`git archive HEAD toolkits/auto_placement | tar -x -C DIR` is enough). The same profile data
goes to both: RLinf's per-count cost tables (what its node models derive from profile_data) become the
measured points of an hpcplace profile, with RLinf's valid counts as `counts`. hpcplace's best predicted
time must be no worse than RLinf's best total cost, its prediction of RLinf's own choice must equal
RLinf's cost (the two models agree there), and every proposal must plan.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.planner import plan_from_spec
from hpcplace.tune.tune import evaluate, search
from hpcplace.tune.tune_config import build_setup, plan_text, rewrite
from hpcplace.tune.tune_profile import parse_profile

SRC = os.environ.get("HPCPLACE_RLINF_SRC")
HELPER = Path(__file__).with_name("rlinf_auto_placement.py")


def cases() -> list[dict]:
    out = []
    costs = [(101, 224, 10), (95.7, 59.9, 30.8), (40, 200, 20), (300, 50, 60), (60, 60, 60)]
    for gpus, (a, r, i), recompute, (amp, rmp) in itertools.product(
        (16, 32, 64), costs, (True, False), ((1, 1), (2, 1), (2, 2))
    ):
        out.append(
            {
                "total_gpus": gpus,
                "actor_cost": a,
                "rollout_cost": r,
                "inference_cost": i,
                "recompute_logprobs": recompute,
                "actor_mp": amp,
                "rollout_mp": rmp,
                "group_size": 8,
                "n_minibatches": 4,
                "rollout_batch_size": 64,
                "max_running_requests": 64,
            }
        )
    return out


def _profile(case: dict, result: dict) -> str:
    B = case["rollout_batch_size"]
    lines = [f"batches: {B}", "workflow: [" + ", ".join(result["tables"]) + "]", "components:"]
    for name, table in result["tables"].items():
        points = {int(k): v * B for k, v in table.items() if v is not None}
        lines.append(f"  {name}:")
        lines.append("    seconds: {a800: {" + ", ".join(f"{k}: {v!r}" for k, v in sorted(points.items())) + "}}")
        lines.append(f"    counts: [{', '.join(str(k) for k in sorted(points))}]")
    lines.append("  reward: {with: actor}")
    return "\n".join(lines) + "\n"


def _config(case: dict) -> str:
    g = case["total_gpus"]
    place = ["    rollout: 0-7", "    actor: 8-15" if g == 16 else f"    actor: 8-{g - 1}", "    reward: 0-7"]
    if case["recompute_logprobs"]:
        place = ["    rollout: 0-3", "    inference: 4-7", f"    actor: 8-{g - 1}", "    reward: 8-15"]
    return "\n".join(
        [
            "# an RLinf reasoning config (comments outside the placement survive the rewrite)",
            "cluster:",
            f"  num_nodes: {g // 8}",
            "  component_placement:",
            *place,
            "slurm: {gpus_per_node: 8, gpu_type: a800}",
            f"actor: {{model: {{tensor_model_parallel_size: {case['actor_mp']}}}}}",
            f"rollout: {{tensor_parallel_size: {case['rollout_mp']}}}",
            "reward: {}",
            f"algorithm: {{recompute_logprobs: {str(case['recompute_logprobs']).lower()}}}",
            "",
        ]
    )


@pytest.mark.skipif(
    not SRC,
    reason="HPCPLACE_RLINF_SRC is not set: RLinf's auto-placement toolkit is not in the "
    "rlinf wheel; point it at an RLinf checkout to compare",
)
def test_no_worse_than_rlinf_auto_placement(tmp_path: Path) -> None:
    todo = cases()
    res = subprocess.run(
        [sys.executable, str(HELPER), SRC],
        input=json.dumps(todo),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout)
    compared = better = agreed = 0
    for n, (case, theirs) in enumerate(zip(todo, results)):
        if theirs["total_cost"] is None:
            continue
        (tmp_path / f"p{n}.yaml").write_text(_profile(case, theirs))
        config = tmp_path / f"c{n}.yaml"
        config.write_text(_config(case))
        spec = load_spec(config)
        setup = build_setup(spec, plan_from_spec(spec), parse_profile(tmp_path / f"p{n}.yaml"))
        found = search(setup.problem, top=3)
        assert found, case
        ours = found[0].time_s
        assert ours <= theirs["total_cost"] * (1 + 1e-9), (case, ours, theirs)
        better += ours < theirs["total_cost"] * (1 - 1e-9)
        # RLinf's own choice, predicted by hpcplace's model, costs what RLinf says
        g = theirs["gpus"]
        names = list(theirs["tables"])
        if theirs["mode"] == "collocated":
            stages = [(tuple(names), "default", case["total_gpus"])]
        else:
            stages = [((m,), "default", g[m]) for m in names]
        mine = evaluate(setup.problem, stages)
        if mine is not None:
            assert abs(mine.time_s - theirs["total_cost"]) <= 1e-6 * theirs["total_cost"], (case, mine, theirs)
            agreed += 1
        text = config.read_text()
        for cand in found:
            variant = rewrite(text, str(config), setup, cand)
            assert variant.startswith("# an RLinf reasoning config")
            plan_text(variant, str(config), format=None, overrides=())  # raises if it does not plan
        compared += 1
    print(
        f"\nRLinf comparison: {compared} cases, hpcplace better in {better}, equal in {compared - better}; "
        f"RLinf's choice predicted identically in {agreed}"
    )
    assert compared >= 60
