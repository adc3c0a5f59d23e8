#!/usr/bin/env bash
# Stop the hpcplace Slurm test cluster and remove its network. Idempotent; well under 5 s.
#
#   scripts/slurm-cluster/down.sh [--fast]
#
# --fast (used by up.sh, which wipes all state right after): SIGKILL the daemons instead of
# letting slurmctld save its state (~1.5 s) -- nothing of that state survives anyway.
#
# Only processes up.sh started are stopped: found by the pid files in the state dir and by the
# HPCPLACE_SLURM_OWNER=<state dir> variable every daemon inherits from up.sh, plus whatever still
# lives inside the node network namespaces. Logs and config stay for inspection (up.sh wipes them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

grace=1 # multiplier for the SIGTERM grace periods
case "${1:-}" in
    "") ;;
    --fast) grace=0 ;;
    *)
        echo "usage: $0 [--fast]" >&2
        exit 2
        ;;
esac

hpcp_require_root "stop"
hpcp_check_dir
hpcp_serialize "$@"

start="$(hpcp_now)"
run="$HPCP_DIR/run"
conf="$HPCP_DIR/etc/slurm.conf"

phase() {
    if [[ "${HPCPLACE_SLURM_TRACE:-0}" == 1 ]]; then
        echo "[down.sh +$(hpcp_elapsed "$start")s] $*" >&2
    fi
}

# Live pids of one daemon: its pid file(s) plus the processes carrying our owner mark.
daemon_pids() { # COMM PIDFILE...
    local comm="$1" f
    shift
    {
        for f in "$@"; do
            hpcp_pid_from_file "$f" "$comm" || true
        done
        hpcp_owned_pids "$comm"
    } | sort -un
}

stop_daemon() { # TIMEOUT_MS COMM PIDFILE...
    local timeout="$1" pids
    shift
    mapfile -t pids < <(daemon_pids "$@")
    if [[ "${#pids[@]}" -gt 0 ]]; then
        hpcp_stop_pids "$((timeout * grace))" "${pids[@]}"
    fi
}

# 1. Cancel every job while the controller still answers (best effort, bounded).
if [[ "$grace" -gt 0 && -r "$conf" ]] && [[ -n "$(daemon_pids slurmctld "$run/slurmctld.pid")" ]]; then
    # %i is "ID" or "LEADER+OFFSET" for het-job components: cancel leaders (= whole het job).
    mapfile -t jobs < <(SLURM_CONF="$conf" timeout 2 squeue -h -o %i 2>/dev/null | sed 's/+.*//' | sort -u || true)
    if [[ "${#jobs[@]}" -gt 0 ]]; then
        SLURM_CONF="$conf" timeout 2 scancel "${jobs[@]}" 2>/dev/null || true
    fi
fi

phase "jobs cancelled"

# 2. slurmctld (it must go before the bridge does) and the slurmd's: SIGTERM to all of them at once,
#    up to 2 s for slurmctld to save its state, then whatever is left inside the node namespaces
#    gets SIGKILL (slurmstepd ignores SIGTERM).
pidfiles=()
for node in "${HPCP_NODES[@]}"; do
    pidfiles+=("$run/slurmd-$node.pid")
done
mapfile -t slurmd_pids < <(daemon_pids slurmd "${pidfiles[@]}")
if [[ "${#slurmd_pids[@]}" -gt 0 ]]; then
    kill -TERM "${slurmd_pids[@]}" 2>/dev/null || true
fi
stop_daemon 2000 slurmctld "$run/slurmctld.pid"
phase "slurmctld stopped"

if [[ "${#slurmd_pids[@]}" -gt 0 ]]; then
    hpcp_stop_pids "$((200 * grace))" "${slurmd_pids[@]}"
fi
phase "slurmds stopped"

leftovers=()
for node in "${HPCP_NODES[@]}"; do
    mapfile -t -O "${#leftovers[@]}" leftovers < <(hpcp_pids_in_netns "$(hpcp_netns "$node")")
done
mapfile -t -O "${#leftovers[@]}" leftovers < <(hpcp_owned_pids slurmstepd)
if [[ "${#leftovers[@]}" -gt 0 ]]; then
    kill -KILL "${leftovers[@]}" 2>/dev/null || true
    hpcp_stop_pids 0 "${leftovers[@]}"
fi
phase "node processes killed"
# Each node's own /dev/shm and /tmp (tmpfs in its mount namespace) went with its last process; the
# empty staging mount points stay in the state dir, which up.sh wipes.

# 3. slurmdbd, then our MariaDB (never a system one: pid file in the state dir / owner mark).
stop_daemon 1500 slurmdbd "$run/slurmdbd.pid"
phase "slurmdbd stopped"
stop_daemon 2500 mariadbd "$run/mariadb.pid"

phase "mariadb stopped"

# 4. This cluster no longer uses this machine's munged: stopped when up.sh started it and no other test
#    cluster uses it (_common.sh).
hpcp_munge_lock
rm -f "$HPCP_MUNGE_STATE/users/$HPCP_INSTANCE"
alone=0 # no other test cluster is up on this machine
if [[ -z "$(ls -A "$HPCP_MUNGE_STATE/users")" ]]; then
    alone=1
    if munged_pid="$(hpcp_pid_from_file "$HPCP_MUNGE_STATE/started" munged)"; then
        hpcp_stop_pids "$((1000 * grace))" "$munged_pid"
    fi
    rm -f "$HPCP_MUNGE_STATE/started"
fi
hpcp_munge_unlock

phase "munged handled"

# 5. Network: veths (removing one end removes its peer), namespaces, bridge, the guard route.
{
    for i in "${!HPCP_NODES[@]}"; do
        veth="$(hpcp_veth "$i")"
        ns="$(hpcp_netns "${HPCP_NODES[$i]}")"
        if [[ -e "/sys/class/net/$veth" ]]; then echo "link del $veth"; fi
        veth="$(hpcp_fab_veth "$i")"
        if [[ -e "/sys/class/net/$veth" ]]; then echo "link del $veth"; fi
        if [[ -e "/run/netns/$ns" ]]; then echo "netns del $ns"; fi
    done
    if [[ -e "/sys/class/net/$HPCP_BRIDGE" ]]; then echo "link del $HPCP_BRIDGE"; fi
    if [[ -e "/sys/class/net/$HPCP_FAB_BRIDGE" ]]; then echo "link del $HPCP_FAB_BRIDGE"; fi
} | ip -force -batch - 2>/dev/null || true
while ip route del unreachable "$HPCP_SUBNET" 2>/dev/null; do :; done

phase "network removed"
# Empty cgroup v1 directories the slurmd's created (slurm_<node>/...); rmdir only removes empty ones. Every
# instance's nodes have the same names: while another one is up, its directories are left alone (the last
# cluster down removes them all).
cgroup_nodes=()
if [[ "$alone" == 1 ]]; then
    cgroup_nodes=("${HPCP_NODES[@]}")
fi
for node in "${cgroup_nodes[@]}"; do
    for cg in /sys/fs/cgroup/*/"slurm_$node"; do
        [[ -d "$cg" ]] || continue
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
done
# And those runc made for containers (`srun --container`, ids <node>.<user>.<job>.<step>.<task>) that
# were never deleted (a runc killed before its cleanup): beside the node's, or under this machine's own
# cgroup of a hierarchy.
names=()
for node in "${cgroup_nodes[@]}"; do
    if [[ "${#names[@]}" -gt 0 ]]; then names+=(-o); fi
    names+=(-name "$node.*.*.*.*")
done
[[ "${#names[@]}" == 0 ]] || find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d \( "${names[@]}" \) -exec rmdir {} + 2>/dev/null || true
phase "cgroups removed"

# 6. /etc/hosts lines we added (rewritten in place: /etc/hosts may be a bind mount); another instance's are
#    in its own hosts file (_common.sh).
if [[ "$HPCP_HOSTS_FILE" == /etc/hosts ]] && grep -qF "$HPCP_HOSTS_MARK" /etc/hosts 2>/dev/null; then
    filtered="$(grep -vF "$HPCP_HOSTS_MARK" /etc/hosts || true)"
    printf '%s\n' "$filtered" >/etc/hosts
fi

rm -f "$HPCP_DIR/up"
echo "slurm cluster down in $(hpcp_elapsed "$start")s"
