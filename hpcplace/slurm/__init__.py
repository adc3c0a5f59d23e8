"""Stage 4, slurm: Plan -> one heterogeneous Slurm job. Lowering (pure), rendering (job.sbatch, plan.json),
the live cluster's facts and validation, submission once per run directory, status, cancel, logs. The only
module that runs Slurm's commands is slurm_cli. Imports ray, plan, config and errors (docs/architecture.md)."""
