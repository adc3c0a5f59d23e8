"""Node-scoped /dev/shm state and the job directory being the job's own (issues 8 and 12)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime import shm_dir
from hpcplace.runtime.colocate import Cycle, GroupSchedule

ROOT = Path(__file__).resolve().parents[2]


def test_node_directories_are_keyed_and_sanitized() -> None:
    assert shm_dir.node_dir_path("/dev/shm/hpcplace-7", "a800-1") == "/dev/shm/hpcplace-7/node-a800-1"
    assert shm_dir.node_dir_path("/j", "n/1 x") == "/j/node-n_1_x"
    assert (
        shm_dir.node_dir_from_env({"HPCPLACE_JOB_ID": "9", "SLURMD_NODENAME": "cpu-1"})
        == "/dev/shm/hpcplace-9/node-cpu-1"
    )
    with pytest.raises(shm_dir.ShmDirError):
        shm_dir.node_key("..")


def test_two_nodes_in_one_job_directory_never_share_a_baton(tmp_path: Path) -> None:
    """The reported failure: two nodes' ranks in one directory disagreed on the schedule. Per-node
    directories inside one job directory (a shared /dev/shm) keep them apart; each node's cleanup
    removes only its own, and the job directory goes with the last."""
    job = tmp_path / "hpcplace-1"
    nodes = {}
    for node, ranks in (("a800-1", (0, 1)), ("a800-2", (2, 3))):
        path = shm_dir.node_dir_path(str(job), node)
        shm_dir.make_node_dir(path)
        schedule = GroupSchedule(
            name="colloc-0",
            phases=(("actor",), ("rollout",)),
            members={"actor": ranks, "rollout": ranks},
            devices={"actor": ("0", "1"), "rollout": ("0", "1")},
        )
        nodes[node] = (path, [Cycle(path, schedule, component=c, rank=r) for c in ("actor", "rollout") for r in ranks])
    for _, cycles in nodes.values():
        for cycle in cycles:
            assert cycle.state()["members"] == cycles[0].state()["members"]
    for cycle in nodes["a800-1"][1]:
        cycle.close()
    assert shm_dir.remove_job_dir(nodes["a800-1"][0]) is True
    assert sorted(os.listdir(job)) == ["node-a800-2"]  # the other node's state untouched
    for cycle in nodes["a800-2"][1]:
        cycle.close()
    assert shm_dir.remove_job_dir(nodes["a800-2"][0]) is True
    assert not job.exists()


def _make_and_remove(node_dir: str, rounds: int) -> None:
    for _ in range(rounds):
        shm_dir.make_node_dir(node_dir)
        try:  # something inside for the removals to walk
            Path(node_dir, f"baton-{os.getpid()}").write_text("x")
        except FileNotFoundError:
            pass  # a peer removed the directory already
        shm_dir.remove_job_dir(node_dir)


def test_tasks_of_one_node_that_make_and_remove_its_directory_at_once_all_succeed(tmp_path: Path) -> None:
    """A job stopping as its tasks start (CI run of 2026-11-29): every task of a node makes the node's directory,
    sees the stop and removes it, side by side. None may fail because a peer removed the directory (or the job
    directory around it, or a file inside) between its own steps; nothing is left afterwards."""
    import multiprocessing

    node_dir = shm_dir.node_dir_path(str(tmp_path / "hpcplace-3"), "a800-1")
    context = multiprocessing.get_context("fork")
    tasks = [context.Process(target=_make_and_remove, args=(node_dir, 200)) for _ in range(6)]
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(timeout=120)
    assert [task.exitcode for task in tasks] == [0] * len(tasks)
    assert os.listdir(tmp_path) == []


def test_removing_a_node_directory_never_follows_a_symlink_inside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "keep").write_text("k")
    node_dir = shm_dir.node_dir_path(str(tmp_path / "hpcplace-4"), "cpu-1")
    shm_dir.make_node_dir(node_dir)
    Path(node_dir, "weights-actor", "shard").mkdir(parents=True)
    Path(node_dir, "weights-actor", "shard", "0.bin").write_bytes(b"w")
    Path(node_dir, "weights-actor", "to-outside").symlink_to(outside)
    Path(node_dir, "deep").symlink_to(outside / "deep")
    assert shm_dir.remove_job_dir(node_dir) is True
    assert sorted(os.listdir(tmp_path)) == ["outside"] and (outside / "deep" / "keep").read_text() == "k"
    assert shm_dir.remove_job_dir(node_dir) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a directory owned by another user")
def test_a_job_directory_made_first_by_another_user_is_refused(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o1777)
    job = tmp_path / "hpcplace-5"
    job.mkdir(mode=0o700)
    nobody = pwd.getpwnam("nobody")
    os.chown(job, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(shm_dir.ShmDirError) as info:
        shm_dir.make_node_dir(str(job / "node-n1"))
    assert f"{job} is owned by nobody (uid {nobody.pw_uid}), not by this job's user" in str(info.value)
    assert "HINT" in str(info.value) and os.listdir(job) == []
    with pytest.raises(shm_dir.ShmDirError):  # and the cleanup never removes it
        shm_dir.remove_job_dir(str(job))
    assert job.is_dir()


def test_a_symlink_or_an_open_mode_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.mkdir(mode=0o700)
    link = tmp_path / "hpcplace-6"
    link.symlink_to(target)
    with pytest.raises(shm_dir.ShmDirError, match=rf"{link} is a symlink \(owner "):
        shm_dir.make_node_dir(str(link / "node-n1"))
    assert os.listdir(target) == []
    loose = tmp_path / "hpcplace-7"
    loose.mkdir()
    os.chmod(loose, 0o755)
    with pytest.raises(shm_dir.ShmDirError, match="mode 0755; it must be private"):
        shm_dir.make_node_dir(str(loose / "node-n1"))


def test_the_shim_fails_the_task_naming_the_directory_and_owner(tmp_path: Path) -> None:
    """hpcplace-run refuses to start the program when the node directory is not the job's own."""
    from hpcplace.runtime import shim
    from hpcplace.runtime.errors import ShimError

    link = tmp_path / "hpcplace-8"
    link.symlink_to(tmp_path)
    with pytest.raises(ShimError, match=r"unsafe node-local directory: .*hpcplace-8 is a symlink"):
        shim._make_shm_dir(str(link / "node-n1"), False)


def test_collocated_weight_sync_sources_are_on_the_rollout_ranks_node(tmp_path: Path) -> None:
    """2 nodes x 8 GPUs, actor TP=4, rollout TP=2 strided: in the plan's weight_sync map every actor
    rank feeding a rollout rank is on that rollout rank's node (the per-node weight stores rely on it)."""
    config = tmp_path / "mp.yaml"
    config.write_text((ROOT / "configs" / "model-parallel-strided.yaml").read_text().replace("nodes: 1", "nodes: 2"))
    plan = plan_from_file(config)
    import json

    doc = json.loads(plan_to_json(plan))
    table = doc["weight_sync"]["actor_to_rollout"]
    node = {(c["name"], p["rank"]): p["cluster_node_rank"] for c in doc["components"] for p in c["processes"]}
    assert len(table) == 16
    fed = {}
    for actor, targets in enumerate(table):
        for dp, _tp in targets:
            assert node[("actor", actor)] == node[("rollout", dp)], (actor, dp)
            fed.setdefault(dp, []).append(actor)
    assert fed[0] == [0, 2] and fed[4] == [8, 10]
