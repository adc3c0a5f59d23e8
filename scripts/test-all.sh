#!/usr/bin/env bash
# Install everything and run the whole test suite, including the real-Slurm tier on the project's own test
# cluster on two Slurm releases: Debian 12's 22.05 (bookworm) and the newest Debian serves, sid's 26.05
# (HPCPLACE_SLURM_RELEASES changes the list, e.g. "bookworm trixie sid"). This is README's second command
# and what CI (.ci/run) runs.
#
# The lanes run side by side (the real-Slurm tier mostly waits on Slurm, Ray and its jobs):
#   checks:  lint and types, the docs, then the CPU tiers (pytest -m "not slurm"), at a lower CPU priority
#            (nice), so the Slurm lanes' jobs get the CPU when they need it;
#   slurm-N: the real-Slurm tier (pytest -m slurm) on release N, on a test cluster of its own
#            (HPCPLACE_SLURM_INSTANCE=N: its own state dir, networks, ports and job ids), all releases at once
#            (HPCPLACE_SLURM_SIDE_BY_SIDE=0: one after the other); a framework's own placement code (marker
#            framework_driver) and release-independent
#            bookkeeping (marker one_release) on the first release only, and the tests that run in both
#            ConstrainDevices modes (fixture `lab`) in ConstrainDevices=yes only on the later ones
#            (HPCPLACE_LAB_MODES).
# Each lane's pytest checks the test cluster for what its tests left (jobs, node-local files); after both
# lanes this script checks the machine itself (/dev/shm, /tmp, processes: tests/leftovers.py). The last lines
# give each part's time and exit code.
#   - the Slurm tier needs root (it installs Debian's Slurm and boots a cluster in namespaces);
#     without root it is skipped with the reason, except under CI=true where that is a failure.
#   - the GPU tier runs only where a GPU is present (scripts/gpu-tier.sh); elsewhere it skips.
# Arguments go to every pytest run (`scripts/test-all.sh tests/planner -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$(pwd)
started=$SECONDS

work=$(mktemp -d "${TMPDIR:-/var/tmp}/hpcplace-test-all.XXXXXX")  # logs, reports; removed at exit
trap 'rm -rf "$work"' EXIT

read -r -a releases <<<"${HPCPLACE_SLURM_RELEASES:-bookworm sid}"
if [ "${#releases[@]}" -gt 1 ] && [ -n "${HPCPLACE_SLURM_DIR:-}${HPCPLACE_SLURM_NET:-}${HPCPLACE_SLURM_FABNET:-}" ]; then
  echo "test-all: HPCPLACE_SLURM_DIR, _NET and _FABNET name one test cluster's; ${#releases[@]} run at once here" \
    "(each its own: scripts/slurm-cluster/_common.sh): unset them, or run one release (HPCPLACE_SLURM_RELEASES)" >&2
  exit 2
fi
# The first release's Slurm installs (apt) while pip installs the project.
first_install=""
if [ "$(id -u)" = 0 ]; then
  first_log="$work/install-first.log"
  scripts/slurm-cluster/install.sh --slurm "${releases[0]}" >"$first_log" 2>&1 &
  first_install=$!
fi

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

slurm_ok=0
if [ -n "$first_install" ]; then
  rc=0
  wait "$first_install" || rc=$?
  cat "$first_log"
  [ "$rc" = 0 ] || { echo "test-all: installing Slurm (${releases[0]}) failed" >&2; exit 1; }
  slurm_ok=1
elif [ "${CI:-}" = "true" ]; then
  echo "test-all: the real Slurm tier needs root and is required in CI" >&2
  exit 1
else
  echo "test-all: not root: the real-Slurm tests will be skipped (they need root to boot the test cluster)" >&2
fi
installed=$((SECONDS - started))

export PATH="$venv/bin:$PATH"
export HPCPLACE_REQUIRE_SLURM="${CI:-false}"
# The test cluster's nodes keep /tmp private (as real nodes do) but must see this checkout and the
# venv wherever they are, /tmp included (as a real site shares /home): tests/slurm/conftest.py boots
# the cluster with these (and itself adds the checkout and the running venv).
export HPCPLACE_SLURM_SHARED="$root_dir:$venv${HPCPLACE_SLURM_SHARED:+:$HPCPLACE_SLURM_SHARED}"
# Every process either lane starts carries this marker (the leftover check finds them by it); each pytest
# checks only the cluster, this script the machine, once both lanes are done.
export HPCPLACE_TEST_SESSION="test-all-$$-$RANDOM"
export HPCPLACE_TEST_LEFTOVERS=cluster
python -m tests.leftovers snapshot "$work/machine.json"

summary=()
record() { # NAME SECONDS RC
  summary+=("$(printf '%-28s %4d s  exit %s' "$1" "$2" "$3")")
}
timed() { # NAME COMMAND...: run it, record its time and exit code, return its exit code
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  record "$name" $((SECONDS - t0)) "$rc"
  return "$rc"
}

# A test stuck for 5 minutes prints every thread's stack (then goes on), so a hang is diagnosable. Each run
# writes a JUnit report for the totals at the end.
runs=0
pytest_run() {
  runs=$((runs + 1))
  python -m pytest -q -o faulthandler_timeout=300 --durations=15 --junitxml="$work/junit-$BASHPID-$runs.xml" "$@"
}

checks_lane() { # lint, docs, the CPU tiers; its summary lines go to $work/checks.summary
  local status=0
  summary=()
  renice -n 10 -p "$BASHPID" >/dev/null  # this lane and all it starts: the Slurm lane's jobs come first
  # Lint and types: ruff check, ruff format --check and mypy --strict, zero findings.
  HPCPLACE_VENV="$venv" timed "lint and types" scripts/lint.sh || status=1
  # The docs site, strict (a broken link, a missing page or a failing generated part fails CI).
  timed "docs" scripts/build-docs.sh || status=1
  local rc=0
  timed "CPU tiers (not slurm)" pytest_run -m "not slurm" "$@" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 5 ] || status=1  # 5: a selection with no CPU test in it
  printf '%s\n' "${summary[@]}" >"$work/checks.summary"
  return "$status"
}

slurm_lane() { # INDEX RELEASE [ARGS...]: that release's real-Slurm tier on test cluster INDEX
  local i=$1 release=$2 selection="slurm" lab_modes="no,yes" rc=0 version
  shift 2
  summary=()
  export HPCPLACE_SLURM_INSTANCE="$i"
  if [ "$i" -gt 0 ]; then
    selection="slurm and not framework_driver and not one_release"
    lab_modes="yes"  # the tests run in both ConstrainDevices modes: in the mode sites run (docs/testing.md)
    # its Slurm installs now, while the other lanes run (a root filesystem: a minute or two on a fresh machine)
    if ! scripts/slurm-cluster/install.sh --slurm "$release"; then
      echo "test-all: installing Slurm ($release) failed" >&2
      record "Slurm tier: $release" 0 1
      printf '%s\n' "${summary[@]}" >"$work/slurm-$i.summary"
      return 1
    fi
  fi
  echo "test-all: Slurm test cluster $i: $release (pytest -m '$selection')"
  HPCPLACE_SLURM="$release" HPCPLACE_LAB_MODES="$lab_modes" timed "Slurm tier: $release" \
    pytest_run -m "$selection" "$@" || rc=$?
  version=$(. "$root_dir/scripts/slurm-cluster/_common.sh" && cat "$HPCP_DIR/version" 2>/dev/null || echo '?')
  summary[-1]="${summary[-1]}  (Slurm $version)"
  scripts/slurm-cluster/down.sh >/dev/null 2>&1 || true
  printf '%s\n' "${summary[@]}" >"$work/slurm-$i.summary"
  # A selection with no real-Slurm test in it (`scripts/test-all.sh tests/planner`) ran nothing there.
  [ "$rc" = 0 ] || [ "$rc" = 5 ]
}

echo "test-all: lane checks (lint, docs, pytest -m 'not slurm') runs beside the Slurm lanes; its output: $work/checks.log"
checks_lane "$@" >"$work/checks.log" 2>&1 &
checks_pid=$!

status=0
lane_pids=()
if [ "$slurm_ok" = 1 ]; then
  # The later releases' lanes in the background (their output: $work/slurm-N.log) beside the first one's;
  # HPCPLACE_SLURM_SIDE_BY_SIDE=0 runs them after it, one at a time.
  if [ "${HPCPLACE_SLURM_SIDE_BY_SIDE:-1}" != 0 ]; then
    for i in "${!releases[@]}"; do
      [ "$i" -gt 0 ] || continue
      echo "test-all: lane slurm-$i (${releases[$i]}) runs beside it; its output: $work/slurm-$i.log"
      slurm_lane "$i" "${releases[$i]}" "$@" >"$work/slurm-$i.log" 2>&1 &
      lane_pids+=("$!")
    done
  fi
  (slurm_lane 0 "${releases[0]}" "$@") || status=1
  if [ "${HPCPLACE_SLURM_SIDE_BY_SIDE:-1}" = 0 ]; then
    for i in "${!releases[@]}"; do
      [ "$i" -gt 0 ] || continue
      (slurm_lane "$i" "${releases[$i]}" "$@") || status=1
    done
  fi
  for k in "${!lane_pids[@]}"; do
    i=$((k + 1))
    wait "${lane_pids[$k]}" || status=1
    echo "test-all: lane slurm-$i (${releases[$i]}):"
    cat "$work/slurm-$i.log"
  done
fi

checks_rc=0
wait "$checks_pid" || checks_rc=$?
echo "test-all: lane checks:"
cat "$work/checks.log"
[ "$checks_rc" = 0 ] || status=1
mapfile -t checks_summary <"$work/checks.summary" || true
slurm_summary=()
for i in "${!releases[@]}"; do
  [ "$slurm_ok" = 1 ] && [ -r "$work/slurm-$i.summary" ] || continue
  mapfile -t -O "${#slurm_summary[@]}" slurm_summary <"$work/slurm-$i.summary"
done

leftovers_rc=0
timed "leftovers on this machine" python -m tests.leftovers check "$work/machine.json" || leftovers_rc=$?
[ "$leftovers_rc" = 0 ] || status=1

echo
echo "test-all: install $installed s, then the lanes side by side:"
for line in "${checks_summary[@]}" "${slurm_summary[@]}" "${summary[@]}"; do
  echo "test-all:   $line"
done
echo "test-all: total $((SECONDS - started)) s, exit $status"
python scripts/junit_totals.py "$work"/junit-*.xml || true  # the closing line: every pytest run's counts
exit "$status"
