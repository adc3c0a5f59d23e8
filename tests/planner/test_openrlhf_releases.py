"""Every OpenRLHF release hpcplace reads (hpcplace/config/formats/openrlhf_releases.json), planned on that
release's own commands: the train_ppo_ray and serve_rm commands of its example scripts (its tag), or of its README where it
has no tag (tests/fixtures/openrlhf/release_commands.json, written by tests/planner/openrlhf_release_commands.py),
each read as that release (stated framework_version) and compared with the plan checked by hand against the
script: the roles, their sizes and nodes, the roles that share GPUs; or, where the release's own parser refuses
its own example, that refusal at the word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.openrlhf_flags import releases
from hpcplace.errors import SpecError
from hpcplace.plan.planner import plan_from_spec
from tests.planner.openrlhf_release_commands import FIXTURE

COMMANDS: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["commands"]
CASES = [
    pytest.param(command, release.split()[0], id=f"{release.split()[0]}-{Path(command['script']).name}")
    for command in COMMANDS
    for release in command["releases"]
]


def test_every_release_read_has_commands_of_its_own() -> None:
    covered = {release.split()[0] for command in COMMANDS for release in command["releases"]}
    assert covered == {str(r.version) for r in releases()}


@pytest.mark.parametrize(("command", "release"), CASES)
def test_a_releases_own_command_is_planned_as_that_release(
    command: dict[str, Any], release: str, tmp_path: Path
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f'slurm: {{gpus_per_node: 8}}\nhpcplace: {{framework_version: "{release}"}}\n', encoding="utf-8")
    words: list[str] = command["words"]
    expect = command["expect"]
    assert isinstance(expect, dict), f"{command['script']}: no expected plan (add it after reading the script)"
    if "refused" in expect:
        with pytest.raises(SpecError) as err:
            load_spec(str(site), driver=words)
        assert f"OpenRLHF {release}'s parser {expect['refused']}" in err.value.message
        assert err.value.hint == expect["hint"]
        assert err.value.location is not None
        at = err.value.location.column
        assert " ".join(words)[at - 1 :].split(" ")[0] == expect["refused"].rsplit(" ", 1)[-1]  # at the flag's word
        return
    plan = plan_from_spec(load_spec(str(site), driver=words))
    roles = {c.name: [c.world_size, sorted({p.cluster_node_rank for p in c.processes})] for c in plan.components}
    assert roles == expect["roles"]
    assert len(plan.cluster.nodes) == expect["nodes"]
    assert sorted(sorted(g.components) for g in plan.collocation_groups) == expect["colocated"]
    assert not any("read with the flags of" in w for w in plan.warnings)  # the release's own table
    assert plan.launch.is_ray == ("reward_server" not in roles)  # serve_rm: one process the steps mode starts
