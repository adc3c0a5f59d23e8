# shellcheck shell=bash
# Shared settings and helpers for up.sh / down.sh / status.sh. Sourced, never run.
# shellcheck disable=SC2034  # the settings below are used by the scripts that source this file

# Several test clusters may run at once (scripts/test-all.sh runs two Slurm releases side by side):
# HPCPLACE_SLURM_INSTANCE=N (one digit, default 0) gives cluster N its own state dir, networks, bridge,
# namespace and interface names, controller ports, first job id and node-name resolution. Instance 0
# keeps the names it always had.
HPCP_INSTANCE="${HPCPLACE_SLURM_INSTANCE:-0}"
if [[ ! "$HPCP_INSTANCE" =~ ^[0-9]$ ]]; then
    echo "HPCPLACE_SLURM_INSTANCE must be one digit (0-9): $HPCP_INSTANCE" >&2
    exit 2
fi
if [[ "$HPCP_INSTANCE" == 0 ]]; then
    HPCP_PREFIX=hpcp
    HPCP_DEFAULT_DIR=/tmp/hpcplace-slurm
else
    HPCP_PREFIX="hpcp$HPCP_INSTANCE"
    HPCP_DEFAULT_DIR="/tmp/hpcplace-slurm-$HPCP_INSTANCE"
fi
# State directory: config, spool, logs, pid files, fake devices, MariaDB data.
HPCP_DIR="${HPCPLACE_SLURM_DIR:-$HPCP_DEFAULT_DIR}"
# The controller's ports (slurmctld and slurmdbd listen on this machine, beside other instances').
HPCP_CTLD_PORT=$((6817 + 10 * HPCP_INSTANCE))
HPCP_SLURMD_PORT=$((6818 + 10 * HPCP_INSTANCE))
HPCP_DBD_PORT=$((6819 + 10 * HPCP_INSTANCE))
# Job ids of instance N start at N*100000+1: Slurm's cgroup directories (slurm_<node>/uid_<uid>/job_<id>)
# and runc's container ids are named by node and job, and every instance has the same node names.
HPCP_FIRST_JOB_ID=$((HPCP_INSTANCE * 100000 + 1))
# The Slurm tools that match the running cluster (a newer release's, see up.sh) come first.
if [[ -d "$HPCP_DIR/bin" ]]; then
    PATH="$HPCP_DIR/bin:$PATH"
fi

# Which Slurm: the packages of one Debian release. bookworm's (22.05) run on this machine itself;
# trixie's (24.11) and sid's (26.05) need a newer glibc and run in a root filesystem of their own
# release (install.sh builds it, up.sh boots every daemon inside it). The version numbers are what the
# registry served when this was written: the scripts record the version they really booted.
HPCP_SUITES=(bookworm trixie sid)
HPCP_SUITE="${HPCPLACE_SLURM:-bookworm}"
HPCP_ROOT_CACHE="${HPCPLACE_SLURM_ROOT_CACHE:-/var/cache/hpcplace}"

hpcp_suite_of() { # bookworm|trixie|sid|22.05|24.11|26.05 -> the Debian release; 1 if unknown
    case "$1" in
        bookworm | 22.05) echo bookworm ;;
        trixie | 24.11) echo trixie ;;
        sid | 26.05) echo sid ;;
        *) return 1 ;;
    esac
}

hpcp_rootfs() { # SUITE -> its root filesystem ("" for bookworm: this machine's own)
    if [[ "$1" != bookworm ]]; then echo "$HPCP_ROOT_CACHE/slurm-$1/root"; fi
}

# The Debian mirror this machine's own apt uses (its deb822 sources, or classic `deb` lines), so root
# filesystems and images come from the same registry (HPCPLACE_DEBIAN_MIRROR overrides it). No host name is
# written here: a machine whose apt names none must say which.
hpcp_debian_mirror() {
    local mirror="${HPCPLACE_DEBIAN_MIRROR:-}"
    if [[ -z "$mirror" ]]; then
        mirror="$(awk '/^URIs:/ && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
    fi
    if [[ -z "$mirror" ]]; then
        mirror="$(awk '/^deb / && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)"
    fi
    if [[ -z "$mirror" ]]; then
        echo "no Debian mirror in this machine's apt sources: set HPCPLACE_DEBIAN_MIRROR to the one to use" >&2
        return 1
    fi
    echo "$mirror"
}

hpcp_root_slurm_version() { # ROOT -> "26.05.5"
    chroot "$1" /usr/sbin/slurmd -V | awk '{print $2}'
}

# Shell code (for `bash -c` in a mount namespace of its own) that makes $root the process's / with
# pivot_root, as a container runtime does: Apptainer refuses to start under a plain chroot ("Running
# inside a weak chrooted environment"). $root must be a mount point (bind it onto itself before binding
# anything into it). The old root ends up stacked on the new one and is detached at once (umount -l):
# nothing in the namespace can reach this machine's files afterwards, except what was bound in.
# shellcheck disable=SC2016  # expanded by the inner shell
HPCP_PIVOT_ROOT='
cd "$root"
pivot_root . .
umount -l .
cd /
'

# Run COMMAND inside ROOT (a release's root filesystem) entered with pivot_root, in a private mount
# namespace: /proc, /sys, /dev, /etc/hosts and this machine's /tmp bound in, and each PATH bound at
# its own path.
hpcp_in_root() { # ROOT [PATH...] -- COMMAND...
    # shellcheck disable=SC2016  # expanded by the inner bash
    unshare --mount --propagation private bash -c '
set -e
root=$1
shift
mount --bind "$root" "$root"
mount --rbind /proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind /etc/hosts "$root/etc/hosts"
mount --rbind /tmp "$root/tmp"
while [ "$1" != -- ]; do
    mkdir -p "$root$1"
    mount --rbind "$1" "$root$1"
    shift
done
shift
'"$HPCP_PIVOT_ROOT"'
exec "$@"
' bash "$@"
}

# `--slurm S` (the only option of install.sh; up.sh parses its own options and calls hpcp_set_suite).
hpcp_parse_slurm_option() { # SCRIPT_NAME "$@"
    local name="$1"
    shift
    while [[ "$#" -gt 0 ]]; do
        case "$1" in
            --slurm)
                [[ "$#" -ge 2 ]] || { echo "usage: $name [--slurm ${HPCP_SUITES[*]}]" >&2; exit 2; }
                hpcp_set_suite "$2"
                shift 2
                ;;
            --slurm=*)
                hpcp_set_suite "${1#*=}"
                shift
                ;;
            *)
                echo "usage: $name [--slurm ${HPCP_SUITES[*]}]" >&2
                exit 2
                ;;
        esac
    done
    hpcp_set_suite "$HPCP_SUITE"
}

hpcp_set_suite() { # NAME_OR_VERSION
    HPCP_SUITE="$(hpcp_suite_of "$1")" || {
        echo "unknown Slurm release: $1 (allowed: bookworm or 22.05, trixie or 24.11, sid or 26.05)" >&2
        exit 2
    }
}
# Private network: bridge on the host, one veth + network namespace per node.
HPCP_NET="${HPCPLACE_SLURM_NET:-10.$((77 + HPCP_INSTANCE)).0}"  # first three octets of a /24
HPCP_BRIDGE="${HPCP_PREFIX}br0"
HPCP_HOST_IP="${HPCP_NET}.1"
HPCP_SUBNET="${HPCP_NET}.0/24"
HPCP_CLUSTER="hpcplace"
HPCP_HOSTS_MARK="# hpcplace-slurm test cluster (scripts/slurm-cluster; removed by down.sh)"
# Where the nodes (and a newer release's daemons) resolve node names: instance 0 adds them to this
# machine's /etc/hosts; another instance's nodes bear the same names at other addresses, so it writes a
# hosts file of its own ($DIR/hosts: this machine's, without instance 0's lines, plus its nodes) and binds
# it over /etc/hosts where its nodes and daemons run. Slurm itself needs neither (NodeAddr is an address).
if [[ "$HPCP_INSTANCE" == 0 ]]; then
    HPCP_HOSTS_FILE=/etc/hosts
else
    HPCP_HOSTS_FILE="$HPCP_DIR/hosts"
fi

# Every node's own /dev/shm and /tmp (tmpfs in the node's mount namespace; pages count only when used).
HPCP_NODE_SHM_SIZE="${HPCPLACE_SLURM_NODE_SHM:-2g}"
HPCP_NODE_TMP_SIZE="${HPCPLACE_SLURM_NODE_TMP:-2g}"

# Nodes, in a fixed order: the index gives the IP (.11, .12, ...) and the host-side veth name.
# nvl-1..4: four 4-GPU nodes in two NVLink "racks" (blocks) and two leaf switches on Slurm 25.05+ (topology.yaml).
HPCP_NODES=(a800-1 a800-2 rtx4090-1 cpu-1 robot-1 nvl-1 nvl-2 nvl-3 nvl-4)
# Each node's last address octet, in HPCP_NODES order: HPCPLACE_SLURM_NODE_OCTETS="12 11 13 ..." gives a800-1 a
# higher address than a800-2, a site whose addresses do not sort like its host names (verl's and slime's IP order).
read -r -a HPCP_NODE_OCTETS <<<"${HPCPLACE_SLURM_NODE_OCTETS:-11 12 13 14 15 16 17 18 19}"
if [[ ${#HPCP_NODE_OCTETS[@]} -ne ${#HPCP_NODES[@]} ]]; then
    echo "HPCPLACE_SLURM_NODE_OCTETS must hold ${#HPCP_NODES[@]} numbers (one per node: ${HPCP_NODES[*]})" >&2
    exit 2
fi

hpcp_node_ip() { # NODE_INDEX
    echo "${HPCP_NET}.${HPCP_NODE_OCTETS[$1]}"
}
hpcp_netns() { # NODE
    echo "$HPCP_PREFIX-$1"
}
hpcp_veth() { # NODE_INDEX
    echo "${HPCP_PREFIX}v$1"
}
# A second network, as a site's fast fabric beside the management Ethernet: bridge hpcpbr1 (no address on
# the host: only the nodes are on it), veth hpcpf<i> <-> `fab0` in each node (10.99.0.11-15/24). Node
# names resolve to the first network; jobs reach this one only by choosing it (a node group's `network:`).
HPCP_FAB_NET="${HPCPLACE_SLURM_FABNET:-10.$((99 - HPCP_INSTANCE)).0}"  # first three octets of a /24
HPCP_FAB_BRIDGE="${HPCP_PREFIX}br1"
HPCP_FAB_IF="fab0"
HPCP_FAB_SUBNET="${HPCP_FAB_NET}.0/24"
hpcp_fab_ip() { # NODE_INDEX
    echo "${HPCP_FAB_NET}.$((11 + $1))"
}
hpcp_fab_veth() { # NODE_INDEX
    echo "${HPCP_PREFIX}f$1"
}

# A path inside NODE's own mount namespace as seen from the host (its /dev/shm, /tmp), through the
# root of its slurmd: /proc/<pid>/root. Empty when the node's slurmd is not running.
hpcp_node_path() { # NODE PATH
    local pid
    pid="$(hpcp_pid_from_file "$HPCP_DIR/run/slurmd-$1.pid" slurmd)" || return 0
    echo "/proc/$pid/root$2"
}

hpcp_log() {
    echo "[slurm-cluster] $*" >&2
}

hpcp_now() { # seconds since the epoch, with fractions
    date +%s.%N
}

hpcp_elapsed() { # START (from hpcp_now) -> "1.2"
    awk -v s="$1" -v e="$(hpcp_now)" 'BEGIN { printf "%.1f", e - s }'
}

# True when PID exists and is not a zombie (PID 1 here reaps orphans lazily: state Z = dead).
hpcp_alive() { # PID
    local stat
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$stat" ]] || return 1
    stat="${stat##*) }"
    case "${stat%% *}" in
        Z | X | x) return 1 ;;
        *) return 0 ;;
    esac
}

# The pid stored in PIDFILE when it is alive and its command name is COMM (guards against pid reuse).
hpcp_pid_from_file() { # PIDFILE COMM
    local pid comm
    [[ -r "$1" ]] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [[ -n "$pid" ]] || return 1
    hpcp_alive "$pid" || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    [[ "$comm" == "$2" ]] || return 1
    echo "$pid"
}

# Send SIGTERM to the PIDs, wait up to TIMEOUT_MS milliseconds, then SIGKILL the survivors.
hpcp_stop_pids() { # TIMEOUT_MS PID...
    local timeout_ms="$1" pid deadline left
    shift
    [[ "$#" -gt 0 ]] || return 0
    kill -TERM "$@" 2>/dev/null || true
    deadline=$(($(date +%s%N) + timeout_ms * 1000000))
    while :; do
        left=()
        for pid in "$@"; do
            if hpcp_alive "$pid"; then left+=("$pid"); fi
        done
        [[ "${#left[@]}" -gt 0 ]] || return 0
        [[ "$(date +%s%N)" -lt "$deadline" ]] || break
        sleep 0.05
    done
    kill -KILL "${left[@]}" 2>/dev/null || true
    local killed=("${left[@]}")
    for _ in $(seq 40); do
        left=()
        for pid in "${killed[@]}"; do
            if hpcp_alive "$pid"; then left+=("$pid"); fi
        done
        [[ "${#left[@]}" -gt 0 ]] || return 0
        sleep 0.05
    done
    hpcp_log "still alive after SIGKILL: ${left[*]}"
}

# PIDs of all (non-zombie) processes living in network namespace NSNAME (/run/netns/NSNAME).
hpcp_pids_in_netns() { # NSNAME
    local pid
    [[ -e "/run/netns/$1" ]] || return 0
    for pid in $(ip netns pids "$1" 2>/dev/null); do
        if hpcp_alive "$pid"; then echo "$pid"; fi
    done
}

# This machine's munged serves the controllers of every test cluster on it (and bookworm's nodes). One that
# up.sh started ($HPCP_MUNGE_STATE/started: its pid) is stopped by the down.sh of the last cluster using it:
# a cluster registers in $HPCP_MUNGE_STATE/users/<instance> while it is up. Both scripts change these under
# the machine's munge lock, held on fd 8 (a daemon started meanwhile must not inherit it: `8>&-`).
HPCP_MUNGE_STATE=/run/hpcplace-munge
hpcp_munge_lock() {
    mkdir -p "$HPCP_MUNGE_STATE/users"
    exec 8>"$HPCP_MUNGE_STATE/.lock"
    flock -w 60 8 || {
        echo "timed out waiting for $HPCP_MUNGE_STATE/.lock" >&2
        exit 1
    }
}
hpcp_munge_unlock() {
    exec 8>&-
}

# Every daemon up.sh starts inherits this variable; down.sh finds its own processes by it even
# when pid files are gone (and never touches a Slurm/MariaDB/munge it did not start).
HPCP_OWNER_MARK="HPCPLACE_SLURM_OWNER=$HPCP_DIR"

# PIDs of live processes named COMM (any of them) that carry HPCP_OWNER_MARK in their environment.
hpcp_owned_pids() { # COMM...
    local p pid comm want
    for p in /proc/[0-9]*; do
        pid="${p#/proc/}"
        comm=""
        read -r comm 2>/dev/null <"$p/comm" || continue
        for want in "$@"; do
            if [[ "$comm" == "$want" ]]; then
                if hpcp_alive "$pid" &&
                    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "$HPCP_OWNER_MARK"; then
                    echo "$pid"
                fi
                break
            fi
        done
    done
}

hpcp_require_root() { # [WHAT]
    if [[ "$(id -u)" -ne 0 ]]; then
        echo "needs root to ${1:-boot} the test cluster" >&2
        exit 77
    fi
}

hpcp_check_dir() {
    case "$HPCP_DIR" in
        /*) ;;
        *)
            echo "HPCPLACE_SLURM_DIR must be an absolute path: $HPCP_DIR" >&2
            exit 2
            ;;
    esac
    # slurm.conf / gres.conf have no quoting: keep the path plain.
    if [[ ! "$HPCP_DIR" =~ ^/[A-Za-z0-9._/-]+$ ]] || [[ "$HPCP_DIR" == "/" ]]; then
        echo "HPCPLACE_SLURM_DIR must be a plain path (letters, digits, . _ - /), not / : $HPCP_DIR" >&2
        exit 2
    fi
}

# Run the calling script under an exclusive lock on $HPCP_DIR/.lock (concurrent up/down calls
# queue instead of tearing each other's cluster apart). `flock -o` keeps the lock in the flock
# process only, so the daemons the script starts never inherit it. Re-entrant for up -> down.
hpcp_serialize() { # "$@" of the calling script
    if [[ "${HPCPLACE_SLURM_LOCK_HELD:-}" != "$HPCP_DIR" ]]; then
        mkdir -p "$HPCP_DIR"
        export HPCPLACE_SLURM_LOCK_HELD="$HPCP_DIR"
        exec flock -o -w 300 "$HPCP_DIR/.lock" "$0" "$@"
    fi
}
