#!/usr/bin/env bash
# Install everything and run the whole test suite, including the real-Slurm tier on the project's
# own test cluster, on two Slurm releases one after the other: Debian 12's 22.05 (the whole suite) and
# the newest Debian serves, sid's 26.05 (the real-Slurm tier again; HPCPLACE_SLURM_RELEASES changes
# the list, e.g. "bookworm trixie sid"). This is README's second command and what CI (.ci/run) runs.
#   - the Slurm tier needs root (it installs Debian's Slurm and boots a cluster in namespaces);
#     without root it is skipped with the reason, except under CI=true where that is a failure.
#   - the GPU tier runs only where a GPU is present (scripts/gpu-tier.sh); elsewhere it skips.
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$(pwd)

venv="${HPCPLACE_VENV:-$root_dir/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
venv="$(cd "$venv" && pwd)"  # absolute: the test cluster shares it with its nodes
# torch is pinned to the local CPU build (never a CUDA download).
"$venv/bin/pip" install --quiet --disable-pip-version-check -e ".[test,torch,ray,frameworks,docs]"
# The RL frameworks the Ray launch-mode tests run (their wheels pin GPU stacks: --no-deps; what their
# code imports comes from the `frameworks` extra above); tests also check hpcplace against their parsers.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r tests/requirements-frameworks.txt

# The first release runs the whole suite; each further one runs the real-Slurm tier (-m slurm) again.
read -r -a releases <<<"${HPCPLACE_SLURM_RELEASES:-bookworm sid}"
slurm_ok=0
if [ "$(id -u)" = 0 ]; then
  for release in "${releases[@]}"; do
    scripts/slurm-cluster/install.sh --slurm "$release"
  done
  slurm_ok=1
elif [ "${CI:-}" = "true" ]; then
  echo "test-all: the real Slurm tier needs root and is required in CI" >&2
  exit 1
else
  echo "test-all: not root: the real-Slurm tests will be skipped (they need root to boot the test cluster)" >&2
fi

export PATH="$venv/bin:$PATH"
export HPCPLACE_REQUIRE_SLURM="${CI:-false}"
# The test cluster's nodes keep /tmp private (as real nodes do) but must see this checkout and the
# venv wherever they are, /tmp included (as a real site shares /home): tests/slurm/conftest.py boots
# the cluster with these (and itself adds the checkout and the running venv).
export HPCPLACE_SLURM_SHARED="$root_dir:$venv${HPCPLACE_SLURM_SHARED:+:$HPCPLACE_SLURM_SHARED}"
status=0
# Lint and types: ruff check, ruff format --check and mypy --strict, zero findings.
HPCPLACE_VENV="$venv" scripts/lint.sh || status=$?
# The docs site, strict (a broken link, a missing page or a failing generated part fails CI).
scripts/build-docs.sh || status=$?
# A test stuck for 5 minutes prints every thread's stack (then goes on), so a hang is diagnosable.
summary=()
for i in "${!releases[@]}"; do
  release="${releases[$i]}"
  selection=()
  if [ "$i" -gt 0 ]; then
    [ "$slurm_ok" = 1 ] || break
    selection=(-m slurm)
  fi
  echo "test-all: Slurm test cluster: $release (${selection[*]:-the whole suite})"
  rc=0
  HPCPLACE_SLURM="$release" python -m pytest -q -o faulthandler_timeout=300 "${selection[@]}" "$@" || rc=$?
  if [ "$slurm_ok" = 1 ]; then
    summary+=("$release: Slurm $(cat "${HPCPLACE_SLURM_DIR:-/tmp/hpcplace-slurm}/version" 2>/dev/null || echo '?'), pytest exit $rc")
    scripts/slurm-cluster/down.sh >/dev/null 2>&1 || true
  fi
  # A selection with no real-Slurm test in it (`scripts/test-all.sh tests/planner`) ran nothing there.
  if [ "$i" -gt 0 ] && [ "$rc" = 5 ]; then rc=0; fi
  [ "$rc" = 0 ] || status=$rc
done
for line in "${summary[@]}"; do
  echo "test-all: $line"
done
exit "$status"
