#!/usr/bin/env bash
# Record what the running test cluster's Slurm prints (RECORD.md), into tests/slurm/data/slurm-<version>/.
#   source /tmp/hpcplace-slurm/env.sh && tests/slurm/data/record.sh [SHARED_DIR]    (default /var/tmp)
# SHARED_DIR must be visible to every node (the test cluster's /tmp is each node's own).
set -euo pipefail
cd "$(dirname "$0")/../../.."
shared="${1:-/var/tmp}"
V=$(scontrol --version | awk '{print $2}')
D=$PWD/tests/slurm/data/slurm-$V
mkdir -p "$D"
# 1. the version and the cluster's nodes and partitions
scontrol --version >"$D/scontrol-version.txt"
sinfo --version >"$D/sinfo-version.txt"
scontrol show node -o >"$D/scontrol-show-node.txt"
scontrol show partition -o >"$D/scontrol-show-partition.txt"
# the fabric: from 25.05 each topology a partition names (topology.yaml); before, the cluster's one topology
# (topology.conf), the file named by its plugin (up.sh --fabric block|tree boots either)
names=$(scontrol show partition -o | grep -o 'Topology=[^ ]*' | cut -d= -f2 | sort -u)
if [[ -n "$names" ]]; then
    for name in $names; do scontrol show topology "$name" >"$D/scontrol-show-topology-$name.txt"; done
else
    plugin=$(scontrol show config | awk '$1 == "TopologyPlugin" { print $3 }')
    scontrol show topology >"$D/scontrol-show-topology-${plugin#topology/}.txt"
fi
# 2. the scenario: a 2-component het job whose steps exit 7, die of SIGTERM, exit 143, then sleep 30
W=$(mktemp -d "$shared/hpcplace-versions-$V.XXXXXX")
mkdir -p "$W/logs" && cp tests/slurm/data/versions-job.sh "$W/"
J=$(cd "$W" && sbatch --parsable versions-job.sh)
# 3. while step `ok` (the sleep) runs: it is het component 1's step, whose job id is the leader's + 1
until squeue --steps -h -j "$J,$((J + 1))" -o '%j' | grep -qx ok; do sleep 1; done
scontrol show job -o "$J" >"$D/scontrol-show-job-het.txt"
squeue -h -j "$J" -O 'JobID:24,StdOut:300,StdErr:300' >"$D/squeue-std-paths.txt"
# 4. once the job ended (sacct, as hpcplace asks it; it may lag the job's end)
while squeue -h -j "$J" | grep -q .; do sleep 2; done
for _ in $(seq 30); do
    sacct -j "$J" --parsable2 --noheader \
        -o JobID,JobName,Partition,State,ExitCode,NodeList,Elapsed,WorkDir,Submit >"$D/sacct-exit-codes.txt"
    grep -q '|exit143|' "$D/sacct-exit-codes.txt" && break
    sleep 1
done
rm -rf "$W"
echo "recorded Slurm $V into $D"
