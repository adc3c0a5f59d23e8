"""Every slime release hpcplace reads (hpcplace/config/formats/slime_releases.json, from the release tags), planned
on that release's own commands (tests/fixtures/slime/release_commands.json: the train.py commands of each tag's
scripts/*.sh, written by tests/planner/slime_release_commands.py) read as that release and compared with the plan
checked by hand against the script; and where slime's placement changed between releases, each side of the change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.slime_flags import DATA, release_for, releases
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec
from tests.planner.slime_release_commands import FIXTURE

COMMANDS: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["commands"]
CASES = [
    pytest.param(command, release.split()[0], id=f"{release.split()[0]}-{Path(command['script']).name}")
    for command in COMMANDS
    for release in command["releases"]
]
ENTRY = ["python3", "train.py"]
REPO = Path(__file__).resolve().parents[2]


def test_every_release_read_has_commands_of_its_own() -> None:
    covered = {release.split()[0] for command in COMMANDS for release in command["releases"]}
    assert covered == {str(r.version) for r in releases()}


@pytest.mark.parametrize(("command", "release"), CASES)
def test_a_releases_own_command_is_planned_as_that_release(
    command: dict[str, Any], release: str, tmp_path: Path
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f'slurm: {{gpus_per_node: 8}}\nhpcplace: {{framework_version: "{release}"}}\n', encoding="utf-8")
    expect = command["expect"]
    assert isinstance(expect, dict), f"{command['script']}: no expected plan (add it after reading the script)"
    if "refused" in expect:  # the script as shipped cannot start (what the framework or Megatron raises)
        with pytest.raises(HpcplaceError, match=re.escape(expect["refused"])):
            plan_from_spec(load_spec(str(site), driver=command["words"]))
        return
    plan = plan_from_spec(load_spec(str(site), driver=command["words"]))
    roles = {c.name: [c.world_size, sorted({p.cluster_node_rank for p in c.processes})] for c in plan.components}
    assert roles == expect["roles"]
    assert len(plan.cluster.nodes) == expect["nodes"]
    assert sorted(sorted(g.components) for g in plan.collocation_groups) == expect["colocated"]
    assert plan.framework_version is not None and plan.framework_version.version == release
    assert plan.framework_version.read_as is None  # the release's own flags
    assert not any("has no flag" in w for w in plan.warnings)


def plan(tmp_path: Path, release: str | None, *words: str) -> Plan:
    site = tmp_path / "site.yaml"
    stated = f'hpcplace: {{framework_version: "{release}"}}\n' if release else ""
    site.write_text("format: slime\nslurm: {gpus_per_node: 8}\n" + stated, encoding="utf-8")
    return plan_from_spec(load_spec(str(site), driver=[*ENTRY, *words]))


def refused(tmp_path: Path, release: str | None, *words: str) -> SpecError:
    with pytest.raises(SpecError) as err:
        plan(tmp_path, release, *words)
    return err.value


def gpus(p: Plan, name: str) -> list[tuple[int, tuple[str, ...]]]:
    comp = next(c for c in p.components if c.name == name)
    return [(x.cluster_node_rank, x.visible_accelerators) for x in comp.processes]


PPO = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--advantage-estimator", "ppo"]


def test_a_ppo_critic_has_gpus_of_its_own_before_0_3_0(tmp_path: Path) -> None:
    # 0.2.x: critic_offset = actor's GPUs, rollout_offset = actor's + critic's (create_placement_groups)
    old = plan(tmp_path, "0.2.4", *PPO, "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "2")
    assert gpus(old, "actor") == [(0, (str(g),)) for g in range(4)]
    assert gpus(old, "critic") == [(0, (str(g),)) for g in range(4, 8)]
    assert gpus(old, "rollout") == [(1, (str(2 * e), str(2 * e + 1))) for e in range(4)]
    assert any("slime >= 0.3.0 changed this" in w for w in old.warnings)
    sized = plan(tmp_path, "0.2.4", *PPO, "--critic-num-gpus-per-node", "2", "--rollout-num-gpus", "2")
    assert gpus(sized, "critic") == [(0, ("4",)), (0, ("5",))] and gpus(sized, "rollout") == [(0, ("6",)), (0, ("7",))]
    new = plan(tmp_path, "0.3.0", *PPO, "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "2")
    assert gpus(new, "critic") == gpus(new, "actor")  # the actor's GPUs, taking turns
    assert [n for n, _ in gpus(new, "rollout")] == [0, 0, 1, 1]  # right after the actor's 4
    # colocated 0.2: the group and the rollout are the actor's and the critic's GPUs together
    colocated = plan(tmp_path, "0.2.2", *PPO, "--colocate", "--rollout-num-gpus-per-engine", "4")
    assert gpus(colocated, "rollout") == [(0, ("0", "1", "2", "3")), (0, ("4", "5", "6", "7"))]
    err = refused(tmp_path, "0.2.2", *PPO, "--debug-rollout-only", "--rollout-num-gpus", "8")
    assert "NameError: critic_offset" in err.message


def test_colocate_sets_the_rollout_to_the_actors_gpus_before_0_3_1(tmp_path: Path) -> None:
    words = ["--actor-num-nodes", "1", "--colocate", "--rollout-num-gpus", "16", "--rollout-num-gpus-per-engine", "8"]
    old = plan(tmp_path, "0.3.0", *words)
    assert len(old.cluster.nodes) == 1 and gpus(old, "rollout") == [(0, tuple(str(g) for g in range(8)))]
    assert any("slime 0.3.0 overrides --rollout-num-gpus 16 to 8" in w for w in old.warnings)
    new = plan(tmp_path, "0.3.1", *words)  # max(actor, rollout) GPUs: the engines' second node holds no actor
    assert len(new.cluster.nodes) == 2 and [n for n, _ in gpus(new, "rollout")] == [0, 1]


def test_0_1_0_bounds_an_engine_on_a_node_by_rollout_num_gpus_per_node(tmp_path: Path) -> None:
    words = ["--actor-num-nodes", "2", "--colocate", "--rollout-num-gpus-per-engine", "8"]
    p = plan(tmp_path, "0.1.0", *words, "--rollout-num-gpus-per-node", "4")
    rollout = next(c for c in p.components if c.name == "rollout")
    assert rollout.spanning is not None and len(rollout.processes) == 4  # engines of 8 over two 4-GPU slices
    err = refused(tmp_path, "0.1.0", *words, "--num-gpus-per-node", "4")
    assert "slime 0.1.0's parser has no flag --num-gpus-per-node (Megatron's argparse: unrecognized arguments)" in (
        err.message
    )
    assert err.hint == "remove it (slime 0.2.0 or newer reads it)"
    err = refused(tmp_path, "0.1.0", "--colocate", "--advantage-estimator", "ppo")
    assert "invalid choice: 'ppo'" in err.message  # 0.1.0's own choices


def test_a_newer_releases_flag_is_refused_before_0_2_3_and_ignored_from_it(tmp_path: Path) -> None:
    words = ["--actor-num-nodes", "1", "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "2"]
    err = refused(tmp_path, "0.2.0", *words, "--prefill-num-servers", "1")
    assert "slime 0.2.0's parser has no flag --prefill-num-servers" in err.message
    assert "slime 0.2.1 to 0.3.1 have it" in err.message
    assert err.location is not None and err.location.column == 1 + sum(len(w) + 1 for w in [*ENTRY, *words])
    # from 0.2.3 slime ignores what its parsers lack (0.1.0's --rollout-num-gpus-per-node here)
    p = plan(tmp_path, "0.2.3", *words, "--rollout-num-gpus-per-node", "4")
    assert any("slime 0.2.3 has no flag --rollout-num-gpus-per-node and ignores it" in w for w in p.warnings)
    # --sglang-* words go to SGLang's own server arguments in releases that do not read them
    p = plan(tmp_path, "0.2.2", *words, "--sglang-config", "absent.yaml")
    assert [c.name for c in p.components] == ["actor", "rollout"]
    assert any("slime 0.2.2 has no --sglang-config of its own" in w for w in p.warnings)


def test_external_engines_are_planned_as_0_3_1_places_them(tmp_path: Path) -> None:
    words = ["--actor-num-nodes", "1", "--rollout-external-engine-addrs", "h:1"]
    assert [c.name for c in plan(tmp_path, "0.3.1", *words).components] == ["actor"]
    err = refused(tmp_path, "0.3.0", *words)
    assert "hpcplace plans external engines as slime 0.3.1 places them" in err.message


def test_the_version_read_is_recorded_and_a_newer_one_read_as_the_newest_release(tmp_path: Path) -> None:
    words = ["--colocate"]
    unstated = plan(tmp_path, None, *words).framework_version
    assert unstated is not None and (unstated.version, unstated.source) == (str(releases()[-1].version), "newest")
    newer = plan(tmp_path, "0.4.0", *words)
    assert newer.framework_version is not None and newer.framework_version.read_as == str(releases()[-1].version)
    assert any("rerun scripts/gen_slime_flags.py" in w for w in newer.warnings)
    assert str(release_for(None).version) == "0.3.1"


def test_the_release_data_is_what_the_generator_reads_from_the_tags(tmp_path: Path) -> None:
    git_dir = os.environ.get("HPCPLACE_SLIME_GIT")
    if not git_dir:
        pytest.skip("HPCPLACE_SLIME_GIT (a THUDM/slime git mirror) is not set: CI cannot fetch one")
    out = tmp_path / "slime_releases.json"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_slime_flags.py"), "--git-dir", git_dir, "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
        capture_output=True,
    )
    assert out.read_text(encoding="utf-8") == DATA.read_text(encoding="utf-8")
