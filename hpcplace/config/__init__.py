"""Stage 1, config: YAML in any input format -> a typed, validated ExperimentSpec.

Located YAML loading and its caps, Hydra composition and interpolation, the rank syntax, the cluster model
(node groups, nodes, hardware), the `slurm:` and `launch:` blocks, the spec and the four formats. Imports
only hpcplace.errors below it (docs/architecture.md)."""
