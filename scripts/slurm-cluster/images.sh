#!/usr/bin/env bash
# Build (once) the container images the tests run on the sid test cluster, from Debian's packages only:
#
#   scripts/slurm-cluster/images.sh        ->  stdout, one line per image:  NAME=ABSOLUTE_PATH
#
#   apptainer_sid=DIR       Apptainer sandbox directory: Debian sid (minbase) + python3
#   apptainer_bookworm=DIR  the same from Debian 12 bookworm (python3 3.11): another OS and Python, so a
#                           test can tell which image a task ran in (/etc/os-release, sys.version)
#   oci_sid=DIR             OCI bundle (config.json + rootfs/, the sid image hardlinked) for Slurm's
#                           `srun --container=DIR` (oci.conf, written by up.sh for trixie and sid)
#   sif_sid=FILE            the sid image as a SIF (`apptainer build`, run in the sid root filesystem)
#
# Cached in $HPCPLACE_SLURM_ROOT_CACHE/images (default /var/cache/hpcplace/images); each image has a
# stamp and is rebuilt only when missing or when its recipe changes, so a second run takes well under
# a second. Needs root and debootstrap (install.sh --slurm sid installs it); the SIF also needs the sid
# root filesystem (install.sh --slurm sid), which holds Apptainer. debootstrap fetches and unpacks the
# packages itself (from the mirror this machine's apt uses): no apt configuration of this machine is
# read or changed. Progress goes to stderr. Exit codes: 0 built, 77 not root, 1 a build failed.
#
# config.json binds, from the node the container starts on: /dev/shm, /tmp (the node's own: the state
# dir and the shared paths under /tmp come along), /var/tmp, /work, /root, /home, /srv, the state dir
# when it is not under /tmp ($HPCPLACE_SLURM_DIR, as when images.sh runs), every other path the running
# cluster shares (its $HPCPLACE_SLURM_DIR/shared), and /etc/hosts (node names);
# host network, PIDs and hostname (only a mount namespace of its own, as Apptainer does).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

if [[ "$#" -gt 0 ]]; then
    echo "usage: $0   (no options; prints NAME=PATH per image)" >&2
    exit 2
fi
if [[ "$(id -u)" -ne 0 ]]; then
    echo "images.sh: needs root to build the test images (debootstrap)" >&2
    exit 77
fi
hpcp_check_dir

cache="$HPCP_ROOT_CACHE/images"
sid_root="$(hpcp_rootfs sid)"
mkdir -p "$cache"
# One build at a time (tests running in parallel wait for the first one's images).
exec 9>"$cache/.lock"
flock -w 900 9 || {
    echo "images.sh: timed out waiting for $cache/.lock" >&2
    exit 1
}

# What each image is made of; a change here rebuilds that image (its stamp differs).
debootstrap_recipe() { # SUITE
    echo "debootstrap --variant=minbase --include=python3 $1; rev=1"
}
# The bundle's binds: the node's own /dev/shm and /tmp, the paths a site shares, and the state dir.
oci_binds=(/dev/shm /tmp /var/tmp /work /root /home /srv)
case "$HPCP_DIR/" in
    /tmp/*) ;;
    *) oci_binds+=("$HPCP_DIR") ;;
esac
bind_unless_held() { # PATH: add it to bundle_binds unless a bind there already holds it
    local held
    for held in "${bundle_binds[@]}"; do
        case "$1/" in "${held%/}/"*) return 0 ;; esac
    done
    bundle_binds+=("$1")
}
bundle_binds=("${oci_binds[@]}")
# and, in the OCI bundle only, every other path the running cluster shares with its nodes (up.sh's
# $HPCP_DIR/shared: a checkout and its venv elsewhere, as CI's under /check): a task in the bundle sees
# what its node sees. Their mount points are made in the bundle's own rootfs (its directories are its own).
if [[ -r "$HPCP_DIR/shared" ]]; then
    while IFS= read -r path; do
        if [[ -n "$path" && -d "$path" ]]; then bind_unless_held "$path"; fi
    done <"$HPCP_DIR/shared"
fi

built_any=no
note() {
    echo "images.sh: $*" >&2
}
stamp_ok() { # PATH RECIPE
    [[ -e "$1" && -r "$1.stamp" && "$(cat "$1.stamp")" == "$2" ]]
}

# ---------------------------------------------------------------- Apptainer sandboxes (debootstrap)
mirror="$(hpcp_debian_mirror)"
build_python_image() { # SUITE DIR -- runs in the background: reports through its exit status
    local suite="$1" dir="$2" tmp="$2.build.$$" log="$2.log"
    rm -rf "$tmp"
    # No apt run here: debootstrap resolves --include's dependencies and verifies the Release file's
    # signature itself (sid's Valid-Until, which apt would refuse once past, is not checked).
    if ! debootstrap --variant=minbase --include=python3 "$suite" "$tmp" "$mirror" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        echo "images.sh: debootstrap $suite failed (log: $log)" >&2
        rm -rf "$tmp"
        return 1
    fi
    # Smaller and quieter: no package cache or lists, no machine-id; the mount points the binds need
    # (Apptainer and runc would otherwise have to create them at each start, in a read-only image).
    rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"*
    : >"$tmp/etc/machine-id"
    local path
    for path in "${oci_binds[@]}" /.singularity.d; do
        mkdir -p "$tmp$path"
    done
    rm -rf "$dir"
    mv "$tmp" "$dir"
    rm -f "$log"
}

started="$(hpcp_now)"
want_sid="$(debootstrap_recipe sid)"
want_bookworm="$(debootstrap_recipe bookworm)"
sid_dir="$cache/sid-python"
bookworm_dir="$cache/bookworm-python"
builds=() names=()
if ! stamp_ok "$sid_dir" "$want_sid"; then
    command -v debootstrap >/dev/null || {
        echo "images.sh: debootstrap is missing: run scripts/slurm-cluster/install.sh --slurm sid first" >&2
        exit 1
    }
    note "building $sid_dir (debootstrap sid + python3, $mirror)"
    rm -f "$sid_dir.stamp"
    build_python_image sid "$sid_dir" &
    builds+=("$!") names+=(sid)
fi
if ! stamp_ok "$bookworm_dir" "$want_bookworm"; then
    command -v debootstrap >/dev/null || {
        echo "images.sh: debootstrap is missing: run scripts/slurm-cluster/install.sh --slurm sid first" >&2
        exit 1
    }
    note "building $bookworm_dir (debootstrap bookworm + python3, $mirror)"
    rm -f "$bookworm_dir.stamp"
    build_python_image bookworm "$bookworm_dir" &
    builds+=("$!") names+=(bookworm)
fi
failed=no
for i in "${!builds[@]}"; do
    if wait "${builds[$i]}"; then
        case "${names[$i]}" in
            sid) echo "$want_sid" >"$sid_dir.stamp" ;;
            bookworm) echo "$want_bookworm" >"$bookworm_dir.stamp" ;;
        esac
        built_any=yes
    else
        failed=yes
    fi
done
[[ "$failed" == no ]] || exit 1

# ---------------------------------------------------------------- OCI bundle for srun --container
oci_dir="$cache/oci-sid"
oci_config() { # the bundle's config.json (Slurm's runtime plugin sets process.args/env/terminal and root.path)
    local path sep=""
    cat <<'EOF'
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": { "uid": 0, "gid": 0 },
    "args": [ "/bin/sh" ],
    "env": [ "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" ],
    "cwd": "/",
    "capabilities": {
      "bounding": [ "CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE" ],
      "effective": [ "CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE" ],
      "permitted": [ "CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE" ]
    },
    "noNewPrivileges": true
  },
  "root": { "path": "rootfs", "readonly": true },
  "mounts": [
    { "destination": "/proc", "type": "proc", "source": "proc" },
    { "destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": [ "nosuid", "strictatime", "mode=755", "size=65536k" ] },
    { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
      "options": [ "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620" ] },
    { "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": [ "nosuid", "noexec", "nodev" ] },
    { "destination": "/sys", "type": "sysfs", "source": "sysfs", "options": [ "nosuid", "noexec", "nodev", "ro" ] },
    { "destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": [ "nosuid", "noexec", "nodev", "relatime", "ro" ] },
    { "destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": [ "bind", "ro" ] },
EOF
    for path in "${bundle_binds[@]}"; do
        printf '%s    { "destination": "%s", "type": "bind", "source": "%s", "options": [ "rbind" ] }' "$sep" "$path" "$path"
        sep=$',\n'
    done
    cat <<'EOF'

  ],
  "linux": {
    "resources": { "devices": [ { "allow": true, "access": "rwm" } ] },
    "namespaces": [ { "type": "mount" } ],
    "maskedPaths": [ "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                     "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware" ],
    "readonlyPaths": [ "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger" ]
  }
}
EOF
}
want_oci="rootfs=hardlinks of sid-python ($want_sid); rev=1"
if ! stamp_ok "$oci_dir" "$want_oci" || [[ "$(cat "$oci_dir/config.json" 2>/dev/null)" != "$(oci_config)" ]]; then
    note "building $oci_dir (OCI bundle: config.json + rootfs/ hardlinked from $sid_dir)"
    rm -f "$oci_dir.stamp"
    tmp="$oci_dir.build.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    cp -al "$sid_dir" "$tmp/rootfs"
    for path in "${bundle_binds[@]}"; do
        mkdir -p "$tmp/rootfs$path"
    done
    oci_config >"$tmp/config.json"
    rm -rf "$oci_dir"
    mv "$tmp" "$oci_dir"
    echo "$want_oci" >"$oci_dir.stamp"
    built_any=yes
fi

# ---------------------------------------------------------------- SIF (Apptainer in the sid root)
sif="$cache/sid-python.sif"
want_sif="apptainer build from sid-python ($want_sid); rev=1"
if ! stamp_ok "$sif" "$want_sif"; then
    if [[ ! -x "$sid_root/usr/bin/apptainer" ]]; then
        note "no Apptainer in $sid_root (run scripts/slurm-cluster/install.sh --slurm sid): no SIF built"
        sif=""
    else
        note "building $sif (apptainer build, in $sid_root)"
        rm -f "$sif.stamp" "$sif.build.$$"
        # Apptainer runs only in a pivot_root'ed root filesystem (a chroot is "weak"): the same entry
        # up.sh's nodes use, with the image cache bound in at its own path.
        if ! hpcp_in_root "$sid_root" "$cache" -- apptainer --quiet build --force "$sif.build.$$" "$sid_dir" \
            >"$sif.log" 2>&1; then
            tail -n 20 "$sif.log" >&2
            echo "images.sh: apptainer build failed (log: $sif.log)" >&2
            rm -f "$sif.build.$$"
            exit 1
        fi
        mv "$sif.build.$$" "$sif"
        rm -f "$sif.log"
        echo "$want_sif" >"$sif.stamp"
        built_any=yes
    fi
fi

if [[ "$built_any" == yes ]]; then
    note "images ready in $(hpcp_elapsed "$started")s"
fi
echo "apptainer_sid=$sid_dir"
echo "apptainer_bookworm=$bookworm_dir"
echo "oci_sid=$oci_dir"
if [[ -n "$sif" ]]; then echo "sif_sid=$sif"; fi
