"""slime's command-line flags, release by release: the data scripts/gen_slime_flags.py reads from each release's own
`slime/utils/arguments.py` and `slime/backends/sglang_utils/arguments.py` (its git tag: slime is not on PyPI) into
slime_releases.json. A command is read with the flags of the release that runs it (the stated or installed version;
else the newest release read)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from hpcplace.config.formats.argv import Flag, Value
from hpcplace.config.formats.release_data import default_of, flag_of, release_at

DATA = Path(__file__).with_name("slime_releases.json")
OLDEST = "0.1.0"  # the first release read (docs/formats/slime.md)
# The flags slime's placement reads (formats/slime.py), in any release that has them: 0.1.0 bounds an engine's
# GPUs on a node by --rollout-num-gpus-per-node, later releases by --num-gpus-per-node; 0.2.x give a ppo critic GPUs
# of its own (--critic-num-nodes x --critic-num-gpus-per-node).
PLACEMENT_FLAGS = (
    "--actor-num-nodes",
    "--actor-num-gpus-per-node",
    "--critic-num-nodes",
    "--critic-num-gpus-per-node",
    "--rollout-num-gpus",
    "--rollout-num-gpus-per-engine",
    "--rollout-num-gpus-per-node",
    "--num-gpus-per-node",
    "--colocate",
    "--debug-train-only",
    "--debug-rollout-only",
    "--load-debug-rollout-data",
    "--rollout-external-engine-addrs",
    "--advantage-estimator",
    "--sglang-config",
    "--prefill-num-servers",
    "--sglang-pp-size",
    "--sglang-pipeline-parallel-size",
)

# Megatron's flags the fabric check reads (megatron/training/arguments.py, the parser slime's runs with
# ignore_unknown_args; the same in every release): the actor's (and critic's) tensor-parallel groups are TP
# consecutive ranks, its MoE all-to-all ETP x EP, validate_args setting a missing --expert-tensor-parallel-size
# to --tensor-model-parallel-size.
MEGATRON_FLAGS: Mapping[str, Flag] = {
    "--tensor-model-parallel-size": Flag("int"),
    "--pipeline-model-parallel-size": Flag("int"),
    "--expert-model-parallel-size": Flag("int"),
    "--expert-tensor-parallel-size": Flag("int"),
}
MEGATRON_DEFAULTS: Mapping[str, Value | None] = {
    "--tensor-model-parallel-size": 1,
    "--pipeline-model-parallel-size": 1,
    "--expert-model-parallel-size": 1,
    "--expert-tensor-parallel-size": None,
}
# slime's own flags beside them: the training backend (0.2.0 to 0.2.2 also had fsdp, without Megatron's expert
# parallelism) and the per-role Megatron overrides file (0.3.0 on)
BACKEND_FLAGS = ("--train-backend", "--megatron-config-path")


@dataclass(frozen=True)
class Release:
    """One slime release's flags (its parsers, whole) and the defaults of the placement flags it has."""

    version: Version
    flags: Mapping[str, Flag]
    defaults: Mapping[str, Value | None]
    commit: str

    def has(self, name: str) -> bool:
        return name in self.flags


@functools.cache
def releases() -> tuple[Release, ...]:
    """Every release read, oldest first."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    tables = {key: {name: flag_of(row) for name, row in rows.items()} for key, rows in data["tables"].items()}
    defaults = {key: {n: default_of(v) for n, v in values.items()} for key, values in data["defaults"].items()}
    out = [
        Release(Version(version), tables[record["flags"]], defaults[record["defaults"]], record["commit"])
        for version, record in data["releases"].items()
    ]
    return tuple(sorted(out, key=lambda r: r.version))


def release_for(version: Version | None) -> Release:
    """The release whose flags a command of `version` is read with (release_data.release_at)."""
    return release_at(releases(), version)


def releases_with(name: str) -> list[Version]:
    """The releases whose parsers have flag `name`."""
    return [r.version for r in releases() if r.has(name)]
