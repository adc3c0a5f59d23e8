"""OpenRLHF's reward model server, `python -m openrlhf.cli.serve_rm --reward.model_name_or_path M --port 5000`
(its examples/scripts/serve_remote_rm.sh), planned as the one process it is, in the steps launch mode.

What serve_rm does (openrlhf/cli/serve_rm.py, alike in every release read, 0.9.0 to 0.11.2; at v0.11.0 = 3c3be623:
RewardModelProxy.__init__ and the `__main__` block): it parses its flags, loads the reward model with
`get_llm_for_sequence_regression(..., device_map="auto")` (Hugging Face's "auto" device map spreads the model over
every GPU the process sees) and serves `/get_reward` with uvicorn on --host/--port. One plain Python process: no
launcher, no Ray, no torch.distributed. So the plan is one process on one node with every GPU of that node;
train_ppo_ray reaches it with `--reward.remote_url http://<that node>:<port>/get_reward`. Its flags are read with
the serve_rm parser of the release that runs it (openrlhf_releases.json). See docs/formats/openrlhf.md."""

from __future__ import annotations

from hpcplace.config.formats.argv import parse_flags
from hpcplace.config.formats.command import COMMAND_FORMATS, FrameworkCommand
from hpcplace.config.formats.common import (
    SiteGpus,
    facts_node_group,
    hpcplace_block,
    slurm_facts,
    slurm_job_options,
    with_block_settings,
)
from hpcplace.config.formats.entry_point import PYTHON_WORD
from hpcplace.config.formats.openrlhf import HELP_FLAGS, gpus_per_node, note_release, other_names, planned_version
from hpcplace.config.formats.openrlhf_flags import release_for
from hpcplace.config.framework_version import resolve_version
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster
from hpcplace.config.yaml_source import YamlDocument

COMPONENT = "reward_server"


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    root = blocks.root()
    notes: list[str] = []
    entry = _entry_index(command)
    version = resolve_version("openrlhf", root, notes)
    release = release_for(version.version if version is not None else None)
    note_release(release, version, notes)
    suggest = version is None or version.source != "stated"
    given = parse_flags(
        command,
        entry + 1,
        {**release.serve_rm, **HELP_FLAGS},
        f"OpenRLHF {release.version} serve_rm",
        other_names(release.version, suggest, "serve_rm"),
    )
    model = "--reward.model_name_or_path" if "--reward.model_name_or_path" in release.serve_rm else "--reward_pretrain"
    if model not in given:
        raise command.error(
            entry,
            f"OpenRLHF {release.version}'s serve_rm loads its reward model from {model}, which is not given "
            "(its default is None): it fails at its start, with no model to serve",
            hint=f"give {model} (a Hugging Face model name or path)",
        )
    slurm_view = root.get("slurm")
    where = slurm_view if slurm_view is not None else root
    facts = slurm_facts(slurm_view)
    takes = 'serve_rm\'s device_map="auto" takes every GPU of its node'
    gpn = gpus_per_node(facts, "default", where, site_gpus, notes, takes)
    group = facts_node_group("default", facts, 1, gpn, where)
    port = given["--port"].value if "--port" in given else 5000  # its parser's default, in every release
    notes.append(
        f'OpenRLHF\'s serve_rm is one process with all {gpn} GPUs of its node (device_map="auto" spreads the '
        f"model over every GPU it sees); train_ppo_ray reaches it at http://<its node>:{port}/get_reward"
    )
    placement = PlacementEntry((COMPONENT,), ("default",), None, (tuple(range(gpn)),), command.location(entry))
    name, settings = hpcplace_block(root, {COMPONENT}, blocks.path)
    component = ComponentSpec(COMPONENT, command=command.argv)
    if COMPONENT in settings:
        component = with_block_settings(component, settings[COMPONENT])
    return ExperimentSpec(
        name,
        build_cluster((group,), where),
        (placement,),
        {COMPONENT: component},
        blocks.path,
        "openrlhf_serve_rm",
        slurm_job_options(slurm_view),
        notes=tuple(notes),
        framework_version=planned_version(version),
    )


def _entry_index(command: FrameworkCommand) -> int:
    """The entry point's word, run by a Python interpreter (the command's first word) as a module (`python -m
    openrlhf.cli.serve_rm`) or as its file (`python .../serve_rm.py`), with only Python's options between."""
    pattern = COMMAND_FORMATS["openrlhf_serve_rm"].entry_point
    index = next(i for i, word in enumerate(command.argv) if pattern.match(word))
    word, between = command.argv[index], command.argv[1:index]
    module = between[-1:] == ("-m",) and not word.endswith(".py")
    script = word.endswith(".py") and "-m" not in between
    if not (PYTHON_WORD.match(command.argv[0]) and (module or script) and all(w.startswith("-") for w in between)):
        raise command.error(
            index,
            f"hpcplace plans serve_rm started plainly by Python, and this command starts {word} otherwise",
            hint="write it as OpenRLHF's examples/scripts/serve_remote_rm.sh does: `python -m openrlhf.cli.serve_rm "
            "--reward.model_name_or_path M --port 5000 ...`",
        )
    return index
