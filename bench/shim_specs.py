"""The shim benchmark's plans and the Slurm task each is measured as (bench_shim.py, and compare.py for both
sides of a comparison): a small plan (the lab's het job, 4 components) and a 65,536-process one (8,192 nodes x 8
GPUs); the tasks are recorded variables of het job 120 and the last rank of the big plan. Data only: no imports."""

SMALL = """
name: bench-small
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor,rollout: {node_group: a800, placement: "0-15:0-3"}
    inference: {node_group: rtx4090, placement: "0-3"}
    agent: {node_group: cpu, placement: "0:0-7"}
components:
  actor: {command: ["true"]}
  rollout: {command: ["true"]}
  inference: {command: ["true"]}
  agent: {command: ["true"]}
"""
BIG = """
name: bench-big
cluster:
  node_groups:
    - {label: gpu, partition: gpu, nodes: 8192, gpus_per_node: 8, gpu_type: h100}
  component_placement:
    actor: all
components:
  actor: {command: ["true"]}
"""
SMALL_TASK = {  # actor rank 3 on a800-2, --het-group=0 step of het job 120
    "SLURM_JOB_ID": "120",
    "SLURM_HET_SIZE": "3",
    "SLURM_JOB_ID_HET_GROUP_0": "120",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "a800-[1-2]",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "rtx4090-1",
    "SLURM_JOB_NODELIST_HET_GROUP_2": "cpu-1",
    "SLURMD_NODENAME": "a800-2",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NUM_TASKS": "4",
    "CUDA_VISIBLE_DEVICES": "4,5,6,7",
    "SLURM_JOB_GPUS": "0,1",
}
BIG_TASK = {  # the last process of the big plan
    "SLURM_JOB_ID": "121",
    "SLURM_JOB_NODELIST": "gpu[0001-8192]",
    "SLURMD_NODENAME": "gpu8192",
    "SLURM_PROCID": "65535",
    "SLURM_LOCALID": "7",
    "SLURM_STEP_NUM_TASKS": "65536",
    "CUDA_VISIBLE_DEVICES": "7",
}
