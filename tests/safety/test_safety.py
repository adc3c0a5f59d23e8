"""Issue 8's defects, one test each: YAML alias bombs, caps, env names, --set on any document,
plan refusing what render refuses, control characters, srun-special argv words, render -o over a
submitted run, account/QOS per het component, MASTER_PORT agreement."""

from __future__ import annotations

import json
import socket
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hpcplace.cli import main as cli_main
from hpcplace.config import limits
from hpcplace.config.safe_words import check_srun_argv, env_name_problem, reserved_env_names
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime import master_port as mp
from hpcplace.slurm.render import render_run, render_script
from hpcplace.slurm.slurm_job import lower

NATIVE = """\
name: t
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-15"}
    agent: {node_group: cpu, placement: "0:0-1"}
components:
  actor: {command: [python3, -c, "print(1)"], env: {MY_FLAG: "1"}}
"""
RUNNABLE = NATIVE + '  agent: {command: ["true"]}\n'  # every component has a command: render accepts it


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_of(path: Path, **kw: object) -> HpcplaceError:
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path, **kw)  # type: ignore[arg-type]
    assert info.value.location is not None, f"no location: {info.value}"
    assert info.value.location.path == str(path)
    return info.value


# ---- YAML ----------------------------------------------------------------------------------------


def test_alias_bomb_is_capped_quickly(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    assert path.stat().st_size < 600
    t0 = time.monotonic()
    err = error_of(path)
    assert time.monotonic() - t0 < 5
    assert f"more than {limits.MAX_YAML_VALUES} values" in err.message


@pytest.mark.parametrize("text", ["a: &x [1, *x]\n", "a: &x {b: 1, c: *x}\n", "a: &x {b: 1, <<: *x}\n"])
def test_self_referencing_alias_is_an_error_not_a_recursion(tmp_path: Path, text: str) -> None:
    assert "refers to the mapping or list that contains it" in error_of(write(tmp_path, text)).message


def test_deep_nesting_is_capped(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "a: " + "[" * 3000 + "]" * 3000 + "\n"))
    assert "nesting is deeper" in err.message


def test_merge_keys_still_work() -> None:
    from hpcplace.config.yaml_source import load_yaml_text

    doc = load_yaml_text("d: &d {command: [true], env: {A: '1'}}\nagent: {<<: *d, env: {B: '2'}}\n")
    assert doc.data["agent"] == {"command": [True], "env": {"B": "2"}}


def test_huge_integer_literal_is_an_error(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, NATIVE.replace("nodes: 2,", "nodes: " + "9" * 5000 + ",")))
    assert "unreadable YAML value" in err.message or "at most" in err.message


# ---- caps ----------------------------------------------------------------------------------------

CAPPED = {
    "native nodes": (NATIVE.replace("nodes: 2,", "nodes: 1000000000,"), "number of nodes"),
    "native gpus": (NATIVE.replace("gpus_per_node: 8", "gpus_per_node: 100000"), "gpus_per_node"),
    "native hardware": (
        NATIVE.replace(
            "{label: cpu, partition: cpu, nodes: 1}",
            "{label: cpu, partition: cpu, nodes: 1, hardware: {type: arm, count: 99999999}}",
        ),
        "hardware.count",
    ),
    "rank map": (NATIVE.replace('"0:0-1"', '"0:0-99999999999999"'), "too large"),
    "processes": (NATIVE.replace('"0:0-1"', f'"0:0-{limits.MAX_PROCESSES}"'), "at most"),
    "rlinf num_nodes": (
        """\
        cluster:
          num_nodes: 1000000000
          component_placement: {actor: all}
        slurm: {partition: a800, gpus_per_node: 8}
        """,
        "cluster.num_nodes",
    ),
    "roll device id": (
        """\
        num_gpus_per_node: 8
        actor_train: {device_mapping: "[0, 99999999999]"}
        slurm: {partition: a800}
        """,
        "largest supported GPU id",
    ),
    "roll device range": (
        """\
        num_gpus_per_node: 8
        actor_train: {device_mapping: "list(range(0, 1000000000000))"}
        slurm: {partition: a800}
        """,
        "GPU id",
    ),
    "roll gpus per node": (
        """\
        num_gpus_per_node: 100000
        actor_train: {device_mapping: "[0]"}
        slurm: {partition: a800}
        """,
        "num_gpus_per_node",
    ),
    "areal n_nodes": (
        """\
        allocation_mode: "sglang:d8p1t1+fsdp:d8p1t1"
        cluster: {n_nodes: 1000000000, n_gpus_per_node: 8}
        slurm: {partition: a800}
        """,
        "cluster.n_nodes",
    ),
    "areal dims": (
        """\
        allocation_mode: "sglang:d99999999999p1t1+fsdp:d8p1t1"
        cluster: {n_nodes: 2, n_gpus_per_node: 8}
        slurm: {partition: a800}
        """,
        "larger than",
    ),
}


@pytest.mark.parametrize("case", sorted(CAPPED))
def test_caps_are_clear_errors_before_memory_runs_out(tmp_path: Path, case: str) -> None:
    text, words = CAPPED[case]
    t0 = time.monotonic()
    err = error_of(write(tmp_path, text))
    assert time.monotonic() - t0 < 3, "the cap came too late"
    assert words in str(err), str(err)


# ---- environment names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["A=B", "=X", "a b", "1X", "X-Y", "RANK", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "HPCPLACE_ANYTHING", ""]
)
def test_bad_env_names_fail_at_plan_time_with_a_location(tmp_path: Path, name: str) -> None:
    text = NATIVE.replace('env: {MY_FLAG: "1"}', "env: {" + json.dumps(name) + ": '1'}")
    err = error_of(write(tmp_path, text))
    assert err.location is not None and err.location.line == 10
    assert repr(name) in err.message or "variable name" in err.message or "string name" in err.message


def test_env_value_with_nul_and_node_group_env(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, NATIVE.replace('MY_FLAG: "1"', 'MY_FLAG: "a\\0b"')))
    assert "NUL" in err.message
    err = error_of(
        write(
            tmp_path,
            NATIVE.replace(
                "{label: cpu, partition: cpu, nodes: 1}", "{label: cpu, partition: cpu, nodes: 1, env: {WORLD_SIZE: 3}}"
            ),
        )
    )
    assert "'WORLD_SIZE' is set by hpcplace" in err.message


def test_env_name_rules_are_one_function_with_an_allow_list() -> None:
    assert env_name_problem("PYTHONPATH") is None and env_name_problem("_x1") is None
    assert env_name_problem("RANK") and env_name_problem("RANK", allowed=["RANK"]) is None
    assert {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"} <= reserved_env_names()


# ---- --set ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n", "~\n"])
def test_set_on_any_document_shape_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        plan_from_file(path, overrides=["name=x"])
    assert info.value.location is not None


def test_set_through_a_scalar_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="'name' is not a mapping") as info:
        plan_from_file(write(tmp_path, NATIVE), overrides=["name.x=1"])
    assert info.value.location is not None and info.value.location.line == 1


# ---- plan refuses what render refuses; control characters -----------------------------------------


@pytest.mark.parametrize(
    "slurm, words",
    [
        ('{time: "soon"}', "not a Slurm time limit"),
        ('{time: "1:00\\n#SBATCH --x"}', "control character"),
        ('{job_name: "a\\\\b"}', "backslash"),
        ('{extra_sbatch_args: "-x"}', "not a long sbatch option"),
        ('{extra_sbatch_args: "--a=\'b"}', "cannot split"),
    ],
)
def test_plan_refuses_bad_slurm_options_with_a_location(tmp_path: Path, slurm: str, words: str) -> None:
    err = error_of(write(tmp_path, NATIVE + f"slurm: {slurm}\n"))
    assert words in err.message and err.location is not None and err.location.line == 11


def test_partition_with_control_characters_is_refused_at_plan(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, NATIVE.replace("partition: cpu", 'partition: "cpu\\e[2J"')))
    assert "control character" in err.message


def test_plan_command_runs_the_render_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # node group with different GPU counts per node: lowering refuses it; so must `plan`
    path = write(tmp_path, NATIVE.replace("gpus_per_node: 8", "gpus_per_node: [8, 4]").replace('"0-15"', '"0-11"'))
    assert cli_main(["plan", str(path)]) == 3
    err = capsys.readouterr().err
    assert "different GPU counts" in err and f"{path}:" in err


def test_escape_sequences_never_reach_job_sbatch_raw(tmp_path: Path) -> None:
    text = NATIVE.replace('[python3, -c, "print(1)"]', '[printf, "\\e[2J\\e[31mlooks fine\\u202e\\n"]')
    plan = plan_from_file(write(tmp_path, text))
    script = render_script(plan, "/run")
    assert "\x1b" not in script and "\u202e" not in script
    assert all(c.isprintable() or c in "\n\t" for c in script)
    assert "\\x1b[2J" in script  # shown escaped in the command comment
    rendered = render_run(plan, tmp_path / "run")
    assert json.loads(rendered.plan_json.read_text())["components"][0]["command"][1].startswith("\x1b[2J")


def test_quote_word_round_trips_through_bash() -> None:
    from hpcplace.slurm.render import quote_word

    for text in ["a\nb", "\x1b[31m", "it's \\ \t", "\u202eabc", "\x7f", "ok"]:
        out = subprocess.run(["bash", "-c", "printf %s " + quote_word(text)], capture_output=True, text=True).stdout
        assert out == text and quote_word(text).isprintable()


# ---- srun-special argv words ---------------------------------------------------------------------


def test_command_with_colon_never_reaches_srun_argv(tmp_path: Path) -> None:
    text = NATIVE.replace('[python3, -c, "print(1)"]', '[sh, -c, "echo", ":", "--het-group=1", "-n1", "touch", "x"]')
    plan = plan_from_file(write(tmp_path, text))
    script = render_script(plan, "/run")
    srun_lines = [line for line in script.splitlines() if line.lstrip().startswith(('"${hp_launcher', "srun", ": "))]
    assert srun_lines and not any("touch" in line for line in srun_lines)
    assert "--component actor" in script and "-- sh" not in script


@pytest.mark.parametrize("launcher", [": x", "hpcplace-run : --het-group=1 touch x", "--het-group=1 x", "-v"])
def test_launcher_that_srun_would_split_or_misread_is_refused(
    tmp_path: Path, launcher: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, RUNNABLE)
    assert cli_main(["render", str(path), "-o", str(tmp_path / "run"), f"--launcher={launcher}"]) == 2
    assert "launcher" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_check_srun_argv_for_other_callers() -> None:
    assert check_srun_argv(["python", "a:b", "::"], "driver") == ("python", "a:b", "::")
    for bad in (["python", ":"], [":"], ["-x"], [], ["a\x00b"]):
        with pytest.raises(SpecError):
            check_srun_argv(bad, "driver")


# ---- render -o over a submitted run --------------------------------------------------------------


def test_render_refuses_a_submitted_run_dir_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, RUNNABLE)
    run = tmp_path / "run"
    assert cli_main(["render", str(path), "-o", str(run)]) == 0
    (run / "run.json").write_text(json.dumps({"job_id": "42"}))
    before = (run / "plan.json").read_text()
    write(tmp_path, RUNNABLE.replace('"0:0-1"', '"0:0-2"'))
    assert cli_main(["render", str(path), "-o", str(run)]) == 2  # bad input (the directory), not a Slurm error
    assert "submitted as job 42" in capsys.readouterr().err
    assert (run / "plan.json").read_text() == before
    assert cli_main(["render", str(path), "-o", str(run), "--force"]) == 0
    assert (run / "plan.json").read_text() != before


# ---- account / QOS per het component ---------------------------------------------------------------


def test_account_and_qos_are_stated_for_every_component(tmp_path: Path) -> None:
    text = NATIVE.replace("{label: a800, partition: a800,", "{label: a800, partition: a800, account: acct_a, qos: q_a,")
    text = text.replace(
        "- {label: cpu, partition: cpu, nodes: 1}",
        "- {label: cpu, partition: cpu, nodes: 1}\n    - {label: c2, partition: cpu, nodes: 1, account: acct_b}",
    )
    text = text.replace(
        'agent: {node_group: cpu, placement: "0:0-1"}',
        'agent: {node_group: cpu, placement: "0:0-1"}\n    b: {node_group: c2, placement: "0"}',
    )
    plan = plan_from_file(write(tmp_path, text))
    job = lower(plan)
    args = [set(c.sbatch_args) for c in job.components]
    assert {"--account=acct_a", "--qos=q_a"} <= args[0]
    assert {"--account=acct_a", "--qos=q_a"} <= args[1]  # what sbatch would carry over, now written
    assert {"--account=acct_b", "--qos=q_a"} <= args[2]
    rendered = render_run(plan, tmp_path / "run")
    groups = json.loads(rendered.plan_json.read_text())["node_groups"]
    assert [g["charged"] for g in groups] == [
        {"account": "acct_a", "account_from": "a800", "qos": "q_a", "qos_from": "a800"},
        {"account": "acct_a", "account_from": "a800", "qos": "q_a", "qos_from": "a800"},
        {"account": "acct_b", "account_from": "c2", "qos": "q_a", "qos_from": "a800"},
    ]
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "account acct_a (inherited from node group a800: sbatch carries it over)" in script


# ---- MASTER_PORT -----------------------------------------------------------------------------------


def test_rank0_skips_a_port_another_job_listens_on_and_others_wait_for_it(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    try:
        path = mp.port_file(str(tmp_path), "1711", "actor")
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(mp.wait_published(path, timeout_s=10)))
        waiter.start()
        time.sleep(0.1)
        port = mp.choose_and_publish(path, [taken, taken + 1 if taken < 65535 else taken - 1])
        waiter.join(10)
        assert port != taken and got == [port]
    finally:
        busy.close()


def test_port_wait_times_out_with_a_clear_error(tmp_path: Path) -> None:
    from hpcplace.runtime.errors import ShimError

    with pytest.raises(ShimError, match="did not publish MASTER_PORT"):
        mp.wait_published(mp.port_file(str(tmp_path), "1", "a"), timeout_s=0.1)


def test_port_candidates_stay_in_the_span() -> None:
    from hpcplace.runtime.ranks import PORT_BASE, PORT_SPAN, PORT_STRIDE, master_port

    ports = mp.candidates(master_port("1000", 3), PORT_BASE, PORT_SPAN, PORT_STRIDE)
    assert len(set(ports)) == len(ports) and all(PORT_BASE <= p < PORT_BASE + PORT_SPAN for p in ports)
    assert all((p - PORT_BASE) % PORT_STRIDE == 3 for p in ports)  # still distinct from other components


def test_shim_refuses_bad_env_names_in_a_foreign_plan_json() -> None:
    from hpcplace.runtime.errors import ShimError
    from hpcplace.runtime.ranks import _env_name_ok, environment_changes

    assert _env_name_ok("PYTHONPATH") and _env_name_ok("_a1")
    assert not any(_env_name_ok(n) for n in ("A=B", "=X", "a b", "1X", "", "é"))

    class Info:
        component = "actor"

        def environment(self) -> dict[str, str]:
            return {"RANK": "0"}

    for env in ({"A=B": "1"}, {"OK": "a\x00b"}):
        with pytest.raises(ShimError, match="invalid variables"):
            environment_changes(Info(), env)  # type: ignore[arg-type]


def test_rlinf_empty_node_ranks_is_an_error(tmp_path: Path) -> None:
    text = """\
        cluster:
          num_nodes: 2
          component_placement: {actor: {node_group: a, placement: "0"}}
          node_groups:
            - {label: a, node_ranks: " "}
        slurm: {partition: a800, gpus_per_node: 8}
        """
    assert "node_ranks is empty" in error_of(write(tmp_path, text)).message


@pytest.mark.parametrize(
    "data, where, message, hint",
    [
        (b"name: x\ncluster:\n\tnum_nodes: 1\n", ":3:1:", "invalid YAML", "YAML indents with spaces, never tabs"),
        (b"name: x\ncluster: 1\x00\n", ":2:11:", "character 0x00 is not allowed in YAML", "UTF-8 text"),
        (b"name: caf\xe9\n", ":1:10:", "is not UTF-8 text: byte 0xe9 cannot be decoded", "save it as UTF-8"),
        (b"\xff\xfen\x00", ":1:1:", "is UTF-16 text", "iconv -f utf-16 -t utf-8"),
    ],
)
def test_unreadable_text_is_located_with_a_hint(
    tmp_path: Path, data: bytes, where: str, message: str, hint: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    err = error_of(path)
    assert str(err).startswith(f"{path}{where}") and message in err.message and hint in (err.hint or "")


def test_yaml_error_in_a_defaults_file_is_located_in_that_file(tmp_path: Path) -> None:
    """Hydra composes `defaults:` files with its own loader: the error names that file, not the top one."""
    write(tmp_path, "defaults:\n  - base\n  - _self_\ncluster: {num_nodes: 1}\n", "main.yaml")
    base = write(tmp_path, "a: 1\nbad: [1, 2\n", "base.yaml")
    for text, message in (
        ("a: 1\nbad: [1, 2\n", ":3:1: invalid YAML: while parsing a flow sequence"),
        ("cluster: {x: 1}\ncluster: {y: 2}\n", ":2:1: invalid YAML: while constructing a mapping"),
        ("a: 1\nb: 2\x00\n", ":2:5: invalid YAML: character 0x00 is not allowed in YAML"),
    ):
        base.write_text(text)
        with pytest.raises(SpecError) as info:
            plan_from_file(tmp_path / "main.yaml")
        assert str(info.value).startswith(f"{base}{message}"), str(info.value)
    base.write_bytes(b"a: 1\nname: caf\xe9\n")  # Hydra decodes it itself: the file and the byte are named
    with pytest.raises(SpecError) as info:
        plan_from_file(tmp_path / "main.yaml")
    assert str(info.value).startswith(f"{base}:2:10: config file {base} is not UTF-8 text: byte 0xe9")


def test_a_directory_as_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        plan_from_file(tmp_path)
    assert info.value.message == f"config path {tmp_path} is a directory"
    assert info.value.hint == "pass the config's YAML file"


@pytest.mark.parametrize("mem", ["99999999999999999999999", "2000T"])
def test_memory_per_node_is_capped(mem: str) -> None:
    from hpcplace.config.spec import parse_memory_mb
    from hpcplace.config.yaml_source import load_yaml_text

    with pytest.raises(HpcplaceError) as info:
        parse_memory_mb(load_yaml_text(f"mem: {mem}\n", "c.yaml").root().require("mem"))
    assert str(info.value).startswith("c.yaml:1:6: memory (MB) is ")
    assert f"hpcplace supports at most {limits.MAX_MEM_PER_NODE_MB}" in info.value.message
