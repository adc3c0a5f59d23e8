"""Stage 5, local: the same plan on this machine without Slurm (`hpcplace run --local`): every process with
the environment the shim would give it, or one head raylet in the Ray launch mode. Imports slurm (the
rendered plan files), ray, plan, config and errors (docs/architecture.md)."""
