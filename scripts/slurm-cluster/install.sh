#!/usr/bin/env bash
# Install the Debian packages the hpcplace test cluster needs (Debian 12, Slurm 22.05).
# Idempotent: does nothing when every package is already installed.
# Daemons are NOT started here (no systemd); up.sh starts each one by hand.
set -euo pipefail

if [[ "$(id -u)" -ne 0 ]]; then
    echo "install.sh: needs root to install packages" >&2
    exit 77
fi

packages=(
    slurmctld slurmd slurm-client slurmdbd munge
    mariadb-server libpmix-dev
    iproute2 procps util-linux
)

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done

if [[ "${#missing[@]}" -eq 0 ]]; then
    echo "install.sh: all packages already installed"
    exit 0
fi

echo "install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# Without systemd, maintainer scripts that try to start services fail; a policy-rc.d that
# answers 101 ("action forbidden") makes invoke-rc.d skip the start cleanly.
policy=/usr/sbin/policy-rc.d
created_policy=no
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    created_policy=yes
fi
cleanup() {
    if [[ "$created_policy" == yes ]]; then
        rm -f "$policy"
    fi
}
trap cleanup EXIT

# apt-get update only when the package lists cannot serve us (fresh image, empty lists).
if ! apt-get install -y --no-install-recommends --dry-run "${missing[@]}" >/dev/null 2>&1; then
    apt-get update
fi
apt-get install -y --no-install-recommends "${missing[@]}"
echo "install.sh: done"
