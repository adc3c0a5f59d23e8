"""hpcplace: exact process placement for RL post-training on heterogeneous Slurm clusters."""

__version__ = "0.1.0"
