"""Issue 8 on the real test cluster: a bare ':' in a command never reaches srun as a separator, and
every het component is charged the account/QOS plan.json says (checked in sacct)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import LiveCluster, cli, cluster_nodes, config_yaml, node_root, submit_cli, wait_done

pytestmark = pytest.mark.slurm


def test_colon_in_a_command_is_an_argument_not_an_srun_separator(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    canary = tmp_path / "canary"
    # Before: srun read the bare ':' as its het-job separator; the rest became srun options and a
    # program of its own (`touch CANARY` with its own GPU request), outside the shim.
    command = [
        "sh",
        "-c",
        'printf "%s\\n" "$@" > "$0.$RANK"; echo "$MASTER_PORT" > "$0.port.$RANK"',
        str(out / "args"),
        ":",
        "--het-group=1",
        "--gres=gpu:a800:1",
        "-n1",
        "touch",
        str(canary),
    ]
    config = config_yaml(
        tmp_path,
        f"""
        name: colon
        cluster:
          node_groups:
            - {{label: cpu, partition: cpu, nodes: 1}}
            - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}}
          component_placement:
            worker: {{node_group: a800, placement: "0-15:0-1"}}
            idle: {{node_group: cpu, placement: "0"}}
        components:
          worker: {{command: {json.dumps(command)}}}
          idle: {{command: ["true"]}}
        slurm: {{time: "5"}}
        """,
    )
    submit_cli(config, tmp_path / "run")
    status = wait_done(tmp_path / "run")
    assert status.state == "COMPLETED", status.text
    for rank in (0, 1):
        words = (out / f"args.{rank}").read_text().splitlines()
        assert words == [":", "--het-group=1", "--gres=gpu:a800:1", "-n1", "touch", str(canary)]
    assert not canary.exists(), "words after ':' ran as a separate program"
    # both ranks (two nodes) agreed on the MASTER_PORT rank 0 checked and published
    ports = {(out / f"args.port.{rank}").read_text().strip() for rank in (0, 1)}
    assert len(ports) == 1 and 10000 <= int(ports.pop()) < 32768
    assert list((tmp_path / "run" / ".hpcplace-ports").iterdir())


ACCOUNTS = ("hp_acct_a", "hp_acct_b")
QOS = "hp_qos_a"


def _sacctmgr(cluster: LiveCluster, *args: str) -> None:
    res = cluster.run("sacctmgr", "-i", *args)
    text = res.stdout + res.stderr
    assert res.returncode == 0 or "Nothing new added" in text or "already exists" in text.lower(), text


def test_each_het_component_is_charged_what_the_plan_says(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    cluster = slurm_cluster
    _sacctmgr(cluster, "add", "account", *ACCOUNTS)
    _sacctmgr(cluster, "add", "qos", QOS)
    _sacctmgr(cluster, "add", "user", "root", f"account={','.join(ACCOUNTS)}")
    _sacctmgr(cluster, "modify", "user", "root", "set", f"qos+={QOS}")
    # sbatch carries --account/--qos of component 0 over to component 1 (which sets none), and
    # --qos on to component 2 (which sets only an account)
    config = config_yaml(
        tmp_path,
        f"""
        name: charges
        cluster:
          node_groups:
            - {{label: cpu, partition: cpu, nodes: 1, account: {ACCOUNTS[0]}, qos: {QOS}}}
            - {{label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}}
            - {{label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090, account: {ACCOUNTS[1]}}}
          component_placement:
            a: {{node_group: cpu, placement: "0"}}
            b: {{node_group: a800, placement: "0"}}
            c: {{node_group: rtx, placement: "0"}}
        components: {{a: {{command: ["true"]}}, b: {{command: ["true"]}}, c: {{command: ["true"]}}}}
        slurm: {{time: "5"}}
        """,
    )
    job_id = submit_cli(config, tmp_path / "run")
    charged = [g["charged"] for g in json.loads((tmp_path / "run" / "plan.json").read_text())["node_groups"]]
    assert [(c["account"], c["qos"]) for c in charged] == [(ACCOUNTS[0], QOS), (ACCOUNTS[0], QOS), (ACCOUNTS[1], QOS)]
    status = wait_done(tmp_path / "run")
    assert status.state == "COMPLETED", status.text
    got: dict[str, tuple[str, str]] = {}
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:  # sacct can lag a finished job
        res = cluster.run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,Account,QOS")
        got = {
            line.split("|")[0]: tuple(line.split("|")[1:3])
            for line in res.stdout.splitlines()  # type: ignore[misc]
            if line.startswith(f"{job_id}+")
        }
        time.sleep(0.5)
    assert got == {f"{job_id}+{i}": (c["account"], c["qos"]) for i, c in enumerate(charged)}
    # and the reviewer sees the same in the script's header
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert f"charged to account {ACCOUNTS[0]} (inherited from node group cpu" in script
    assert subprocess.run(["bash", "-n", str(tmp_path / "run" / "job.sbatch")]).returncode == 0


def test_run_directory_the_nodes_cannot_see(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`-o /tmp/...`: each node has its own /tmp. submit warns, the job fails at once (Slurm cannot
    start the batch script there), and `hpcplace status` says why instead of a bare JobLaunchFailure."""
    import shutil
    import tempfile

    config = config_yaml(
        tmp_path,
        """
        name: unshared
        cluster:
          node_groups: [{label: cpu, partition: cpu, nodes: 1}]
          component_placement: {probe: {node_group: cpu, placement: "0"}}
        components:
          probe: {command: ["true"]}
        """,
    )
    local = Path(tempfile.mkdtemp(prefix="hpcplace-unshared-", dir="/tmp"))
    try:
        run_dir = local / "run"
        res = cli("submit", config, "-o", run_dir)
        assert res.returncode == 0, res.stderr
        assert f"the run directory {run_dir} is under /tmp, which each node has for itself" in res.stderr
        status = wait_done(run_dir, 60)
        # 22.05 never starts the batch script (JobLaunchFailure); 24.11 and 26.05 start it and it fails at once.
        if slurm_cluster.version < (24, 11, 0):
            assert status.state == "FAILED" and "reason=JobLaunchFailure" in status.text, status.text
            said = "the batch script never started on the node (Slurm: JobLaunchFailure), and wrote no "
        else:
            assert status.state == "FAILED" and "reason=NonZeroExitCode" in status.text, status.text
            said = "the batch script failed at once, and wrote no "
        assert f"{said}{run_dir}/logs/batch-" in status.text and "must be on storage every node mounts" in status.text
    finally:
        shutil.rmtree(local, ignore_errors=True)
        for node in cluster_nodes():  # Slurm 26.05 makes the missing folder on the node it starts the script on
            root = node_root(node)
            if root is not None:
                shutil.rmtree(root / local.relative_to("/"), ignore_errors=True)
