"""Plan -> SlurmJob: the arithmetic and the step/segment layout for regular and irregular plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hpcplace.config.rank_syntax import compress_ranks
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.slurm_job import (
    consecutive_runs,
    gpu_bind,
    gpu_mask,
    joined_ranks,
    lower,
    sbatch_time_ok,
    segment_srun_args,
    slug,
    time_limit_seconds,
    unique_slugs,
)
from tests.slurm.conftest import REPO, plan_yaml

LAB = """
name: lab
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
%s
components: {}
"""


def lab(tmp_path, placements: str, components: str = "{}"):  # type: ignore[no-untyped-def]
    text = LAB % "\n".join("    " + line for line in placements.strip().splitlines())
    return plan_yaml(tmp_path, text.replace("components: {}", f"components: {components}"))


def test_compress_ranks() -> None:
    assert compress_ranks([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert compress_ranks([3, 2, 1]) == "3,2,1"  # order kept: only +1 runs collapse
    assert compress_ranks([]) == ""
    assert compress_ranks(range(65536)) == "0-65535"
    assert compress_ranks(range(4, 5)) == "4"
    assert compress_ranks(range(0, 6, 2)) == "0,2,4"


def test_joined_ranks() -> None:
    assert joined_ranks([range(8), range(8, 16)]) == range(16)  # one run: a range, nothing copied
    assert joined_ranks([(0, 1, 2), range(3, 5), (5,)]) == range(6)  # the same form whatever the parts
    assert joined_ranks([range(2), range(4, 6)]) == (0, 1, 4, 5)
    assert joined_ranks([(0, 2, 1), range(3, 5)]) == (0, 2, 1, 3, 4)
    assert joined_ranks([range(0, 6, 2)]) == (0, 2, 4)
    assert joined_ranks([]) == ()


def test_gpu_mask_and_bind() -> None:
    assert gpu_mask(["0", "1"]) == "0x3"
    assert gpu_mask(["7"]) == "0x80"
    assert gpu_mask(["0", "2", "4", "6"]) == "0x55"
    assert gpu_bind([["3"], ["1"]]) == "map_gpu:3,1"
    assert gpu_bind([["0", "1"], ["2", "3"]]) == "mask_gpu:0x3,0xc"
    assert gpu_bind([["0"], ["2", "3"]]) == "mask_gpu:0x1,0xc"


def test_consecutive_runs() -> None:
    items = [(0, "a"), (1, "a"), (2, "b"), (4, "b"), (5, "b")]
    assert consecutive_runs(items) == [(0, 2, "a"), (2, 1, "b"), (4, 2, "b")]


def test_slugs() -> None:
    assert slug("actor") == "actor"
    assert slug("a b/c$(x)") == "a_b_c_x"
    assert slug("$$$", "component") == "component"
    assert unique_slugs(["a b", "a_b", "c"]) == ("a_b-0", "a_b-1", "c")


def test_time_format() -> None:
    for ok in ("30", "4:00:00", "2-00:00:00", "1-12", "UNLIMITED", "10:00"):
        assert sbatch_time_ok(ok)
    for bad in ("1h", "", "4:00:00; rm", "-1"):
        assert not sbatch_time_ok(bad)


def test_hetero_example_components_and_steps() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    job = lower(plan)
    assert job.is_het and [c.partition for c in job.components] == ["a800", "rtx4090", "cpu", "robot"]
    assert [c.gres for c in job.components] == ["gpu:a800:8", "gpu:rtx4090:4", None, "robot:4"]
    a800 = job.components[0].sbatch_args
    assert "--exclusive" in a800 and "--nodes=2" in a800 and "--mem=64000M" in a800 and "--time=00:10:00" in a800
    by_name = {s.component: s for s in job.steps}
    actor = by_name["actor"]
    assert len(actor.segments) == 1
    seg = actor.segments[0]
    assert (seg.het_group, seg.relative, seg.num_nodes, seg.tasks_per_node) == (0, 0, 2, 2)
    assert seg.gpu_bind == "mask_gpu:0xf,0xf0" and seg.mem_mb == 2 * 4096 and seg.cpus_per_task == 2
    args = segment_srun_args(job, actor, seg)
    assert "--overlap" in args and "--mem=8192M" in args and "--gres=gpu:a800:8" in args
    assert not any(a.startswith("--gpus-per-task") for a in args)
    inference = by_name["inference"].segments[0]
    assert inference.gpu_bind == "mask_gpu:0x1,0x2,0xc"
    env = by_name["env"].segments[0]
    assert env.gpus_per_node == 0 and env.gpu_bind is None and env.tasks_per_node == 8
    assert "--mem=0" in segment_srun_args(job, by_name["env"], env)


def test_irregular_layout_in_one_group_becomes_two_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # RLinf's example: 15 processes; node 0 holds 9 of them (2 per GPU on 0-1, one on 3-5, 2 on 7), node 1 six.
    plan = lab(tmp_path, 'actor: {node_group: a800, placement: "0-1:0-3,3-5,7-10:7-14"}')
    steps = lower(plan).steps
    assert [s.index for s in steps] == [0, 1]
    first, second = steps[0].segments[0], steps[1].segments[0]
    assert (first.relative, first.num_nodes, first.tasks_per_node) == (0, 1, 9)
    assert first.gpu_bind == "map_gpu:0,0,1,1,3,4,5,7,7"
    assert first.ranks == range(9)  # consecutive ranks are kept as a range
    assert (second.relative, second.num_nodes, second.tasks_per_node) == (1, 1, 6)
    assert second.gpu_bind == "map_gpu:0,0,1,1,2,2"
    assert second.ranks == range(9, 15)


def test_component_spanning_groups_is_one_colon_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = lab(tmp_path, 'span: {node_group: "a800,rtx4090", placement: "0-19"}')
    job = lower(plan)
    (step,) = job.steps
    assert [(s.het_group, s.num_nodes, s.tasks_per_node) for s in step.segments] == [(0, 2, 8), (1, 1, 4)]
    assert step.ranks == range(20)  # srun task order = PROCID order
    assert [segment_srun_args(job, step, s)[0] for s in step.segments] == ["--het-group=0", "--het-group=1"]


def test_strided_multi_gpu_processes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_from_file(REPO / "configs" / "model-parallel-strided.yaml")
    for step in lower(plan).steps:
        for seg in step.segments:
            for gpus in seg.task_gpus:
                assert len(gpus) >= 1
            if any(len(g) > 1 for g in seg.task_gpus):
                assert seg.gpu_bind and seg.gpu_bind.startswith("mask_gpu:")
                masks = seg.gpu_bind.split(":")[1].split(",")
                assert masks == [gpu_mask(g) for g in seg.task_gpus]


def test_node_kind_sees_all_gpus_without_binding(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = lab(tmp_path, 'agent: {node_group: node, placement: "0-3:0-7"}')
    job = lower(plan)
    segs = {s.het_group: s for s in job.steps[0].segments}
    assert segs[0].gpus_per_node == 8 and segs[0].gpu_bind is None and segs[0].tasks_per_node == 2
    assert segs[2].gpus_per_node == 0 and segs[2].tasks_per_node == 2


def test_unused_group_nodes_and_relative(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = lab(tmp_path, 'actor: {node_group: a800, placement: "8-15"}')
    (seg,) = lower(plan).steps[0].segments
    assert (seg.relative, seg.num_nodes) == (1, 1)
    assert seg.gpu_bind == "map_gpu:0,1,2,3,4,5,6,7"


def test_collocated_steps_overlap_with_explicit_memory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = lab(
        tmp_path, 'actor,rollout: {node_group: a800, placement: "0-7"}', "{actor: {mem_per_process: 2G}, rollout: {}}"
    )
    job = lower(plan)
    for step in job.steps:
        args = segment_srun_args(job, step, step.segments[0])
        assert "--overlap" in args
        assert any(a.startswith("--mem=") for a in args)
    assert job.steps[0].collocation_group == job.steps[1].collocation_group is not None


def test_single_group_job_has_no_het_group_option(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_yaml(
        tmp_path,
        """
        name: one
        cluster:
          node_groups: [{label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}]
          component_placement: {actor: "0-7"}
        """,
    )
    job = lower(plan)
    assert not job.is_het
    assert not any(a.startswith("--het-group") for a in segment_srun_args(job, job.steps[0], job.steps[0].segments[0]))


def test_unequal_gpu_counts_in_one_group_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_yaml(
        tmp_path,
        """
        name: uneven
        cluster:
          node_groups: [{label: mixed, partition: gpu, nodes: 2, gpus_per_node: [8, 4], gpu_type: a800}]
          component_placement: {actor: "0-11"}
        """,
    )
    with pytest.raises(SlurmError, match=r"different GPU counts per node \[8, 4\]"):
        lower(plan)


def test_slurm_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = lab(tmp_path, 'actor: {node_group: a800, placement: "0-7"}')
    job = lower(
        replace(
            plan,
            slurm={
                "time": "1:00:00",
                "job_name": "my run",
                "exclusive": "false",
                "extra_sbatch_args": "--reservation=rl --comment='x y'",
                "mail_user": "me@example.org",
            },
        )
    )
    args = job.components[0].sbatch_args
    assert args[0] == "--job-name=my_run" and "--time=1:00:00" in args
    assert "--exclusive" not in args and "--ntasks-per-node=1" in args and "--cpus-per-task=8" in args
    assert args[-2:] == ("--reservation=rl", "--comment=x y")
    assert job.batch_args == ("--mail-user=me@example.org",)
    with pytest.raises(SpecError, match="unknown slurm option"):
        lower(replace(plan, slurm={"partition_typo": "x"}))
    with pytest.raises(SpecError, match="not a Slurm time limit"):
        lower(replace(plan, slurm={"time": "1h"}))
    with pytest.raises(SpecError, match="not a long sbatch option"):
        lower(replace(plan, slurm={"extra_sbatch_args": "-p debug"}))


def test_stop_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """signal_before_limit -> the job's limit_signal (default TERM@120), passed on by the batch script,
    which alone gets Slurm's warning (--signal=B:USR2@SECONDS on het component 0 only), requeue ->
    --requeue on every component and one appended batch log, kill_wait -> the script's grace."""
    plan = lab(tmp_path, 'actor: {node_group: a800, placement: "0-7"}')
    job = lower(plan)
    assert job.limit_signal == "TERM@120" and "--signal=B:USR2@120" in job.components[0].sbatch_args
    assert "--requeue" not in job.components[0].sbatch_args
    assert (job.kill_wait_s, job.requeue) == (None, False)
    for value, rendered in (("30", "TERM@30"), ("SIGUSR1@300", "USR1@300"), ("usr2@60", "USR2@60"), ("10@5", "10@5")):
        job = lower(replace(plan, slurm={"signal_before_limit": value}))
        signals = [a for c in job.components for a in c.sbatch_args if a.startswith("--signal")]
        assert job.limit_signal == rendered and signals == [f"--signal=B:USR2@{rendered.split('@')[1]}"], value
    for limit, default in (
        ("1", "TERM@6"),
        ("3", "TERM@18"),
        ("19", "TERM@114"),
        ("20", "TERM@120"),
        ("4:00:00", "TERM@120"),
    ):  # a tenth of a short job's time, at most 2 minutes
        job = lower(replace(plan, slurm={"time": limit}))
        assert job.limit_signal == default, limit
        assert f"--signal=B:USR2@{default.split('@')[1]}" in job.components[0].sbatch_args, limit
    assert [time_limit_seconds(t) for t in ("1", "1:30", "1:00:00", "2-0", "1-2:03", "1-0:0:5", "INFINITE", "")] == [
        60,
        90,
        3600,
        172800,
        93780,
        86405,
        None,
        None,
    ]
    with pytest.raises(SpecError, match=r"is not shorter than slurm\.time"):
        lower(replace(plan, slurm={"time": "2", "signal_before_limit": "USR1@120"}))
    off = lower(replace(plan, slurm={"signal_before_limit": "false"}))
    assert not any(a.startswith("--signal") for a in off.components[0].sbatch_args)
    job = lower(replace(plan, slurm={"requeue": "true", "kill_wait": "45"}))
    assert all("--requeue" in c.sbatch_args for c in job.components)
    assert job.batch_args == ("--open-mode=append",) and (job.kill_wait_s, job.requeue) == (45, True)
    for bad, message in (
        (("signal_before_limit", "USR1@soon"), "not a number of seconds"),
        (("signal_before_limit", "BOGUS@30"), "'BOGUS' is not a signal"),
        (("signal_before_limit", "KILL@30"), "cannot be caught"),
        (("kill_wait", "-1"), "not a number of seconds"),
        (("requeue", "maybe"), "not true or false"),
    ):
        with pytest.raises(SpecError, match=message):
            lower(replace(plan, slurm={bad[0]: bad[1]}))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("signal_before_limit: USR1@soon", "not a number of seconds"),
        ("kill_wait: ten", "not a number of seconds"),
        ("requeue: maybe", "not true or false"),
    ],
)
def test_stop_options_refused_at_plan_time_with_location(tmp_path, option: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError, match=message) as err:
        plan_yaml(
            tmp_path,
            f"""
            name: x
            cluster:
              node_groups: [{{label: cpu, partition: cpu, nodes: 1}}]
              component_placement: {{a: {{node_group: cpu, placement: "0"}}}}
            components: {{a: {{command: ["true"]}}}}
            slurm: {{{option}}}
            """,
        )
    assert err.value.location is not None and err.value.location.line == 7


def test_a_job_sharing_its_nodes_binds_job_relative_gpu_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`exclusive: false`: the plan's GPU ids are job-relative (plan.json says so, the summary too); no
    step binds them with --gpu-bind (it would name the node's GPUs), each still asks for the job's GPUs of
    the node. The same plan exclusive: physical ids, map_gpu, nothing in plan.json."""
    from hpcplace.plan.plan import JOB_RELATIVE_GPU_IDS, PHYSICAL_GPU_IDS, gpu_id_kind, plan_header
    from hpcplace.slurm.render import placement_summary

    placements = 'actor: {node_group: a800, placement: "0-3"}\nrollout: {node_group: a800, placement: "4-5"}'
    held = lab(tmp_path, placements)
    shared = replace(held, slurm={**held.slurm, "exclusive": "false"})
    assert (gpu_id_kind(held.slurm), gpu_id_kind(shared.slurm)) == (PHYSICAL_GPU_IDS, JOB_RELATIVE_GPU_IDS)
    assert "gpu_ids" not in plan_header(held) and plan_header(shared)["gpu_ids"] == "job-relative"
    for plan, bound in ((held, True), (shared, False)):
        job = lower(plan)
        for step in job.steps:
            for seg in step.segments:
                args = segment_srun_args(job, step, seg)
                assert any(a.startswith("--gpu-bind=map_gpu:") for a in args) == bound, (step.component, args)
                assert f"--gres=gpu:a800:{seg.gpus_per_node}" in args
        summary = "\n".join(placement_summary(plan, job))
        assert ("GPU ids: job-relative (slurm.exclusive: false)" in summary) == (not bound)
    assert "--exclusive" not in lower(shared).components[0].sbatch_args
