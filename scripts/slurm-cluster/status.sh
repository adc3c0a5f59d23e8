#!/usr/bin/env bash
# Is the hpcplace Slurm test cluster up? Prints one line; exit 0 when up, 1 when not.
#
#   scripts/slurm-cluster/status.sh   ->  "up constrain_devices=no slurm=sid version=26.05.5 SLURM_CONF=..."  |  "down"
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

conf="$HPCP_DIR/etc/slurm.conf"
mode="unknown"
if [[ -r "$HPCP_DIR/mode" ]]; then
    mode="$(cat "$HPCP_DIR/mode")"
fi
suite="$(cat "$HPCP_DIR/slurm" 2>/dev/null || echo unknown)"
version="$(cat "$HPCP_DIR/version" 2>/dev/null || echo unknown)"
if [[ -e "$HPCP_DIR/up" && -r "$conf" ]] &&
    SLURM_CONF="$conf" timeout 5 scontrol ping >/dev/null 2>&1; then
    echo "up $mode slurm=$suite version=$version SLURM_CONF=$conf"
    exit 0
fi
echo "down"
exit 1
