"""RLinf robot node groups whose nodes have different hardware (issue 10): RLinf counts a node's robots
as the hardware configs naming its node_rank, and hardware ranks run over the group's nodes in order,
so a node may have none. Such groups plan, lower and render: the het component asks every node for the
fewest robots (GRES omitted at 0). Checked against RLinf's own NodeProbe and placement (tests/rlinf_offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.formats import load_spec
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file, plan_from_spec
from hpcplace.slurm.slurm_job import lower
from tests.planner.conftest import Yaml, cluster, group, plan_of

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rlinf_robots_uneven.yaml"


def hw_of(plan, name: str) -> list[tuple[int, tuple[int, ...]]]:  # type: ignore[no-untyped-def]
    return [(p.cluster_node_rank, p.local_hardware_ranks) for p in plan.component(name).processes]


def test_uneven_robot_group_plans_with_rlinf_hardware_ranks() -> None:
    plan = plan_from_file(FIXTURE)
    franka = plan.cluster.node_groups[1]
    assert franka.hardware is not None and franka.hardware.per_node == (2, 0, 1)
    # hardware ranks 0,1 are node 1's two arms; node 2 has none; rank 2 is node 3's arm (its local 0)
    assert hw_of(plan, "env") == [(1, (0,)), (1, (1,)), (3, (0,))]
    assert hw_of(plan, "teleop") == [(2, ())]
    assert any(
        "Franka per node differs (node 1: 2, node 2: 0, node 3: 1)" in w and "no GRES" in w for w in plan.warnings
    )


def test_uneven_robot_group_lowers_and_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = lower(plan_from_file(FIXTURE))
    assert [c.gres for c in job.components] == ["gpu:a800:8", None]
    assert not any(a.startswith("--gres") for a in job.components[1].sbatch_args)
    assert main(["render", str(FIXTURE), "-o", str(tmp_path / "run"), "--driver", "--", "python", "main.py"]) == 0
    text = (tmp_path / "run" / "job.sbatch").read_text()
    assert "1: franka -> partition robot, 3 node(s) (cluster node ranks 1-3), GRES none" in text
    assert main(["plan", str(FIXTURE)]) == 0  # `plan` checks what render would refuse
    assert "Franka per node differs" in capsys.readouterr().out


def test_fewest_robots_are_asked_of_every_node() -> None:
    plan = plan_of(
        cluster(group("gpu", 8), group("robot", [0, 0, 0], hardware=("robot", [3, 1, 2]))),
        {"actor": ("gpu", "0-7"), "arm": ("robot", "0-5")},
    )
    assert [c.gres for c in lower(plan).components] == ["gpu:8", "robot:1"]
    assert hw_of(plan, "arm") == [(1, (0,)), (1, (1,)), (1, (2,)), (2, (0,)), (3, (0,)), (3, (1,))]


def test_different_gpu_counts_in_a_group_are_still_refused() -> None:
    """GPUs are bound per task through GRES, so a group's nodes must agree on them (unchanged)."""
    from hpcplace.errors import SlurmError

    plan = plan_of(cluster(group("mixed", [8, 4])), {"actor": ("mixed", "0-11")})
    with pytest.raises(SlurmError, match=r"different GPU counts per node \[8, 4\]"):
        lower(plan)


def test_upstream_shape_one_robot_on_the_first_of_two_nodes(yml: Yaml) -> None:
    """RLinf's dual-arm collection configs: a two-node robot group whose one DualFranka config names node
    0 (node 1 runs cameras/controllers): the env lands on node 0, the group asks for no GRES."""
    path = yml.write("""
        cluster:
          num_nodes: 2
          component_placement:
            env: {node_group: franka, placement: 0}
          node_groups:
            - label: franka
              node_ranks: 0-1
              hardware:
                type: DualFranka
                configs:
                  - {left_robot_ip: 10.0.0.2, right_robot_ip: 10.0.0.3, left_controller_node_rank: 0,
                     right_controller_node_rank: 1, node_rank: 0}
        slurm: {partition: robot}
        """)
    plan = plan_from_spec(load_spec(path))
    assert hw_of(plan, "env") == [(0, (0,))]
    assert lower(plan).components[0].gres is None


def test_rlinf_agrees_on_the_uneven_robot_group() -> None:
    """RLinf 0.3.0's NodeProbe (robots enumerated by its Franka policy from the configs) and
    ComponentPlacement, run in-process, place every process exactly where plan.json does."""
    pytest.importorskip("rlinf")
    from omegaconf import OmegaConf

    from tests.ray.framework_checks import rlinf_mismatches
    from tests.rlinf_offline import placement_report, rlinf_cluster

    cfg = OmegaConf.load(FIXTURE)
    plan = json.loads(plan_to_json(plan_from_file(FIXTURE)))
    gpus = {
        r: g["gpus_per_node"][j]
        for g in plan["node_groups"]
        for j, r in enumerate(range(g["first_node_rank"], g["first_node_rank"] + g["num_nodes"]))
    }
    rlinf = rlinf_cluster(cfg.cluster, [gpus[r] for r in range(len(gpus))], order=[2, 0, 3, 1])
    assert [rlinf.get_node_info(r).get_hw_resource_count("Franka") for r in range(4)] == [0, 2, 0, 1]
    report = placement_report(cfg, rlinf)
    assert rlinf_mismatches(report, plan) == []


HETEROGENEOUS = Path(__file__).resolve().parents[2] / "configs" / "rlinf-heterogeneous.yaml"


def test_site_gres_name_for_rlinf_hardware_type(tmp_path: Path) -> None:
    """RLinf names robot arms by their class (`type: Franka`); the site's gres.conf may call them
    `robot`: `slurm.node_groups.<label>.hardware_gres` renders that GRES and survives plan.json."""
    from hpcplace.slurm.submit import load_plan

    plan = plan_from_file(HETEROGENEOUS)
    robot = next(g for g in plan.cluster.node_groups if g.label == "robot")
    assert robot.hardware is not None and (robot.hardware.type, robot.hardware.gres) == ("Franka", "robot")
    assert "--gres=robot:4" in lower(plan).components[-1].sbatch_args
    path = tmp_path / "plan.json"
    path.write_text(plan_to_json(plan), encoding="utf-8")
    assert [c.gres for c in lower(load_plan(path)).components] == [c.gres for c in lower(plan).components]
    without = plan_from_file(HETEROGENEOUS, overrides=["~slurm.node_groups.robot.hardware_gres"])
    assert "--gres=Franka:4" in lower(without).components[-1].sbatch_args


def test_hardware_gres_on_a_group_without_hardware_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(HETEROGENEOUS), "--set", "slurm.node_groups.cpu.hardware_gres=robot"]) == 2
    err = capsys.readouterr().err
    assert (
        "hardware_gres is set but node group 'cpu' declares no hardware" in err and "rlinf-heterogeneous.yaml:" in err
    )
