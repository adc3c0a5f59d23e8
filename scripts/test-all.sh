#!/usr/bin/env bash
# Install everything and run the whole test suite, including the real-Slurm tier on the project's
# own test cluster. This is README's second command and what CI (.ci/run) runs.
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
# torch is pinned to the local CPU build (never a CUDA download).
"$venv/bin/pip" install --quiet --disable-pip-version-check -e ".[test,torch,frameworks]"
# The frameworks (pinned), without their GPU stacks: tests check hpcplace against their own parsers.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r tests/requirements-frameworks.txt

slurm_ok=0
if [ "$(id -u)" = 0 ]; then
  scripts/slurm-cluster/install.sh
  slurm_ok=1
elif [ "${CI:-}" = "true" ]; then
  echo "test-all: the real Slurm tier needs root and is required in CI" >&2
  exit 1
else
  echo "test-all: not root: the real-Slurm tests will be skipped (they need root to boot the test cluster)" >&2
fi

export PATH="$venv/bin:$PATH"
export HPCPLACE_REQUIRE_SLURM="${CI:-false}"
status=0
# A test stuck for 5 minutes prints every thread's stack (then goes on), so a hang is diagnosable.
python -m pytest -q -o faulthandler_timeout=300 "$@" || status=$?
if [ "$slurm_ok" = 1 ]; then
  scripts/slurm-cluster/down.sh >/dev/null 2>&1 || true
fi
exit "$status"
