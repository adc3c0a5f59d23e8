#!/usr/bin/env bash
# Stop the hpcplace Slurm test cluster and remove its network; idempotent, a few seconds at most.
# Logs and the state directory stay for inspection (up.sh wipes them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

hpcp_require_root
hpcp_check_dir

start="$(hpcp_now)"
run="$HPCP_DIR/run"
conf="$HPCP_DIR/etc/slurm.conf"

# 1. Cancel every job while the controller still answers (best effort, bounded).
ctld_pid="$(hpcp_pid_from_file "$run/slurmctld.pid" slurmctld || true)"
if [[ -n "$ctld_pid" && -r "$conf" ]]; then
    jobs="$(SLURM_CONF="$conf" timeout 2 squeue -h -o %F 2>/dev/null | sort -u || true)"
    if [[ -n "$jobs" ]]; then
        # shellcheck disable=SC2086  # word splitting of the id list is intended
        SLURM_CONF="$conf" timeout 2 scancel $jobs 2>/dev/null || true
    fi
fi

# 2. slurmctld first (it must go before the bridge does).
if [[ -n "$ctld_pid" ]]; then
    hpcp_stop_pids 2 "$ctld_pid"
fi

# 3. slurmd's, then everything left inside the node namespaces (slurmstepd ignores SIGTERM).
slurmd_pids=()
for node in "${HPCP_NODES[@]}"; do
    if pid="$(hpcp_pid_from_file "$run/slurmd-$node.pid" slurmd)"; then
        slurmd_pids+=("$pid")
    fi
done
if [[ "${#slurmd_pids[@]}" -gt 0 ]]; then
    hpcp_stop_pids 1 "${slurmd_pids[@]}"
fi
ns_pids=()
for node in "${HPCP_NODES[@]}"; do
    while read -r pid; do
        [[ -n "$pid" ]] && ns_pids+=("$pid")
    done < <(hpcp_pids_in_netns "$(hpcp_netns "$node")")
done
if [[ "${#ns_pids[@]}" -gt 0 ]]; then
    kill -KILL "${ns_pids[@]}" 2>/dev/null || true
    hpcp_stop_pids 1 "${ns_pids[@]}"
fi

# 4. slurmdbd and our MariaDB (only the one whose pid file lives in the state dir).
dbd_pids=()
if pid="$(hpcp_pid_from_file "$run/slurmdbd.pid" slurmdbd)"; then
    dbd_pids+=("$pid")
fi
if [[ "${#dbd_pids[@]}" -gt 0 ]]; then
    hpcp_stop_pids 2 "${dbd_pids[@]}"
fi
if pid="$(hpcp_pid_from_file "$run/mariadb.pid" mariadbd)"; then
    hpcp_stop_pids 3 "$pid"
fi

# 5. munged, only when up.sh started it.
if [[ -r "$run/munged.ours" ]]; then
    if pid="$(hpcp_pid_from_file "$run/munged.ours" munged)"; then
        hpcp_stop_pids 2 "$pid"
    fi
    rm -f "$run/munged.ours"
fi

# 6. Network: namespaces, veths, bridge, the guard route.
for i in "${!HPCP_NODES[@]}"; do
    ns="$(hpcp_netns "${HPCP_NODES[$i]}")"
    veth="$(hpcp_veth "$i")"
    if ip link show "$veth" >/dev/null 2>&1; then
        ip link del "$veth" 2>/dev/null || true
    fi
    if [[ -e "/run/netns/$ns" ]]; then
        ip netns del "$ns" 2>/dev/null || true
    fi
done
if ip link show "$HPCP_BRIDGE" >/dev/null 2>&1; then
    ip link del "$HPCP_BRIDGE" 2>/dev/null || true
fi
while ip route del unreachable "$HPCP_SUBNET" 2>/dev/null; do :; done

# 7. /etc/hosts lines we added (rewritten in place: /etc/hosts may be a bind mount).
if grep -qF "$HPCP_HOSTS_MARK" /etc/hosts 2>/dev/null; then
    filtered="$(grep -vF "$HPCP_HOSTS_MARK" /etc/hosts || true)"
    printf '%s\n' "$filtered" >/etc/hosts
fi

rm -f "$run"/*.pid "$HPCP_DIR/up" 2>/dev/null || true
echo "slurm cluster down in $(hpcp_elapsed "$start")s"
