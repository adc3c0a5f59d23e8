"""torchrun and deepspeed commands (formats/launcher.py) on the real cluster: hpcplace starts each rank where the
plan puts it, with the rank environment the launcher would give it, and the ranks meet as one torch.distributed
group across the nodes (gloo, env:// as the frameworks' trainers initialise it)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hpcplace.slurm import submit
from tests.slurm.conftest import LiveCluster, submit_cli, wait_done

pytestmark = pytest.mark.slurm

# What every rank does: join the group from the environment alone, all-reduce its rank + 1, write what it saw.
PROGRAM = """\
import json, os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
seen = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")}
seen.update(host=socket.gethostname(), sum=total.item(), argv=sys.argv[1:])
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as out:
    json.dump(seen, out)
dist.destroy_process_group()
"""


def run_launcher(cluster: LiveCluster, tmp_path: Path, *command: str) -> tuple[list[dict[str, object]], list[str]]:
    """`hpcplace submit site.yaml --driver -- COMMAND` (a site of hpcplace's blocks only), waited for: each rank's
    report in rank order, and the plan's host of each rank."""
    pytest.importorskip("torch")
    program = tmp_path / "allreduce.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    site = tmp_path / "site.yaml"
    site.write_text('slurm: {partition: a800, gpus_per_node: 8, time: "0:10:00"}\n')
    # `python` in the job is the one the tests run (the launchers' own interpreter, sys.executable)
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cluster.env.get('PATH', '')}"}
    run_dir = tmp_path / "run"
    argv = [word.replace("PROGRAM", str(program)).replace("OUT", str(out)) for word in command]
    submit_cli(site, run_dir, "--driver", "--", *argv, env=env, cwd=tmp_path)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text
    plan = submit.load_plan(run_dir / "plan.json")
    hosts = submit.read_hosts(run_dir)
    (worker,) = plan.components
    reports = [json.loads((out / f"rank{p.rank}.json").read_text()) for p in worker.processes]
    return reports, [hosts[(p.het_group, p.group_node_index)] for p in worker.processes]


def test_torchrun_ranks_meet_across_two_nodes(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    reports, hosts = run_launcher(
        slurm_cluster, tmp_path, "torchrun", "--nnodes=2", "--nproc_per_node=2", "PROGRAM", "OUT"
    )
    assert len(reports) == 4 and len(set(hosts)) == 2 and hosts[0] == hosts[1] != hosts[2] == hosts[3]
    for rank, (seen, host) in enumerate(zip(reports, hosts)):
        assert (seen["RANK"], seen["LOCAL_RANK"], seen["WORLD_SIZE"], seen["LOCAL_WORLD_SIZE"]) == (
            str(rank),
            str(rank % 2),
            "4",
            "2",
        ), seen
        assert seen["host"] == host and seen["sum"] == 1 + 2 + 3 + 4 and seen["argv"] == [str(tmp_path / "out")]
    assert len({seen["MASTER_ADDR"] for seen in reports}) == 1


def test_deepspeed_ranks_meet_on_its_one_node(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    reports, hosts = run_launcher(slurm_cluster, tmp_path, "deepspeed", "--num_gpus", "2", "PROGRAM", "OUT")
    assert len(reports) == 2 and len(set(hosts)) == 1
    assert [(s["RANK"], s["LOCAL_RANK"], s["WORLD_SIZE"]) for s in reports] == [("0", "0", "2"), ("1", "1", "2")]
    assert all(s["host"] == hosts[0] and s["sum"] == 1 + 2 for s in reports), reports
