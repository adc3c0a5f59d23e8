#!/bin/bash
#SBATCH --job-name=versions
#SBATCH --output=logs/batch-%j.out
#SBATCH --time=10
#SBATCH --partition=cpu --nodes=1 --ntasks=1 --mem=500M
#SBATCH hetjob
#SBATCH --partition=a800 --nodes=1 --ntasks=1 --mem=500M --gres=gpu:a800:1
# The scenario recorded on each Slurm version (tests/slurm/data/RECORD.md): four steps whose exit codes each
# version prints in its own way, the last one long enough to record `scontrol show job` while it runs.
# No --error: from 25.11 `scontrol show job` then prints StdErr= blank.
srun --het-group=0 -n1 -c1 --mem=100M -J exit7 bash -c 'exit 7'
srun --het-group=0 -n1 -c1 --mem=100M -J killed15 bash -c 'kill -TERM $$'
srun --het-group=0 -n1 -c1 --mem=100M -J exit143 bash -c 'exit 143'
srun --het-group=1 -n1 -c1 --mem=100M --gres=gpu:a800:1 -J ok sleep 30
exit 0
