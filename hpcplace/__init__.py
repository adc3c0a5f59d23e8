"""hpcplace: exact process placement for RL post-training on heterogeneous Slurm clusters.

Stage packages (docs/architecture.md): config -> plan -> ray -> slurm -> local -> tune, the CLI and the Python
functions API on top; hpcplace.runtime is the in-job side."""

__version__ = "0.1.0"
