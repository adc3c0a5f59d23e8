"""`hpcplace plan CONFIG [--json] [--svg F]`: every example config, the JSON contract, the SVG, user errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.plan.plan import PROCESS_FIELDS, SCHEMA

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
SVG_NS = "{http://www.w3.org/2000/svg}"

TOP_KEYS = [
    "schema",
    "name",
    "source",
    "node_groups",
    "collocation_groups",
    "weight_sync",
    "slurm",
    "warnings",
    "components",
]
COMPONENT_KEYS = [
    "name",
    "world_size",
    "node_groups",
    "resource_type",
    "command",
    "env",
    "offload",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "cpus_per_process",
    "mem_per_process_mb",
    "collocation_group",
    "processes",
]
GROUP_KEYS = [
    "label",
    "partition",
    "het_group",
    "num_nodes",
    "first_node_rank",
    "gpus_per_node",
    "gpu_type",
    "cpus_per_node",
    "mem_per_node_mb",
    "constraint",
    "account",
    "qos",
    "hardware",
    "resource_kind",
    "env",
    "charged",
]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_there_are_example_configs() -> None:
    assert len(CONFIGS) >= 8


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_plan_summary_for_every_config(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.plan.runnable import commandless_components

    code, out, err = run_cli(capsys, str(config))
    assert code == 0, err
    if commandless_components(plan_from_file(config)):  # a framework config without its driver: one warning line
        assert err.startswith("hpcplace: warning: nothing to run: ") and err.count("\n") == 1, err
        assert "render and submit refuse this plan; HINT:" in err and "launch: {mode: ray, driver: [" in err
        fix = "components.<name>.command" if "(native)" in err else "--driver -- python main.py"
        assert fix in err
    else:
        assert err == ""
    assert out.startswith("plan '")
    assert "node groups (het-job components):" in out
    assert "device map (node: device -> component ranks):" in out


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_plan_json_for_every_config(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    code, out, err = run_cli(capsys, str(config), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == SCHEMA == "hpcplace.plan/1"
    # `launch` (between warnings and components) only in the Ray launch mode (the command formats' configs),
    # then `steer` where the framework's own Ray requests are steered (verl, NeMo-RL, OpenRLHF, slime)
    ray = data.get("launch", {}).get("mode") == "ray"
    steered = ["steer"] if data.get("source", {}).get("format") in ("verl", "nemo_rl", "openrlhf", "slime") else []
    assert list(data) == (TOP_KEYS[:-1] + ["launch", *steered, "components"] if ray else TOP_KEYS)
    assert data["source"]["path"] == str(config)
    for i, g in enumerate(data["node_groups"]):
        assert list(g) == GROUP_KEYS and g["het_group"] == i
    total = 0
    for comp in data["components"]:
        service = ["service"] if "service" in comp else []  # only a service's component (docs/services.md)
        assert list(comp) == COMPONENT_KEYS[:-1] + service + COMPONENT_KEYS[-1:]
        assert comp["world_size"] == len(comp["processes"])
        assert [p["rank"] for p in comp["processes"]] == list(range(comp["world_size"]))
        for p in comp["processes"]:
            assert list(p) == list(PROCESS_FIELDS)
        total += comp["world_size"]
    # every process record sits on its own line and parses alone
    lines = [line.strip() for line in out.splitlines() if line.lstrip().startswith('{"rank":')]
    assert len(lines) == total
    records = [json.loads(line.removesuffix(",")) for line in lines]
    assert records == [p for comp in data["components"] for p in comp["processes"]]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_plan_svg_for_every_config(capsys: pytest.CaptureFixture[str], tmp_path: Path, config: Path) -> None:
    target = tmp_path / "map.svg"
    code, out, err = run_cli(capsys, str(config), "--svg", str(target))
    assert code == 0, err
    assert "device map" in out  # the summary still goes to stdout
    root = ET.fromstring(target.read_text(encoding="utf-8"))
    assert root.tag == f"{SVG_NS}svg"
    assert int(root.get("width", "0")) > 0 and int(root.get("height", "0")) > 0
    titles = [t.text or "" for t in root.iter(f"{SVG_NS}title")]
    texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
    data = json.loads(plan_json(capsys, config))
    for comp in data["components"]:
        assert comp["name"] in texts  # legend
        assert any(f": {comp['name']} ranks" in t for t in titles)


def plan_json(capsys: pytest.CaptureFixture[str], config: Path) -> str:
    code, out, _ = run_cli(capsys, str(config), "--json")
    assert code == 0
    return out


def test_max_nodes_truncates_the_map(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, str(ROOT / "configs" / "hetero-partitions.yaml"), "--max-nodes", "2")
    assert code == 0
    assert "... 3 more nodes (use --max-nodes)" in out


def test_set_and_format_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "rlinf.yaml"
    config.write_text("cluster: {num_nodes: 1, component_placement: {actor: all}}\nslurm: {partition: p}\n")
    code, _, err = run_cli(capsys, str(config))
    assert code == 2 and "GPUs per node of node group 'default' are unknown" in err
    code, out, err = run_cli(capsys, str(config), "--format", "rlinf", "--set", "slurm.gpus_per_node=4", "--json")
    assert code == 0, err
    assert json.loads(out)["components"][0]["world_size"] == 4


INVALID = [
    (
        "bad-rank.yaml",
        "name: t\ncluster:\n  node_groups: [{label: a, nodes: 1, gpus_per_node: 8}]\n"
        "  component_placement:\n    actor: 0-3,2-9\n",
        "5:16",
    ),
    ("bad-yaml.yaml", "name: t\ncluster: {node_groups: [\n", "3:1"),
    ("bad-rlinf.yaml", "cluster:\n  num_nodes: 2\n  component_placement: {actor: all}\nslurm: {partition: p}\n", "2:3"),
    (
        "bad-roll.yaml",
        "num_gpus_per_node: 8\nslurm: {partition: p}\nw:\n  device_mapping: list(range(0,8))+x\n",
        "4:36",
    ),
    (
        "bad-areal.yaml",
        "allocation_mode: sglang[rollout]:d8|fsdp[actor]:d4\ncluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "slurm: {partition: p}\n",
        "1:18",
    ),
]


@pytest.mark.parametrize("name, text, line_col", INVALID, ids=[i[0] for i in INVALID])
def test_invalid_config_exits_2_with_location_and_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, line_col: str
) -> None:
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, str(config))
    assert code == 2
    assert out == ""
    assert err.startswith(f"hpcplace: error: {config}:{line_col}: "), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "name, text, line_col",
    [i for i in INVALID if i[0] != "bad-areal.yaml"],
    ids=[i[0] for i in INVALID if i[0] != "bad-areal.yaml"],
)
def test_invalid_config_has_a_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, line_col: str
) -> None:
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    _, _, err = run_cli(capsys, str(config))
    assert "\n  HINT: " in err


def test_missing_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, str(tmp_path / "nope.yaml"))
    assert code == 2
    assert "config file not found" in err and "HINT:" in err and "Traceback" not in err


def test_console_script_real_subprocess() -> None:
    """The one real subprocess: the installed `hpcplace` entry point (module fallback if not on PATH)."""
    exe = shutil.which("hpcplace")
    argv = [exe] if exe else [sys.executable, "-m", "hpcplace.cli"]
    config = ROOT / "configs" / "hetero-partitions.yaml"
    proc = subprocess.run(
        [*argv, "plan", str(config), "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    data = json.loads(proc.stdout)
    assert data["schema"] == SCHEMA
    assert {c["name"]: c["world_size"] for c in data["components"]} == {
        "actor": 4,
        "rollout": 4,
        "inference": 3,
        "env": 8,
        "agent": 4,
    }


def test_a_frameworks_long_defaults_tree_is_one_summary_line_and_overrides_stay_listed() -> None:
    from hpcplace.plan.gpumap import COMPOSED_SHOWN, composed_lines

    few = ["/c/main.yaml", "override cluster.num_nodes=2"]
    assert composed_lines(few) == ["  composed: /c/main.yaml", "  composed: override cluster.num_nodes=2"]
    many = [f"/v/config/part{i}.yaml @x{i}" for i in range(COMPOSED_SHOWN)] + ["/v/ppo.yaml", "override a=1"]
    assert composed_lines(many) == [
        f"  composed: {COMPOSED_SHOWN + 1} files under /v, the last /v/ppo.yaml (plan.json lists each)",
        "  composed: override a=1",
    ]
