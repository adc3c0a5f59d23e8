"""Stage 3, ray: the Ray cluster a plan asks for in the Ray launch mode (pure): one raylet per planned node,
its rank, GPUs, CPUs, resources and labels, and the head. Used by the Slurm lowering (the raylet and driver
steps) and by the local Ray mode. Imports plan, config and errors (docs/architecture.md)."""
