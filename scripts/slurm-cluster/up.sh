#!/usr/bin/env bash
# Boot a fresh hpcplace Slurm test cluster on this machine.
#
#   scripts/slurm-cluster/up.sh [--slurm bookworm|trixie|sid] [--constrain-devices yes|no] [--fabric block|tree]
#
# --slurm (default $HPCPLACE_SLURM, else bookworm): which Debian release's Slurm (22.05 | 24.11 | 26.05
# are accepted as names too). bookworm's runs on this machine; trixie's and sid's run in the release's
# own root filesystem (install.sh builds it): every daemon and every job sees that release's OS, while
# the shared paths (the state dir, $HPCPLACE_SLURM_SHARED, /home, /root, /work, /srv, /var/tmp, the
# test images' cache) are bound in as a site shares its filesystems, and $DIR/bin holds the release's
# client tools for this machine (env.sh puts it first on PATH). A node enters the root filesystem with
# pivot_root (Apptainer refuses a chroot); trixie/sid also get oci.conf (srun --container, with runc).
# --fabric (default $HPCPLACE_SLURM_FABRIC, else block where Slurm has segments (24.05+), else tree): the
# cluster-wide topology (topology.conf) of a Slurm older than 25.05, which has one topology for every
# partition; 25.05+ gets both, one per partition (topology.yaml), and ignores it.
#
# Tears down a running cluster first, wipes Slurm state AND the accounting database, then starts
# MariaDB, slurmdbd, slurmctld and one slurmd per node, each node in its own network + UTS + mount
# namespace (own hostname and IP on the private bridge hpcpbr0; own tmpfs on /dev/shm and /tmp, so
# node-local means node-local as on a real cluster). Ends with a real `srun` per partition.
# Writes $HPCPLACE_SLURM_DIR/env.sh (exports SLURM_CONF), $HPCPLACE_SLURM_DIR/mode and
# $HPCPLACE_SLURM_DIR/shared (the paths every node sees as the host does, one a line).
# HPCPLACE_SLURM_SHARED=DIR[:DIR...]: more shared paths (a checkout and its venv under /tmp).
# Exit codes: 0 up, 77 not root (tests skip with that reason), 2 usage, other: boot failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

usage() {
    echo "usage: $0 [--slurm bookworm|trixie|sid] [--constrain-devices yes|no] [--fabric block|tree]" >&2
    exit 2
}

args=("$@")
constrain_devices=no
fabric="${HPCPLACE_SLURM_FABRIC:-}"
while [[ "$#" -gt 0 ]]; do
    case "$1" in
        --constrain-devices)
            [[ "$#" -ge 2 ]] || usage
            constrain_devices="$2"
            shift 2
            ;;
        --constrain-devices=*)
            constrain_devices="${1#*=}"
            shift
            ;;
        --fabric)
            [[ "$#" -ge 2 ]] || usage
            fabric="$2"
            shift 2
            ;;
        --fabric=*)
            fabric="${1#*=}"
            shift
            ;;
        --slurm)
            [[ "$#" -ge 2 ]] || usage
            hpcp_set_suite "$2"
            shift 2
            ;;
        --slurm=*)
            hpcp_set_suite "${1#*=}"
            shift
            ;;
        -h | --help) usage ;;
        *) usage ;;
    esac
done
case "$constrain_devices" in
    yes | no) ;;
    *) usage ;;
esac
case "$fabric" in
    "" | block | tree) ;;
    *) usage ;;
esac

hpcp_set_suite "$HPCP_SUITE"
hpcp_require_root "boot"
hpcp_check_dir
hpcp_serialize "${args[@]}"
root="$(hpcp_rootfs "$HPCP_SUITE")"
host_tools=(munged mariadbd mariadb-install-db ip nsenter unshare chroot)
if [[ -z "$root" ]]; then
    host_tools+=(slurmctld slurmd slurmdbd srun sbatch sacct)
else
    host_tools+=(pivot_root)
fi
if [[ -n "$root" && ! -r "$root/.hpcplace-root" ]]; then
    echo "no $HPCP_SUITE root filesystem at $root: run scripts/slurm-cluster/install.sh --slurm $HPCP_SUITE first" >&2
    exit 1
fi
for tool in "${host_tools[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "missing $tool: run scripts/slurm-cluster/install.sh --slurm $HPCP_SUITE first" >&2
        exit 1
    fi
done

# The shared paths (see node_boot below): the state dir and $HPCPLACE_SLURM_SHARED (colon-separated
# directories), resolved, sorted, without any that lies inside another (its parent's bind carries it).
# Checked before anything starts: a path the nodes could not see is an error now, not a job failing
# later with "execve(): No such file or directory".
shared_error() {
    echo "HPCPLACE_SLURM_SHARED: $*" >&2
    exit 2
}
shared_candidates=("$HPCP_DIR")
if [[ -n "$root" ]]; then
    # A node in another release's root filesystem sees none of this machine's files unless bound:
    # bind what a site shares (homes, work and scratch areas), so that both kinds of cluster show the
    # same files on every node (the OS itself, /tmp and /dev/shm excepted).
    for path in /home /root /work /srv /var/tmp; do
        if [[ -d "$path" ]]; then shared_candidates+=("$path"); fi
    done
    # and the test images (images.sh), as a site shares its container images: created now, so that
    # images built after the boot are seen too
    mkdir -p "$HPCP_ROOT_CACHE/images"
    shared_candidates+=("$(realpath -e "$HPCP_ROOT_CACHE/images")")
fi
IFS=: read -r -a shared_raw <<<"${HPCPLACE_SLURM_SHARED:-}"
for path in "${shared_raw[@]}"; do
    [[ -n "$path" ]] || continue
    [[ "$path" == /* ]] || shared_error "$path is not an absolute path"
    [[ -d "$path" ]] || shared_error "$path is not a directory"
    path="$(realpath -e "$path")"
    case "$path/" in
        /tmp/) shared_error "/tmp itself cannot be shared (each node's /tmp is its own)" ;;
        /dev/shm/*) shared_error "$path is under /dev/shm, which each node has its own of" ;;
    esac
    shared_candidates+=("$path")
done
shared=()
while IFS= read -r path; do
    for kept in "${shared[@]}"; do
        [[ "$path/" != "$kept/"* ]] || continue 2
    done
    shared+=("$path")
done < <(printf '%s\n' "${shared_candidates[@]}" | LC_ALL=C sort -u)

start="$(hpcp_now)"
DIR="$HPCP_DIR"
ctl_host="$(hostname -s)"
etc="$DIR/etc"
run="$DIR/run"
logs="$DIR/log"
export SLURM_CONF="$etc/slurm.conf"
# slurmdbd's MariaDB client library takes the socket path from here (slurmdbd.conf has no socket key).
export MYSQL_UNIX_PORT="$run/mysqld.sock"
# Owner mark inherited by every daemon started below: down.sh stops exactly these processes.
export HPCPLACE_SLURM_OWNER="$HPCP_DIR"

dump_logs() {
    local f
    for f in "$logs"/mariadb.err "$logs"/slurmdbd.log "$logs"/slurmctld.log "$logs"/slurmd-*.log "$logs"/slurm*.out "$logs"/health-*.out; do
        [[ -s "$f" ]] || continue
        echo "----- tail $f" >&2
        case "$f" in
            */slurmd-*) tail -n 8 "$f" >&2 ;;
            *) tail -n 25 "$f" >&2 ;;
        esac
    done
}

mariadb_job=""
fail() {
    trap - ERR
    hpcp_munge_unlock # down.sh takes it
    echo "slurm cluster boot FAILED: $*" >&2
    dump_logs
    # Leave nothing half-started behind (logs and config stay in the state dir).
    if [[ -n "$mariadb_job" ]]; then
        kill "$mariadb_job" 2>/dev/null || true
        wait "$mariadb_job" 2>/dev/null || true
    fi
    "$here/down.sh" >/dev/null 2>&1 || true
    echo "(cluster torn down; logs in $logs)" >&2
    exit 1
}

# Any unexpected failing command (set -e), in functions too (-E), ends in fail: log tails + teardown.
set -E
trap 'fail "unexpected error (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

wait_for() { # SECONDS DESCRIPTION COMMAND...
    local secs="$1" what="$2" deadline
    shift 2
    deadline=$(($(date +%s%N) + secs * 1000000000))
    until "$@" >/dev/null 2>&1; do
        if [[ "$(date +%s%N)" -ge "$deadline" ]]; then
            fail "timed out after ${secs}s waiting for $what"
        fi
        sleep 0.05
    done
}

# HPCPLACE_SLURM_TRACE=1: print the time of each boot phase to stderr.
phase() {
    if [[ "${HPCPLACE_SLURM_TRACE:-0}" == 1 ]]; then
        echo "[up.sh +$(hpcp_elapsed "$start")s] $*" >&2
    fi
}

tcp_open() { # HOST PORT
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# ---------------------------------------------------------------- teardown + fresh state
"$here/down.sh" --fast >/dev/null
phase "teardown done"
for sub in etc spool log run dev mysql mnt; do
    rm -rf "${DIR:?}/$sub"
done
rm -rf "$DIR/bin"
rm -f "$DIR/env.sh" "$DIR/mode" "$DIR/up" "$DIR/shared" "$DIR/slurm" "$DIR/version" "$DIR/networks" "$DIR/hosts"
mkdir -p "$etc" "$run" "$logs" "$DIR/spool/ctld" "$DIR/dev" "$DIR/mysql"
chmod 0755 "$DIR" "$DIR/spool"
for node in "${HPCP_NODES[@]}"; do
    mkdir -p "$DIR/spool/$node"
done

# ---------------------------------------------------------------- MariaDB (in the background)
# A throw-away test database: small redo log, no fsync; lock wait / buffer pool as slurmdbd recommends; its
# temporary tables in the state dir (another test cluster's MariaDB may be starting beside it).
mariadb_opts=(
    --innodb-log-file-size=64M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0
    --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900 --tmpdir="$run"
)
start_mariadb() {
    trap - ERR # runs in the background: report through the exit status only
    chown mysql:mysql "$DIR/mysql" "$run" "$logs"
    if ! runuser -u mysql -- test -w "$DIR/mysql"; then
        echo "user mysql cannot write $DIR/mysql (is a parent directory closed to others?)" >"$logs/mariadb.err"
        return 1
    fi
    mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/mysql" \
        --auth-root-authentication-method=socket --skip-test-db "${mariadb_opts[@]}" \
        </dev/null >"$logs/mariadb-install.out" 2>&1 || return 1
    setsid mariadbd --no-defaults --user=mysql --skip-networking \
        --datadir="$DIR/mysql" --socket="$run/mysqld.sock" --pid-file="$run/mariadb.pid" \
        --log-error="$logs/mariadb.err" \
        "${mariadb_opts[@]}" \
        </dev/null >/dev/null 2>&1 &
    local i
    for i in $(seq 300); do
        [[ -S "$run/mysqld.sock" ]] && return 0
        sleep 0.05
    done
    return 1
}
start_mariadb &
mariadb_job=$!
phase "mariadb started in background"

# ---------------------------------------------------------------- munge
if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge /etc/munge/munge.key
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
# This machine's munged (shared with any other test cluster running: see _common.sh): started when none
# answers, and this cluster registered as one of its users.
hpcp_munge_lock
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged --force </dev/null >"$logs/munged.out" 2>&1 8>&- ||
        fail "munged did not start"
    wait_for 5 "munged" sh -c 'munge -n </dev/null | unmunge'
    cp /run/munge/munged.pid "$HPCP_MUNGE_STATE/started" 2>/dev/null || true
fi
echo "$HPCP_DIR" >"$HPCP_MUNGE_STATE/users/$HPCP_INSTANCE"
hpcp_munge_unlock

if [[ -n "$root" ]]; then
    # Every node of a newer release runs its own munged (from 24.11 on, one munged shared by every node
    # makes each multi-node launch fail: the second node's decode of a job credential is refused as a
    # replay); they all use this machine's key, owned by the root filesystem's own munge user.
    install -m 0400 /etc/munge/munge.key "$root/etc/munge/munge.key"
    chroot "$root" chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 "$root/etc/munge"
fi

phase "munge ok"

# ---------------------------------------------------------------- the release's Slurm, for this machine
# A newer release's client tools run here through its own loader and libraries (no chroot: they see
# this machine's files, as a login node does); the root filesystem's path resolves inside it too
# (install.sh), so slurm.conf's PluginDir is right on both sides.
if [[ -n "$root" ]]; then
    mkdir -p "$DIR/bin"
    libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/slurm-wlm"
    for tool in sbatch srun salloc squeue scontrol sacct sacctmgr scancel sinfo sattach sstat sprio sshare sreport; do
        [[ -x "$root/usr/bin/$tool" ]] || continue
        printf '#!/bin/sh\n# %s of Slurm from %s (scripts/slurm-cluster/up.sh)\nexec %q --library-path %q --argv0 %q %q "$@"\n' \
            "$tool" "$root" "$root/lib64/ld-linux-x86-64.so.2" "$libs" "$tool" "$root/usr/bin/$tool" >"$DIR/bin/$tool"
        chmod 0755 "$DIR/bin/$tool"
    done
    # from here on (scontrol ping, sinfo, sacctmgr, the health sruns) the release's own tools: a
    # 22.05 scontrol never gets an answer from a 26.05 slurmctld
    PATH="$DIR/bin:$PATH"
    slurm_version="$(hpcp_root_slurm_version "$root")"
else
    slurm_version="$(slurmd -V | awk '{print $2}')"
fi
echo "$HPCP_SUITE" >"$DIR/slurm"
echo "$slurm_version" >"$DIR/version"
phase "slurm $slurm_version ($HPCP_SUITE)"

# ---------------------------------------------------------------- network: bridge + one netns per node
ip link add "$HPCP_BRIDGE" type bridge
ip addr add "$HPCP_HOST_IP/24" dev "$HPCP_BRIDGE"
ip link set "$HPCP_BRIDGE" up
# If the bridge disappears, packets for the subnet must not leave through the default route.
ip route add unreachable "$HPCP_SUBNET" metric 4000
for i in "${!HPCP_NODES[@]}"; do
    node="${HPCP_NODES[$i]}"
    ns="$(hpcp_netns "$node")"
    veth="$(hpcp_veth "$i")"
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$HPCP_BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(hpcp_node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
done
# The second network (the "fabric"): its own bridge and subnet, `fab0` in every node.
ip link add "$HPCP_FAB_BRIDGE" type bridge
ip link set "$HPCP_FAB_BRIDGE" up
for i in "${!HPCP_NODES[@]}"; do
    ns="$(hpcp_netns "${HPCP_NODES[$i]}")"
    veth="$(hpcp_fab_veth "$i")"
    ip link add "$veth" type veth peer name "$HPCP_FAB_IF" netns "$ns"
    ip link set "$veth" master "$HPCP_FAB_BRIDGE" up
    ip -n "$ns" addr add "$(hpcp_fab_ip "$i")/24" dev "$HPCP_FAB_IF"
    ip -n "$ns" link set "$HPCP_FAB_IF" up
done
# What tests read: each node network's interface and subnet, the one node names resolve to first.
printf 'eth0 %s\n%s %s\n' "$HPCP_SUBNET" "$HPCP_FAB_IF" "$HPCP_FAB_SUBNET" >"$DIR/networks"

# Node names (and nothing else) -> bridge addresses, marked for down.sh: in /etc/hosts (instance 0) or in
# this instance's own hosts file (a copy of this machine's without instance 0's lines), see _common.sh.
if [[ "$HPCP_HOSTS_FILE" != /etc/hosts ]]; then
    grep -vF "$HPCP_HOSTS_MARK" /etc/hosts >"$HPCP_HOSTS_FILE" || true
fi
{
    for i in "${!HPCP_NODES[@]}"; do
        printf '%s\t%s\t%s\n' "$(hpcp_node_ip "$i")" "${HPCP_NODES[$i]}" "$HPCP_HOSTS_MARK"
    done
} >>"$HPCP_HOSTS_FILE"
# the nodes' and daemons' mount namespaces bind it (node_boot, root_boot)
export HPCP_HOSTS_FILE

phase "network ok"

# ---------------------------------------------------------------- fake GPUs (character devices, major 195)
make_gpus() { # NODE COUNT
    local d="$DIR/dev/$1" k
    mkdir -p "$d"
    for ((k = 0; k < $2; k++)); do
        mknod "$d/nvidia$k" c 195 "$k"
        chmod 0666 "$d/nvidia$k"
    done
}
make_gpus a800-1 8
make_gpus a800-2 8
make_gpus rtx4090-1 4
for node in nvl-1 nvl-2 nvl-3 nvl-4; do make_gpus "$node" 4; done

# ---------------------------------------------------------------- configuration
# What differs between the releases' slurm.conf: 23.11 renamed CryptoType to CredType (crypto/munge ->
# cred/munge) and dropped switch/none; a newer release's plugins live in its root filesystem.
version_settings() {
    if [[ -z "$root" ]]; then
        printf '%s\n' "CryptoType=crypto/munge" "SwitchType=switch/none"
    else
        printf '%s\n' "CredType=cred/munge" "PluginDir=$root/usr/lib/x86_64-linux-gnu/slurm-wlm"
    fi
}
slurm_at_least() { # MAJOR MINOR
    local major=${slurm_version%%.*} minor=${slurm_version#*.}
    minor=${minor%%.*}
    ((10#$major > $1 || (10#$major == $1 && 10#$minor >= $2)))
}
topologies() { # Slurm 25.05 or newer: one topology per partition (topology.yaml)
    slurm_at_least 25 5
}
# Before 25.05 one topology serves every partition (topology.conf, TopologyPlugin): blocks where Slurm can
# ask for segments of them (24.05+), else a tree; --fabric picks (blocks need 23.11+).
if topologies; then
    fabric=""
elif [[ -z "$fabric" ]]; then
    if slurm_at_least 24 5; then fabric=block; else fabric=tree; fi
elif [[ "$fabric" == block ]] && ! slurm_at_least 23 11; then
    fail "--fabric block: Slurm $slurm_version has no topology/block (23.11+)"
fi
cgroup_settings() {
    # The test machine mounts cgroup v1 (and an empty unified hierarchy): say which, never autodetect.
    if [[ -n "$root" ]]; then echo "CgroupPlugin=cgroup/v1"; fi
}
cat >"$etc/slurm.conf" <<EOF
# Generated by scripts/slurm-cluster/up.sh -- hpcplace test cluster (constrain_devices=$constrain_devices)
ClusterName=$HPCP_CLUSTER
SlurmctldHost=$ctl_host($HPCP_HOST_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
$(version_settings)
SlurmctldPort=$HPCP_CTLD_PORT
SlurmdPort=$HPCP_SLURMD_PORT
FirstJobId=$HPCP_FIRST_JOB_ID
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd-%n.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,bf_hetjob_immediate
ReturnToService=2
KillWait=2
MessageTimeout=10
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
MinJobAge=300
Waittime=0
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$HPCP_DBD_PORT
AccountingStorageTRES=gres/gpu,gres/robot
JobCompType=jobcomp/none
GresTypes=gpu,robot
${fabric:+TopologyPlugin=topology/$fabric}

NodeName=a800-1 NodeAddr=$(hpcp_node_ip 0) NodeHostname=a800-1 CPUs=16 RealMemory=64000 Gres=gpu:a800:8 State=UNKNOWN
NodeName=a800-2 NodeAddr=$(hpcp_node_ip 1) NodeHostname=a800-2 CPUs=16 RealMemory=64000 Gres=gpu:a800:8 State=UNKNOWN
NodeName=rtx4090-1 NodeAddr=$(hpcp_node_ip 2) NodeHostname=rtx4090-1 CPUs=8 RealMemory=32000 Gres=gpu:rtx4090:4 State=UNKNOWN
NodeName=cpu-1 NodeAddr=$(hpcp_node_ip 3) NodeHostname=cpu-1 CPUs=8 RealMemory=32000 State=UNKNOWN
NodeName=robot-1 NodeAddr=$(hpcp_node_ip 4) NodeHostname=robot-1 CPUs=8 RealMemory=32000 Gres=robot:4 State=UNKNOWN
$(for k in 1 2 3 4; do echo "NodeName=nvl-$k NodeAddr=$(hpcp_node_ip $((4 + k))) NodeHostname=nvl-$k CPUs=4 RealMemory=8000 Gres=gpu:gb200:4 State=UNKNOWN"; done)

PartitionName=a800 Nodes=a800-[1-2] MaxTime=INFINITE State=UP
PartitionName=rtx4090 Nodes=rtx4090-1 MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=cpu-1 Default=YES MaxTime=INFINITE State=UP
PartitionName=robot Nodes=robot-1 MaxTime=INFINITE State=UP
PartitionName=nvl Nodes=nvl-[1-4] MaxTime=INFINITE State=UP$(topologies && echo " Topology=nvblock")
PartitionName=nvtree Nodes=nvl-[1-4] MaxTime=INFINITE State=UP$(topologies && echo " Topology=nvtree")
EOF

# The fabric of nvl-1..4 (Slurm 25.05+: one topology per partition, topology.yaml): partition nvl sees two
# NVLink blocks of two nodes that interleave with the names (rack1 = nvl-1,3; rack2 = nvl-2,4), so Slurm's
# node order is not the blocks' (the job must order them itself); partition nvtree two leaf switches under a
# spine (leaf1 = nvl-1,4; leaf2 = nvl-2,3). Every other partition is flat.
# Before 25.05 (topology.conf) the one topology of every partition is the same blocks (or switches) over
# nvl-1..4; every other node must be in one too (Slurm allocates no node outside them): the a800 nodes
# form a block (switch) of their own, the three single nodes another.
rm -f "$etc/topology.yaml" "$etc/topology.conf"
case "$fabric" in
    block)
        cat >"$etc/topology.conf" <<EOF
BlockName=rack1 Nodes=nvl-[1,3]
BlockName=rack2 Nodes=nvl-[2,4]
BlockName=a800 Nodes=a800-[1-2]
BlockName=single Nodes=rtx4090-1,cpu-1,robot-1
BlockSizes=2,4
EOF
        ;;
    tree)
        cat >"$etc/topology.conf" <<EOF
SwitchName=leaf1 Nodes=nvl-[1,4]
SwitchName=leaf2 Nodes=nvl-[2-3]
SwitchName=leaf0 Nodes=a800-[1-2],rtx4090-1,cpu-1,robot-1
SwitchName=spine Switches=leaf[0-2]
EOF
        ;;
esac
if topologies; then
    cat >"$etc/topology.yaml" <<EOF
- topology: flat
  cluster_default: true
  flat: true
- topology: nvblock
  block:
    block_sizes: [2]
    blocks:
      - block: rack1
        nodes: nvl-[1,3]
      - block: rack2
        nodes: nvl-[2,4]
- topology: nvtree
  tree:
    switches:
      - switch: leaf1
        nodes: nvl-[1,4]
      - switch: leaf2
        nodes: nvl-[2-3]
      - switch: spine
        children: leaf[1-2]
EOF
fi

cat >"$etc/gres.conf" <<EOF
AutoDetect=off
NodeName=a800-1 Name=gpu Type=a800 File=$DIR/dev/a800-1/nvidia[0-7]
NodeName=a800-2 Name=gpu Type=a800 File=$DIR/dev/a800-2/nvidia[0-7]
NodeName=rtx4090-1 Name=gpu Type=rtx4090 File=$DIR/dev/rtx4090-1/nvidia[0-3]
NodeName=robot-1 Name=robot Count=4
$(for k in 1 2 3 4; do echo "NodeName=nvl-$k Name=gpu Type=gb200 File=$DIR/dev/nvl-$k/nvidia[0-3]"; done)
EOF

cat >"$etc/cgroup.conf" <<EOF
$(cgroup_settings)
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=$constrain_devices
EOF

# Slurm's own OCI containers (`srun --container=BUNDLE`) on the newer releases: each task runs in the
# bundle through `runc run` (Debian's crun refuses these machines: "cgroups in hybrid mode not
# supported"); runc's state lives in the state dir (every node sees it; the ids carry the node name).
# Query, kill and delete go through a small script, for two reasons:
# - runc moves a task into cgroups of its own, where Slurm's proctrack no longer signals it; when a
#   step is cancelled its runc is killed but the container's processes live on. slurmstepd's cleanup
#   then queries/kills/deletes the container with the task id -1 (%t is -1 there): the script takes
#   "NODE.USER.JOB.STEP.-1" for every task container of that step on the node, and kills them.
# - `runc run` deletes its container when the task ends; a plain `runc state` then fails, which
#   slurmstepd logs as an error into the job's output ("RunTimeQuery failed ... container does not
#   exist"): the script answers "stopped" instead.
if [[ -n "$root" ]]; then
    mkdir -p "$run/runc"
    cat >"$etc/runc-oci" <<'EOF'
#!/bin/sh
# oci.conf's RunTimeQuery/Kill/Delete (written by scripts/slurm-cluster/up.sh):
#   runc-oci RUNC_ROOT query|kill|delete CONTAINER_ID      (an id ending in .-1: all the step's tasks here)
root=$1 op=$2 id=$3
ids=$id
case "$id" in
    *.-1)
        ids=""
        for c in $(runc --root="$root" list -q 2>/dev/null); do
            case "$c" in "${id%-1}"*) ids="$ids $c" ;; esac
        done
        ;;
esac
status=stopped
for c in $ids; do
    case "$op" in
        query)
            if runc --root="$root" state "$c" 2>/dev/null | grep -q '"status": *"running"'; then status=running; fi
            ;;
        kill) runc --root="$root" kill "$c" KILL 2>/dev/null || true ;;
        delete) runc --root="$root" delete --force "$c" 2>/dev/null || true ;;
    esac
done
if [ "$op" = query ]; then
    printf '{"ociVersion":"1.0.2","id":"%s","status":"%s"}\n' "$id" "$status"
fi
exit 0
EOF
    chmod 0755 "$etc/runc-oci"
    cat >"$etc/oci.conf" <<EOF
# Generated by scripts/slurm-cluster/up.sh: srun/sbatch --container=BUNDLE runs each task in BUNDLE with runc
RunTimeRun="runc --root=$run/runc run %n.%u.%j.%s.%t -b %b"
RunTimeQuery="$etc/runc-oci $run/runc query %n.%u.%j.%s.%t"
RunTimeKill="$etc/runc-oci $run/runc kill %n.%u.%j.%s.%t"
RunTimeDelete="$etc/runc-oci $run/runc delete %n.%u.%j.%s.%t"
EOF
fi

(
    umask 077
    cat >"$etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$ctl_host
DbdPort=$HPCP_DBD_PORT
SlurmUser=root
PidFile=$run/slurmdbd.pid
LogFile=$logs/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
)
chmod 0600 "$etc/slurmdbd.conf"

phase "config written"

# ---------------------------------------------------------------- daemons
# slurmd's need neither the database nor slurmctld to start: they register once slurmctld pings them.
# Each node also gets its own mount namespace with a private tmpfs on /dev/shm and on /tmp, as on
# a real cluster where both are node-local (slurmstepd and every task inherit slurmd's namespace).
# The shared paths (the state dir and $HPCPLACE_SLURM_SHARED: a checkout and its venv, as a real site
# shares /home) stay visible on every node: each one under /tmp is bound into the node's new /tmp
# (a tmpfs staged at $DIR/mnt/<node>, filled, then moved onto /tmp).
# A newer release's node: its root filesystem becomes the node's / (kernel interfaces bound in, the shared
# paths bound at their own paths, its own munged on a private /run/munge), then slurmd starts in it.
# Each node's slurmd runs in the foreground under slurmd-keeper, which starts a crashed one again as a site's
# systemd unit does (seen once: Debian's 22.05.8 died of a heap corruption inside Slurm while four jobs
# launched steps on one node; the node went DOWN and every later job needing it waited forever). A copy in
# $run: the nodes of a release's root filesystem see the state dir, not necessarily this checkout. setsid --fork:
# like a daemon, it leaves up.sh's session (a signal to the caller's process group never reaches the nodes), and
# it starts as a foreground command, not with `&` (which would start it with SIGINT and SIGQUIT ignored).
install -m 0755 "$here/slurmd-keeper" "$run/slurmd-keeper"
# The kernel's interfaces and the node names, bound into a release's root filesystem ($root) before a
# chroot into it: by node_boot (each node) and root_boot (slurmctld, slurmdbd).
# shellcheck disable=SC2016  # expanded by the inner bash
root_binds='
mount --rbind /proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind "$HPCP_HOSTS_FILE" "$root/etc/hosts"
'
# shellcheck disable=SC2016  # $1, $2... are expanded by the inner bash
node_boot='
set -e
node=$1 stage=$2/mnt/$1 shm_size=$3 tmp_size=$4 root=$5 keeper=$2/run/slurmd-keeper crashes=$2/log/slurmd-crashes.log
shift 5
hostname "$node"
if [ -n "$root" ]; then
    # pivot_root (below) needs the new root to be a mount point: bind it onto itself, first
    mount --bind "$root" "$root"
'"$root_binds"'
    mkdir -p "$root/run/munge"
    mount -t tmpfs -o size=16m,mode=0755 "hpcp-munge-$node" "$root/run/munge"
elif [ "$HPCP_HOSTS_FILE" != /etc/hosts ]; then
    mount --bind "$HPCP_HOSTS_FILE" /etc/hosts
fi
mount -t tmpfs -o "size=$shm_size,mode=1777,nosuid,nodev" "hpcp-shm-$node" "$root/dev/shm"
mount -t tmpfs -o "size=$tmp_size,mode=1777,nosuid,nodev" "hpcp-tmp-$node" "$stage"
for path in "$@"; do
    case "$path/" in
        /tmp/*)
            mkdir -p "$stage${path#/tmp}"
            mount --bind "$path" "$stage${path#/tmp}"
            ;;
        *)
            if [ -n "$root" ]; then
                mkdir -p "$root$path"
                mount --bind "$path" "$root$path"
            fi
            ;;
    esac
done
mount --move "$stage" "$root/tmp"
if [ -z "$root" ]; then
    exec setsid --fork "$keeper" "$(command -v slurmd)" "$node" "$crashes"
fi
# The root filesystem becomes the / of the node by pivot_root, not chroot: Apptainer refuses to start
# in a chroot ("weak chrooted environment"); the old root is detached, the node sees only its binds.
'"$HPCP_PIVOT_ROOT"'
chown munge:munge /run/munge
runuser -u munge -- /usr/sbin/munged --socket=/run/munge/munge.socket.2 --pid-file=/run/munge/munged.pid \
    --log-file=/run/munge/munged.log --seed-file=/run/munge/munged.seed
exec setsid --fork "$keeper" /usr/sbin/slurmd "$node" "$crashes"
'
printf '%s\n' "${shared[@]}" >"$DIR/shared"
for node in "${HPCP_NODES[@]}"; do
    ns="$(hpcp_netns "$node")"
    mkdir -p "$DIR/mnt/$node"
    # NOT `ip netns exec`: it remounts /sys and hides the cgroup hierarchy from slurmd.
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
        bash -c "$node_boot" bash "$node" "$DIR" "$HPCP_NODE_SHM_SIZE" "$HPCP_NODE_TMP_SIZE" "$root" "${shared[@]}" \
        </dev/null >"$logs/slurmd-$node.out" 2>&1 ||
        fail "slurmd $node did not start"
done

phase "slurmds started"

# slurmdbd and slurmctld of a newer release run inside its root filesystem too (own mount namespace,
# this machine's network and munged).
# shellcheck disable=SC2016  # expanded by the inner bash
root_boot='
set -e
root=$1 dir=$2
shift 2
'"$root_binds"'
mkdir -p "$root/run/munge" "$root$dir"
mount --bind /run/munge "$root/run/munge"
mount --bind "$dir" "$root$dir"
exec chroot "$root" "$@"
'
in_root() { # DAEMON...
    if [[ -z "$root" ]]; then
        "$@"
    else
        unshare --mount --propagation private bash -c "$root_boot" bash "$root" "$DIR" "$@"
    fi
}

wait "$mariadb_job" || fail "MariaDB did not start (see also $logs/mariadb-install.out)"
phase "mariadb up"

in_root slurmdbd </dev/null >"$logs/slurmdbd.out" 2>&1 || fail "slurmdbd did not start"
wait_for 20 "slurmdbd on port $HPCP_DBD_PORT" tcp_open 127.0.0.1 "$HPCP_DBD_PORT"
phase "slurmdbd up"

in_root slurmctld </dev/null >"$logs/slurmctld.out" 2>&1 || fail "slurmctld did not start"
wait_for 20 "slurmctld to answer" scontrol ping
phase "slurmctld up"

# ---------------------------------------------------------------- health check
nodes_ready() {
    local states
    states="$(sinfo -h -N -o '%N %t' 2>/dev/null)" || return 1
    [[ -n "$states" ]] || return 1
    # every node idle (no unknown/down/not responding/draining flags)
    ! grep -qv -E ' idle$' <<<"$states"
}
wait_for 20 "all nodes to register idle" nodes_ready
phase "nodes idle"

# The cluster row in the accounting DB (slurmctld registers it itself on first contact).
if ! sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx "$HPCP_CLUSTER"; then
    sacctmgr -i add cluster "$HPCP_CLUSTER" >"$logs/sacctmgr.out" 2>&1 ||
        fail "cluster $HPCP_CLUSTER not in the accounting database and sacctmgr could not add it"
fi

# A real job step per partition (sinfo alone can show saved states), retried for up to 20 s.
health_one() { # PARTITION
    trap - ERR # runs in the background: report through the exit status only
    local deadline=$(($(date +%s%N) + 20 * 1000000000))
    while :; do
        if timeout 20 srun -p "$1" -N1 -t 1 -J "health-$1" true </dev/null >"$logs/health-$1.out" 2>&1; then
            return 0
        fi
        [[ "$(date +%s%N)" -lt "$deadline" ]] || return 1
        sleep 0.5
    done
}
partitions=(a800 rtx4090 cpu robot nvl)
check_pids=()
for p in "${partitions[@]}"; do
    health_one "$p" &
    check_pids+=("$!")
done
bad=()
for i in "${!partitions[@]}"; do
    if ! wait "${check_pids[$i]}"; then
        bad+=("${partitions[$i]}")
    fi
done
if [[ "${#bad[@]}" -gt 0 ]]; then
    fail "srun health check failed on partition(s): ${bad[*]}"
fi

phase "health check ok"

# ---------------------------------------------------------------- handles for the tests
cat >"$DIR/env.sh" <<EOF
# source me: the hpcplace Slurm test cluster (scripts/slurm-cluster/up.sh)
export HPCPLACE_SLURM_DIR=$DIR
export HPCPLACE_SLURM_INSTANCE=$HPCP_INSTANCE
export SLURM_CONF=$SLURM_CONF
$(if [[ -n "$root" ]]; then printf 'export PATH=%q:"$PATH"\n' "$DIR/bin"; fi)
# the nodes' GPU device files (fake, per node) for the job's start-up check: no /dev/nvidia* here
export HPCPLACE_GPU_DEVICE_DIR='$DIR/dev/{node}'
EOF
echo "constrain_devices=$constrain_devices" >"$DIR/mode"
echo "${fabric:-per-partition}" >"$DIR/fabric"
touch "$DIR/up"

echo "slurm cluster up (slurm $slurm_version $HPCP_SUITE, constrain_devices=$constrain_devices) in $(hpcp_elapsed "$start")s"
