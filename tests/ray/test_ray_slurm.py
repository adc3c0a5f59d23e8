"""The Ray launch mode on the real Slurm test cluster (marker `slurm`): a Ray cluster shaped by the
plan (one raylet per node across every het component), a driver pinning one task per node; every
value it reports must equal the plan, under ConstrainDevices=no and =yes. Plus the failure cases.
Every job is submitted as a user does: a config file and `hpcplace submit CONFIG -o RUN --driver -- CMD...`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from hpcplace.slurm import submit
from tests.slurm.conftest import (
    LiveCluster,
    cli,
    cluster_nodes,
    hostile_values,
    node_root,
    submit_cli,
    wait_done,
)
from tests.slurm.test_stop_cluster import warn_early

pytestmark = pytest.mark.slurm

PROBE = Path(__file__).with_name("probe_driver.py")
JOB_TIMEOUT_S = 240
RAY_ARGS = "--object-store-memory=80000000"  # a 2-core / 24 GiB machine running 4 raylets
CONFIG = """
name: ray-probe
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, env: {HP_GROUP_VAR: "a800 env"}}
    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: "0-15"
    rollout: {node_group: rtx, placement: "0-3"}
    env: {node_group: cpu, placement: "0"}
"""


def ray_submit(
    tmp_path: Path,
    driver: list[str],
    env: dict[str, str] | None = None,
    join_timeout: float = 120,
    config: str = CONFIG,
) -> tuple[str, Path]:
    """`hpcplace submit ray.yaml -o tmp_path/run --driver -- DRIVER...` (the config's `launch:` block
    carries env and join_timeout); the job id and the run dir."""
    path = tmp_path / "ray.yaml"
    launch = {"env": env or {}, "join_timeout": join_timeout}
    path.write_text(config + f"launch: {json.dumps(launch)}\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    return submit_cli(path, run_dir, "--driver", "--", *driver), run_dir


def ray_processes(job_id: str) -> list[str]:
    """Ray processes of this job still alive anywhere on the machine (every test node is a namespace
    on it): matched by the job's temp dir in their command line or environment."""
    out = []
    marker = f"hpcplace-{job_id}/ray-n".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        if marker in cmd:
            out.append(cmd.replace(b"\0", b" ").decode(errors="replace")[:200])
    return out


def node_leftovers(job_id: str) -> list[str]:
    """The job's node-local dirs still present on ANY node (each node has its own /dev/shm and /tmp,
    seen here through /proc/<its slurmd>/root) or on this host: /dev/shm/hpcplace-<job> (Ray's
    temp/session dirs live in it) and the spill dirs ${TMPDIR:-/tmp}/hpcplace-ray-<job>-n<rank>."""
    roots = [Path("/")] + [r for r in map(node_root, cluster_nodes()) if r is not None]
    tmp = (os.environ.get("TMPDIR") or "/tmp").lstrip("/")
    out = []
    for root in roots:
        shm = root / f"dev/shm/hpcplace-{job_id}"
        if os.path.lexists(shm):
            out.append(f"{shm}: {sorted(str(p.relative_to(shm)) for p in shm.rglob('*'))[:20]}")
        out += [str(p) for p in (root / tmp).glob(f"hpcplace-ray-{job_id}-n*")]
    return out


def assert_clean(job_id: str, within: float = 15) -> None:
    """No Ray process of the job left anywhere, and no node-local dir of it on any node."""
    assert len(cluster_nodes()) >= 4 and all(node_root(n) for n in cluster_nodes())  # every node inspected
    deadline = time.monotonic() + within
    while (ray_processes(job_id) or node_leftovers(job_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_processes(job_id) == []
    assert node_leftovers(job_id) == []


@pytest.fixture(autouse=True)
def _small_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPLACE_RAY_ARGS", RAY_ARGS)


def test_ray_cluster_matches_the_plan(lab: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    job_id, run_dir = ray_submit(
        tmp_path, [sys.executable, str(PROBE), str(out)], {"HP_LAUNCH_VAR": "a'; echo $x \" :"}
    )
    status = wait_done(run_dir)
    batch = "".join(p.read_text() for p in (run_dir / "logs").glob("batch-*.out"))
    assert status.state == "COMPLETED", batch
    report = json.loads(out.read_text())
    hosts = submit.read_hosts(run_dir)
    head = hosts[(0, 0)]
    env = report["env"]
    port = json.loads((run_dir / "ray" / "head.json").read_text())["port"]
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "4" and env["MASTER_ADDR"] == head
    assert env["MASTER_PORT"] == str(port) and env["RAY_ADDRESS"] == f"{head}:{port}"
    assert env["HPCPLACE_PLAN"] == str(run_dir / "plan.json") and env["HP_LAUNCH_VAR"] == "a'; echo $x \" :"
    assert report["host"] == head and not env["CUDA_VISIBLE_DEVICES"]
    expected = {0: ((0, 0), "a800", 8), 1: ((0, 1), "a800", 8), 2: ((1, 0), "rtx", 4), 3: ((2, 0), "cpu", 0)}
    assert sorted(report["nodes"]) == ["0", "1", "2", "3"]
    for rank, ((g, j), label, gpus) in expected.items():
        node = report["nodes"][str(rank)]
        where = f"node rank {rank}"
        assert node["host"] == hosts[(g, j)], where
        assert node["rlinf_node_rank"] == str(rank), where
        assert node["num_gpus"] == gpus, where
        assert node["labels"]["hpcplace.group"] == label, where
        assert node["launch_var"] == "a'; echo $x \" :", where
        assert node["group_var"] == ("a800 env" if label == "a800" else None), where
        if gpus:  # a 1-GPU task gets one of the node's planned GPUs, as Ray numbers them (0..n-1)
            assert len(node["gpu_ids"]) == 1 and node["cuda_visible_devices"] == str(node["gpu_ids"][0]), where
            assert 0 <= int(node["cuda_visible_devices"]) < gpus, where
        else:
            assert not node["cuda_visible_devices"], where
    logs = cli("logs", run_dir, "--list")
    assert logs.returncode == 0 and f"Ray node rank 2 (rtx, het 1 node 0, {hosts[(1, 0)]})" in logs.stdout, logs
    assert str(run_dir / "logs" / "driver.out") in logs.stdout
    status_ = cli("status", run_dir)
    assert f"Ray head: {head}:{port}" in status_.stdout and "all 4 node(s) joined" in status_.stdout, status_
    timings = json.loads((run_dir / "ray" / "bringup.json").read_text())
    assert timings["nodes"] == 4 and timings["all_joined"] >= timings["head_ready"]
    assert_clean(job_id)


RLINF_ENV_CONFIGS = """
cluster:
  num_nodes: 3
  component_placement:
    actor: {node_group: a800, placement: 0-15}
    env: {node_group: cpu, placement: 0}
  node_groups:
    - label: a800
      node_ranks: 0-1
      env_configs:
        - node_ranks: 1
          env_vars: [{HP_NODE_VAR: only-node-1}]
          python_interpreter_path: {python}
    - label: cpu
      node_ranks: 2
slurm:
  node_groups:
    a800: {partition: a800, gpus_per_node: 8, gpu_type: a800}
    cpu: {partition: cpu, gpus_per_node: 0}
"""


def test_rlinf_env_configs_reach_only_their_node(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """RLinf env_configs on node rank 1 only: its raylet's workers see the variable and run the entry's
    interpreter (another name of the job's venv Python); nodes 0 and 2 see neither."""
    other = str(Path(sys.executable).with_name(f"python{sys.version_info.major}.{sys.version_info.minor}"))
    assert Path(other).exists() and other != sys.executable
    out = tmp_path / "probe.json"
    job_id, run_dir = ray_submit(
        tmp_path,
        [sys.executable, str(PROBE), str(out)],
        config=RLINF_ENV_CONFIGS.replace("{python}", json.dumps(other)),
    )
    status = wait_done(run_dir)
    batch = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("batch-*.out"))
    assert status.state == "COMPLETED", batch
    nodes = json.loads(out.read_text())["nodes"]
    assert sorted(nodes) == ["0", "1", "2"]
    assert nodes["1"]["node_var"] == "only-node-1" and nodes["1"]["python"] == other
    for rank in ("0", "2"):
        assert nodes[rank]["node_var"] is None and nodes[rank]["python"] != other, rank
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert f"env HP_NODE_VAR, python {other}" in script
    assert_clean(job_id)


def test_driver_exit_code_is_the_jobs(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    job_id, run_dir = ray_submit(tmp_path, [sys.executable, str(PROBE), str(out), "exit", "7"])
    status = wait_done(run_dir)
    batch = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("batch-*.out"))
    assert status.state == "FAILED" and status.exit_codes[0] == "7:0", (status, batch)
    assert "component 'driver'" in batch and "exited with code 7" in batch, batch
    assert out.exists()
    assert_clean(job_id)


def wait_for_file(path: Path, timeout: float = 120) -> None:
    """Until the driver has written `path` (it runs once every node joined), at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def test_killed_raylet_fails_the_job_naming_the_node(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    job_id, run_dir = ray_submit(tmp_path, [sys.executable, str(PROBE), str(out), "hold", "120"])
    wait_for_file(out)
    assert out.exists(), "the driver never ran"
    hosts = submit.read_hosts(tmp_path / "run")
    victim = hosts[(1, 0)]  # rtx, cluster node rank 2
    pids = [int(e) for e in os.listdir("/proc") if e.isdigit() and _is_raylet_of(int(e), job_id, 2)]
    assert pids, "no raylet of node rank 2 found"
    for pid in pids:
        os.kill(pid, 9)
    status = wait_done(run_dir, 90)
    batch = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("batch-*.out"))
    assert status.state == "FAILED", batch
    assert f"Ray node rank 2 on {victim} (node group rtx" in batch, batch
    assert_clean(job_id)


def _is_raylet_of(pid: int, job_id: str, rank: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"/raylet" in cmd.split(b"\0")[0] and f"hpcplace-{job_id}/ray-n{rank}/".encode() in cmd


def test_cancel_stops_every_raylet(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    job_id, run_dir = ray_submit(tmp_path, [sys.executable, str(PROBE), str(out), "hold", "300"])
    wait_for_file(out)
    assert out.exists() and len(ray_processes(job_id)) >= 4
    cancel = cli("cancel", run_dir)
    assert cancel.returncode == 0 and f"cancelled job {job_id}" in cancel.stdout, cancel
    status = wait_done(run_dir, 60)
    assert status.code == 11 and all(" CANCELLED" in line for line in status.components), status.text
    assert_clean(job_id, within=15)


def test_missing_node_fails_within_join_timeout(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """The cpu node's `ray start` hangs before starting Ray (a sitecustomize on the PYTHONPATH its node
    group's env gives it): the driver step fails after join_timeout naming that host and group; the
    driver never runs; nothing is left behind."""
    out = tmp_path / "probe.json"
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import time\ntime.sleep(3600)\n")
    config = CONFIG.replace(
        "- {label: cpu, partition: cpu, nodes: 1}",
        f"- {{label: cpu, partition: cpu, nodes: 1, env: {{PYTHONPATH: {json.dumps(str(hang))}}}}}",
    )
    job_id, run_dir = ray_submit(tmp_path, [sys.executable, str(PROBE), str(out)], join_timeout=25, config=config)
    status = wait_done(run_dir, 150)
    batch = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("batch-*.out"))
    hosts = submit.read_hosts(tmp_path / "run")
    assert status.state == "FAILED", batch
    assert not out.exists()
    assert "1 of 4 Ray node(s) did not join within" in batch, batch
    assert f"node rank 3 on {hosts[(2, 0)]} (node group cpu, het group 2 node 0)" in batch, batch
    assert_clean(job_id)


def test_hostile_driver_argv_never_reaches_a_shell(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    values = hostile_values(canary) + [":", "a : b"]
    args_file = tmp_path / "args.json"
    code = "import json,sys; json.dump(sys.argv[1:], open(sys.argv[1], 'w'))"
    job_id, run_dir = ray_submit(tmp_path, [sys.executable, "-c", code, str(args_file), *values], {"HP_X": values[2]})
    status = wait_done(run_dir)
    assert status.state == "COMPLETED"
    assert json.loads(args_file.read_text()) == [str(args_file), *values]
    assert not canary.exists()
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "--ray-driver --plan" in script and values[2] not in script.split("# ====")[-1].split("hp_start 1")[1]
    assert_clean(job_id)


def test_time_limit_warning_reaches_the_driver_and_not_the_ray_nodes(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    """1-minute limit, `signal_before_limit: TERM@30`: Slurm's warning goes to the batch script only
    (B:USR2), here sent before the driver runs (warn_early), which sends SIGTERM to the driver step
    alone once it runs, 30 s before the limit. After it the driver still runs a task on every node (no
    raylet was touched); at the limit the job ends TIMEOUT and nothing of it is left on any node."""
    out = tmp_path / "probe.json"
    config = CONFIG + 'slurm: {time: "1", signal_before_limit: "TERM@30"}\n'
    # The probe installs its handler after ray.init (Ray's own SIGTERM handler would end it): SIGTERM is
    # blocked from before the probe's exec (the mask survives exec) until then, as a real driver would.
    block = (
        "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    job_id, run_dir = ray_submit(
        tmp_path, [sys.executable, "-c", block, str(PROBE), str(out), "warn", "100"], config=config
    )
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert script.count("#SBATCH --signal=") == 1 and "#SBATCH --signal=B:USR2@30" in script
    limit_at = warn_early(slurm_cluster, job_id, run_dir)
    status = wait_done(run_dir, 200)
    batch = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("batch-*.out"))
    assert status.state == "TIMEOUT", status.text + batch
    before = json.loads(out.read_text())
    after = json.loads(Path(f"{out}.after").read_text())
    assert after["terms"], f"the driver never got the warning\n{batch}"
    warned = after["terms"][0]
    # 30 s before the limit (not at Slurm's early moment), or just after the driver started if later
    assert limit_at - 33 < warned < max(limit_at - 30, before["started"]) + 6, (warned - limit_at, batch)
    # once: Slurm's own warning changed nothing (a second SIGTERM is the limit's own); it comes too ("again:
    # already ..."), or merges with the test's (signals of one kind do not queue), or is lost at the start
    assert all(t > limit_at - 3 for t in after["terms"][1:]), (after["terms"], limit_at)
    assert batch.count("time-limit warning: SIGTERM sent to the driver") == 1, batch
    assert sorted(after["nodes"]) == ["0", "1", "2", "3"], after  # every raylet still serves tasks
    assert {r: n["host"] for r, n in after["nodes"].items()} == {r: n["host"] for r, n in before["nodes"].items()}
    assert after["probed"] > warned
    step = (tmp_path / "run" / "ray" / "driver.step").read_text().strip()
    assert f"time-limit warning: SIGTERM sent to the driver (step {job_id}.{step}) only" in batch, batch
    assert_clean(job_id)
