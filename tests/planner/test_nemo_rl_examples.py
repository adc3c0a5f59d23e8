"""Every example config of a NeMo-RL checkout (`examples/configs/**/*.yaml`), planned unchanged with only a
`slurm:` block beside it, through the entry point its name says (grpo*/...grpo... -> run_grpo.py, sft ->
run_sft.py, dpo -> run_dpo.py, rm -> run_rm.py, distillation/eval/ppo -> their scripts); and every command of
NeMo-RL's own test scripts (`tests/functional/*.sh`, `tests/test_suites/**/*.sh`), read as bash would expand
it (tests/planner/script_commands.py). Each is planned or refused with a located reason; nothing raises
anything else. Needs HPCPLACE_NEMO_RL_SRC (NeMo-RL is not on PyPI and CI fetches nothing): skipped in CI."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.command import COMMAND_FORMATS
from hpcplace.config.formats.nemo_rl import DEFAULT_CONFIGS, ENTRY_POINTS
from hpcplace.errors import HpcplaceError
from hpcplace.plan.planner import plan_from_spec
from tests.planner.script_commands import extract

SRC = os.environ.get("HPCPLACE_NEMO_RL_SRC")
pytestmark = pytest.mark.skipif(
    not SRC, reason="HPCPLACE_NEMO_RL_SRC is not set: a NeMo-RL checkout is needed (NeMo-RL is not on PyPI)"
)
SITE = "slurm: {partition: gpu, time: '01:00:00'}\n"
_UNSET = re.compile(r"=\$\{?([A-Za-z_]\w*)\}?(?=\s|$)")  # key=$VAR: the shell's value, unknown here
_ENDS = re.compile(r"^(\|\|?|&&|;|[0-9&]?>.*)$")  # a pipe, a list operator or a redirection ends the words


def script_for(config: Path) -> str:
    """The entry point a config is written for, from its name (NeMo-RL's recipes name the algorithm first)."""
    name = config.stem.lower()
    if "evals" in config.parts:
        return "run_eval.py"
    for prefix, script in (
        ("xtoken", "run_xtoken_off_policy_distillation.py"),
        ("distillation", "run_distillation.py"),
        ("ppo", "run_ppo.py"),
        ("dpo", "run_dpo.py"),
        ("sft", "run_sft.py"),
        ("rm", "run_rm.py"),
    ):
        if name.startswith(prefix) or f"-{prefix}" in name.split("grpo")[0]:
            return script
    if "vlm" in name and "sft" in name:
        return "run_vlm_sft.py"
    return "run_grpo.py"


@contextmanager
def _in(src: Path, tmp: Path) -> Iterator[Path]:
    """The site file (in tmp) and the checkout as the current directory, as a user runs hpcplace."""
    site = tmp / "site.yaml"
    site.write_text(SITE)
    old = os.getcwd()
    os.chdir(src)
    try:
        yield site
    finally:
        os.chdir(old)


def outcome(site: Path, words: list[str]) -> str:
    """`planned: components`, `refused: location: message`, or `traceback: the exception`."""
    try:
        plan = plan_from_spec(load_spec(site, driver=words))
    except HpcplaceError as exc:
        if exc.location is None:
            return f"unlocated: {exc.message}"
        return f"refused: {exc.location}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - counted: the sweep's point is that there is none
        return f"traceback: {type(exc).__name__}: {exc}"
    return "planned: " + ", ".join(f"{c.name}={c.world_size}" for c in plan.components)


def sweep(src: Path, tmp: Path) -> dict[str, str]:
    """Each example config (relative path) -> its outcome."""
    out: dict[str, str] = {}
    with _in(src, tmp) as site:
        for config in sorted((src / "examples" / "configs").rglob("*.yaml")):
            rel = config.relative_to(src)
            out[str(rel)] = outcome(site, ["uv", "run", f"examples/{script_for(rel)}", "--config", str(rel)])
    return out


def script_text(src: Path, script: Path) -> str:
    """A test script with what its sourced common.env computes written in: PROJECT_ROOT (the checkout),
    CONFIG_PATH (the recipe named like the script); `$@` is empty; `key=$VAR` of a run-time value keeps its
    key (`key=X`); a bare word of a run-time value (`$EXTRA_OVERRIDES`, read as `X`) is left out."""
    text = script.read_text(errors="replace")
    suites = src / "tests" / "test_suites"
    folder = script.parent.relative_to(suites) if script.is_relative_to(suites) else Path(script.parent.name)
    recipe = src / "examples" / "configs" / "recipes" / folder / f"{script.stem}.yaml"
    for name, value in (("PROJECT_ROOT", str(src)), ("CONFIG_PATH", str(recipe))):
        text = text.replace("${" + name + "}", value).replace("$" + name, value)
    text = text.replace('"$@"', "").replace("$@", "")
    return _UNSET.sub(lambda m: "=${" + m.group(1) + ":-X}", text)


def script_sweep(src: Path, tmp: Path) -> dict[str, str]:
    """Each command of NeMo-RL's test scripts (`script:line`) -> its outcome."""
    entry = COMMAND_FORMATS["nemo_rl"].entry_point
    scripts = sorted((src / "tests" / "functional").glob("*.sh")) + sorted(
        (src / "tests" / "test_suites").rglob("*.sh")
    )
    out: dict[str, str] = {}
    with _in(src, tmp) as site:
        for script in scripts:
            for found in extract(script_text(src, script), entry, (), script):
                where = f"{script.relative_to(src)}:{found.line}"
                words = [w for k, w in enumerate(found.words) if w != "X" or found.words[k - 1] == "--config"]
                words = words[: next((k for k, w in enumerate(words) if _ENDS.match(w)), len(words))]
                out[where] = f"not extractable: {found.problem}" if found.problem else outcome(site, words)
    return out


def _report(title: str, outcomes: dict[str, str]) -> Counter[str]:
    counts = Counter(o.split(":", 1)[0] for o in outcomes.values())
    print(f"\n{title}: {dict(counts)}")
    for where, what in outcomes.items():
        if not what.startswith("planned"):
            print(f"  {where}: {what}")
    return counts


def test_every_example_config_is_planned_or_refused_with_a_location(tmp_path: Path) -> None:
    assert SRC is not None
    outcomes = sweep(Path(SRC), tmp_path)
    counts = _report("NeMo-RL example configs", outcomes)
    _report("of them recipes", {k: v for k, v in outcomes.items() if "/recipes/" in k})
    assert counts["planned"] > 0
    assert set(counts) <= {"planned", "refused"}
    assert sum(counts.values()) == len(list((Path(SRC) / "examples" / "configs").rglob("*.yaml")))


def test_every_test_script_command_is_planned_or_refused_with_a_location(tmp_path: Path) -> None:
    assert SRC is not None
    outcomes = script_sweep(Path(SRC), tmp_path)
    counts = _report("NeMo-RL test script commands", outcomes)
    assert counts["planned"] > 0
    assert not {k: v for k, v in outcomes.items() if v.startswith(("traceback", "unlocated"))}


def test_every_entry_point_and_its_default_config_is_in_the_checkout() -> None:
    """hpcplace's list of NeMo-RL's scripts is the checkout's: each `examples/**/run_*.py` is known, each known
    one exists, and its default config (used without --config) is where the script looks."""
    assert SRC is not None
    examples = Path(SRC) / "examples"
    scripts = {p.stem[4:]: p for p in examples.rglob("run_*.py") if p.parent in (examples, examples / "nemo_gym")}
    assert set(scripts) == set(ENTRY_POINTS) == set(DEFAULT_CONFIGS)
    for name, script in scripts.items():
        assert (script.parent / DEFAULT_CONFIGS[name]).is_file(), name
        assert COMMAND_FORMATS["nemo_rl"].entry_point.match(str(script.relative_to(SRC))), name
