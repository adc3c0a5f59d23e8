"""Stage 6, tune: `hpcplace tune` and `compare` — search placements over a config's node groups from measured
costs (the profile, the cost model and its branch-and-bound search, the rewrite of the winner in the input's
own format). Imports slurm (the render check), plan, config and errors (docs/architecture.md)."""

OBJECTIVES = ("time", "gpu-hours")  # what the search minimises (here: the CLI lists them without importing it)
