"""The check beside an OpenRLHF driver (runtime/openrlhf_watch.py): train_ppo_ray's placement groups are unnamed
and name no node group, so Ray may put a role on another role's node group; the watcher finds each role by its
Ray actors' class, checks the actor's node or every bundle of the placement group it sits in, and stops the
driver naming the role, the node and both node groups. Pure parts against a plan.json made by
formats/openrlhf.py (a heterogeneous plan: vLLM and ref on `gen`); the class names against the installed
openrlhf's source; the whole watcher on a real local Ray cluster, beside a stand-in driver that makes actors of
OpenRLHF's class names in placement groups pinned to the right or the wrong nodes."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_spec
from hpcplace.runtime.openrlhf_watch import (
    ROLE_CLASSES,
    ActorRow,
    expected_actors,
    nodes_by_id,
    placed_actors,
    placement_problem,
    planned_roles,
)
from hpcplace.runtime.ray_driver import watcher_module

SITE = """\
slurm:
  partition: a800
  gpus_per_node: 2
  node_groups:
    gen: {partition: h20, gpus_per_node: 2}
  pools: {vllm: gen, ref: gen}
"""
# actor 1 x 2 (a PACK group) on default; ref 1 x 1 (no group: a free 1-GPU actor) and one vLLM engine of TP 2
# (a group of 2 bundles) on gen
ARGV = [
    "python3",
    "-m",
    "openrlhf.cli.train_ppo_ray",
    "--actor.num_nodes",
    "1",
    "--actor.num_gpus_per_node",
    "2",
    "--ref.num_gpus_per_node",
    "1",
    "--vllm.num_engines",
    "1",
    "--vllm.tensor_parallel_size",
    "2",
    "--actor.model_name_or_path",
    "m",
    "--reward.remote_url",
    "http://rm:5000",
    "--algo.advantage.estimator",
    "reinforce_baseline",
    "--rollout.n_samples_per_prompt",
    "2",
]


def plan_header(tmp_path: Path, site: str = SITE) -> dict[str, Any]:
    (tmp_path / "site.yaml").write_text(site)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        spec = load_spec("site.yaml", driver=ARGV)
    finally:
        os.chdir(old)
    data: dict[str, Any] = json.loads(plan_to_json(plan_from_spec(spec)))
    return data


@pytest.fixture
def header(tmp_path: Path) -> dict[str, Any]:
    """plan.json: actor on default (node rank 0), vllm on gen's rank 1, ref on gen's rank 2."""
    return plan_header(tmp_path)


def test_planned_roles_and_actor_counts(header: dict[str, Any]) -> None:
    assert [(g["label"], g["first_node_rank"], g["num_nodes"]) for g in header["node_groups"]] == [
        ("default", 0, 1),
        ("gen", 1, 2),
    ]
    assert planned_roles(header) == {"actor": "default", "ref": "gen", "vllm": "gen"}
    assert expected_actors(header) == {"actor": 2, "ref": 1, "vllm": 1}


def test_the_driver_step_starts_the_watcher_for_a_heterogeneous_plan(header: dict[str, Any], tmp_path: Path) -> None:
    assert watcher_module("openrlhf", header) == "hpcplace.runtime.openrlhf_watch"
    assert watcher_module("nemo_rl", header) == "hpcplace.runtime.nemo_rl_watch"
    assert watcher_module("verl", header) is None
    one = plan_header(tmp_path, "slurm: {partition: a800, gpus_per_node: 4}\n")
    assert len(one["node_groups"]) == 1 and watcher_module("openrlhf", one) is None


def test_role_classes_are_the_installed_openrlhfs() -> None:
    """Every class train_ppo_ray's placement makes an actor of (RayActorGroup's third argument,
    create_vllm_engines' `.options(...)`) is a @ray.remote class of openrlhf/trainer/ray/ that ROLE_CLASSES maps
    to its role; read from the installed source with ast (importing it imports vllm)."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    root = Path(next(iter(spec.submodule_search_locations)))
    remote = set()
    for path in sorted((root / "trainer" / "ray").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any("ray.remote" in ast.unparse(d) for d in node.decorator_list):
                remote.add(node.name)
    assert remote == {
        "PolicyModelActor",
        "ReferenceModelActor",
        "CriticModelActor",
        "RewardModelActor",
        "RolloutRayActor",
    }
    groups = {}  # the actor group variable train() assigns -> the class it places
    for node in ast.walk(ast.parse((root / "cli" / "train_ppo_ray.py").read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "RayActorGroup"
        ):
            groups[ast.unparse(node.targets[0])] = ast.unparse(node.value.args[2])
    assert groups == {
        "actor_model": "PolicyModelActor",
        "ref_model": "ReferenceModelActor",
        "critic_model": "CriticModelActor",
        "reward_model": "RewardModelActor",
    }
    assert {ROLE_CLASSES[c] for c in groups.values()} == {"actor", "ref", "critic", "reward"}
    engines = (root / "trainer" / "ray" / "vllm_engine.py").read_text(encoding="utf-8")
    assert "RolloutRayActor.options(" in engines and ROLE_CLASSES["RolloutRayActor"] == "vllm"


NODES = [
    {"NodeID": "n0", "NodeManagerHostname": "a800-01", "Labels": {"hpcplace.node_rank": "0"}},
    {"NodeID": "n1", "NodeManagerHostname": "h20-01", "Labels": {"hpcplace.node_rank": "1"}},
    {"NodeID": "n2", "NodeManagerHostname": "h20-02", "Labels": {"hpcplace.node_rank": "2"}},
    {"NodeID": "other", "Labels": {}},
]
LABELS = {0: "default", 1: "gen", 2: "gen"}


def _table(**groups: list[str]) -> dict[str, dict[str, Any]]:
    """placement_group_table()'s shape: group id -> its bundles and the node of each placed one."""
    return {
        pg: {
            "bundles": {i: {"GPU": 1.0, "CPU": 1.0} for i in range(len(nodes))},
            "bundles_to_node_id": dict(enumerate(nodes)),
        }
        for pg, nodes in groups.items()
    }


RIGHT_ACTORS = [
    ActorRow("RolloutRayActor", "n1", "pgv"),
    ActorRow("PolicyModelActor", "n0", "pga"),
    ActorRow("PolicyModelActor", "n0", "pga"),
    ActorRow("ReferenceModelActor", "n2", ""),
    ActorRow("SomeoneElsesActor", "n0", "pgv"),
]


def test_right_placement_passes_and_counts(header: dict[str, Any]) -> None:
    nodes = nodes_by_id(NODES, LABELS)
    assert nodes["n2"] == (2, "gen", "h20-02") and "other" not in nodes
    table = _table(pgv=["n1", "n1"], pga=["n0", "n0"])
    planned = planned_roles(header)
    assert placement_problem(RIGHT_ACTORS, table, nodes, planned) is None
    assert placed_actors(RIGHT_ACTORS, table) == expected_actors(header)
    # a group Ray has not placed whole yet, an actor not scheduled yet: not counted, no problem
    pending = _table(pgv=["n1", ""], pga=["n0", "n0"])
    waiting = [*RIGHT_ACTORS[:3], ActorRow("ReferenceModelActor", "", "")]
    assert placement_problem(waiting, pending, nodes, planned) is None
    assert placed_actors(waiting, pending) == {"actor": 2}


def test_engine_tp_bundle_on_the_actors_node_group(header: dict[str, Any]) -> None:
    """The engine's actor sits on bundle 0 (gen); its second TP bundle, where vLLM's worker runs, is on node 0."""
    problem = placement_problem(
        RIGHT_ACTORS, _table(pgv=["n1", "n0"], pga=["n0", "n0"]), nodes_by_id(NODES, LABELS), planned_roles(header)
    )
    assert problem == (
        "OpenRLHF's vllm (RolloutRayActor) has bundle 1 of its placement group on node rank 0 (a800-01), in node "
        "group default; the plan puts vllm on node group gen: Ray chose the node (train_ppo_ray's placement "
        "groups ask only for CPU and GPU), so it would not run where planned"
    )


def test_free_actor_and_swapped_groups(header: dict[str, Any]) -> None:
    nodes, planned = nodes_by_id(NODES, LABELS), planned_roles(header)
    table = _table(pgv=["n1", "n1"], pga=["n0", "n0"])
    stray = [*RIGHT_ACTORS[:3], ActorRow("ReferenceModelActor", "n0", "")]
    problem = placement_problem(stray, table, nodes, planned)
    assert problem is not None and problem.startswith(
        "OpenRLHF's ref (ReferenceModelActor) has the actor on node rank 0 (a800-01), in node group default; "
        "the plan puts ref on node group gen"
    )
    swapped = _table(pgv=["n0", "n0"], pga=["n2", "n1"])
    problem = placement_problem(RIGHT_ACTORS, swapped, nodes, planned)
    assert problem is not None and problem.startswith("OpenRLHF's vllm (RolloutRayActor) has bundle 0 of its")
    problem = placement_problem(RIGHT_ACTORS[1:], swapped, nodes, planned)
    assert problem is not None and problem.startswith(
        "OpenRLHF's actor (PolicyModelActor) has bundle 0 of its placement group on node rank 2 (h20-02), in node "
        "group gen; the plan puts actor on node group default"
    )
    # older releases' class names are the same roles
    old = [ActorRow("ActorModelRayActor", "n0", "pgv"), ActorRow("LLMRayActor", "n0", "pga")]
    problem = placement_problem(old, table, nodes, planned)
    assert problem is not None and problem.startswith("OpenRLHF's actor (ActorModelRayActor) has bundle 0")


ray = pytest.importorskip("ray")

# A stand-in for train_ppo_ray: placement groups of {GPU: 1, CPU: 1} bundles, each bundle pinned to a node by a
# custom resource, and actors of OpenRLHF's class names in them (or free), as RayActorGroup and
# create_vllm_engines make them; it holds them HOLD_S seconds and exits 0.
STAND_IN = """
import json, sys, time
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

address, spec, hold = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, log_to_driver=False)
classes = {}
def cls(name):
    if name not in classes:
        classes[name] = ray.remote(num_gpus=1)(type(name, (), {"ping": lambda self: 1}))
    return classes[name]
actors = []
for group in spec:
    if "node" in group:  # no placement group: a 1-GPU actor Ray places alone
        actors.append(cls(group["cls"]).options(num_cpus=1, resources={f"hp_node_{group['node']}": 0.01}).remote())
        continue
    pg = placement_group(
        [{"GPU": 1, "CPU": 1, f"hp_node_{n}": 0.01} for n in group["bundles"]], strategy="PACK"
    )
    ray.get(pg.ready(), timeout=60)
    for i, name in enumerate(group["actors"]):
        actors.append(
            cls(name).options(
                num_cpus=1,
                num_gpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i),
            ).remote()
        )
ray.get([a.ping.remote() for a in actors], timeout=60)
print("placed", flush=True)
time.sleep(hold)
"""
HOLD_S = 20


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    """Node rank 0 (default) and node rank 1 (gen), 4 fake GPUs each."""
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    for rank in range(2):
        cluster.add_node(
            num_cpus=5, num_gpus=4, resources={f"hp_node_{rank}": 1}, labels={"hpcplace.node_rank": str(rank)}
        )
    cluster.wait_for_nodes()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def _run(
    address: str, header: dict[str, Any], run_dir: Path, spec: list[dict[str, Any]]
) -> tuple[int, str, int, float]:
    """The stand-in driver with the watcher beside it: the watcher's exit code and stderr, the driver's exit code,
    and how long the driver ran."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    plan = run_dir / "plan.json"
    plan.write_text(json.dumps(header))
    start = time.monotonic()
    driver = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, address, json.dumps(spec), str(HOLD_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = subprocess.Popen(
        [sys.executable, "-m", "hpcplace.runtime.openrlhf_watch", address, str(plan), str(run_dir), str(driver.pid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        driver.communicate(timeout=90)  # reaped here: an exited child left unreaped would look alive to the watcher
        ran = time.monotonic() - start
        _, err = watcher.communicate(timeout=30)
        return watcher.returncode, err, driver.returncode, ran
    finally:
        for proc in (driver, watcher):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_watcher_lets_a_driver_placed_as_planned_run(two_nodes: str, tmp_path: Path) -> None:
    header = plan_header(tmp_path)
    spec = [
        {"actors": ["RolloutRayActor"], "bundles": [1, 1]},
        {"actors": ["PolicyModelActor", "PolicyModelActor"], "bundles": [0, 0]},
        {"cls": "ReferenceModelActor", "node": 1},
    ]
    code, err, driver_code, ran = _run(two_nodes, header, tmp_path / "right", spec)
    assert code == 0, err
    assert "OpenRLHF's roles are on their planned node groups: actor on default, ref on gen, vllm on gen" in err
    assert driver_code == 0 and ran >= HOLD_S  # the driver ran to its end
    assert not (tmp_path / "right" / "logs" / "ray-errors.txt").exists()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (  # the engine's second TP bundle on the actor's node group
            [
                {"actors": ["RolloutRayActor"], "bundles": [1, 0]},
                {"actors": ["PolicyModelActor", "PolicyModelActor"], "bundles": [0, 0]},
            ],
            "OpenRLHF's vllm (RolloutRayActor) has bundle 1 of its placement group on node rank 0 (",
        ),
        (  # the actor's group on gen's node
            [{"actors": ["PolicyModelActor", "PolicyModelActor"], "bundles": [1, 1]}],
            "OpenRLHF's actor (PolicyModelActor) has bundle 0 of its placement group on node rank 1 (",
        ),
    ],
    ids=["engine_tp_bundle", "actor_group"],
)
def test_watcher_stops_a_driver_whose_role_landed_elsewhere(
    two_nodes: str, tmp_path: Path, spec: list[dict[str, Any]], said: str
) -> None:
    header = plan_header(tmp_path)
    code, err, driver_code, ran = _run(two_nodes, header, tmp_path / "wrong", spec)
    assert code == 1, err
    assert said in err and "the plan puts" in err
    assert driver_code != 0 and ran < HOLD_S  # stopped, not run to its end
    recorded = (tmp_path / "wrong" / "logs" / "ray-errors.txt").read_text()
    assert recorded.startswith("OpenRLHF placement: " + said)


# OpenRLHF's own train_ppo_ray (tests/ray/drivers/openrlhf_driver.py: its placement code, probes named as its
# actor classes) with the watcher beside it. vLLM (one engine of TP 4) planned on gen's 4-GPU node, the actor
# (1 x 2) on default's 2-GPU node; OpenRLHF makes the engines' group first, and Ray's PACK puts a group of 4
# on the one node that holds 4 GPUs: the node group whose node has 4 GPUs decides where vLLM lands.
E2E_SITE = """\
slurm:
  partition: a800
  gpus_per_node: 2
  node_groups:
    gen: {partition: h20, gpus_per_node: 4}
  pools: {vllm: gen}
"""
E2E_ARGV = [
    "--actor.num_nodes",
    "1",
    "--actor.num_gpus_per_node",
    "2",
    "--vllm.num_engines",
    "1",
    "--vllm.tensor_parallel_size",
    "4",
    "--algo.kl.init_coef",
    "0",
    "--actor.model_name_or_path",
    "m",
    "--reward.remote_url",
    "http://rm:5000",
    "--algo.advantage.estimator",
    "reinforce_baseline",
    "--rollout.n_samples_per_prompt",
    "2",
]
OPENRLHF_DRIVER = Path(__file__).parent / "drivers" / "openrlhf_driver.py"


@pytest.mark.parametrize(("gpus", "stopped"), [((2, 4), False), ((4, 2), True)], ids=["as_planned", "swapped"])
def test_watcher_beside_openrlhfs_own_placement(tmp_path: Path, gpus: tuple[int, int], stopped: bool) -> None:
    if importlib.util.find_spec("openrlhf") is None:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    from ray.cluster_utils import Cluster

    (tmp_path / "site.yaml").write_text(E2E_SITE)
    spec = load_spec(str(tmp_path / "site.yaml"), driver=["python3", "-m", "openrlhf.cli.train_ppo_ray", *E2E_ARGV])
    header = json.loads(plan_to_json(plan_from_spec(spec)))
    assert planned_roles(header) == {"actor": "default", "vllm": "gen"}
    assert [g["gpus_per_node"] for g in header["node_groups"]] == [[2], [4]]
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps(header))
    cluster = Cluster()
    try:
        for rank, count in enumerate(gpus):  # node rank 0 is default's node, 1 gen's: GPU counts as given
            cluster.add_node(num_cpus=count * 2 + 4, num_gpus=count, labels={"hpcplace.node_rank": str(rank)})
        cluster.wait_for_nodes()
        report = tmp_path / "report.json"
        driver = subprocess.Popen(
            [
                sys.executable,
                str(OPENRLHF_DRIVER),
                "--report",
                str(report),
                "--address",
                cluster.address,
                "--",
                *E2E_ARGV,
            ],
            cwd=tmp_path,
            env={**os.environ, "OPENRLHF_PROBE_PARENT": str(tmp_path)},  # a stopped driver leaves its probes there
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hpcplace.runtime.openrlhf_watch",
                cluster.address,
                str(run_dir / "plan.json"),
                str(run_dir),
                str(driver.pid),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, driver_err = driver.communicate(timeout=240)
            _, err = watcher.communicate(timeout=30)
        finally:
            for proc in (driver, watcher):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        cluster.shutdown()
    if not stopped:
        assert watcher.returncode == 0, err
        assert "OpenRLHF's roles are on their planned node groups: actor on default, vllm on gen" in err
        assert driver.returncode == 0, driver_err[-3000:]
        data = json.loads(report.read_text())
        assert data["error"] is None, data.get("traceback") or data["error"]
        assert len(data["records"]) == 3  # both actor ranks and the engine ran
        assert not (run_dir / "logs" / "ray-errors.txt").exists()
        return
    assert watcher.returncode == 1, err
    # stopped before its end, however the driver's Ray takes the watcher's SIGTERM: Ray's handler raises
    # SystemExit, which the test driver catches and reports (its own exit code is then 0); when the signal lands
    # inside Ray's core worker, Ray aborts (SIGABRT, seen on a loaded 2-core machine); the SIGKILL 10 s later
    # leaves no report
    stop = json.loads(report.read_text())["error"] if report.exists() else None
    assert driver.returncode in (-signal.SIGKILL, -signal.SIGABRT) or stop in ("SystemExit(1)", "SystemExit(15)"), (
        driver.returncode,
        stop,
        driver_err[-3000:],
    )
    said = (run_dir / "logs" / "ray-errors.txt").read_text()
    assert (
        "OpenRLHF's vllm (RolloutRayActor) has bundle 0 of its placement group on node rank 0 (" in said
        and "in node group default; the plan puts vllm on node group gen" in said
    ) or (
        "OpenRLHF's actor (PolicyModelActor) has bundle 0 of its placement group on node rank 1 (" in said
        and "in node group gen; the plan puts actor on node group default" in said
    ), said
