"""Racks and switches on the real test cluster (up.sh). Slurm 25.05+ (topology.yaml): partition `nvl` is two
NVLink blocks of two nodes that interleave with the names (rack1 = nvl-1,3; rack2 = nvl-2,4), partition
`nvtree` two leaf switches (leaf1 = nvl-1,4; leaf2 = nvl-2,3). Before 25.05 (topology.conf) one topology
serves every partition: the same blocks (24.05+; `up.sh --fabric tree` the switches) or, on 22.05, the same
switches, so a case runs where its kind is the site's. Slurm's node order is never the fabric's, so a job that
numbered its nodes as Slurm lists them would split every 2-node tensor-parallel group. Each task reports where
it ran; every group must sit inside one block (switch) of the site's own topology."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hpcplace.config.topology import BLOCK, TREE
from hpcplace.slurm import slurm_cli
from hpcplace.slurm.fabric import SEGMENT_OLDEST, SiteFabric, parse_fabric
from tests.slurm.conftest import LiveCluster, booted_version, cli, config_yaml, submit_cli, wait_done
from tests.slurm.test_cluster import run_config

pytestmark = pytest.mark.slurm

JOB = """
name: fabric
cluster:
  node_groups:
    - {{label: nvl, partition: {partition}, nodes: 4, gpus_per_node: 4, gpu_type: gb200, cpus_per_node: 4,
       mem_per_node: 4000, topology: {topology}}}
  component_placement:
    trainer: "0-7"
    engine: "8-15"
components:
  trainer: {{command: ["true"], tensor_parallel_size: 8}}
  engine: {{command: ["true"], tensor_parallel_size: 8}}
slurm: {{time: "00:05:00"}}
"""


def site_fabric(cluster: LiveCluster, partition: str) -> SiteFabric:
    """The topology the partition uses, as the site itself reports it (its Topology=, else the cluster's)."""
    res = cluster.run("scontrol", "show", "partition", partition)
    assert res.returncode == 0, res.stderr
    name = slurm_cli.parse_key_values(res.stdout.replace("\n", " ")).get("Topology") or None
    res = cluster.run("scontrol", "show", "topology", *([name] if name else []))
    assert res.returncode == 0, res.stderr
    return parse_fabric(res.stdout, name)


def fabric_of_kind(cluster: LiveCluster, partition: str, kind: str) -> SiteFabric:
    fabric = site_fabric(cluster, partition)
    if fabric.kind != kind:
        version = booted_version()
        pytest.skip(
            f"partition {partition}'s topology is {fabric.kind or 'flat'} on Slurm {version[0]}.{version[1]:02d}.{version[2]}, not {kind} "
            "(before 25.05 one topology serves every partition: up.sh --fabric block|tree picks it)"
        )
    return fabric


def site_units(fabric: SiteFabric) -> dict[str, str]:
    """host -> block (leaf switch) of the nvl nodes."""
    return {host: unit.name for unit in fabric.units for host in unit.nodes if host.startswith("nvl-")}


def where(fabric: SiteFabric) -> str:
    return f"topology {fabric.name!r}" if fabric.name else "the cluster's topology"


@pytest.mark.parametrize(
    ("partition", "kind", "topology", "asked", "sizes"),
    [
        ("nvl", BLOCK, "{block: 2}", "--segment=2", "tensor_parallel_size: 8"),
        ("nvtree", TREE, "{switch: 2}", "--switches=2", "tensor_parallel_size: 8"),
        # a MoE trainer: TP 2 groups fit a node, its ETP (= TP) x EP 4 all-to-all spans two nodes
        ("nvl", BLOCK, "{block: 2}", "--segment=2", "tensor_parallel_size: 2, expert_parallel_size: 4"),
    ],
    ids=["block", "tree", "block-experts"],
)
def test_every_tensor_parallel_group_lands_inside_one_block(
    slurm_cluster: LiveCluster, tmp_path: Path, partition: str, kind: str, topology: str, asked: str, sizes: str
) -> None:
    """Each component is one group of 8 GPUs on 2 nodes (a tensor-parallel group, or the MoE all-to-all of
    expert-parallel ranks) that must sit inside one block (leaf switch)."""
    units = site_units(fabric_of_kind(slurm_cluster, partition, kind))
    text = JOB.format(partition=partition, topology=topology).replace("tensor_parallel_size: 8", sizes)
    run = run_config(config_yaml(tmp_path, text), tmp_path)
    assert run.status.state == "COMPLETED", run.status.text
    script = (run.run_dir / "job.sbatch").read_text()
    assert f"#SBATCH {asked}\n" in script
    assert run.plan.topology_crossings == ()
    # the job's own record of its order: plan node j -> host and its block, grouped by block
    fabric = [line.split() for line in (run.run_dir / "logs" / "fabric.txt").read_text().splitlines()]
    assert [(int(g), int(j)) for g, j, _, _ in fabric] == [(0, j) for j in range(4)]
    assert all(units[host] == unit for _, _, host, unit in fabric), (fabric, units)
    hosts = [host for _, _, host, _ in fabric]
    assert hosts != sorted(hosts), "the site's blocks interleave with the names: Slurm's order would split them"
    assert [unit for *_, unit in fabric][::2] == [unit for *_, unit in fabric][1::2]
    reports = [json.loads(p.read_text()) for p in run.reports.glob("*.json")]
    assert len(reports) == 16
    by_rank: dict[tuple[str, int], str] = {}
    for report in reports:
        env = report["env"]
        comp, rank = env["HPCPLACE_COMPONENT"], int(env["HPCPLACE_RANK"])
        process = run.plan.component(comp).processes[rank]
        assert report["host"] == hosts[process.group_node_index], (comp, rank, report["host"])
        by_rank[(comp, rank)] = report["host"]
    for comp in ("trainer", "engine"):  # each component is one group of 8 GPUs on 2 nodes
        blocks = {units[by_rank[(comp, r)]] for r in range(8)}
        hosts_of = {by_rank[(comp, r)] for r in range(8)}
        assert len(hosts_of) == 2 and len(blocks) == 1, (comp, hosts_of, blocks)


@pytest.mark.parametrize(
    ("partition", "kind", "topology", "other", "held"),
    [
        ("nvl", BLOCK, "{block: 2}", "{switch: 2}", "2 block(s)"),
        ("nvtree", TREE, "{switch: 2}", "{block: 2}", "2 leaf switch(es)"),
    ],
)
def test_validate_checks_the_plan_against_the_sites_blocks(
    slurm_cluster: LiveCluster, tmp_path: Path, partition: str, kind: str, topology: str, other: str, held: str
) -> None:
    fabric = fabric_of_kind(slurm_cluster, partition, kind)
    good = config_yaml(tmp_path, JOB.format(partition=partition, topology=topology), "good.yaml")
    res = cli("validate", good)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"node group 'nvl' (partition {partition!r}): {held} of {where(fabric)} hold the partition" in res.stdout
    if kind == BLOCK:
        wrong = config_yaml(tmp_path, JOB.format(partition=partition, topology="{block: 4}"), "wrong.yaml")
        res = cli("validate", wrong)
        assert res.returncode == 3, res.stdout + res.stderr
        assert f"the config says 4 nodes per block; {where(fabric)}'s blocks hold 2 (BlockSize)" in res.stderr
    mismatched = config_yaml(tmp_path, JOB.format(partition=partition, topology=other), "mismatched.yaml")
    res = cli("validate", mismatched)
    assumed = TREE if kind == BLOCK else BLOCK
    assert res.returncode == 3, res.stdout + res.stderr
    assert f"the plan assumes a {assumed} topology; {where(fabric)} is {kind} topology" in res.stderr


@pytest.mark.parametrize(("partition", "kind"), [("nvl", BLOCK), ("nvtree", TREE)])
def test_topology_site_reads_the_partitions_blocks(
    slurm_cluster: LiveCluster, tmp_path: Path, partition: str, kind: str
) -> None:
    fabric = fabric_of_kind(slurm_cluster, partition, kind)
    config = config_yaml(tmp_path, JOB.format(partition=partition, topology="site"))
    res = cli("plan", config, "--json")
    assert res.returncode == 0, res.stderr
    (group,) = json.loads(res.stdout)["node_groups"]
    expected: dict[str, object] = {"kind": kind, "size": 2}
    expected.update({"segment": 2} if kind == BLOCK else {"switches": 2})
    expected.update({"site_name": fabric.name} if fabric.name else {})
    assert group["topology"] == expected


RAY_DRIVER = (
    "import json, sys, ray; ray.init(logging_level='ERROR'); "
    "json.dump([{'host': n['NodeManagerHostname'], 'resources': n['Resources']} for n in ray.nodes() if n['Alive']], "
    "open(sys.argv[1], 'w'))"
)


@pytest.mark.parametrize(
    ("partition", "kind", "topology"), [("nvl", BLOCK, "{block: 2}"), ("nvtree", TREE, "{switch: 2}")]
)
def test_the_ray_nodes_advertise_their_block_and_fabric_rank(
    slurm_cluster: LiveCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    partition: str,
    kind: str,
    topology: str,
) -> None:
    """NeMo-RL's keys (its ray.sub registers them): `nvlink_domain_<block>` on every node of a block (none on
    a tree), and `topo_rank` = node rank + 1 in the fabric order, by which NeMo-RL keeps a segment in one
    domain."""
    monkeypatch.setenv("HPCPLACE_RAY_ARGS", "--object-store-memory=80000000")
    units = site_units(fabric_of_kind(slurm_cluster, partition, kind))
    config = config_yaml(tmp_path, JOB.format(partition=partition, topology=topology))
    out = tmp_path / "nodes.json"
    job_id = submit_cli(config, tmp_path / "run", "--driver", "--", sys.executable, "-c", RAY_DRIVER, str(out))
    status = wait_done(tmp_path / "run", timeout=300)
    assert status.state == "COMPLETED", (job_id, status.text)
    fabric = [line.split() for line in (tmp_path / "run" / "logs" / "fabric.txt").read_text().splitlines()]
    rank_of = {host: int(j) for _, j, host, _ in fabric}
    nodes = {n["host"]: n["resources"] for n in json.loads(out.read_text())}
    assert sorted(nodes) == sorted(units)
    for host, resources in nodes.items():
        assert resources["topo_rank"] == rank_of[host] + 1, (host, resources)
        domains = [k for k in resources if k.startswith("nvlink_domain_")]
        assert domains == ([f"nvlink_domain_{units[host]}"] if kind == BLOCK else []), (host, resources)
        assert all(resources[k] == 1 for k in domains)


def test_a_group_that_fits_one_block_gets_one_block(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Two nodes and blocks of two: no --segment, and Slurm's block plugin keeps the job in one block."""
    text = JOB.format(partition="nvl", topology="{block: 2}").replace("nodes: 4", "nodes: 2")
    text = text.replace('    engine: "8-15"\n', "").replace(
        '  engine: {command: ["true"], tensor_parallel_size: 8}\n', ""
    )
    units = site_units(fabric_of_kind(slurm_cluster, "nvl", BLOCK))
    run = run_config(config_yaml(tmp_path, text), tmp_path)
    assert run.status.state == "COMPLETED", run.status.text
    assert "--segment" not in (run.run_dir / "job.sbatch").read_text()
    hosts = {json.loads(p.read_text())["host"] for p in run.reports.glob("*.json")}
    assert len(hosts) == 2 and len({units[h] for h in hosts}) == 1, hosts


def test_a_segment_is_refused_where_slurm_has_none(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Slurm before 24.05 has no --segment: a plan that needs one is refused, with the site's version, by
    `validate` and by `submit --no-validate`, before anything is submitted."""
    version = booted_version()
    if version[:2] >= SEGMENT_OLDEST:
        pytest.skip(f"Slurm {version[0]}.{version[1]:02d}.{version[2]} has --segment")
    config = config_yaml(tmp_path, JOB.format(partition="nvl", topology="{block: 2}"))
    said = f"the job asks for --segment=2 (topology: block), which Slurm {version[0]}.{version[1]:02d} does not have"
    res = cli("validate", config)
    assert res.returncode == 3 and said in res.stderr, res.stdout + res.stderr
    res = cli("submit", config, "-o", tmp_path / "run", "--no-validate")
    assert res.returncode == 3 and said in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "run").exists()  # refused before the run directory, let alone sbatch
