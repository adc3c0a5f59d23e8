"""Which framework version plans a config (hpcplace/config/framework_version.py): stated over installed
over today's rules, PEP 440 comparisons, located errors for a malformed stated version."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from hpcplace.cli import main
from hpcplace.config import framework_version as fv
from hpcplace.config.yaml_source import load_yaml_text
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from tests.planner.conftest import Yaml, gpus_of

NONE_INSTALLED: fv.InstalledLookup = lambda framework: None  # noqa: E731


def installed(version: str) -> fv.InstalledLookup:
    return lambda framework: version


def resolve(text: str, lookup: fv.InstalledLookup = NONE_INSTALLED) -> tuple[fv.FrameworkVersion | None, list[str]]:
    notes: list[str] = []
    found = fv.resolve_version("areal", load_yaml_text(text, "job.yaml").root(), notes, installed=lookup)
    return found, notes


def test_stated_wins_over_installed_and_says_so() -> None:
    found, notes = resolve('hpcplace:\n  framework_version: "1.0.2"\n', installed("1.0.4"))
    assert found is not None and found.source == "stated" and str(found.version) == "1.0.2"
    assert str(found.location) == "job.yaml:2:22"
    assert found.describe() == "AReaL 1.0.2 (stated at job.yaml:2:22)"
    assert notes == [
        "AReaL 1.0.2 stated at job.yaml:2:22 is planned; the installed areal here is 1.0.4 (the job must run 1.0.2)"
    ]
    _, notes = resolve('hpcplace: {framework_version: "1.0.4"}\n', installed("1.0.4"))
    assert notes == []  # the same version: nothing to say


def test_installed_when_not_stated_and_none_without_either() -> None:
    found, notes = resolve("cluster: {n_nodes: 1}\n", installed("1.0.2"))
    assert found is not None and found.source == "installed" and found.version == Version("1.0.2")
    assert found.describe() == "AReaL 1.0.2 (installed: areal 1.0.2)" and notes == []
    assert resolve("cluster: {n_nodes: 1}\n") == (None, [])
    assert resolve("hpcplace: {name: x}\n") == (None, [])  # the block without the key


def test_an_installed_version_that_is_not_pep440_falls_back_to_todays_rules() -> None:
    found, notes = resolve("cluster: {}\n", installed("nightly-build"))
    assert found is None and "reports version 'nightly-build', which is not a PEP 440 version" in notes[0]


@pytest.mark.parametrize(
    "value, message",
    [
        ('"one.two"', "AReaL version 'one.two' is not a version"),
        ('"1.0.2-beta-x"', "AReaL version '1.0.2-beta-x' is not a version"),
        ("1.10", "must be a version string, got 1.1"),  # YAML's float: the text is lost, so it is refused
        ("true", "must be a version string, got True"),
        ("[1, 0]", "must be a version string, got [1, 0]"),
    ],
)
def test_malformed_stated_version_is_a_located_error(value: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        resolve(f"cluster: {{}}\nhpcplace:\n  framework_version: {value}\n", installed("1.0.4"))
    assert message in info.value.message
    assert str(info.value).startswith("job.yaml:3:22: "), str(info.value)
    assert info.value.hint is not None and '"1.0.2"' in info.value.hint


def test_pep440_ordering_decides_gates() -> None:
    gate = fv.AREAL_EXPLICIT_BACKEND
    assert gate.applies(None)  # no version known: today's rules

    def at(text: str) -> fv.FrameworkVersion:
        return fv.FrameworkVersion("areal", fv.parse_version(text, "areal"), "stated")

    # 1.0.10 is after 1.0.3 (a string comparison would say otherwise); pre/dev releases of 1.0.3 before it
    assert gate.applies(at("1.0.10")) and gate.applies(at("1.0.3")) and gate.applies(at("1.0.3.post1"))
    assert not gate.applies(at("1.0.2")) and not gate.applies(at("1.0.3rc1")) and not gate.applies(at("1.0.3.dev4"))
    assert not gate.applies(at("0.5.3")) and gate.applies(at("2"))
    assert 'state it: `hpcplace: {framework_version: "1.0.2"}`' in gate.hint("write sglang:d4")
    assert gate.hint("x").startswith("x; AReaL before 1.0.3 accepted it (inclusionAI/AReaL 93b572d0")


def test_installed_version_reads_the_distribution_with_its_marker() -> None:
    """Real lookups: an absent distribution is None; a present one is read only when it installs the
    framework's marker file (an unrelated package with the same name is not the framework)."""
    assert fv.installed_version(fv.Framework("X", "hpcplace-no-such-distribution", "x/y.py")) is None
    ours = fv.installed_version(fv.Framework("hpcplace", "hpcplace", "hpcplace/config/framework_version.py"))
    assert ours is not None and Version(ours)
    assert fv.installed_version(fv.Framework("hpcplace", "hpcplace", "hpcplace/not_a_module.py")) is None


def test_container_note_only_for_an_installed_version() -> None:
    stated = fv.FrameworkVersion("areal", Version("1.0.2"), "stated")
    gates = fv.GATES["areal"]
    assert fv.container_note(stated, "/images/a.sif", gates) is None and fv.container_note(None, "x", gates) is None
    old = fv.FrameworkVersion("areal", Version("1.0.2"), "installed")
    note = fv.container_note(old, "/images/a.sif", gates)
    assert note is not None and "runs in /images/a.sif, whose areal may differ" in note
    # an installed version that follows today's rules changes nothing: no note
    assert fv.container_note(fv.FrameworkVersion("areal", Version("1.0.4"), "installed"), "/i.sif", gates) is None


# ================================================================================================
# AReaL's rules by version (hpcplace/config/formats/areal.py; gates AREAL_EXPLICIT_BACKEND/ENGINE_BACKEND)

OLD_ERA = """
experiment_name: old-era
allocation_mode: {mode}
cluster: {{n_nodes: 1, n_gpus_per_node: 8}}
{extra}
"""


@pytest.fixture
def areal_installed(monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], None]:
    """Make the areal "installed where hpcplace runs" the given version (None: not installed)."""

    def choose(version: str | None) -> None:
        monkeypatch.setattr(fv, "installed_version", lambda framework: version)

    choose(None)
    return choose


def old_era(yml: Yaml, mode: str, version: str | None = "1.0.2", extra: str = "") -> Path:
    block = f'hpcplace: {{framework_version: "{version}"}}\n' if version else ""
    return yml.write(OLD_ERA.format(mode=mode, extra=block + extra))


def gpus(plan: Plan, name: str) -> list[list[int]]:
    return [[n * 8 + g for n, g in proc] for proc in gpus_of(plan, name)]


def test_bare_dims_plan_as_areal_before_1_0_3_did(yml: Yaml, areal_installed: Callable[[str | None], None]) -> None:
    """AReaL 1.0.2 (train_dims_only): bare dims are the training allocation, fsdp; rollout first."""
    plan = plan_from_file(old_era(yml, "sglang:d4p1t1+d4p1t1"))
    assert gpus(plan, "rollout") == [[0], [1], [2], [3]] and gpus(plan, "actor") == [[4], [5], [6], [7]]
    assert plan.component("actor").tensor_parallel_size == 1
    (warning,) = [w for w in plan.warnings if "names no backend" in w]
    assert warning.startswith("allocation 'd4p1t1' names no backend: planned with fsdp, the backend AReaL chose")
    assert "planned as AReaL 1.0.2 (stated at " in warning and "AReaL >= 1.0.3 changed this" in warning
    assert "93b572d0" in warning and warning.endswith("newer AReaL refuses it: write fsdp:d4p1t1")


@pytest.mark.parametrize(
    "mode, backend, actor",
    [
        ("sglang:d2+d2p2t1", "megatron", (4, 1, 2)),  # p > 1: AReaL chose megatron (world 4, tp1, pp2)
        ("sglang:d4+d4e2", "megatron", (4, 1, 1)),  # e > 1: megatron
        ("sglang:d4+d2t2", "fsdp", (4, 2, 1)),
        ("sglang:d4+(attn:d1p2t2|ffn:d1p2e2)", "megatron", (4, 2, 2)),  # bare MoE: megatron
        ("sglang[rollout]:d4+[actor]:d2t2", "fsdp", (4, 2, 1)),  # train_name_only
    ],
)
def test_the_backend_old_areal_chose(yml: Yaml, mode: str, backend: str, actor: tuple[int, int, int]) -> None:
    plan = plan_from_file(old_era(yml, f'"{mode}"'))
    comp = plan.component("actor")
    assert (comp.world_size, comp.tensor_parallel_size, comp.pipeline_parallel_size) == actor
    assert any(f"planned with {backend}, the backend AReaL chose" in w for w in plan.warnings), plan.warnings


def test_bare_dims_refused_by_current_areal_with_the_way_to_state_an_older_one(
    yml: Yaml, areal_installed: Callable[[str | None], None]
) -> None:
    for installed, stated in ((None, None), ("1.0.4", None), ("1.0.2", "1.0.3"), (None, "1.0.10")):
        areal_installed(installed)
        path = old_era(yml, "sglang:d4p1t1+d4p1t1", version=stated)
        err = yml.error(path)
        assert "names no backend: AReaL requires it explicitly" in err.message, (installed, stated)
        assert str(err).startswith(f"{path}:2:") and err.hint is not None
        assert err.hint.startswith("write the backend first, e.g. fsdp:d4p1t1")
        assert "AReaL before 1.0.3 accepted it" in err.hint and 'hpcplace: {framework_version: "1.0.2"}' in err.hint


def test_installed_old_areal_decides_when_nothing_is_stated(
    yml: Yaml, areal_installed: Callable[[str | None], None]
) -> None:
    areal_installed("1.0.2")
    plan = plan_from_file(old_era(yml, "sglang:d4+d4", version=None))
    assert any("planned as AReaL 1.0.2 (installed: areal 1.0.2)" in w for w in plan.warnings)
    areal_installed("1.0.4")  # a stated version wins, and the plan says they differ
    plan = plan_from_file(old_era(yml, "sglang:d4+d4"))
    assert any("AReaL 1.0.2 stated at " in w and "the installed areal here is 1.0.4" in w for w in plan.warnings)


def test_current_areal_plans_explicit_backends_without_a_version_warning(
    yml: Yaml, areal_installed: Callable[[str | None], None]
) -> None:
    areal_installed("1.0.4")
    plan = plan_from_file(old_era(yml, "sglang:d4+fsdp:d4", version=None))
    assert not any("AReaL" in w and "1.0" in w for w in plan.warnings), plan.warnings


def test_per_engine_backend_refused_by_areal_before_1_0_3(yml: Yaml) -> None:
    path = yml.write(
        'cluster: {n_nodes: 1, n_gpus_per_node: 8}\nhpcplace: {framework_version: "1.0.2"}\n'
        'actor:\n  backend: "fsdp:d4"\nrollout:\n  backend: "sglang:d4"\n'
    )
    err = yml.error(path)
    assert str(err).startswith(f"{path}:4:3: actor.backend: AReaL 1.0.2 has no per-engine `backend:` field")
    assert err.hint is not None and "allocation_mode" in err.hint and 'framework_version: "1.0.3"' in err.hint
    plan = plan_from_file(yml.write(path.read_text().replace('"1.0.2"', '"1.0.3"')))
    assert gpus(plan, "rollout") == [[4], [5], [6], [7]]  # the current format: creation order actor, rollout


def test_malformed_version_in_an_areal_config_is_located(yml: Yaml) -> None:
    path = old_era(yml, "sglang:d4+d4", version="1.0.x")
    err = yml.error(path)
    where = yml.where(path, '"1.0.x"')
    assert str(err).startswith(f"{where}: `hpcplace.framework_version`: AReaL version '1.0.x' is not a version")


def test_version_stated_in_the_file_beside_the_areal_file(yml: Yaml) -> None:
    """docs/formats/areal.md's layout: the AReaL file unchanged, hpcplace's blocks in a file naming it."""
    yml.write(OLD_ERA.format(mode="sglang:d4p1t1+d4p1t1", extra=""), name="gsm8k_grpo.yaml")
    job = yml.write('defaults: [gsm8k_grpo, _self_]\nhpcplace: {framework_version: "1.0.2"}\n', name="job.yaml")
    plan = plan_from_file(job)
    assert plan.component("actor").world_size == 4
    where = yml.where(job, '"1.0.2"')
    assert any(f"planned as AReaL 1.0.2 (stated at {where})" in w for w in plan.warnings), plan.warnings


def test_the_version_as_a_command_line_override(yml: Yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = old_era(yml, "sglang:d4+d4", version=None)
    assert main(["plan", str(path), "hpcplace.framework_version=1.0.2"]) == 0
    assert "newer AReaL refuses it: write fsdp:d4" in capsys.readouterr().out
    assert main(["plan", str(path), "hpcplace.framework_version=1.0.4"]) == 2
    assert "names no backend" in capsys.readouterr().err


def test_container_image_note_when_the_version_is_the_hosts(
    yml: Yaml, areal_installed: Callable[[str | None], None]
) -> None:
    extra = "actor:\n  scheduling_spec: [{image: /images/areal.sif, mount: /data:/data}]\n"
    areal_installed("1.0.2")
    plan = plan_from_file(old_era(yml, "sglang:d4+d4", version=None, extra=extra))
    assert any("installed where hpcplace runs; the job runs in /images/areal.sif" in w for w in plan.warnings)
    plan = plan_from_file(old_era(yml, "sglang:d4+d4", extra=extra))  # stated: nothing to doubt
    assert not any("the job runs in /images" in w for w in plan.warnings)


def _sweep():  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[2] / "scripts" / "upstream_sweep.py"
    spec = importlib.util.spec_from_file_location("upstream_sweep_under_test", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_sweep_plans_a_checkout_as_its_own_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/upstream_sweep.py states the version the checkout declares (its pyproject.toml, found
    above a given `examples/`): an old-era AReaL checkout's bare dimensions plan; --installed refuses them
    (the areal installed here, if any, is today's)."""
    sweep = _sweep()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "areal"\nversion = "1.0.2"\n')
    examples = tmp_path / "examples" / "math"
    examples.mkdir(parents=True)
    (examples / "grpo.yaml").write_text(OLD_ERA.format(mode="sglang:d4p1t1+d4p1t1", extra=""))
    assert sweep.checkout_version(tmp_path / "examples") == "1.0.2"
    assert sweep.main([str(tmp_path / "examples")]) == 0
    assert "    1  examples  planned" in capsys.readouterr().out
    assert sweep.main(["--installed", str(tmp_path / "examples")]) == 0
    out = capsys.readouterr().out
    assert "planned" not in out and "names no backend: AReaL requires it explicitly" in out


def test_dot_after_the_backend_is_refused_with_the_colon_form(yml: Yaml) -> None:
    """AReaL 0.4.1 (cd0003db0) replaced `sglang.d4` by `sglang:d4`; hpcplace plans 0.4.1 and later."""
    path = old_era(yml, '"sglang.d4+fsdp.d4"', version=None)
    err = yml.error(path)
    assert "allocation 'sglang.d4': a dot after the backend is AReaL's grammar before 0.4.1" in err.message
    assert str(err).startswith(f"{yml.where(path, 'sglang.d4')}:") and err.hint == "write a colon: sglang:d4"


def test_a_version_older_than_hpcplace_knows_is_refused(
    yml: Yaml, areal_installed: Callable[[str | None], None]
) -> None:
    err = yml.error(old_era(yml, "sglang:d4+fsdp:d4", version="0.4.0"))
    assert "AReaL 0.4.0 (stated at " in err.message and "hpcplace plans AReaL 0.4.1 and later" in err.message
    assert "cd0003db0" in err.message
    areal_installed("0.3.4")  # installed, not stated: located at the config, with the way to state another
    path = old_era(yml, "sglang:d4+fsdp:d4", version=None)
    err = yml.error(path)
    assert str(err).startswith(f"{path}:1:1: AReaL 0.3.4 (installed: areal 0.3.4): hpcplace plans AReaL 0.4.1")
    assert err.hint is not None and "framework_version" in err.hint
    assert plan_from_file(old_era(yml, "sglang:d4+fsdp:d4", version="0.4.1")).component("actor").world_size == 4


def test_archon_needs_areal_0_5_2(yml: Yaml) -> None:
    path = old_era(yml, "sglang:d6+archon:d2", version="0.5.1")
    err = yml.error(path)
    where = yml.where(path, "archon:d2")
    assert str(err).startswith(f"{where}: `allocation_mode`: unknown backend 'archon' in 'archon:d2' for AReaL 0.5.1")
    assert "3de273d1e" in err.message and err.hint == "that AReaL's training backends: fsdp, megatron"
    assert plan_from_file(old_era(yml, "sglang:d6+archon:d2", version="0.5.2")).component("actor").world_size == 2


# ================================================================================================
# RLinf and ROLL: one reading across their versions (docs/formats/versions.md); RLinf older than the
# 0.3.0 its rules follow is said in the plan

RLINF_CONFIG = """
cluster:
  num_nodes: 1
  component_placement: {actor: all}
slurm: {gpus_per_node: 8}
"""


def test_rlinf_older_than_the_rules_followed_is_noted(yml: Yaml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fv, "installed_version", lambda framework: "0.3.0")
    plan = plan_from_file(yml.write(RLINF_CONFIG))
    assert not any("placement rules" in w for w in plan.warnings)
    plan = plan_from_file(yml.write(RLINF_CONFIG + 'hpcplace: {framework_version: "0.2.0"}\n'))
    assert plan.component("actor").world_size == 8
    (warning,) = [w for w in plan.warnings if "placement rules" in w]
    assert warning.startswith("planned by RLinf 0.3.0's placement rules (hpcplace is checked against rlinf==0.3.0)")
    assert "not those of RLinf 0.2.0 (stated at " in warning and "5d29bfd2f, PR #842" in warning
    plan = plan_from_file(yml.write(RLINF_CONFIG + 'hpcplace: {framework_version: "0.4.0"}\n'))
    assert not any("placement rules" in w for w in plan.warnings)


@pytest.mark.parametrize(
    "config",
    [RLINF_CONFIG, "num_gpus_per_node: 8\nactor_train: {device_mapping: '[0, 1]'}\n"],
    ids=["rlinf", "roll"],
)
def test_a_malformed_version_is_refused_in_every_format_that_reads_it(yml: Yaml, config: str) -> None:
    path = yml.write(config + 'hpcplace: {framework_version: "latest"}\n')
    err = yml.error(path)
    where = yml.where(path, '"latest"')
    assert str(err).startswith(f"{where}: `hpcplace.framework_version`: ")
    assert "version 'latest' is not a version" in err.message


def test_engine_scheduling_keys_need_areal_0_5_0(yml: Yaml) -> None:
    extra = "rollout:\n  scheduling_strategy: {type: separation}\n"
    path = old_era(yml, "sglang:d4+fsdp:d4", version="0.4.1", extra=extra)
    err = yml.error(path)
    assert str(err).startswith(f"{yml.where(path, 'scheduling_strategy')}: rollout.scheduling_strategy: AReaL 0.4.1")
    assert "b3bd51476" in err.message and 'framework_version: "0.5.0"' in (err.hint or "")
    plan = plan_from_file(old_era(yml, "sglang:d4+fsdp:d4", version="0.5.0", extra=extra))
    assert plan.component("rollout").world_size == 4


def test_a_config_without_a_document_reads_the_installed_version() -> None:
    """Formats read from a command line alone (no YAML) pass no root: installed, else today's rules."""
    notes: list[str] = []
    found = fv.resolve_version("slime", None, notes, installed=installed("0.4.0"))
    assert found is not None and found.describe() == "slime 0.4.0 (installed: slime 0.4.0)" and notes == []
    assert fv.resolve_version("verl", None, notes, installed=NONE_INSTALLED) is None


def test_a_mistyped_gate_fails_when_it_is_defined() -> None:
    with pytest.raises(ValueError, match="unknown framework 'areall'"):
        fv.VersionGate("areall", "1.0.3", "x", "y")
    with pytest.raises(fv.InvalidVersion):
        fv.VersionGate("areal", "1.0.x", "x", "y")
