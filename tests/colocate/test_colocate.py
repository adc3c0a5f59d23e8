"""Ownership hand-off between real processes: the device invariant, hybrid phases, dead owners."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from colocate_invariants import check_invariants, read_events

from hpcplace.runtime.colocate import CollocationError, Cycle, GroupSchedule, schedule_from_plan
from hpcplace.runtime.memory import CpuBackend
from hpcplace.runtime.shm_dir import ShmDirError

WORKER = str(Path(__file__).with_name("cycle_worker.py"))


@pytest.fixture
def job(tmp_path: Path) -> str:
    return str(tmp_path / "hpcplace-test")


def spawn(job: str, component: str, rank: int, *, phases, members, devices, turns, events=None, **extra):
    args = {
        "job": job,
        "group": "g",
        "phases": phases,
        "members": members,
        "devices": devices,
        "component": component,
        "rank": rank,
        "turns": turns,
        "events": events,
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, WORKER, json.dumps(args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 20) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no result from worker (rc {proc.returncode}): {err}"
    return proc.returncode, json.loads(lines[-1])


def test_two_components_two_ranks_alternate(job: str, tmp_path: Path) -> None:
    events = str(tmp_path / "events.log")
    phases = [["rollout"], ["actor"]]
    members = {"actor": [0, 1], "rollout": [0, 1]}
    devices = {"actor": ["0", "1"], "rollout": ["0", "1"]}
    procs = [
        spawn(job, c, r, phases=phases, members=members, devices=devices, turns=4, events=events, sleep=0.005)
        for c in ("actor", "rollout")
        for r in (0, 1)
    ]
    for p in procs:
        rc, result = finish(p)
        assert rc == 0 and result["turns"] == 4, result
    gens = check_invariants(read_events(events), phases)
    assert [sorted(gens[g]) for g in sorted(gens)] == [["rollout"], ["actor"]] * 4


def test_hybrid_phase_runs_two_components_then_one_on_all(job: str, tmp_path: Path) -> None:
    events = str(tmp_path / "events.log")
    phases = [["env", "rollout"], ["actor"]]
    members = {"env": [0], "rollout": [0], "actor": [0, 1]}
    devices = {"env": ["0"], "rollout": ["1"], "actor": ["0", "1"]}
    procs = [
        spawn(job, c, r, phases=phases, members=members, devices=devices, turns=3, events=events, sleep=0.05)
        for c, ranks in members.items()
        for r in ranks
    ]
    for p in procs:
        rc, result = finish(p)
        assert rc == 0 and result["turns"] == 3, result
    log = read_events(events)
    gens = check_invariants(log, phases)
    assert [sorted(gens[g]) for g in sorted(gens)] == [["env", "rollout"], ["actor"]] * 3
    # env and rollout really run together (a baton that serialized them would never overlap them;
    # one generation suffices: at generation 0 one of them may still be starting up)
    overlapped = []
    for g in (0, 2, 4):
        start = {e["component"]: e["t"] for e in log if e["generation"] == g and e["event"] == "onload_end"}
        end = {e["component"]: e["t"] for e in log if e["generation"] == g and e["event"] == "offload_begin"}
        overlapped.append(start["env"] < end["rollout"] and start["rollout"] < end["env"])
    assert any(overlapped), overlapped


def _hang_and_kill(job: str, tmp_path: Path, policy: str) -> tuple[int, int, dict]:
    marker = tmp_path / "in-turn"
    phases = [["actor"], ["rollout"]]
    members = {"actor": [0], "rollout": [0]}
    devices = {"actor": ["0"], "rollout": ["0"]}
    owner = spawn(job, "actor", 0, phases=phases, members=members, devices=devices, turns=1, hang_marker=str(marker))
    waiter = spawn(job, "rollout", 0, phases=phases, members=members, devices=devices, turns=2, policy=policy)
    deadline = time.monotonic() + 15
    while not marker.exists():
        assert time.monotonic() < deadline, "owner never got its turn"
        time.sleep(0.01)
    time.sleep(0.2)  # the waiter is blocked on the bell by now
    t_kill = time.monotonic_ns()
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    rc, result = finish(waiter)
    return rc, t_kill, result


def test_killed_owner_error_policy_raises_within_one_second(job: str, tmp_path: Path) -> None:
    rc, t_kill, result = _hang_and_kill(job, tmp_path, "error")
    assert rc == 3 and result["turns"] == 0
    assert "actor:0" in result["error"] and "died" in result["error"]
    assert (result["t_error"] - t_kill) / 1e9 < 1.0


def test_killed_owner_takeover_policy_passes_the_turn_within_one_second(job: str, tmp_path: Path) -> None:
    rc, t_kill, result = _hang_and_kill(job, tmp_path, "takeover")
    assert rc == 0 and result["turns"] == 2  # the dead actor is skipped from then on
    assert (result["t_end"] - t_kill) / 1e9 < 1.0


def test_rank_dying_inside_resume_is_reported_as_failed_to_onload(job: str) -> None:
    """torch_memory_saver exit(1)s on a failed resume; the group hears "failed to onload", naming the rank."""
    shape = {
        "phases": [["rollout"], ["actor"]],
        "members": {"rollout": [0], "actor": [0]},
        "devices": {"rollout": ["0"], "actor": ["0"]},
    }
    rollout = spawn(job, "rollout", 0, turns=2, **shape)
    actor = spawn(job, "actor", 0, turns=1, die_in_resume=True, **shape)
    assert actor.wait(timeout=20) == 1
    rc, result = finish(rollout)
    assert rc == 3 and result["turns"] == 1
    assert "actor:0 (failed to onload in generation 1: it died inside memory resume" in result["error"]


def _threads(job: str, schedule: GroupSchedule, plan: dict[tuple[str, int], list], **kwargs) -> list[str]:
    """Run each (component, rank) in a thread with its own Cycle; each plan entry is a list of
    callables run inside successive turns. Returns the order of turns taken."""
    order: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(component: str, rank: int, bodies: list) -> None:
        try:
            with Cycle(job, schedule, component=component, rank=rank, **kwargs) as cycle:
                for body in bodies:
                    with cycle.turn(component):
                        with lock:
                            order.append(component)
                        body(cycle)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c, r, b)) for (c, r), b in plan.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    if errors:
        raise errors[0]
    return order


def test_request_next_overrides_the_configured_order(job: str) -> None:
    schedule = GroupSchedule("g", (("a",), ("b",), ("c",)), {"a": (0,), "b": (0,), "c": (0,)}, {})
    nothing = lambda cycle: None  # noqa: E731
    order = _threads(
        job,
        schedule,
        {
            ("a", 0): [lambda cycle: cycle.request_next("c"), nothing],
            ("b", 0): [nothing],
            ("c", 0): [nothing, nothing],
        },
    )
    assert order == ["a", "c", "a", "b", "c"]


def test_start_component_and_phases_without_local_ranks(job: str) -> None:
    # "env" has no rank on this node: its phase is skipped here.
    schedule = GroupSchedule("g", (("env",), ("actor",), ("rollout",)), {"actor": (0,), "rollout": (0,)}, {})
    nothing = lambda cycle: None  # noqa: E731
    order = _threads(job, schedule, {("actor", 0): [nothing] * 2, ("rollout", 0): [nothing] * 2}, start="rollout")
    assert order == ["rollout", "actor", "rollout", "actor"]


def test_memory_backend_is_resumed_on_entry_and_paused_on_exit(job: str) -> None:
    schedule = GroupSchedule("g", (("actor",),), {"actor": (0,)}, {})
    memory = CpuBackend()
    memory.add_tag("weights", nbytes=1 << 16, backup=True)
    with Cycle(job, schedule, component="actor", rank=0) as cycle:
        for _ in range(3):
            with cycle.turn(memory=memory):
                assert memory.state("weights") == "resident"
            assert memory.state("weights") == "paused"
    memory.close()


def test_failed_offload_marks_the_group_failed(job: str) -> None:
    schedule = GroupSchedule("g", (("actor",), ("rollout",)), {"actor": (0,), "rollout": (0,)}, {})
    actor = Cycle(job, schedule, component="actor", rank=0)
    rollout = Cycle(job, schedule, component="rollout", rank=0)

    def broken() -> None:
        raise OSError("cannot release")

    with pytest.raises(OSError), actor.turn(offload=broken):
        pass
    with pytest.raises(CollocationError, match="failed to offload"):
        rollout.wait_for_turn(timeout=2)
    actor.close()
    rollout.close()


def test_misuse_is_refused(job: str) -> None:
    schedule = GroupSchedule(
        "g", (("actor",), ("rollout",)), {"actor": (0,), "rollout": (0,)}, {"actor": ("0",), "rollout": ("0",)}
    )
    with Cycle(job, schedule, component="actor", rank=0) as cycle:
        with pytest.raises(CollocationError, match="already running"):
            Cycle(job, schedule, component="actor", rank=0)
        with pytest.raises(CollocationError, match="cannot take a turn as"), cycle.turn("rollout"):
            pass
        with pytest.raises(CollocationError, match="only allowed during a turn"):
            cycle.request_next("rollout")
        other = GroupSchedule("g", (("rollout",), ("actor",)), {"actor": (0,), "rollout": (0,)}, {})
        with pytest.raises(CollocationError, match="disagree"):
            Cycle(job, other, component="rollout", rank=0)
        Cycle(job, schedule, component="rollout", rank=0).close()  # the refused attempt held nothing
    with pytest.raises(CollocationError, match="not a member"):
        Cycle(job, schedule, component="actor", rank=5)
    with pytest.raises(CollocationError, match="share devices"):
        GroupSchedule(
            "h", (("env", "rollout"),), {"env": (0,), "rollout": (0,)}, {"env": ("0", "1"), "rollout": ("1",)}
        ).validate()


def test_job_dir_is_private_and_symlinks_are_refused(tmp_path: Path) -> None:
    schedule = GroupSchedule("g", (("actor",),), {"actor": (0,)}, {})
    job = tmp_path / "hpcplace-1"
    Cycle(str(job), schedule, component="actor", rank=0).close()
    assert (job.stat().st_mode & 0o777) == 0o700
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "hpcplace-2"
    link.symlink_to(target)
    with pytest.raises(ShmDirError, match="symlink"):
        Cycle(str(link), schedule, component="actor", rank=0)
    wide = tmp_path / "hpcplace-3"
    wide.mkdir(mode=0o755)
    wide.chmod(0o755)
    with pytest.raises(ShmDirError, match="private"):
        Cycle(str(wide), schedule, component="actor", rank=0)
    (tmp_path / "hpcplace-4").mkdir(mode=0o700)
    (tmp_path / "hpcplace-4" / "colocate-g").symlink_to(target)
    with pytest.raises(ShmDirError, match="symlink"):
        Cycle(str(tmp_path / "hpcplace-4"), schedule, component="actor", rank=0)


def _proc(rank: int, node: int, devices: list[str]) -> dict:
    return {"rank": rank, "cluster_node_rank": node, "visible_accelerators": devices, "local_rank": rank % 2}


def test_schedule_and_cycle_from_env_read_the_plan(tmp_path: Path) -> None:
    plan = {
        "schema": "hpcplace.plan/1",
        "name": "demo",
        "collocation_groups": [
            {
                "name": "actor,rollout",
                "components": ["actor", "rollout"],
                "phases": [["actor"], ["rollout"]],
                "resource_type": "gpu",
                "devices": [{"node": 0, "local_ranks": [0, 1]}, {"node": 1, "local_ranks": [0, 1]}],
            }
        ],
        "components": [
            {
                "name": "actor",
                "collocation_group": "actor,rollout",
                "processes": [_proc(0, 0, ["0"]), _proc(1, 0, ["1"]), _proc(2, 1, ["0"]), _proc(3, 1, ["1"])],
            },
            {
                "name": "rollout",
                "collocation_group": "actor,rollout",
                "processes": [_proc(0, 0, ["0", "1"]), _proc(1, 1, ["0", "1"])],
            },
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    schedule = schedule_from_plan(str(path), "actor,rollout", component="actor", rank=3)
    assert schedule.members == {"actor": (2, 3), "rollout": (1,)}
    assert schedule.devices == {"actor": ("0", "1"), "rollout": ("0", "1")}
    env = {
        "HPCPLACE_PLAN": str(path),
        "HPCPLACE_COMPONENT": "rollout",
        "HPCPLACE_RANK": "1",
        "HPCPLACE_SHM_DIR": str(tmp_path / "hpcplace-9"),
        "HPCPLACE_COLLOCATION_GROUP": "actor,rollout",
        "HPCPLACE_NODE_RANK": "1",
    }
    with Cycle.from_env(env) as cycle:
        assert cycle.schedule.phases == (("actor",), ("rollout",))
        assert cycle.state()["phase"] == 0
    with pytest.raises(CollocationError, match="no collocation group"):
        Cycle.from_env({**env, "HPCPLACE_COLLOCATION_GROUP": ""})
    with pytest.raises(CollocationError, match="not set"):
        Cycle.from_env({})
    assert os.path.isdir(tmp_path / "hpcplace-9" / "colocate-actor,rollout")
