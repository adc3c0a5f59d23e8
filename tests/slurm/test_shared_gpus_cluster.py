"""GPU jobs that share nodes (`slurm: {exclusive: false}`, issue 27) on the real test cluster, under both
ConstrainDevices modes: two jobs at once on the same two a800 nodes, each holding 2 of a node's 8 GPUs,
so Slurm gives the second job other GPUs than the first (physical ids bound with map_gpu would fail it).
Their plans' GPU ids are job-relative: every task must run on the GPU of its own job's allocation on its
node (`scontrol show job -d`: GRES IDX) that its plan id indexes (ascending), the collocated component on
exactly the physical GPUs of the one it shares them with; both jobs end COMPLETED; `status` names each
node's physical GPUs. And a Ray-mode job beside a steps-mode one: each raylet gets its own job's GPUs."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpcplace.slurm import submit
from tests.slurm.conftest import LiveCluster, cli, config_yaml, submit_cli, wait_done

pytestmark = pytest.mark.slurm

REPORTER = Path(__file__).with_name("reporter.py")
PROBE = Path(__file__).parent.parent / "ray" / "probe_driver.py"  # one task per Ray node, its CUDA_VISIBLE_DEVICES


def config(tmp_path: Path, name: str, out: Path) -> Path:
    command = json.dumps([sys.executable, str(REPORTER), str(out)])
    text = f"""\
        name: {name}
        cluster:
          node_groups:
            - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 2, gpu_type: a800, cpus_per_node: 4, mem_per_node: 4000}}
          component_placement:
            actor,rollout: {{node_group: a800, placement: "0-3"}}
        components:
          actor: {{command: {command}}}
          rollout: {{command: {command}}}
        slurm: {{exclusive: false, time: "5"}}
        """
    return config_yaml(tmp_path, textwrap.dedent(text), f"{name}.yaml")


def allocation(cluster: LiveCluster, job_id: str) -> dict[str, list[int]]:
    """host -> the physical GPU ids Slurm gave the job there (`scontrol show job -d`, GRES=...(IDX:...))."""
    text = cluster.run("scontrol", "show", "job", "-d", job_id).stdout
    out: dict[str, list[int]] = {}
    for nodes, idx in re.findall(r"Nodes=(\S+) .*?GRES=\S*?gpu\S*?\(IDX:([0-9,-]+)\)", text):
        ids = [i for part in idx.split(",") for i in _span(part)]
        hosts = cluster.run("scontrol", "show", "hostnames", nodes).stdout.split()
        for host in hosts:
            out[host] = sorted(ids)
    return out


def _span(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def test_two_gpu_jobs_share_nodes_each_on_its_own_gpus(lab: LiveCluster, tmp_path: Path) -> None:
    runs, jobs, outs = {}, {}, {}
    hold = {**lab.env, "HPCPLACE_TEST_HOLD": "6"}
    for tag in ("A", "B"):
        outs[tag] = tmp_path / f"out-{tag}"
        outs[tag].mkdir()
        runs[tag] = tmp_path / f"run-{tag}"
        # every task holds 6 s (reporter.py): the two jobs run at once
        jobs[tag] = submit_cli(config(tmp_path, f"gpus-{tag}", outs[tag]), runs[tag], env=hold)
    script = (runs["A"] / "job.sbatch").read_text()
    assert "--gpu-bind" not in script.split("# ====")[-1] and "GPU ids: job-relative" in script
    assert json.loads((runs["A"] / "plan.json").read_text())["gpu_ids"] == "job-relative"
    allocated: dict[str, dict[str, list[int]]] = {}
    deadline = time.monotonic() + 90
    while len(allocated) < 2 and time.monotonic() < deadline:  # both running at once: both hold their GPUs
        allocated = {t: a for t in jobs if len(a := allocation(lab, jobs[t])) == 2}
        time.sleep(0.3)
    assert len(allocated) == 2, {t: lab.run("scontrol", "show", "job", "-d", j).stdout for t, j in jobs.items()}
    for host in ("a800-1", "a800-2"):
        a, b = allocated["A"][host], allocated["B"][host]
        assert len(a) == len(b) == 2 and not set(a) & set(b), (host, a, b)  # two jobs, four GPUs of the node
    for tag in jobs:
        done = wait_done(runs[tag], timeout=120)
        assert done.state == "COMPLETED", (tag, done.text)
        plan = submit.load_plan(runs[tag] / "plan.json")
        physical: dict[tuple[str, str], str] = {}
        for comp in plan.components:
            for p in comp.processes:
                report = json.loads((outs[tag] / f"{comp.name}.{p.rank}.json").read_text())
                env, host = report["env"], report["host"]
                (k,) = (int(g) for g in p.visible_accelerators)
                want = str(allocated[tag][host][k])  # plan GPU k: the k-th of the job's GPUs there
                where = (tag, lab.mode, comp.name, p.rank, host, env, allocated[tag][host])
                assert env["VISIBLE_DEVICES"] == want, where
                if lab.mode == "no":
                    assert env["CUDA_VISIBLE_DEVICES"] == want, where
                else:  # step-local ids; the task may open exactly its job's GPUs of the node
                    assert env["CUDA_VISIBLE_DEVICES"] == str(k), where
                    assert sorted(report["devices"]) == allocated[tag][host], where
                assert env["HPCPLACE_DEVICE_MODE"] == "job-relative", where
                physical[(comp.name, p.rank)] = f"{host}:{want}"
        actor = {gpu for (c, _), gpu in physical.items() if c == "actor"}
        # every actor rank on a GPU of its own, and each rollout rank on the one of the actor rank it shares with
        assert len(actor) == 4 and all(physical[("rollout", r)] == physical[("actor", r)] for r in range(4)), physical
        status = cli("status", runs[tag]).stdout
        for host in ("a800-1", "a800-2"):
            ids = ",".join(map(str, allocated[tag][host]))
            assert f"  {host}: the job's GPUs {ids}; the plan's 0,1 are {ids}" in status, status


def test_a_ray_job_beside_a_steps_job_gets_its_own_gpus(lab: LiveCluster, tmp_path: Path) -> None:
    """A steps-mode job holds 2 GPUs of each a800 node while a Ray-mode job (2 GPUs per node) starts on
    the same nodes: each raylet gets exactly its own job's GPUs of the node (ray/nodes/n<rank>.json names
    their physical ids: those of `scontrol show job -d`), Ray counts 2 per node, and a 1-GPU task on
    each node runs on one of them; both jobs end COMPLETED."""
    out = tmp_path / "out-steps"
    out.mkdir()
    steps = submit_cli(
        config(tmp_path, "gpus-steps", out), tmp_path / "run-steps", env={**lab.env, "HPCPLACE_TEST_HOLD": "25"}
    )
    ray_config = config_yaml(
        tmp_path,
        textwrap.dedent(
            """\
            name: gpus-ray
            cluster:
              node_groups:
                - {label: a800, partition: a800, nodes: 2, gpus_per_node: 2, gpu_type: a800, cpus_per_node: 4, mem_per_node: 4000}
              component_placement:
                actor: {node_group: a800, placement: "0-3"}
            slurm: {exclusive: false, time: "5"}
            launch: {join_timeout: 80}
            """
        ),
        "gpus-ray.yaml",
    )
    report = tmp_path / "probe.json"
    env = {**lab.env, "HPCPLACE_RAY_ARGS": "--object-store-memory=80000000"}
    deadline = time.monotonic() + 60
    while len(allocation(lab, steps)) < 2 and time.monotonic() < deadline:  # the steps job holds its GPUs first
        time.sleep(0.3)
    ray_job = submit_cli(
        ray_config, tmp_path / "run-ray", "--driver", "--", sys.executable, str(PROBE), str(report), env=env
    )
    held: dict[str, dict[str, list[int]]] = {}
    deadline = time.monotonic() + 90
    while len(held) < 2 and time.monotonic() < deadline:
        held = {t: a for t, j in (("steps", steps), ("ray", ray_job)) if len(a := allocation(lab, j)) == 2}
        time.sleep(0.3)
    assert len(held) == 2, {j: lab.run("scontrol", "show", "job", "-d", j).stdout for j in (steps, ray_job)}
    for name in ("ray", "steps"):
        done = wait_done(tmp_path / f"run-{name}", timeout=150)
        assert done.state == "COMPLETED", (name, done.text)
    probe = json.loads(report.read_text())
    for rank, host in (("0", "a800-1"), ("1", "a800-2")):
        mine, other = held["ray"][host], held["steps"][host]
        assert len(mine) == 2 and not set(mine) & set(other), (host, mine, other)
        record = json.loads((tmp_path / "run-ray" / "ray" / "nodes" / f"n{rank}.json").read_text())
        assert record["host"] == host and record["gpus"] == [str(g) for g in mine], (record, mine)
        node = probe["nodes"][rank]
        assert node["host"] == host and node["num_gpus"] == 2, node
        local = [str(g) for g in mine] if lab.mode == "no" else ["0", "1"]  # what the raylet's CUDA sees
        assert node["cuda_visible_devices"] in local, (node, mine, lab.mode)
    status = cli("status", tmp_path / "run-ray").stdout
    assert f"  GPUs {','.join(map(str, held['ray']['a800-1']))} of the node (the plan's job-relative 0-1)" in status, (
        status
    )
