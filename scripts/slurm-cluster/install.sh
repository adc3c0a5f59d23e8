#!/usr/bin/env bash
# Install what the hpcplace test cluster needs for one Slurm release of Debian's:
#
#   scripts/slurm-cluster/install.sh [--slurm bookworm|trixie|sid]     (or 22.05 | 24.11 | 26.05)
#
# bookworm (Slurm 22.05, the default): Debian 12's packages on this machine itself.
# trixie (24.11) and sid (26.05): their binaries need glibc >= 2.38, so they live in a root filesystem
# of their own release (debootstrap, cached in $HPCPLACE_SLURM_ROOT_CACHE, default /var/cache/hpcplace,
# built only when missing); the nodes and daemons run in it (up.sh). This machine's apt sources are
# never touched: trixie/sid packages are fetched by the root filesystem's own apt.
# Every release also needs, on this machine: MariaDB (the accounting database), munge (the login
# side's credentials), iproute2/procps/util-linux (namespaces).
# Idempotent; daemons are NOT started here (no systemd): up.sh starts each one by hand.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/slurm-cluster/_common.sh
source "$here/_common.sh"

hpcp_parse_slurm_option install "$@"
if [[ "$(id -u)" -ne 0 ]]; then
    echo "install.sh: needs root to install packages" >&2
    exit 77
fi

host_packages=(munge mariadb-server iproute2 procps util-linux)
if [[ "$HPCP_SUITE" == bookworm ]]; then
    host_packages+=(slurmctld slurmd slurm-client slurmdbd libpmix-dev)
else
    host_packages+=(debootstrap)
fi
# What the root filesystem of a newer release holds (python3: the node OS's own Python, which the
# stdlib-only runtime must run with as well as with the site's shared one).
root_packages=(slurmd slurmctld slurm-client slurmdbd munge libpmix-dev iproute2 procps util-linux python3)
# Container runtimes on the nodes: runc for Slurm's own OCI containers (`srun --container=BUNDLE`, oci.conf
# written by up.sh; Debian's crun refuses these machines' hybrid cgroups), and from sid on Apptainer
# (trixie has no apptainer package) with squashfs-tools (SIF images).
case "$HPCP_SUITE" in
    trixie) root_packages+=(runc) ;;
    sid) root_packages+=(runc apptainer squashfs-tools) ;;
esac
# What install.sh does to the root filesystem beyond installing packages; a change here rebuilds it.
root_setup="apptainer-root-caps-no"

export DEBIAN_FRONTEND=noninteractive

# Without systemd, maintainer scripts that try to start services fail; a policy-rc.d that answers
# 101 ("action forbidden") makes invoke-rc.d skip the start cleanly.
with_policy_rc_d() { # ROOT COMMAND...
    local policy="$1/usr/sbin/policy-rc.d" created=no status=0
    shift
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        created=yes
    fi
    "$@" || status=$?
    if [[ "$created" == yes ]]; then rm -f "$policy"; fi
    return "$status"
}

missing=()
for pkg in "${host_packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done
if [[ "${#missing[@]}" -gt 0 ]]; then
    echo "install.sh: installing ${missing[*]}"
    # apt-get update only when the package lists cannot serve us (fresh image, empty lists).
    if ! apt-get install -y --no-install-recommends --dry-run "${missing[@]}" >/dev/null 2>&1; then
        apt-get update
    fi
    with_policy_rc_d "" apt-get install -y --no-install-recommends "${missing[@]}"
fi

if [[ "$HPCP_SUITE" == bookworm ]]; then
    echo "install.sh: Slurm $(slurmd -V | awk '{print $2}') (bookworm) ready"
    exit 0
fi

# ---------------------------------------------------------------- the release's root filesystem
root="$(hpcp_rootfs "$HPCP_SUITE")"
stamp="$root/.hpcplace-root"
want="suite=$HPCP_SUITE packages=${root_packages[*]} setup=$root_setup"
if [[ -r "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "install.sh: Slurm $(hpcp_root_slurm_version "$root") ($HPCP_SUITE root filesystem $root) ready"
    exit 0
fi

mirror="$(hpcp_debian_mirror)"

started="$(hpcp_now)"
build="$root.build.$$"
rm -rf "$build"
mkdir -p "$(dirname "$root")"
cleanup_build() {
    for m in proc; do umount -l "$build/$m" 2>/dev/null || true; done
    rm -rf "$build"
}
trap cleanup_build EXIT
echo "install.sh: building the $HPCP_SUITE root filesystem ($mirror) in $root"
debootstrap --variant=minbase --include=ca-certificates "$HPCP_SUITE" "$build" "$mirror" >"$build.log" 2>&1 || {
    tail -n 20 "$build.log" >&2
    echo "install.sh: debootstrap $HPCP_SUITE failed (log: $build.log)" >&2
    exit 1
}
# sid's Release file on the registry may be past its Valid-Until date: apt must not refuse it.
apt_opts=(-o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false)
mount -t proc proc "$build/proc"
chroot "$build" apt-get "${apt_opts[@]}" update >>"$build.log" 2>&1
with_policy_rc_d "$build" chroot "$build" apt-get "${apt_opts[@]}" install -y "${root_packages[@]}" >>"$build.log" 2>&1 || {
    tail -n 20 "$build.log" >&2
    echo "install.sh: apt-get install in the $HPCP_SUITE root filesystem failed (log: $build.log)" >&2
    exit 1
}
chroot "$build" apt-get clean
# Apptainer run by root keeps every capability by default and then fails to raise those this machine
# does not have (CAP_SYS_RESOURCE): give root's containers none, as they get for any other user.
apptainer_conf="$build/etc/apptainer/apptainer.conf"
if [[ -e "$apptainer_conf" ]]; then
    sed -i 's/^root default capabilities = .*/root default capabilities = no/' "$apptainer_conf"
    grep -qx 'root default capabilities = no' "$apptainer_conf" || {
        echo "install.sh: could not set 'root default capabilities = no' in $apptainer_conf" >&2
        exit 1
    }
fi
umount "$build/proc"
rm -rf "$build/var/lib/apt/lists/"*
# The root filesystem's own path resolves inside it too (a link to /): the Slurm tools on this
# machine (through the root filesystem's loader, see up.sh) and the daemons inside it then agree on
# every path in slurm.conf, PluginDir included.
mkdir -p "$build$(dirname "$root")"
ln -sfn / "$build$root"
echo "$want" >"$build/.hpcplace-root"
rm -rf "$root"
mv "$build" "$root"
rm -f "$build.log"
trap - EXIT
echo "install.sh: Slurm $(hpcp_root_slurm_version "$root") ($HPCP_SUITE root filesystem $root) built in $(hpcp_elapsed "$started")s"
