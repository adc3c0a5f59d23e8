"""Which framework version plans a config (hpcplace/config/framework_version.py): stated over installed
over today's rules, PEP 440 comparisons, located errors for a malformed stated version."""

from __future__ import annotations

import pytest
from packaging.version import Version

from hpcplace.config import framework_version as fv
from hpcplace.config.yaml_source import load_yaml_text
from hpcplace.errors import SpecError

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
    assert fv.container_note(stated, "/images/a.sif") is None and fv.container_note(None, "x") is None
    note = fv.container_note(fv.FrameworkVersion("areal", Version("1.0.4"), "installed"), "/images/a.sif")
    assert note is not None and "runs in /images/a.sif, whose areal may differ" in note
