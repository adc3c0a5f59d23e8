"""GPU ids of a job sharing its nodes (`slurm.exclusive: false`): what the preflight notes of each node's
physical GPUs, and how `hpcplace status` shows it (the cluster test is test_shared_gpus_cluster.py)."""

from __future__ import annotations

from pathlib import Path

from hpcplace.runtime.preflight import GpuFacts, job_gpu_ids, job_gpus_note
from hpcplace.slurm.run_report import job_gpu_lines


def test_status_shows_each_nodes_physical_gpus_from_the_preflight(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "nodes.txt").write_text("0 0 a800-1\n0 1 a800-2\n0 2 a800-3\n")
    one = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=(4, 5), slurm_visible="0,1", step_gpus="4,5")
    two = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=tuple(range(8)), slurm_visible="2,6")
    for host, facts, used in (("a800-1", one, (1,)), ("a800-2", two, (0, 1))):
        note = job_gpus_note(job_gpu_ids(facts), used)
        (logs / f"preflight.{host}.out").write_text(
            f"hpcplace-preflight: {host}: ok: 2 CPUs, {note}, /dev/shm 2 GiB free\n"
        )
    # a800-3 has no preflight output (it never ran there): no line, no error
    assert job_gpu_lines(tmp_path) == [
        "GPUs (job-relative ids: slurm.exclusive: false; physical ids per node):",
        "  a800-1: the job's GPUs 4,5; the plan's 1 are 5",
        "  a800-2: the job's GPUs 2,6; the plan's 0,1 are 2,6",
    ]
    (logs / "preflight.a800-1.out").write_text("hpcplace-preflight: a800-1: ok: 8 GPU(s)\n")  # a job holding its nodes
    (logs / "preflight.a800-2.out").unlink()
    assert job_gpu_lines(tmp_path) == []
    assert job_gpu_lines(tmp_path / "nowhere") == []
