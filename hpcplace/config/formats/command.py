"""Framework command formats: verl, NeMo-RL, OpenRLHF and slime read their placement from the command that
launches them (Hydra overrides or argparse flags), not from a file hpcplace could read alone. That
command is the job's Ray driver, so it is the input: `launch.driver` in a YAML file that holds hpcplace's
own blocks (`slurm:`, `launch:`, `container:`, `hpcplace:`), or `--driver -- CMD...` on the command line.

Each format is registered in COMMAND_FORMATS (its module, and how its entry point is recognised) and its
module has one function:

    parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec

`blocks` is the YAML file beside the command (its `slurm:` block says where each pool or role runs);
`parse` returns a spec whose components are started by the framework's driver (no commands), as RLinf's;
a launcher's format (`mode="steps"`: torchrun, deepspeed) gives its component the command each rank runs."""

from __future__ import annotations

import importlib
import io
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hpcplace.config.formats.common import SiteGpus
from hpcplace.config.spec import ExperimentSpec
from hpcplace.config.yaml_source import View, YamlDocument
from hpcplace.errors import SourceLocation, SpecError


@dataclass(frozen=True)
class CommandFormatEntry:
    """A command format: the module that reads it (imported only when used) and how its command is told
    apart from others (one word of the command matches `entry_point`, or its first word when `first_word`;
    a generic script name also needs one of `flags`), and the launch mode its plans run in: "ray" (the
    framework's driver starts every process) or "steps" (hpcplace starts each process, as a launcher would)."""

    module: str
    entry_point: re.Pattern[str]
    flags: tuple[str, ...] = ()
    first_word: bool = False
    shown: str = ""  # the entry points in words for messages, where the pattern does not read as one
    mode: str = "ray"


COMMAND_FORMATS: dict[str, CommandFormatEntry] = {
    # a launcher's command is the launcher's, whatever program it starts (formats/launcher.py)
    "torchrun": CommandFormatEntry(
        "hpcplace.config.formats.launcher", re.compile(r"(^|.*/)torchrun$"), first_word=True, mode="steps"
    ),
    "deepspeed": CommandFormatEntry(
        "hpcplace.config.formats.launcher", re.compile(r"(^|.*/)deepspeed$"), first_word=True, mode="steps"
    ),
    "verl": CommandFormatEntry(
        "hpcplace.config.formats.verl",
        re.compile(
            r"(^|.*/)(verl[./](trainer[./](main_\w+|sft_trainer_ray)|experimental[./](fully_async_policy[./]"
            r"fully_async_main|one_step_off_policy[./]main_ppo))|recipe[./]dapo[./](dapo_transfer_queue[./])?main_dapo)"
            r"(\.py)?$"
        ),
        shown="verl.trainer.main_*, verl.trainer.sft_trainer_ray, verl.experimental.fully_async_policy.fully_async_main, "
        "verl.experimental.one_step_off_policy.main_ppo, recipe.dapo.main_dapo",
    ),
    "nemo_rl": CommandFormatEntry(
        "hpcplace.config.formats.nemo_rl",
        re.compile(  # NeMo-RL's own scripts (7ea279a), each with a default config: no flag needed
            r"(^|.*/)examples/(run_(vlm_)?(grpo|sft)|run_(grpo_sliding_puzzle|grpo_single_controller|dpo|rm|ppo|eval"
            r"|distillation|xtoken_off_policy_distillation)|nemo_gym/run_(grpo|distillation)_nemo_gym)\.py$"
        ),
        shown="examples/run_{grpo,vlm_grpo,sft,vlm_sft,grpo_sliding_puzzle,grpo_single_controller,dpo,rm,ppo,eval,"
        "distillation,xtoken_off_policy_distillation}.py, examples/nemo_gym/run_{grpo,distillation}_nemo_gym.py",
    ),
    "openrlhf": CommandFormatEntry(
        "hpcplace.config.formats.openrlhf", re.compile(r"(^|.*/)openrlhf[./]cli[./]train_\w+(\.py)?$")
    ),
    # OpenRLHF's reward model server: one plain Python process (formats/openrlhf_serve_rm.py)
    "openrlhf_serve_rm": CommandFormatEntry(
        "hpcplace.config.formats.openrlhf_serve_rm",
        re.compile(r"(^|.*/)openrlhf[./]cli[./]serve_rm(\.py)?$"),
        mode="steps",
    ),
    "slime": CommandFormatEntry(
        "hpcplace.config.formats.slime",
        re.compile(r"(^|.*/)train(_async)?\.py$"),
        (
            "--actor-num-nodes",
            "--actor-num-gpus-per-node",
            "--rollout-num-gpus",
            "--rollout-num-gpus-per-engine",
            "--colocate",
        ),
    ),
}
# what the file beside the command may hold: hpcplace's blocks, and which framework the command is
BLOCK_KEYS = frozenset({"format", "slurm", "launch", "container", "hpcplace", "services"})
DRIVER_SOURCE = "<--driver>"


@dataclass(frozen=True)
class FrameworkCommand:
    """The framework's launch command as argv, with where each word was written (for errors)."""

    argv: tuple[str, ...]
    locations: tuple[SourceLocation, ...]

    def location(self, index: int) -> SourceLocation:
        """Where argv[index] was written (the command's start when out of range)."""
        return self.locations[index] if 0 <= index < len(self.locations) else self.locations[0]

    def error(self, index: int, message: str, *, hint: str | None = None) -> SpecError:
        return SpecError(message, hint=hint, location=self.location(index))


class CommandFormat(Protocol):
    def parse(self, command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec: ...


def command_format(name: str) -> CommandFormat:
    """The module that reads format `name` (one of COMMAND_FORMATS)."""
    module: CommandFormat = importlib.import_module(
        COMMAND_FORMATS[name].module
    )  # a module: it has the protocol's function
    return module


# `uv run`'s options that take a value (the program comes after them)
UV_VALUE_OPTIONS = frozenset(
    {"--extra", "--group", "--with", "--python", "-p", "--package", "--directory", "--project", "--env-file", "--index"}
)


def program_index(argv: Sequence[str]) -> int:
    """Where the program starts: after `ray job submit [OPTIONS] --` and `uv run [OPTIONS]`."""
    start = 0
    if "--" in argv and "submit" in argv[: argv.index("--")]:  # `ray job submit [OPTIONS] -- CMD...`
        start = argv.index("--") + 1
    if list(argv[start : start + 2]) == ["uv", "run"]:
        start += 2
        while start < len(argv) and argv[start].startswith("-"):
            start += 2 if argv[start] in UV_VALUE_OPTIONS else 1
    return min(start, len(argv))


def detect_command_format(argv: Sequence[str]) -> str | None:
    """Which framework's entry point the command runs, or None (a launcher's: the program word, after
    `uv run [OPTIONS]`)."""
    for name, entry in COMMAND_FORMATS.items():
        first = program_index(argv)
        words = argv[first : first + 1] if entry.first_word else argv
        if any(entry.entry_point.match(word) for word in words) and (
            not entry.flags or any(word.split("=", 1)[0] in entry.flags for word in argv)
        ):
            return name
    return None


def command_from_driver(argv: Sequence[str]) -> FrameworkCommand:
    """`--driver -- CMD...`: each word's location is its column in the command as typed (words joined by
    spaces), in a source named `<--driver>`."""
    locations, column = [], 1
    for word in argv:
        locations.append(SourceLocation(DRIVER_SOURCE, 1, column))
        column += len(word) + 1
    return FrameworkCommand(tuple(argv), tuple(locations))


def command_from_view(view: View) -> FrameworkCommand:
    """`launch.driver` in the file: a YAML list of words (each at its own line and column), or one string
    split as a shell would, without any expansion (a backslash-newline joins lines, as in the shell
    scripts these commands are usually kept in)."""
    if isinstance(view.value, list):
        items = list(view.elements())
        for item in items:
            if not isinstance(item.value, (str, int, float)) or isinstance(item.value, bool):
                raise item.error("launch.driver arguments must be strings")
        return FrameworkCommand(tuple(i.as_written() for i in items), tuple(i.location() for i in items))
    text = view.str().replace("\\\n", " ")
    stream = io.StringIO(text)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    words: list[str] = []
    starts: list[int] = []
    try:
        while True:
            start = stream.tell()  # the lexer reads a word and the one character after it
            while start < len(text) and text[start] in lexer.whitespace:
                start += 1
            word = lexer.get_token()
            if word is None:
                break
            words.append(word)
            starts.append(start)
    except ValueError as exc:
        raise view.error(f"cannot split launch.driver: {exc}", hint="give the driver as a YAML list of words") from None
    one_line = "\n" not in text
    return FrameworkCommand(
        tuple(words), tuple(view.location(s if one_line else None) for s in starts) or (view.location(),)
    )


def parse_command_spec(
    name: str, doc: YamlDocument, driver: Sequence[str] | None, site_gpus: SiteGpus | None
) -> ExperimentSpec:
    """The spec of a command format: the command from `driver` (`--driver`, wins) or `launch.driver`."""
    root = doc.root()
    if doc.data is not None:
        root.check_keys(BLOCK_KEYS)
    if driver:
        command = command_from_driver(driver)
    else:
        launch = root.get("launch")
        view = launch.get("driver") if launch is not None and isinstance(launch.value, dict) else None
        if view is None or view.value in (None, "", []):
            raise SpecError(
                f"format {name}: the placement is read from the framework's own command, and none is given",
                location=doc.location(()),
                hint="put it in the file as launch.driver (a list of words or one string), or pass it: "
                f"hpcplace plan {doc.path} --driver -- python3 -m ... (see docs/formats/{name}.md)",
            )
        command = command_from_view(view)
    return command_format(name).parse(command, doc, site_gpus)


def driver_words(doc: YamlDocument, driver: Sequence[str] | None) -> list[str]:
    """The driver command as words (`--driver` wins over launch.driver), for format detection; [] when
    neither is given or launch.driver cannot be read (parse_command_spec reports that)."""
    if driver:
        return list(driver)
    data = doc.data
    launch = data.get("launch") if isinstance(data, dict) else None
    value = launch.get("driver") if isinstance(launch, dict) else None
    if isinstance(value, list):
        return [str(w) for w in value]
    if isinstance(value, str):
        try:
            return shlex.split(value.replace("\\\n", " "))
        except ValueError:
            return []
    return []
