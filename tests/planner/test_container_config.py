"""The `container:` block (hpcplace.config.container) and AReaL's `scheduling_spec` images: every bad value
is a located error (file:line:col of the value, or of the key that names no node group), job-wide settings
resolve per node group (override, `runtime: none`, env merged), the same block works in the native, RLinf,
ROLL and AReaL formats, and an AReaL config's own scheduling_spec[0] image, mount, container_type and
env_vars become the node group's container and the engines' environment, as AReaL's Slurm launcher uses
them (areal/infra/launcher/slurm.py, areal/infra/utils/slurm.py APPTAINER_CMD_TEMPLATE; defaults from
areal/api/cli_args.py SchedulingSpec, never applied)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpcplace.config.container import NO_SETTINGS, Container, ContainerSettings, Mount, parse_mount, resolve
from hpcplace.config.formats import load_spec
from hpcplace.config.formats.areal import AREAL_ARGS, AREAL_DEFAULT_IMAGE, AREAL_DEFAULT_MOUNT, AREAL_RUNTIME
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.plan import Plan, plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.render import render_run
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"

NATIVE = """
name: t
cluster:
  node_groups:
    - {label: a800, partition: gpu-a, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx, nodes: 1, gpus_per_node: 4}
    - {label: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-15:0-3"}
    inference: {node_group: rtx, placement: "0-3"}
    agent: {node_group: cpu, placement: "0:0-1"}
"""


def assert_error_at(err: HpcplaceError, where: str, message: str, hint: str | None = None) -> None:
    """The error's first line starts at `where` (`path:line:col`) and holds `message`; its hint, exactly."""
    text = str(err)
    assert text.startswith(f"{where}: "), text
    assert message in text.splitlines()[0], text
    if hint is not None:
        assert err.hint == hint, text


def containers(plan: Plan) -> dict[str, Container | None]:
    return {g.label: g.container for g in plan.cluster.node_groups}


# ================================================================================================
# errors at the value that is wrong


@pytest.mark.parametrize(
    "block, needle, message, hint",
    [
        (
            "container: {runtime: apptainr, image: /x.sif}",
            "apptainr",
            "`container.runtime`: unknown container runtime 'apptainr'; did you mean 'apptainer'?",
            "one of: apptainer, singularity, pyxis, oci, none",
        ),
        (
            "container: {runtime: pyxsi, image: 'nvcr.io#nvidia/pytorch:25.01-py3'}",
            "pyxsi",
            "unknown container runtime 'pyxsi'; did you mean 'pyxis'?",
            None,
        ),
        (
            "container: {runtime: docker, image: /x.sif}",
            "docker",
            "unknown container runtime 'docker'",
            "one of: apptainer, singularity, pyxis, oci, none",
        ),
    ],
)
def test_unknown_runtime_points_at_it(yml: Yaml, block: str, needle: str, message: str, hint: str | None) -> None:
    path = yml.write(NATIVE + block + "\n")
    err = yml.error(path)
    assert_error_at(err, yml.where(path, needle), message, hint)
    if "docker" in block:
        assert "did you mean" not in err.message


@pytest.mark.parametrize(
    "runtime, image, message",
    [
        ("apptainer", "images/verl.sif", "container image 'images/verl.sif' is a relative path"),
        ("singularity", "verl.sif", "container image 'verl.sif' is a relative path"),
        ("apptainer", "s3://bucket/verl.sif", "apptainer does not pull s3:// references"),
        ("pyxis", "./pytorch.sqsh", "pyxis needs the squashfs file's absolute path"),
        ("pyxis", "images/pytorch.sqsh", "pyxis needs the squashfs file's absolute path"),
        ("pyxis", "nvcr.io#nvidia/pytorch 25.01", "is not an enroot image reference"),
        ("oci", "bundles/verl", "Slurm's --container takes the absolute path of an OCI bundle directory"),
    ],
)
def test_image_that_a_node_cannot_resolve(yml: Yaml, runtime: str, image: str, message: str) -> None:
    path = yml.write(NATIVE + f"container:\n  runtime: {runtime}\n  image: '{image}'\n")
    assert_error_at(yml.error(path), yml.where(path, f"'{image}'"), message)


@pytest.mark.parametrize(
    "runtime, image",
    [
        ("apptainer", "/shared/images/verl.sif"),
        ("apptainer", "docker://verlai/verl:latest"),
        ("singularity", "oras://ghcr.io/x/y:1"),
        ("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3"),
        ("pyxis", "/shared/images/pytorch.sqsh"),
        ("oci", "/shared/bundles/verl"),
    ],
)
def test_images_each_runtime_takes(yml: Yaml, runtime: str, image: str) -> None:
    plan = plan_from_file(yml.write(NATIVE + f"container:\n  runtime: {runtime}\n  image: '{image}'\n"))
    assert {c.image if c else None for c in containers(plan).values()} == {image}
    assert {c.runtime if c else None for c in containers(plan).values()} == {runtime}


@pytest.mark.parametrize(
    "mount, message",
    [
        ("data:/data", "malformed mount 'data:/data': the source 'data' is not an absolute path"),
        ("/data:data", "malformed mount '/data:data': the target 'data' is not an absolute path"),
        ("/data:/data:rx", "malformed mount '/data:/data:rx': unknown option 'rx'"),
        ("/a:/b:ro:x", "malformed mount '/a:/b:ro:x': more than SRC:DST:OPTIONS"),
    ],
)
def test_malformed_mount_in_a_list_points_at_the_item(yml: Yaml, mount: str, message: str) -> None:
    path = yml.write(NATIVE + f"container:\n  runtime: apptainer\n  image: /x.sif\n  mounts: [/ok:/ok, '{mount}']\n")
    assert_error_at(yml.error(path), yml.where(path, f"'{mount}'"), message)


def test_malformed_mount_in_one_string_points_at_the_string(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n  image: /x.sif\n  mounts: /ok:/ok,rel:/x\n")
    assert_error_at(
        yml.error(path),
        yml.where(path, "/ok:/ok,rel"),
        "malformed mount 'rel:/x': the source 'rel' is not an absolute path",
        "write SRC[:DST[:ro|rw]] with absolute paths, e.g. /data:/data:ro",
    )


def test_mounts_parse_as_both_runtimes_read_them() -> None:
    assert parse_mount("/data") == Mount("/data", "/data")
    assert parse_mount("/data:/in") == Mount("/data", "/in")
    assert parse_mount("/data:/in:ro") == Mount("/data", "/in", True)
    assert parse_mount("/data:/in:rw").text() == "/data:/in"
    assert parse_mount("/data:/in:ro").text() == "/data:/in:ro"
    with pytest.raises(SpecError, match="holds a comma"):
        parse_mount("/a,/b")


def test_override_for_a_label_that_is_no_node_group(yml: Yaml) -> None:
    path = yml.write(
        NATIVE + "container:\n  runtime: apptainer\n  image: /x.sif\n  node_groups:\n    rtxx: {runtime: none}\n"
    )
    assert_error_at(
        yml.error(path),
        yml.where(path, "rtxx"),
        "container.node_groups: 'rtxx' is not a node group; did you mean 'rtx'?",
        "node groups: a800, rtx, cpu",
    )


def test_unknown_key_in_the_block_and_in_an_override(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n  imgae: /x.sif\n")
    err = yml.error(path)
    assert_error_at(err, yml.where(path, "imgae"), "unknown key 'imgae' in `container`; did you mean 'image'?")
    path = yml.write(NATIVE + "container:\n  node_groups:\n    cpu: {runtime: none, mount: /x}\n")
    err = yml.error(path)
    assert_error_at(err, yml.where(path, "mount:"), "unknown key 'mount' in `container.node_groups.cpu`")


def test_image_without_runtime(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  image: /shared/verl.sif\n")
    assert_error_at(
        yml.error(path),
        yml.where(path, "/shared/verl.sif"),
        "container image '/shared/verl.sif' names no runtime",
        "add runtime: apptainer (or singularity, pyxis, oci)",
    )


def test_runtime_without_image_points_at_the_runtime_that_asks_for_it(yml: Yaml) -> None:
    # a job-wide image with `runtime: none`: only the group that names a runtime runs in it
    path = yml.write(
        NATIVE + "container:\n  runtime: none\n  image: /x.sqsh\n  node_groups:\n    cpu: {runtime: pyxis}\n"
    )
    assert containers(plan_from_file(path)) == {"a800": None, "rtx": None, "cpu": Container("pyxis", "/x.sqsh")}
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n")
    assert_error_at(
        yml.error(path),
        yml.where(path, "apptainer"),
        "container runtime apptainer without an image",
        "add image: ... (an absolute path or a registry reference)",
    )
    path = yml.write(NATIVE + "container:\n  node_groups:\n    rtx: {runtime: pyxis}\n")
    assert_error_at(yml.error(path), yml.where(path, "pyxis"), "container runtime pyxis without an image")


def test_oci_takes_no_args_and_no_mounts(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  runtime: oci\n  image: /b/verl\n  args: [--writable]\n")
    assert_error_at(
        yml.error(path),
        yml.where(path, "[--writable]"),
        "container.args: Slurm's --container takes no extra flags",
        "edit the bundle's config.json, or remove args",
    )
    path = yml.write(NATIVE + "container:\n  runtime: oci\n  image: /b/verl\n  mounts: [/data]\n")
    assert_error_at(
        yml.error(path), yml.where(path, "[/data]"), "container.mounts: Slurm's --container takes no bind mounts"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ("[--writable-tmpfs]", "container.args: '--writable-tmpfs' is not one of pyxis's srun options"),
        ("[--container-writable, --mpi=pmix]", "'--mpi=pmix' is not one of pyxis's srun options"),
        ("[container-writable]", "container.args: 'container-writable' is not an option of pyxis"),
        ("['--container-image=other:1']", "'--container-image=other:1' is an option hpcplace gives pyxis itself"),
        ("[--container-name=mine]", "'--container-name=mine' is an option hpcplace gives pyxis itself"),
    ],
)
def test_pyxis_args_are_pyxis_options_hpcplace_does_not_set(yml: Yaml, args: str, message: str) -> None:
    text = NATIVE + f"container:\n  runtime: pyxis\n  image: 'nvcr.io#nvidia/pytorch:25.01-py3'\n  args: {args}\n"
    path = yml.write(text)
    assert_error_at(yml.error(path), yml.where(path, args), message)


def test_pyxis_args_it_documents_are_kept(yml: Yaml) -> None:
    text = NATIVE + (
        "container:\n  runtime: pyxis\n  image: 'nvcr.io#nvidia/pytorch:25.01-py3'\n"
        "  args: [--container-writable, --no-container-mount-home, --container-env=NCCL_DEBUG]\n"
    )
    plan = plan_from_file(yml.write(text))
    assert containers(plan)["rtx"].args == (  # type: ignore[union-attr]
        "--container-writable",
        "--no-container-mount-home",
        "--container-env=NCCL_DEBUG",
    )


@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "RANK", "HPCPLACE_PLAN"])
def test_reserved_env_name_points_at_the_name(yml: Yaml, name: str) -> None:
    path = yml.write(
        NATIVE + f"container:\n  runtime: apptainer\n  image: /x.sif\n  env:\n    OK: 1\n    {name}: '0'\n"
    )
    err = yml.error(path)
    assert_error_at(err, yml.where(path, name), f"environment variable '{name}' is set by hpcplace")
    assert err.hint is not None and "remove it from" in err.hint


def test_env_name_that_is_no_variable(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n  image: /x.sif\n  env: {'NCCL DEBUG': INFO}\n")
    assert_error_at(yml.error(path), yml.where(path, "'NCCL DEBUG'"), "NCCL DEBUG")


def test_workdir_must_be_absolute(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n  image: /x.sif\n  workdir: workspace\n")
    assert_error_at(
        yml.error(path),
        yml.where(path, "workspace"),
        "`container.workdir`: container.workdir 'workspace' is not an absolute path",
    )
    path = yml.write(NATIVE + "container:\n  runtime: apptainer\n  image: /x.sif\n  python: python3 -u\n")
    assert_error_at(yml.error(path), yml.where(path, "python3 -u"), "container.python 'python3 -u' is not a program")


def test_block_that_is_not_a_mapping(yml: Yaml) -> None:
    path = yml.write(NATIVE + "container: /x.sif\n")
    assert_error_at(yml.error(path), yml.where(path, "/x.sif"), "container must be a mapping")


# ================================================================================================
# resolution: the job's settings, each node group's over them


def test_job_wide_block_with_overrides_none_and_env_merge(yml: Yaml) -> None:
    plan = plan_from_file(
        yml.write(
            NATIVE
            + """
container:
  runtime: apptainer
  image: /shared/images/verl.sif
  mounts: [/data:/data:ro, /scratch]
  workdir: /workspace
  env: {NCCL_DEBUG: INFO, SHARED: job}
  args: [--writable-tmpfs]
  node_groups:
    rtx:
      runtime: pyxis
      image: nvcr.io#nvidia/pytorch:25.01-py3
      mounts: [/models:/models:ro]
      env: {SHARED: rtx, ONLY_RTX: 1}
      args: [--container-writable]
      python: /usr/bin/python3.12
    CPU: {runtime: none}
"""
        )
    )
    got = containers(plan)
    assert got["a800"] == Container(
        "apptainer",
        "/shared/images/verl.sif",
        (Mount("/data", "/data", True), Mount("/scratch", "/scratch")),
        "/workspace",
        {"NCCL_DEBUG": "INFO", "SHARED": "job"},
        ("--writable-tmpfs",),
    )
    assert got["rtx"] == Container(
        "pyxis",
        "nvcr.io#nvidia/pytorch:25.01-py3",
        (Mount("/models", "/models", True),),  # the group's list replaces the job's
        "/workspace",  # inherited
        {"NCCL_DEBUG": "INFO", "SHARED": "rtx", "ONLY_RTX": "1"},  # merged, the group's value wins
        ("--container-writable",),
        "/usr/bin/python3.12",
    )
    assert got["cpu"] is None  # `runtime: none` (labels match case-insensitively)


def test_override_alone_leaves_the_other_groups_bare(yml: Yaml) -> None:
    plan = plan_from_file(
        yml.write(NATIVE + "container:\n  node_groups:\n    rtx: {runtime: apptainer, image: /r.sif}\n")
    )
    assert containers(plan) == {"a800": None, "rtx": Container("apptainer", "/r.sif"), "cpu": None}


def test_resolve_directly() -> None:
    job = ContainerSettings({"runtime": "apptainer", "image": "/x.sif", "env": {"A": "1", "B": "2"}})
    own = ContainerSettings({"env": {"B": "3"}, "python": "python3.11"})
    assert resolve(job, own) == Container("apptainer", "/x.sif", env={"A": "1", "B": "3"}, python="python3.11")
    assert resolve(job, ContainerSettings({"runtime": "none"})) is None
    assert resolve(NO_SETTINGS, NO_SETTINGS) is None
    assert resolve(job, NO_SETTINGS) == Container("apptainer", "/x.sif", env={"A": "1", "B": "2"})


def test_plans_without_the_block_have_no_container_record() -> None:
    for config in sorted(CONFIGS.glob("*.yaml")):
        data = json.loads(plan_to_json(plan_from_file(config)))
        assert all("container" not in g for g in data["node_groups"]), config.name


# ================================================================================================
# the same block in every input format


BLOCK = """
container:
  runtime: apptainer
  image: /shared/images/rl.sif
  mounts: [/data:/data:ro]
  env: {NCCL_DEBUG: INFO}
"""
JOB = Container("apptainer", "/shared/images/rl.sif", (Mount("/data", "/data", True),), env={"NCCL_DEBUG": "INFO"})


@pytest.mark.parametrize(
    "config, fmt, override, bare",
    [
        ("hetero-partitions.yaml", "native", "rtx4090", "cpu"),
        ("rlinf-heterogeneous.yaml", "rlinf", "4090", "cpu"),
        ("roll-example.yaml", "roll", "gpu", None),
        ("areal-colocated.yaml", "areal", "default", None),
    ],
)
def test_the_block_in_every_format(tmp_path: Path, config: str, fmt: str, override: str, bare: str | None) -> None:
    path = tmp_path / config
    shutil.copy(CONFIGS / config, path)
    original = plan_from_file(path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(BLOCK)
        fh.write(f"  node_groups:\n    {override}: {{image: /shared/images/other.sif}}\n")
        if bare is not None:
            fh.write(f"    {bare}: {{runtime: none}}\n")
    plan = plan_from_file(path)
    assert plan.source_format == fmt
    want = {g.label: JOB for g in plan.cluster.node_groups}
    want[override] = Container(JOB.runtime, "/shared/images/other.sif", JOB.mounts, env=JOB.env)
    if bare is not None:
        want[bare] = None
    assert containers(plan) == want
    # nothing else of the plan moves: the container is a fact of the node groups only
    strip = json.loads(plan_to_json(plan))
    for group in strip["node_groups"]:
        group.pop("container", None)
    assert strip == json.loads(plan_to_json(original))


def test_block_error_in_a_framework_config_is_located(tmp_path: Path) -> None:
    path = tmp_path / "rlinf.yaml"
    path.write_text((CONFIGS / "rlinf-heterogeneous.yaml").read_text() + "container:\n  runtime: apptainr\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = len(path.read_text().splitlines())
    assert_error_at(info.value, f"{path}:{line}:12", "unknown container runtime 'apptainr'; did you mean 'apptainer'?")


# ================================================================================================
# plan.json keeps it


def test_plan_json_round_trip(yml: Yaml, tmp_path: Path) -> None:
    path = yml.write(
        NATIVE
        + """
container:
  runtime: apptainer
  image: docker://verlai/verl:latest
  mounts: [/data:/in:ro, /scratch]
  workdir: /workspace
  env: {NCCL_DEBUG: INFO, B: '010'}
  args: [--writable-tmpfs, --cleanenv]
  python: /opt/py/bin/python3
  node_groups:
    rtx: {runtime: oci, image: /shared/bundles/rtx}
    cpu: {runtime: none}
"""
    )
    plan = plan_from_file(path)
    run = render_run(plan, tmp_path / "run")
    back = load_plan(run.plan_json)
    assert containers(back) == containers(plan)
    assert containers(back)["a800"].env == {"B": "010", "NCCL_DEBUG": "INFO"}  # type: ignore[union-attr]
    assert containers(back)["cpu"] is None
    record = json.loads(run.plan_json.read_text())["node_groups"]
    assert record[0]["container"] == {
        "runtime": "apptainer",
        "image": "docker://verlai/verl:latest",
        "mounts": ["/data:/in:ro", "/scratch:/scratch"],
        "workdir": "/workspace",
        "env": {"B": "010", "NCCL_DEBUG": "INFO"},
        "args": ["--writable-tmpfs", "--cleanenv"],
        "python": "/opt/py/bin/python3",
    }
    assert "container" not in record[2]


# ================================================================================================
# AReaL: scheduling_spec[0] as AReaL's Slurm launcher reads it

# Modelled on AReaL's examples/countdown/train_config.yaml (inclusionAI/AReaL 4aef98d): the rollout and
# ref engines reuse the actor's scheduling_spec through an interpolation; here the spec also names the
# image, its mounts, the container type and the environment (its fields: areal/api/cli_args.py).
COUNTDOWN = """
experiment_name: countdown-grpo
trial_name: trial0
seed: 1
enable_offload: false
total_train_epochs: 10
tokenizer_path: ${actor.path}
cluster:
  n_nodes: 1
  n_gpus_per_node: 8
  fileroot: /tmp/areal/experiments
  name_resolve:
    type: nfs
    nfs_record_root: /tmp/areal/name_resolve
scheduler:
  type: null
rollout:
  backend: "sglang:d4p1t1"
  experiment_name: ${experiment_name}
  trial_name: ${trial_name}
  max_concurrent_rollouts: 16
  consumer_batch_size: ${train_dataset.batch_size}
  max_head_offpolicyness: 2
  scheduling_spec: ${actor.scheduling_spec}
  fileroot: ${cluster.fileroot}
  tokenizer_path: ${tokenizer_path}
gconfig:
  n_samples: 8
  max_new_tokens: 4096
  temperature: 1.0
actor:
  backend: "fsdp:d4p1t1"
  experiment_name: ${experiment_name}
  trial_name: ${trial_name}
  path: Qwen/Qwen2.5-3B-Instruct
  dtype: bfloat16
  temperature: ${gconfig.temperature}
  kl_ctl: 0.0
  scheduling_spec:
    - task_type: worker
      port_count: 2
      gpu: 1
      mem: 32
      cmd: python3 -m areal.infra.rpc.rpc_server
      image: /shared/images/areal-v1.0.sif
      container_type: apptainer
      mount: /shared/models:/models,/scratch:/scratch:ro
      env_vars:
        NCCL_DEBUG: WARN
        WANDB_NAME: ${experiment_name}
        AREAL_PROXY_WARN_ONCE: "1"
ref:
  backend: ${actor.backend}
  experiment_name: ${experiment_name}
  path: ${actor.path}
  scheduling_strategy:
    type: colocation
    target: actor
  scheduling_spec: ${actor.scheduling_spec}
train_dataset:
  batch_size: 256
  path: data/countdown/qwen/train_e.jsonl
slurm:
  partition: a800
  gpu_type: a800
"""
COUNTDOWN_CONTAINER = Container(
    AREAL_RUNTIME,
    "/shared/images/areal-v1.0.sif",
    (Mount("/shared/models", "/models"), Mount("/scratch", "/scratch", True)),
    args=AREAL_ARGS,
)
COUNTDOWN_ENV = {"NCCL_DEBUG": "WARN", "WANDB_NAME": "countdown-grpo", "AREAL_PROXY_WARN_ONCE": "1"}


def test_areal_scheduling_spec_is_the_node_groups_container(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(COUNTDOWN))
    assert plan.source_format == "areal"
    assert containers(plan) == {"default": COUNTDOWN_CONTAINER}
    assert AREAL_RUNTIME == "singularity" and AREAL_ARGS == ("--no-home", "--writable-tmpfs")
    # env_vars: each engine's own (rollout's through the interpolation), interpolations resolved
    assert {c.name: c.env for c in plan.components} == {"rollout": COUNTDOWN_ENV, "actor": COUNTDOWN_ENV}
    notes = "\n".join(plan.warnings)
    assert "node group 'default' runs in the image /shared/images/areal-v1.0.sif (actor.scheduling_spec[0].image)" in (
        notes
    )
    assert "`singularity exec --no-home --writable-tmpfs --nv`" in notes and "not AReaL's --pid" in notes
    assert AREAL_DEFAULT_MOUNT not in notes and "sets no" not in notes  # mount given, engines agree


def test_areal_image_without_container_type_or_mount_says_which_defaults(yml: Yaml) -> None:
    text = COUNTDOWN.replace("      container_type: apptainer\n", "").replace(
        "      mount: /shared/models:/models,/scratch:/scratch:ro\n", ""
    )
    plan = plan_from_file(yml.write(text))
    assert containers(plan) == {"default": Container(AREAL_RUNTIME, "/shared/images/areal-v1.0.sif", args=AREAL_ARGS)}
    notes = "\n".join(plan.warnings)
    assert "sets an image and no container_type: AReaL's default, apptainer, applies" in notes
    assert f"AReaL's default mount {AREAL_DEFAULT_MOUNT} (AReaL's own cluster's storage) is not applied" in notes


def test_areal_engine_without_settings_runs_in_the_others_image_with_a_note(yml: Yaml) -> None:
    text = COUNTDOWN.replace("  scheduling_spec: ${actor.scheduling_spec}\n  fileroot", "  fileroot", 1)
    plan = plan_from_file(yml.write(text))
    assert containers(plan) == {"default": COUNTDOWN_CONTAINER}
    assert {c.name: c.env for c in plan.components} == {"rollout": {}, "actor": COUNTDOWN_ENV}
    assert (
        "rollout.scheduling_spec[0] sets no container_type, image, mount: it runs with actor's container_type, "
        "actor's image, actor's mount, as every process of node group 'default' (AReaL would give it its default "
        f"container_type apptainer, image {AREAL_DEFAULT_IMAGE}, mount {AREAL_DEFAULT_MOUNT})"
    ) in plan.warnings


def test_areal_apptainer_without_image_is_an_error(yml: Yaml) -> None:
    path = yml.write(COUNTDOWN.replace("      image: /shared/images/areal-v1.0.sif\n", ""))
    err = yml.error(path)
    assert_error_at(
        err,
        yml.where(path, "apptainer", line_hint="container_type"),
        "actor's container_type apptainer names no image: AReaL's default image "
        f"{AREAL_DEFAULT_IMAGE} is AReaL's own cluster's",
    )
    assert err.hint is not None and "set actor.scheduling_spec[0].image" in err.hint
    assert "container_type: none" in err.hint


def test_areal_two_images_is_an_error_naming_both(yml: Yaml) -> None:
    own = COUNTDOWN.replace(
        "  scheduling_spec: ${actor.scheduling_spec}\n  fileroot",
        "  scheduling_spec:\n    - image: /shared/images/sglang.sif\n      container_type: apptainer\n"
        "      mount: /shared/models:/models,/scratch:/scratch:ro\n  fileroot",
        1,
    )
    path = yml.write(own)
    err = yml.error(path)
    assert_error_at(
        err,
        yml.where(path, "/shared/images/sglang.sif"),
        "`rollout.scheduling_spec.0.image`: rollout's image '/shared/images/sglang.sif' differs from actor's "
        f"'/shared/images/areal-v1.0.sif' (line {yml.where(path, '/shared/images/areal-v1.0.sif').split(':')[1]})",
    )
    assert err.hint is not None and "rollout.scheduling_spec: ${actor.scheduling_spec}" in err.hint
    assert "top-level `container:` block" in err.hint


def test_areal_two_mounts_or_container_types_are_errors(yml: Yaml) -> None:
    mounts = COUNTDOWN.replace(
        "  scheduling_spec: ${actor.scheduling_spec}\n  fileroot",
        "  scheduling_spec:\n    - image: /shared/images/areal-v1.0.sif\n      mount: /storage:/storage\n  fileroot",
        1,
    )
    path = yml.write(mounts)
    assert_error_at(
        yml.error(path),
        yml.where(path, "/storage:/storage"),
        "rollout's mount '/storage:/storage' differs from actor's '/shared/models:/models,/scratch:/scratch:ro'",
    )
    bare = COUNTDOWN.replace(
        "  scheduling_spec: ${actor.scheduling_spec}\n  fileroot",
        "  scheduling_spec:\n    - container_type: none\n  fileroot",
        1,
    )
    path = yml.write(bare)
    assert_error_at(
        yml.error(path),
        yml.where(path, "none", line_hint="container_type: none"),
        "rollout's container_type 'none' differs from actor's 'apptainer'",
    )
    # the actor asks for a container only through its image (AReaL's default type), the rollout for none
    implicit = bare.replace("      container_type: apptainer\n", "")
    path = yml.write(implicit)
    assert_error_at(
        yml.error(path),
        yml.where(path, "none", line_hint="container_type: none"),
        "rollout's container_type none runs it without a container, but actor sets the image "
        "'/shared/images/areal-v1.0.sif' and no container_type",
    )


def test_areal_equal_settings_written_twice_are_one_container(yml: Yaml) -> None:
    twice = COUNTDOWN.replace(
        "  scheduling_spec: ${actor.scheduling_spec}\n  fileroot",
        "  scheduling_spec:\n    - image: /shared/images/areal-v1.0.sif\n      container_type: apptainer\n"
        "      mount: /shared/models:/models, /scratch:/scratch:ro\n      env_vars: {SGLANG_LOG: '1'}\n  fileroot",
        1,
    )
    plan = plan_from_file(yml.write(twice))
    assert containers(plan) == {"default": COUNTDOWN_CONTAINER}  # the mounts compare parsed, spaces aside
    assert {c.name: c.env for c in plan.components} == {"rollout": {"SGLANG_LOG": "1"}, "actor": COUNTDOWN_ENV}


def test_areal_container_type_none_runs_bare_as_areal_does(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(COUNTDOWN.replace("container_type: apptainer", "container_type: none")))
    assert containers(plan) == {"default": None}
    assert {c.name: c.env for c in plan.components} == {"rollout": COUNTDOWN_ENV, "actor": COUNTDOWN_ENV}
    assert any(
        "container_type none: node group 'default' runs without a container" in w
        and w.endswith("actor's image, actor's mount, rollout's image, rollout's mount not used")
        for w in plan.warnings
    )


def test_areal_unknown_container_type(yml: Yaml) -> None:
    path = yml.write(COUNTDOWN.replace("container_type: apptainer", "container_type: apptainr"))
    err = yml.error(path)
    assert_error_at(err, yml.where(path, "apptainr"), "unknown container_type 'apptainr'; did you mean 'apptainer'?")
    assert err.hint is not None and "top-level `container:` block" in err.hint
    path = yml.write(COUNTDOWN.replace("container_type: apptainer", "container_type: pyxis"))
    assert_error_at(yml.error(path), yml.where(path, "pyxis"), "unknown container_type 'pyxis'")


def test_areal_malformed_mount_points_at_the_bind(yml: Yaml) -> None:
    path = yml.write(COUNTDOWN.replace("/scratch:/scratch:ro", "scratch:/scratch"))
    assert_error_at(
        yml.error(path),
        yml.where(path, "scratch:/scratch"),
        "malformed mount 'scratch:/scratch': the source 'scratch' is not an absolute path",
    )


def test_areal_relative_image_is_an_error(yml: Yaml) -> None:
    path = yml.write(COUNTDOWN.replace("/shared/images/areal-v1.0.sif", "areal.sif"))
    assert_error_at(yml.error(path), yml.where(path, "areal.sif"), "container image 'areal.sif' is a relative path")


@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "RANK", "HPCPLACE_RANK"])
def test_areal_reserved_env_var(yml: Yaml, name: str) -> None:
    path = yml.write(COUNTDOWN.replace("        NCCL_DEBUG: WARN\n", f"        {name}: '0'\n"))
    err = yml.error(path)
    assert_error_at(err, yml.where(path, name), f"environment variable '{name}' is set by hpcplace")


def test_areal_hpcplace_block_env_wins_over_env_vars(yml: Yaml) -> None:
    text = COUNTDOWN + "hpcplace:\n  components:\n    actor: {env: {NCCL_DEBUG: INFO, MINE: x}}\n"
    plan = plan_from_file(yml.write(text))
    actor = next(c for c in plan.components if c.name == "actor")
    assert actor.env == {**COUNTDOWN_ENV, "NCCL_DEBUG": "INFO", "MINE": "x"}


def test_areal_top_level_block_wins(yml: Yaml) -> None:
    block = "container:\n  runtime: pyxis\n  image: nvcr.io#nvidia/pytorch:25.01-py3\n"
    plan = plan_from_file(yml.write(COUNTDOWN + block))
    assert containers(plan) == {"default": Container("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3")}
    assert any("the container block's settings replace the singularity image" in w for w in plan.warnings)
    # the env_vars still apply: they are the engines' environment, not the image's
    assert {c.name: c.env for c in plan.components} == {"rollout": COUNTDOWN_ENV, "actor": COUNTDOWN_ENV}
    # conflicting scheduling_spec images are no error when the block decides
    clash = COUNTDOWN.replace(
        "  scheduling_spec: ${actor.scheduling_spec}\n  fileroot",
        "  scheduling_spec:\n    - image: /shared/images/sglang.sif\n  fileroot",
        1,
    )
    plan = plan_from_file(yml.write(clash + block.replace("runtime: pyxis", "runtime: pyxis  # decides")))
    assert containers(plan) == {"default": Container("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3")}
    assert any("the top-level container: block decides node group 'default'" in w for w in plan.warnings)
    # ... but they are, when the block says nothing for this node group
    path = yml.write(clash + "container: {}\n")
    assert "differs from actor's" in str(yml.error(path))


def test_areal_without_images_plans_as_before(yml: Yaml) -> None:
    """scheduling_spec without image, mount, container_type or env_vars changes nothing in the plan."""
    plain = COUNTDOWN.replace(
        "      image: /shared/images/areal-v1.0.sif\n      container_type: apptainer\n"
        "      mount: /shared/models:/models,/scratch:/scratch:ro\n",
        "",
    ).replace(
        "      env_vars:\n        NCCL_DEBUG: WARN\n        WANDB_NAME: ${experiment_name}\n        "
        'AREAL_PROXY_WARN_ONCE: "1"\n',
        "      env_vars: {}\n",
    )
    path = yml.write(plain, name="same.yaml")
    with_spec = plan_to_json(plan_from_file(path))
    without = plain.replace(plain[plain.index("  scheduling_spec:\n    - task_type") : plain.index("ref:")], "")
    without = without.replace("  scheduling_spec: ${actor.scheduling_spec}\n", "")
    assert "scheduling_spec" not in without
    path.write_text(without.lstrip("\n"), encoding="utf-8")
    assert plan_to_json(plan_from_file(path)) == with_spec
    assert "container" not in with_spec


def test_areal_example_config_keeps_its_plan() -> None:
    plan = plan_from_file(CONFIGS / "areal-colocated.yaml")
    assert containers(plan) == {"default": None}
    assert all(not c.env for c in plan.components)
    assert not any("scheduling_spec" in w or "image" in w for w in plan.warnings)
