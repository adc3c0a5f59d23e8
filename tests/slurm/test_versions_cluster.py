"""What changed between Slurm releases, checked on the real test cluster of whichever release it booted
(`HPCPLACE_SLURM`: scripts/test-all.sh runs this tier on Debian 12's 22.05 and on sid's 26.05). Each
test names the change it guards; docs/slurm-versions.md lists them all."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hpcplace.slurm.slurm_job import lower
from tests.slurm.conftest import CLUSTER_DIR, LiveCluster, cli, config_yaml, submit_cli, wait_done
from tests.slurm.test_cluster import check_reports, run_config

pytestmark = pytest.mark.slurm

CPUS = """
    name: cpus
    cluster:
      node_groups:
        - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 16,
           mem_per_node: 64000}
        - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090, cpus_per_node: 8,
           mem_per_node: 32000}
        - {label: cpu, partition: cpu, nodes: 1, cpus_per_node: 8, mem_per_node: 32000}
      component_placement:
        trainer: {node_group: a800, placement: "0-3:0-1"}
        engine: {node_group: rtx4090, placement: "0-3:0-3"}
        agents: {node_group: cpu, placement: "0:0-2"}
    components:
      trainer: {command: ["true"], cpus_per_process: 5}
      engine: {command: ["true"], cpus_per_process: 2}
      agents: {command: ["true"], cpus_per_process: 1}
    """


def step_cpus(cluster: LiveCluster, job_id: str, want: dict[str, int], within: float = 60) -> dict[str, int]:
    """CPUs accounting gave each named step, all its het components summed. slurmdbd may record a job's steps
    (and a het step's components) one by one after the job ended, so this polls until it sees `want` or the
    deadline passes, and returns what it saw last."""
    deadline = time.monotonic() + within
    while True:
        res = cluster.run("sacct", "-j", job_id, "--parsable2", "--noheader", "-o", "JobID,JobName,AllocTRES")
        got: dict[str, int] = {}
        for line in res.stdout.splitlines():
            job, name, tres = (line.split("|") + ["", "", ""])[:3]
            cpu = next((int(t.split("=", 1)[1]) for t in tres.split(",") if t.startswith("cpu=")), 0)
            if "." in job and not job.endswith((".batch", ".extern")):
                got[name] = got.get(name, 0) + cpu
        if {name: got.get(name) for name in want} == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_het_components_with_different_cpus_each_get_their_own(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """23.11: srun reads SLURM_CPUS_PER_TASK (and SLURM_CPUS_PER_TASK_HET_GROUP_K in a het batch script)
    from the batch environment; 25.05: the batch environment carries the leader's SLURM_TRES_PER_TASK,
    which fights a step's own -c. Three het components asking 5, 2 and 1 CPUs per task (the leader's
    component 16 per node): every task sees its own count and accounting charges each step exactly
    tasks x its CPUs, on every release."""
    run = run_config(config_yaml(tmp_path, CPUS), tmp_path)
    assert run.status.state == "COMPLETED", run.status.text
    check_reports(run.plan, run.run_dir, run.reports, slurm_cluster.mode)
    for report in (json.loads(p.read_text()) for p in run.reports.glob("*.json")):
        env = report["env"]
        planned = next(c.cpus_per_process for c in run.plan.components if c.name == env["HPCPLACE_COMPONENT"])
        assert env.get("SLURM_CPUS_PER_TASK") == str(planned), (env["HPCPLACE_COMPONENT"], env)
    want = {
        step.name: sum(seg.num_tasks * seg.cpus_per_task for seg in step.segments) for step in lower(run.plan).steps
    }
    charged = step_cpus(slurm_cluster, run.job_id, want)
    assert {name: charged.get(name) for name in want} == want, charged


def test_the_booted_version_is_what_status_and_run_json_say(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`submit` reads the site's Slurm version once and records it; `status` shows it: the version the
    cluster really booted (up.sh records it), whichever release that is."""
    booted = (CLUSTER_DIR / "version").read_text(encoding="utf-8").strip()
    assert slurm_cluster.version == tuple(int(x) for x in booted.split(".")[:3])
    run_dir = tmp_path / "run"
    submit_cli(config_yaml(tmp_path, CPUS), run_dir)
    wait_done(run_dir)
    recorded = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert booted in json.dumps(recorded), recorded
    shown = cli("status", run_dir)
    assert booted in shown.stdout, shown.stdout
