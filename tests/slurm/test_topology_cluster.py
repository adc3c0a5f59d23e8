"""Racks and switches on the real test cluster (Slurm 25.05+: topology.yaml; up.sh). Partition `nvl` is two
NVLink blocks of two nodes that interleave with the names (rack1 = nvl-1,3; rack2 = nvl-2,4), partition
`nvtree` two leaf switches (leaf1 = nvl-1,4; leaf2 = nvl-2,3): Slurm's node order is never the fabric's, so a
job that numbered its nodes as Slurm lists them would split every 2-node tensor-parallel group. Each task
reports where it ran; every group must sit inside one block (switch) of the site's own topology."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hpcplace.slurm.fabric import parse_fabric
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


@pytest.fixture
def fabric_cluster(slurm_cluster: LiveCluster) -> LiveCluster:
    if booted_version()[:2] < (25, 5):
        pytest.skip(
            f"one topology per partition (topology.yaml) needs Slurm 25.05+; this cluster is {booted_version()}"
        )
    return slurm_cluster


def site_units(cluster: LiveCluster, topology: str) -> dict[str, str]:
    """host -> block (leaf switch), as the site itself reports it."""
    res = cluster.run("scontrol", "show", "topology", topology)
    assert res.returncode == 0, res.stderr
    fabric = parse_fabric(res.stdout, topology)
    return {host: unit.name for unit in fabric.units for host in unit.nodes}


@pytest.mark.parametrize(
    ("partition", "topology", "site", "asked"),
    [("nvl", "{block: 2}", "nvblock", "--segment=2"), ("nvtree", "{switch: 2}", "nvtree", "--switches=2")],
)
def test_every_tensor_parallel_group_lands_inside_one_block(
    fabric_cluster: LiveCluster, tmp_path: Path, partition: str, topology: str, site: str, asked: str
) -> None:
    units = site_units(fabric_cluster, site)
    run = run_config(config_yaml(tmp_path, JOB.format(partition=partition, topology=topology)), tmp_path)
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
    for comp in ("trainer", "engine"):  # each component is one tensor-parallel group of 8 GPUs on 2 nodes
        blocks = {units[by_rank[(comp, r)]] for r in range(8)}
        hosts_of = {by_rank[(comp, r)] for r in range(8)}
        assert len(hosts_of) == 2 and len(blocks) == 1, (comp, hosts_of, blocks)


def test_validate_checks_the_plan_against_the_sites_blocks(fabric_cluster: LiveCluster, tmp_path: Path) -> None:
    good = config_yaml(tmp_path, JOB.format(partition="nvl", topology="{block: 2}"), "good.yaml")
    res = cli("validate", good)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "node group 'nvl' (partition 'nvl'): 2 block(s) of topology 'nvblock' hold the partition" in res.stdout
    wrong = config_yaml(tmp_path, JOB.format(partition="nvl", topology="{block: 4}"), "wrong.yaml")
    res = cli("validate", wrong)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "the config says 4 nodes per block; topology 'nvblock''s blocks hold 2 (BlockSize)" in res.stderr
    flat = config_yaml(tmp_path, JOB.format(partition="nvl", topology="{switch: 2}"), "flat.yaml")
    res = cli("validate", flat)
    assert (
        res.returncode == 3 and "the plan assumes a tree topology; topology 'nvblock' is block topology" in res.stderr
    )


def test_topology_site_reads_the_partitions_blocks(fabric_cluster: LiveCluster, tmp_path: Path) -> None:
    config = config_yaml(tmp_path, JOB.format(partition="nvl", topology="site"))
    res = cli("plan", config, "--json")
    assert res.returncode == 0, res.stderr
    (group,) = json.loads(res.stdout)["node_groups"]
    assert group["topology"] == {"kind": "block", "size": 2, "segment": 2, "site_name": "nvblock"}


RAY_DRIVER = (
    "import json, sys, ray; ray.init(logging_level='ERROR'); "
    "json.dump([{'host': n['NodeManagerHostname'], 'resources': n['Resources']} for n in ray.nodes() if n['Alive']], "
    "open(sys.argv[1], 'w'))"
)


def test_the_ray_nodes_advertise_their_block_and_fabric_rank(
    fabric_cluster: LiveCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NeMo-RL's keys (its ray.sub registers them): `nvlink_domain_<block>` on every node of a block, and
    `topo_rank` = node rank + 1 in the fabric order, by which NeMo-RL keeps a segment in one domain."""
    monkeypatch.setenv("HPCPLACE_RAY_ARGS", "--object-store-memory=80000000")
    units = site_units(fabric_cluster, "nvblock")
    config = config_yaml(tmp_path, JOB.format(partition="nvl", topology="{block: 2}"))
    out = tmp_path / "nodes.json"
    job_id = submit_cli(config, tmp_path / "run", "--driver", "--", sys.executable, "-c", RAY_DRIVER, str(out))
    status = wait_done(tmp_path / "run", timeout=300)
    assert status.state == "COMPLETED", (job_id, status.text)
    fabric = [line.split() for line in (tmp_path / "run" / "logs" / "fabric.txt").read_text().splitlines()]
    rank_of = {host: int(j) for _, j, host, _ in fabric}
    nodes = {n["host"]: n["resources"] for n in json.loads(out.read_text())}
    assert sorted(nodes) == sorted(units)
    for host, resources in nodes.items():
        assert resources[f"nvlink_domain_{units[host]}"] == 1, (host, resources)
        assert resources["topo_rank"] == rank_of[host] + 1, (host, resources)
        assert not [k for k in resources if k.startswith("nvlink_domain_") and k != f"nvlink_domain_{units[host]}"]


def test_a_group_that_fits_one_block_gets_one_block(fabric_cluster: LiveCluster, tmp_path: Path) -> None:
    """Two nodes and blocks of two: no --segment, and Slurm's block plugin keeps the job in one block."""
    text = JOB.format(partition="nvl", topology="{block: 2}").replace("nodes: 4", "nodes: 2")
    text = text.replace('    engine: "8-15"\n', "").replace(
        '  engine: {command: ["true"], tensor_parallel_size: 8}\n', ""
    )
    units = site_units(fabric_cluster, "nvblock")
    run = run_config(config_yaml(tmp_path, text), tmp_path)
    assert run.status.state == "COMPLETED", run.status.text
    assert "--segment" not in (run.run_dir / "job.sbatch").read_text()
    hosts = {json.loads(p.read_text())["host"] for p in run.reports.glob("*.json")}
    assert len(hosts) == 2 and len({units[h] for h in hosts}) == 1, hosts
