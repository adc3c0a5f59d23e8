"""Containers on the real test cluster (marker `slurm`), with real runtimes: Debian sid's Apptainer 1.4.5 and
Slurm's own `--container` with Debian's runc, on the sid (Slurm 26.05) cluster, whose nodes run in a sid root
filesystem (scripts/slurm-cluster/up.sh); the images are built offline from Debian packages and cached
(scripts/slurm-cluster/images.sh: a sid and a bookworm Python image, an OCI bundle of the sid one). Each test
goes through the CLI as a user does. On 22.05 (bookworm's cluster) only the refusal of `--container` runs:
Apptainer needs glibc >= 2.38, and 22.05's `--container` cannot run a step of several tasks per node."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.slurm import submit
from tests.slurm.conftest import (
    CLUSTER_SCRIPTS,
    REPO,
    REPORTER,
    SLURM_RELEASE,
    LiveCluster,
    _unavailable,
    cli,
    submit_cli,
    wait_done,
)
from tests.slurm.test_cluster import check_reports
from tests.slurm.test_collocated_nodes import all_logs, job_env, wait_no_shm, weight_sources_from_plan
from tests.slurm.test_hold_cluster import held, wait_for

pytestmark = pytest.mark.slurm

CONTAINER_RELEASES = ("sid",)  # where the cluster's nodes have Apptainer and runc (install.sh)
VENV_PYTHON = Path(sys.executable)
# What every image must see: the run and report directories (/var/tmp), this checkout and its venv
# (/work), the venv's interpreter (/root/.pyenv). The fake GPUs' device files (the cluster's state dir, under
# the node's /tmp) come with Apptainer's default bind of /tmp: a bind given by --bind is mounted nodev.
MOUNTS = sorted({"/var/tmp", "/work", str(Path(os.path.realpath(sys.executable)).parents[3])})


@functools.cache
def images() -> dict[str, str]:
    """name -> path of the test images (built once, then cached on the machine)."""
    res = subprocess.run(
        [str(CLUSTER_SCRIPTS / "images.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    if res.returncode != 0:
        _unavailable(f"scripts/slurm-cluster/images.sh failed (rc {res.returncode}): {res.stderr[-2000:]}")
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


@pytest.fixture
def cluster(slurm_cluster: LiveCluster) -> LiveCluster:
    if SLURM_RELEASE not in CONTAINER_RELEASES:
        pytest.skip(
            f"containers run on the {'/'.join(CONTAINER_RELEASES)} test cluster (HPCPLACE_SLURM={SLURM_RELEASE}): "
            "Apptainer 1.4.5 needs glibc >= 2.38, Slurm 22.05's --container runs one task per node"
        )
    images()
    return slurm_cluster


def os_release(root: str) -> str:
    """PRETTY_NAME of an image's root filesystem (a sandbox directory or a bundle's rootfs)."""
    text = Path(root, "etc", "os-release").read_text(encoding="utf-8")
    return re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', text, re.M).group(1)  # type: ignore[union-attr]  # always there


def mounts_yaml() -> str:
    return "[" + ", ".join(MOUNTS) + "]"


HET = """
name: images-per-group
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    trainer: {node_group: a800, placement: "0-15:0-3"}
    engine: {node_group: rtx4090, placement: "0-3:0-3"}
    agents: {node_group: cpu, placement: "0:0-1"}
components:
  trainer: {command: [python3, REPORTER, REPORTS]}
  engine: {command: [python3, REPORTER, REPORTS]}
  agents: {command: [python3, REPORTER, REPORTS]}
container:
  runtime: apptainer
  image: SID
  mounts: MOUNTS
  env: {HP_IMAGE_VAR: "from the container block"}
  node_groups:
    rtx4090: {image: BOOKWORM}
    cpu: {runtime: oci, image: BUNDLE}
"""


def fill(text: str, **values: str) -> str:
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def test_steps_het_job_runs_each_group_in_its_own_image(cluster: LiveCluster, tmp_path: Path) -> None:
    """Three node groups, three images (two runtimes): the a800 group's 4 trainer ranks over 2 nodes in the
    sid image (Apptainer), the rtx4090 group's engines in the bookworm image (Apptainer), the cpu group's two
    agents in the sid OCI bundle (Slurm's --container with runc, 2 tasks on one node). Every rank runs in its
    group's image, with its planned node, ranks and GPUs (the shim set them inside), and the image's Python
    ran both the shim and the program (hpcplace is not installed in any image)."""
    img = images()
    reports = tmp_path / "reports"
    reports.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(
        fill(
            HET,
            SID=img["apptainer_sid"],
            BOOKWORM=img["apptainer_bookworm"],
            BUNDLE=img["oci_sid"],
            MOUNTS=mounts_yaml(),
            REPORTER=str(REPORTER),
            REPORTS=str(reports),
        )
    )
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir, env=job_env(cluster), cwd=REPO)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text + all_logs(run_dir)[-4000:]
    plan = submit.load_plan(run_dir / "plan.json")
    check_reports(plan, run_dir, reports, cluster.mode)
    want = {
        "trainer": os_release(img["apptainer_sid"]),
        "engine": os_release(img["apptainer_bookworm"]),
        "agents": os_release(os.path.join(img["oci_sid"], "rootfs")),
    }
    assert want["trainer"] != want["engine"]
    pythons = {}
    for report in (json.loads(p.read_text()) for p in reports.glob("*.json")):
        comp = report["env"]["HPCPLACE_COMPONENT"]
        assert report["os_release"] == want[comp], (comp, report["os_release"])
        pythons.setdefault(comp, set()).add(report["python"])
    assert pythons["trainer"] != pythons["engine"], pythons  # sid's python3 and bookworm's
    preflight = "".join(p.read_text() for p in (run_dir / "logs").glob("preflight.*.out"))
    assert preflight.count(f"in apptainer image {img['apptainer_sid']}") == 2, preflight
    assert f"in apptainer image {img['apptainer_bookworm']}" in preflight
    assert f"in oci image {img['oci_sid']}" in preflight
    script = (run_dir / "job.sbatch").read_text()
    assert f"--container={img['oci_sid']}" in script


COLLOCATED = """
name: collocated-in-containers
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 16, mem_per_node: 64000}
  component_placement:
    actor,rollout: "0-1"
components:
  actor: {offload: true, command: [bash, -c, 'cat /etc/os-release >OUT/$HPCPLACE_COMPONENT.$HPCPLACE_RANK; exec "$@"', -, PYTHON, examples/collocated_demo.py, --role, actor, --cycles, "2"]}
  rollout: {offload: true, command: [bash, -c, 'cat /etc/os-release >OUT/$HPCPLACE_COMPONENT.$HPCPLACE_RANK; exec "$@"', -, PYTHON, examples/collocated_demo.py, --role, rollout, --cycles, "2"]}
container: {runtime: apptainer, image: SID, mounts: MOUNTS}
"""


def test_collocated_demo_hands_weights_over_between_two_containers(cluster: LiveCluster, tmp_path: Path) -> None:
    """Actor and rollout collocated on two a800 nodes, each component in its own Apptainer container (one
    `apptainer exec` per task): they take turns on the GPUs and every rollout rank reads exactly the weights
    its node's actor published, through the node's /dev/shm, which both containers share. The program runs
    with the venv's Python (mounted: the demo needs torch) beside the image's, which runs the shim."""
    img = images()
    out = tmp_path / "os"
    out.mkdir()
    text = fill(COLLOCATED, SID=img["apptainer_sid"], MOUNTS=mounts_yaml(), PYTHON=str(VENV_PYTHON), OUT=str(out))
    config = tmp_path / "config.yaml"
    config.write_text(text)
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir, env=job_env(cluster), cwd=REPO)
    status = wait_done(run_dir)
    logs = all_logs(run_dir)
    assert status.state == "COMPLETED", status.text + "\n" + logs[-4000:]
    sid = os_release(img["apptainer_sid"])
    ran = {p.name: p.read_text() for p in out.iterdir()}
    assert sorted(ran) == ["actor.0", "actor.1", "rollout.0", "rollout.1"]
    assert all(f'PRETTY_NAME="{sid}"' in text for text in ran.values()), ran
    plan = json.loads((run_dir / "plan.json").read_text())
    published = {
        (int(m[1]), int(m[2])): m[3]
        for m in re.finditer(r"actor\[(\d+)\] gen \d+: .* published weights v(\d+) fp=([0-9a-f]+)", logs)
    }
    assert len(published) == 2 * 2, logs[-4000:]
    for rank, feeding in weight_sources_from_plan(plan).items():
        seen = re.findall(rf"rollout\[{rank}\] gen \d+: weights v(\d+) fp=([0-9a-f]+), .* from actor-(\d+)\)", logs)
        assert [int(v) for v, _, _ in seen] == [0, 1, 2], logs[-4000:]
        for version, fp, source in seen[1:]:
            assert int(source) == feeding[0] and published[(int(source), int(version))] == fp
    assert wait_no_shm(job_id) == []


RAY = """
name: ray-in-image
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-7:0-3"}
    env: {node_group: cpu, placement: "0"}
launch: {mode: ray, join_timeout: 120}
container: {runtime: apptainer, image: SID, python: PYTHON, mounts: MOUNTS}
"""
RAY_DRIVER = Path(__file__).with_name("container_ray_driver.py")


def test_ray_head_workers_and_driver_run_in_the_image(cluster: LiveCluster, tmp_path: Path) -> None:
    """The Ray launch mode in an Apptainer image (`container.python`: an interpreter with Ray, here the venv's,
    mounted): the head and the worker raylets start inside the image on their nodes, the driver runs inside it
    on the head, and a Ray task placed on each node group reports that node's image."""
    img = images()
    config = tmp_path / "config.yaml"
    config.write_text(fill(RAY, SID=img["apptainer_sid"], PYTHON=str(VENV_PYTHON), MOUNTS=mounts_yaml()))
    run_dir = tmp_path / "run"
    out = tmp_path / "driver.json"
    submit_cli(config, run_dir, "--driver", "--", "python", RAY_DRIVER, out, env=job_env(cluster), cwd=REPO)
    status = wait_done(run_dir, timeout=300)
    assert status.state == "COMPLETED", status.text + all_logs(run_dir)[-4000:]
    report = json.loads(out.read_text())
    sid = os_release(img["apptainer_sid"])
    assert report["driver"]["os_release"] == sid and report["driver"]["container"] == img["apptainer_sid"]
    hosts = [line.split()[2] for line in (run_dir / "logs" / "nodes.txt").read_text().splitlines()]
    assert sorted(report["nodes"]) == sorted(hosts), report
    for node, seen in report["nodes"].items():
        assert seen["os_release"] == sid and seen["container"] == img["apptainer_sid"], (node, seen)


HELD = """
name: held-in-image
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
  component_placement:
    actor: {node_group: a800, placement: "0-3"}
    engine: {node_group: rtx4090, placement: "0-1"}
components:
  actor: {command: ["true"]}
  engine: {command: ["true"]}
launch: {hold: true}
container:
  runtime: apptainer
  image: SID
  mounts: MOUNTS
  node_groups:
    rtx4090: {image: BOOKWORM}
"""


def test_exec_runs_in_the_ranks_container(cluster: LiveCluster, tmp_path: Path) -> None:
    """`hpcplace exec` into a held job runs the command as the rank, inside the rank's node group's image
    (each group its own), with the rank's environment set by the shim there."""
    img = images()
    config = tmp_path / "config.yaml"
    config.write_text(fill(HELD, SID=img["apptainer_sid"], BOOKWORM=img["apptainer_bookworm"], MOUNTS=mounts_yaml()))
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir, env=job_env(cluster), cwd=REPO)
    try:
        wait_for("the job to hold", lambda: held(run_dir))
        probe = "import json, os; print(json.dumps([open('/etc/os-release').read(), os.environ.get('RANK')]))"
        for component, rank, image in (("actor", 2, "apptainer_sid"), ("engine", 1, "apptainer_bookworm")):
            res = cli(
                "exec", run_dir, "--component", component, "--rank", str(rank), "--", "python3", "-c", probe,
                env=job_env(cluster), timeout=180,
            )  # fmt: skip
            assert res.returncode == 0, res.stdout + res.stderr
            text, seen_rank = json.loads(res.stdout.strip().splitlines()[-1])
            assert f'PRETTY_NAME="{os_release(img[image])}"' in text and seen_rank == str(rank), res.stdout
    finally:
        cli("cancel", run_dir, env=job_env(cluster))
        wait_done(run_dir)


PREFLIGHT = """
name: preflight-in-image
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
  component_placement:
    actor,rollout: "0-1"
components:
  actor: {command: [python3, REPORTER, REPORTS]}
  rollout: {command: [python3, REPORTER, REPORTS]}
container: CONTAINER
"""


def _failures() -> list[tuple[str, str, str]]:
    """(case, the container block, what the preflight line must say); IMAGE and MOUNTS filled in later."""
    return [
        ("image missing", "{runtime: apptainer, image: /var/tmp/no-such-image.sif, mounts: MOUNTS}",
         r"image /var/tmp/no-such-image\.sif does not exist on this node"),
        ("no such python in the image", "{runtime: apptainer, image: IMAGE, python: python9, mounts: MOUNTS}",
         r"the container did not start.*python9"),
        ("GPUs not visible inside", "{runtime: apptainer, image: IMAGE, mounts: MOUNTS, args: [--no-mount=tmp]}",
         r"the node shows 0 GPU\(s\)"),
        ("private /dev/shm", "{runtime: apptainer, image: IMAGE, mounts: MOUNTS, args: [--contain]}",
         r"/dev/shm in the apptainer image .* is not the node's"),
        ("bundle missing", "{runtime: oci, image: /var/tmp/no-such-bundle}",
         r"the container did not start.*no-such-bundle"),
    ]  # fmt: skip


@pytest.mark.parametrize(("case", "block", "said"), _failures(), ids=[c for c, _, _ in _failures()])
def test_preflight_in_the_image_names_node_image_and_cause(
    cluster: LiveCluster, tmp_path: Path, case: str, block: str, said: str
) -> None:
    """Each way a node cannot run its group's image fails the job at its preflight, before any program, with
    one line naming the node and the cause (in the batch log, logs/preflight.txt and `hpcplace status`)."""
    img = images()
    reports = tmp_path / "reports"
    reports.mkdir()
    container = fill(block, IMAGE=img["apptainer_sid"], MOUNTS=mounts_yaml())
    config = tmp_path / "config.yaml"
    config.write_text(fill(PREFLIGHT, CONTAINER=container, REPORTER=str(REPORTER), REPORTS=str(reports)))
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir, env=job_env(cluster), cwd=REPO)
    status = wait_done(run_dir, timeout=120)
    assert status.state == "FAILED", status.text
    assert not list(reports.iterdir()), "a program started although the preflight failed"
    preflight = (run_dir / "logs" / "preflight.txt").read_text()
    host = (run_dir / "logs" / "nodes.txt").read_text().split()[2]
    assert re.search(rf"^{re.escape(host)}: FAILED: .*{said}", preflight, re.M), (case, preflight)
    shown = cli("status", run_dir, env=job_env(cluster))
    assert re.search(said, shown.stdout + shown.stderr), shown.stdout + shown.stderr


def test_a_node_without_the_runtime_fails_the_preflight(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Nodes without Apptainer (bookworm's cluster: Debian 12 has no apptainer package): the job fails at its
    preflight, before any program, naming the node, the runtime and the image."""
    if SLURM_RELEASE in CONTAINER_RELEASES:
        pytest.skip(f"every node of the {SLURM_RELEASE} test cluster has Apptainer")
    reports = tmp_path / "reports"
    reports.mkdir()
    container = "{runtime: apptainer, image: /var/tmp/some-image.sif}"
    config = tmp_path / "config.yaml"
    config.write_text(fill(PREFLIGHT, CONTAINER=container, REPORTER=str(REPORTER), REPORTS=str(reports)))
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir, env=job_env(slurm_cluster), cwd=REPO)
    status = wait_done(run_dir, timeout=120)
    assert status.state == "FAILED", status.text
    assert not list(reports.iterdir())
    preflight = (run_dir / "logs" / "preflight.txt").read_text()
    assert re.search(
        r"^a800-1: FAILED: the container runtime apptainer is not installed on this node .*image "
        r"/var/tmp/some-image\.sif cannot start",
        preflight,
        re.M,
    ), preflight


OCI_REFUSED = """
name: oci-refused
cluster:
  node_groups:
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    agents: "0:0-1"
components:
  agents: {command: ["true"]}
container: {runtime: oci, image: /var/tmp/bundle}
"""


def test_submit_refuses_oci_where_slurm_cannot_run_it(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Slurm 22.05's --container runs one task per node and sets no SLURM_PROCID inside: `hpcplace submit`
    refuses runtime oci there, with the reason (even with --no-validate); 23.02 and later take it."""
    config = tmp_path / "config.yaml"
    config.write_text(OCI_REFUSED)
    res = cli("submit", config, "-o", tmp_path / "run", "--test-only", "--no-validate", env=job_env(slurm_cluster))
    if slurm_cluster.version[:2] < (23, 2):
        assert res.returncode != 0 and "runs one task per node per step" in res.stderr, res.stderr
    else:
        assert res.returncode == 0, res.stderr
