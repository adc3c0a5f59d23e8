"""`hpcplace run CONFIG --local`: real processes, prefixed output, env as the shim computes it,
failure propagation, Ctrl-C, and the per-run /dev/shm directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcplace.local import local_backend
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime import services
from tests.runtime.conftest import base_env

PY = json.dumps(sys.executable)
SHOW = (
    "import json, os, sys; keys = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'NODE_RANK', "
    "'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES', 'VISIBLE_DEVICES', 'HPCPLACE_PLAN', "
    "'HPCPLACE_SHM_DIR', 'HPCPLACE_JOB_ID', 'HPCPLACE_DEVICE_MODE', 'NODE_GROUP_LABEL', 'GROUP_VAR', "
    "'AGENT_VAR', 'HPCPLACE_COLLOCATION_GROUP']; "
    "env = {k: os.environ.get(k) for k in keys}; env['shm_exists'] = os.path.isdir(env['HPCPLACE_SHM_DIR']); "
    "print(json.dumps(env)); print('to stderr', file=sys.stderr); sys.stdout.write('no newline')"
)
FAIL = "import os, sys, time; time.sleep(1.0); sys.exit(3 if os.environ['RANK'] == '1' else 0)"
SLEEP = "import os, signal, sys, time; {ignore}print('ready', os.getpid(), flush=True); time.sleep(60)"

CONFIG = f"""
name: localtest
cluster:
  node_groups:
    - {{label: gpu, partition: gpu, nodes: 2, gpus_per_node: 2, gpu_type: a800}}
    - {{label: cpu, partition: cpu, nodes: 1, env: {{GROUP_VAR: cpu}}}}
  component_placement:
    trainer: {{node_group: gpu, placement: "0-3"}}
    agent: {{node_group: cpu, placement: "0:0-1"}}
components:
  trainer: {{command: [{PY}, -c, {json.dumps(SHOW)}]}}
  agent: {{command: [{PY}, -c, {json.dumps(SHOW)}], env: {{AGENT_VAR: "x"}}}}
"""


def failing_config(*, ignore_term: bool = False) -> str:
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    sleeper = SLEEP.format(ignore=ignore)
    return f"""
name: failing
cluster:
  node_groups:
    - {{label: cpu, partition: cpu, nodes: 2}}
  component_placement:
    sleeper: {{node_group: cpu, placement: "0-1:0-3"}}
    fail: {{node_group: cpu, placement: "0:0-1"}}
components:
  sleeper: {{command: [{PY}, -c, {json.dumps(sleeper)}]}}
  fail: {{command: [{PY}, -c, {json.dumps(FAIL)}]}}
"""


def hpcplace(*args: str) -> list[str]:
    return [sys.executable, "-m", "hpcplace.cli", *args]


def shm_left(backend_pid: int) -> list[Path]:
    """The /dev/shm/hpcplace-<name>-local-<stamp>-<pid> directories of the backend with this pid."""
    return sorted(Path("/dev/shm").glob(f"hpcplace-*-local-*-{backend_pid}"))


def wait_shm_gone(backend_pid: int, timeout: float = 15) -> list[Path]:
    deadline = time.monotonic() + timeout
    while shm_left(backend_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return shm_left(backend_pid)


def run_local(
    tmp_path: Path, config: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`hpcplace run CONFIG --local ARGS`; however it ended, its /dev/shm directory is gone."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    argv = hpcplace("run", str(path), "--local", *args)
    with subprocess.Popen(
        argv, env={**base_env(), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert not shm_left(proc.pid), f"the run's /dev/shm directory was left behind: {shm_left(proc.pid)}"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def by_label(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        assert line.startswith("["), line
        label, _, rest = line[1:].partition("] ")
        out.setdefault(label, []).append(rest)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_runs_every_process_with_the_shim_environment(tmp_path: Path) -> None:
    done = run_local(tmp_path, CONFIG, "--run-dir", "run")
    assert done.returncode == 0, done.stderr
    lines = by_label(done.stdout)
    assert sorted(lines) == ["agent 0", "agent 1", "trainer 0", "trainer 1", "trainer 2", "trainer 3"]
    envs = {label: json.loads(out[0]) for label, out in lines.items()}
    assert all(out[1] == "no newline" for out in lines.values())
    for label in lines:
        assert f"[{label}] to stderr" in done.stderr
    trainer = [envs[f"trainer {r}"] for r in range(4)]
    assert [e["RANK"] for e in trainer] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in trainer] == ["0", "1", "0", "1"]
    assert [e["NODE_RANK"] for e in trainer] == ["0", "0", "1", "1"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in trainer] == ["0", "1", "0", "1"]  # no GPU here: virtual devices
    assert {e["HPCPLACE_DEVICE_MODE"] for e in trainer} == {"virtual"}
    assert {e["MASTER_ADDR"] for e in envs.values()} == {"127.0.0.1"}
    assert len({envs["trainer 0"]["MASTER_PORT"], envs["agent 0"]["MASTER_PORT"]}) == 2
    agent = envs["agent 1"]
    assert agent["CUDA_VISIBLE_DEVICES"] == "" and agent["GROUP_VAR"] == "cpu" and agent["AGENT_VAR"] == "x"
    assert agent["RANK"] == "1" and agent["WORLD_SIZE"] == "2" and agent["NODE_GROUP_LABEL"] == "cpu"
    plan = Path(agent["HPCPLACE_PLAN"])
    assert plan == (tmp_path / "run" / "plan.json").resolve() and Path(str(plan) + ".idx").exists()
    assert all(e["shm_exists"] for e in envs.values())
    assert not Path(agent["HPCPLACE_SHM_DIR"]).exists()  # removed after the run
    assert len({e["HPCPLACE_JOB_ID"] for e in envs.values()}) == 1


def test_local_gpus_from_the_shell(tmp_path: Path) -> None:
    done = run_local(tmp_path, CONFIG, "--component", "trainer", env={"CUDA_VISIBLE_DEVICES": "5"})
    assert done.returncode == 0, done.stderr
    envs = {label: json.loads(out[0]) for label, out in by_label(done.stdout).items()}
    assert sorted(envs) == ["trainer 0", "trainer 1", "trainer 2", "trainer 3"]
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs.values()} == {"5"}
    assert {e["HPCPLACE_DEVICE_MODE"] for e in envs.values()} == {"local-map"}
    assert [envs[f"trainer {r}"]["VISIBLE_DEVICES"] for r in range(4)] == ["0", "1", "0", "1"]
    assert next(iter((tmp_path / "runs").iterdir())).name.startswith("localtest-local-")


def test_dry_run_starts_nothing(tmp_path: Path) -> None:
    done = run_local(tmp_path, CONFIG, "--dry-run", "--run-dir", "run")
    assert done.returncode == 0, done.stderr
    assert "[trainer 3] " in done.stdout and "RANK=3" in done.stdout and "MASTER_ADDR=127.0.0.1" in done.stdout
    assert "devices: no GPU on this machine" in done.stdout
    assert not (tmp_path / "run").exists()


def test_refuses_user_variables(tmp_path: Path) -> None:
    done = run_local(tmp_path, CONFIG, env={"MASTER_PORT": "29500"})
    assert done.returncode == 2
    assert "MASTER_PORT='29500'" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_needs_local_and_known_components(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    done = subprocess.run(hpcplace("run", str(path)), env=base_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--local" in done.stderr  # a usage error
    done = run_local(tmp_path, CONFIG, "--component", "critic")
    assert done.returncode == 2 and "unknown component(s) critic" in done.stderr


def test_first_failure_stops_everything(tmp_path: Path) -> None:
    start = time.monotonic()
    done = run_local(tmp_path, failing_config(), timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 3, done.stderr
    assert "[fail 1] exited with 3; stopping every process" in done.stderr
    pids = [
        int(rest.split()[1])
        for label, out in by_label(done.stdout).items()
        for rest in out
        if label.startswith("sleeper")
    ]
    assert len(pids) == 4
    assert not any(alive(pid) for pid in pids)
    assert elapsed < 30


def test_sigterm_ignored_gets_sigkill_after_grace(tmp_path: Path) -> None:
    done = run_local(tmp_path, failing_config(ignore_term=True), "--grace", "0.5", timeout=60)
    assert done.returncode == 3, done.stderr
    pids = [
        int(rest.split()[1])
        for label, out in by_label(done.stdout).items()
        for rest in out
        if label.startswith("sleeper")
    ]
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)


def test_ctrl_c_stops_everything(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(failing_config().replace("time.sleep(1.0)", "time.sleep(60)"))
    proc = subprocess.Popen(
        hpcplace("run", str(path), "--local", "--grace", "2"),
        env=base_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pids = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while len(pids) < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "] ready " in line:
            pids.append(int(line.split()[-1]))
    assert len(pids) == 4, proc.stderr.read() if proc.stderr else ""
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the foreground group
    proc.wait(timeout=30)
    assert proc.returncode == 130
    assert "SIGINT: stopping every process" in (proc.stderr.read() if proc.stderr else "")
    assert not any(alive(pid) for pid in pids)
    assert not shm_left(proc.pid)


# A component whose process also starts a grandchild (a shell's background job in its own process
# group would escape a plain killpg; here it shares its parent's group, as programs' helpers do).
FAMILY = (
    "import os, subprocess, sys, time; {ignore}"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
    "print('ready', os.getpid(), child.pid, flush=True); time.sleep(300)"
)


def family_config(*, ignore_term: bool = False) -> str:
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    return f"""
name: family
cluster:
  node_groups:
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    worker: {{node_group: cpu, placement: "0:0-2"}}
components:
  worker: {{command: [{PY}, -c, {json.dumps(FAMILY.format(ignore=ignore))}]}}
"""


def start_family(tmp_path: Path, config: str, *args: str) -> tuple[subprocess.Popen[str], list[int]]:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    proc = subprocess.Popen(
        hpcplace("run", str(path), "--local", *args),
        env=base_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pids: list[int] = []
    deadline = time.monotonic() + 60
    while len(pids) < 6 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "] ready " in line:
            pids.extend(int(x) for x in line.split()[-2:])
    assert len(pids) == 6, proc.stderr.read() if proc.stderr else ""
    return proc, pids


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_sigkill_of_the_backend_leaves_no_process(tmp_path: Path) -> None:
    """kill -9 of `hpcplace run --local`: every child and grandchild is gone (checked by pid)."""
    proc, pids = start_family(tmp_path, family_config(), "--grace", "1")
    assert shm_left(proc.pid)  # the run's /dev/shm directory (a real run's weights live there)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    left = wait_gone(pids, 15)
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes {left} outlived the backend"
    assert not wait_shm_gone(proc.pid), "kill -9 of the backend left its /dev/shm directory behind"


def test_sigkill_of_the_backend_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    proc, pids = start_family(tmp_path, family_config(ignore_term=True), "--grace", "1")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    left = wait_gone(pids, 15)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes {left} outlived the backend"
    assert not wait_shm_gone(proc.pid)


def test_second_ctrl_c_kills_at_once(tmp_path: Path) -> None:
    proc, pids = start_family(tmp_path, family_config(ignore_term=True), "--grace", "60")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None and any(alive(p) for p in pids)  # waiting out the 60 s grace
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)
    assert time.monotonic() - t0 < 10
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 130, err
    assert "Ctrl-C again to kill now" in err and "second SIGINT: SIGKILL to every process" in err
    left = wait_gone(pids, 10)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left
    assert not shm_left(proc.pid)


def test_sigterm_of_the_backend_stops_everything(tmp_path: Path) -> None:
    """`kill PID` (a scheduler's or a user's SIGTERM to the backend alone): processes stopped, exit
    143, the /dev/shm directory removed."""
    proc, pids = start_family(tmp_path, family_config(), "--grace", "2")
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    err = proc.stderr.read() if proc.stderr else ""
    left = wait_gone(pids, 10)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143 and "SIGTERM: stopping every process" in err, err
    assert not left
    assert not shm_left(proc.pid)


RLINF_NO_GPU_COUNT = """\
cluster:
  num_nodes: 1
  component_placement:
    actor: all
hpcplace:
  components:
    actor: {command: [python, -c, "print(1)"]}
"""


def test_gpus_left_to_run_time_are_this_machines(tmp_path: Path) -> None:
    """RLinf counts the node's GPUs at run time; for `run --local` the node is this machine."""
    done = run_local(tmp_path, RLINF_NO_GPU_COUNT, "--dry-run", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.returncode == 0, done.stderr
    assert "[actor 1] " in done.stdout and "[actor 2] " not in done.stdout and "WORLD_SIZE=2" in done.stdout
    assert "HPCPLACE_PARTITION='' " in done.stdout  # no partition named: Slurm's default, empty (never "None")
    done = run_local(tmp_path, RLINF_NO_GPU_COUNT, "--dry-run", env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2 and done.stderr.startswith(
        f"hpcplace: error: {tmp_path / 'config.yaml'}:2:3: `cluster`: GPUs per node of node group 'default' are "
        "unknown (this machine has no GPU visible to `run --local` (CUDA_VISIBLE_DEVICES, else NVML))"
    ), done.stderr


def services_config(*, rm_command: str, optional: bool = False) -> str:
    """configs/services-local.yaml with this Python and the rm service's command replaced."""
    text = (Path(__file__).resolve().parents[2] / "configs" / "services-local.yaml").read_text()
    text = text.replace("python3", PY).replace("examples/", f"{Path(__file__).resolve().parents[2]}/examples/")
    start = text.index("    command: [", text.index("  rm:"))
    end = text.index("\n", start)
    text = text[:start] + f"    command: {rm_command}" + text[end:]
    return text + ("    optional: true\n" if optional else "")


def test_services_start_first_and_stop_when_the_work_is_done(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "examples" / "services" / "standin_server.py"
    config = services_config(rm_command=f'[{PY}, {script}, --port, "{{port}}", --warmup, "1"]')
    done = run_local(tmp_path, config, "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    lines = by_label(done.stdout)
    for rank in ("0", "1"):
        said = lines[f"trainer {rank}"]
        assert said[0].startswith(f"client {rank}: rewards [1.0, 2.0, 3.0] from http://127.0.0.1:"), said
        assert sum("answered 'echo rank" in line for line in said) == 2, said
    assert "the work is done: stopping the service(s) with SIGTERM" in done.stderr
    assert done.stderr.count("standin_server: SIGTERM: stopping") == 3  # rm and both sandboxes, gracefully
    ready = sorted(p.name for p in (tmp_path / "run" / "services").glob("*/*.ready"))
    assert ready == ["0.ready", "0.ready", "1.ready"]
    # the trainer's first request came after the reward server's readiness answered 200, never before
    err = done.stderr
    assert err.index('"GET /health HTTP/1.0" 200') < err.index('"POST /get_reward')


def test_a_service_that_ends_fails_the_run_naming_it(tmp_path: Path) -> None:
    config = services_config(rm_command=f'[{PY}, -c, "import sys; sys.exit(3)", "{{port}}"]')
    done = run_local(tmp_path, config, "--run-dir", str(tmp_path / "run"))
    assert done.returncode != 0
    assert "[rm 0] service ended (exit 3) while the run needed it; stopping every process" in done.stderr
    assert "client" not in done.stdout  # the trainer never started: its service was not ready


def test_a_service_that_ends_is_named_with_its_exit_status_even_when_its_probe_saw_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The replica's probe (a thread) may see the end first and write `.failed` before the supervisor's loop
    reaps the process (seen under load in a full run): the run still says the service's own exit status, not
    only that the trainer could not start."""
    original = local_backend._Supervisor.start_when_ready
    failed = tmp_path / "run" / services.DIR_NAME / "rm" / "0.failed"

    def after_the_probe(
        self: local_backend._Supervisor, waiting: list[local_backend.LocalProcess], began: float
    ) -> None:
        deadline = time.monotonic() + 30
        while not failed.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        original(self, waiting, began)

    monkeypatch.setattr(local_backend._Supervisor, "start_when_ready", after_the_probe)
    config = tmp_path / "config.yaml"
    config.write_text(services_config(rm_command=f'[{PY}, -c, "import sys; sys.exit(3)", "{{port}}"]'))
    code = local_backend.run_plan_locally(plan_from_file(config), run_dir=tmp_path / "run", workdir=tmp_path)
    err = capfd.readouterr().err
    assert failed.exists() and code == 3, err
    assert "[rm 0] service ended (exit 3) while the run needed it; stopping every process" in err
    assert "cannot start" not in err


def test_a_replica_never_ready_fails_the_run_within_its_timeout(tmp_path: Path) -> None:
    config = services_config(rm_command=f'[{PY}, -c, "import time; time.sleep(60)", "{{port}}"]').replace(
        "timeout: 120", "timeout: 1"
    )
    started = time.monotonic()
    done = run_local(tmp_path, config, "--run-dir", str(tmp_path / "run"))
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert (
        "FAILED: [trainer 0] cannot start: service 'rm' replica 0 on 127.0.0.1 was not ready within its timeout of 1 s (waited for GET /health to return 2xx; last: 127.0.0.1:"
        in done.stderr
    )


def test_a_component_chosen_without_its_service_is_refused(tmp_path: Path) -> None:
    config = services_config(rm_command='[python3, x.py, "{port}"]')
    done = run_local(tmp_path, config, "--component", "trainer")
    assert done.returncode == 2
    assert "the chosen components wait for service(s) rm, sandbox, which would not start" in done.stderr
    assert "--component rm --component sandbox starts them too" in done.stderr


def test_an_optional_service_that_ends_leaves_the_run_going(tmp_path: Path) -> None:
    """An optional service's end is logged, not a failure: the run goes on (here it ends while the trainer
    still waits for the reward server's 1.5 s warm-up; nothing uses it)."""
    script = Path(__file__).resolve().parents[2] / "examples" / "services" / "standin_server.py"
    config = services_config(rm_command=f'[{PY}, {script}, --port, "{{port}}", --warmup, "1.5"]')
    config += f'  metrics:\n    node_group: cpu\n    optional: true\n    command: [{PY}, -c, "pass", "{{port}}"]\n'
    done = run_local(tmp_path, config, "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    assert "[metrics 0] optional service ended (exit 0); the run goes on" in done.stderr
    assert "client 0: rewards" in done.stdout and "client 1: rewards" in done.stdout
