#!/usr/bin/env bash
# GPU tier, offline, in one call on a lent GPU machine (no network, a preinstalled CUDA torch):
#   scripts/gpu-tier.sh [OUT_DIR]        (default $OUT, else gpu-tier-results/)
# Needs .whl/ from scripts/gpu-wheelhouse.sh (carried along). Installs it with --no-index --no-deps into
# a target dir over the machine's own torch (never installs torch), prints the torch/CUDA/driver facts,
# runs every `gpu`-marked test with HPCPLACE_REQUIRE_GPU=1, then measures offload/onload against a plain
# copy (bench/bench_gpu_offload.py) and runs the collocated demo. Writes OUT_DIR/gpu-tier.json (after every
# stage, so a run cut short still has one), pytest.txt, offload.json, demo.txt/.json, preflight.json.
# Exit code: the tests'.
# The Python: $PYTHON, else the first of python3, python, python3.12 that has torch. The stages' time limits
# keep the whole run inside HPCPLACE_GPU_TIER_BUDGET_S (default 540 s; the device allows 600 s a command).
# HPCPLACE_GPU_TIER_DRY_RUN=1: no GPU needed: install for CPython 3.12 into the target dir, put a fake
# CUDA torch first on PYTHONPATH, and only collect the gpu tests (pytest --collect-only).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out="${1:-${OUT:-gpu-tier-results}}"
mkdir -p "$out" && out=$(cd "$out" && pwd)
dry="${HPCPLACE_GPU_TIER_DRY_RUN:-0}"
deadline=$((SECONDS + ${HPCPLACE_GPU_TIER_BUDGET_S:-540}))
site="${HPCPLACE_GPU_TIER_SITE:-$(mktemp -d /tmp/hpcplace-gpu-site.XXXXXX)}"

trap 'rm -rf "$site.work"; [ -n "${HPCPLACE_GPU_TIER_SITE:-}" ] || rm -rf "$site"' EXIT
say() { echo "gpu-tier: $*" | tee -a "$out/log.txt"; }
# A stage's time limit: its own, or what is left of the budget (15 s kept for the summary).
limit() { local left=$((deadline - SECONDS - 15)); echo $((left < $1 ? (left > 10 ? left : 10) : $1)); }
prefix() { "$1" -c 'import sys; print(sys.prefix)' 2>/dev/null; }

python="${PYTHON:-}"
if [ -z "$python" ]; then
  python=python3
  for p in python3 python python3.12; do
    if command -v "$p" >/dev/null 2>&1 &&
       "$p" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null; then
      python=$p && break
    fi
  done
fi
python=$(command -v "$python" 2>/dev/null || echo "$python")
say "python: $python ($("$python" --version 2>&1))"
# The demo's components run `python3` from PATH: make that this interpreter.
if [ "$(prefix python3)" != "$(prefix "$python")" ]; then
  PATH="$(dirname "$python"):$PATH"
  [ "$(prefix python3)" = "$(prefix "$python")" ] || say "warning: python3 on PATH is not $python (the demo uses it)"
fi
# Allocator settings that bypass torch_memory_saver's hook make every offload refuse: the tier runs without them.
for var in PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF; do
  if [ -n "${!var:-}" ]; then say "unset $var=${!var} for the tier"; unset "$var"; fi
done

ls .whl/*.whl >/dev/null 2>&1 || { say "no wheelhouse .whl/: run scripts/gpu-wheelhouse.sh and carry .whl"; exit 2; }
pipflags=(--no-index --no-deps --target "$site" --quiet --disable-pip-version-check)
if [ "$dry" = 1 ]; then
  pipflags+=(--ignore-requires-python --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
             --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
fi
install() {
  if "$python" -m pip --version >/dev/null 2>&1; then
    "$python" -m pip install "${pipflags[@]}" .whl/*.whl
    return
  fi
  echo "no pip for $python: unpacking the wheels into $site"  # what --target does, for these wheels
  "$python" - "$site" .whl/*.whl <<'PY'
import sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):  # purelib/platlib go to the top; scripts and headers are not needed
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                info.filename = "/".join(parts[2:])
            z.extract(info, site)
PY
}
if ! install 2>&1 | tee -a "$out/log.txt"; then
  say "offline install from .whl/ failed"; exit 2
fi
# hpcplace from this checkout (the wheel may predate it): the package layout of pyproject, as links.
rm -rf "$site/hpcplace" && mkdir "$site/hpcplace"
for f in hpcplace/*; do ln -s "$repo/$f" "$site/hpcplace/"; done
ln -s "$repo/runtime" "$site/hpcplace/runtime" && ln -s "$repo/templates" "$site/hpcplace/templates"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# Run from a copy of the tests and data: from the checkout itself, its hpcplace/ (without runtime/, which
# pyproject maps in) would shadow the installed layout.
work="$site.work" && rm -rf "$work" && mkdir -p "$work"
cp -r tests configs examples bench pyproject.toml "$work"/ && cd "$work"
if [ "$dry" = 1 ]; then
  fake="$work/fake-cuda"
  "$python" -c 'import sys; from pathlib import Path; from tests.gpu.fake_gpu import fake_gpu_dir; fake_gpu_dir(Path(sys.argv[1]))' "$fake"
  export PYTHONPATH="$fake:$PYTHONPATH"
fi

"$python" - > "$out/facts.json" <<'PY'
import json, os, sys
from hpcplace.runtime import gpu_checks
facts = {"python": sys.version.split()[0], "executable": sys.executable,
         **{k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH")}}
try:
    import torch
    facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if facts["cuda_available"]:
        facts["gpu"] = torch.cuda.get_device_name(0)
except Exception as exc:  # report, never stop: the tests say what fails
    facts["torch_error"] = repr(exc)
d = gpu_checks.driver_info()
facts["driver"] = d and {"version": d.version, "cuda": d.cuda_text}
facts["driver_problem"] = gpu_checks.cuda_driver_problem()
print(json.dumps(facts, indent=1))
PY
cat "$out/facts.json"

files=$(grep -rlE "pytestmark = pytest.mark.gpu|@pytest.mark.gpu" tests --include='test_*.py' | sort)
say "gpu-marked test files: $(echo $files)"
if [ "$dry" = 1 ]; then
  # (hypothesis' cp312 wheel has compiled parts that a 3.11 dry run cannot import; no gpu test uses it)
  "$python" -m pytest --collect-only -q -m gpu -p no:cacheprovider -p no:hypothesispytest $files 2>&1 | tee "$out/pytest.txt"
  exit "${PIPESTATUS[0]}"
fi

status=null bench=null demo=null checks=null
summarize() {  # gpu-tier.json from what has run so far (null: not run yet)
  "$python" - "$out" "$status" "$bench" "$demo" "$checks" > "$out/gpu-tier.json" <<'PY'
import json, os, sys
out, status, bench, demo, checks = sys.argv[1], *(None if a == "null" else int(a) for a in sys.argv[2:])
def load(name):
    try:
        with open(os.path.join(out, name)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
try:
    lines = open(os.path.join(out, "pytest.txt"), errors="replace").read().splitlines()
except OSError:
    lines = []
summary = [l for l in lines if l.startswith(("PASSED", "FAILED", "SKIPPED", "ERROR", "=", "XFAIL", "XPASS"))][-40:]
print(json.dumps({"tests_exit": status, "pytest_summary": summary, "facts": load("facts.json"),
                  "memory_saver_test": load("memory_saver.json"), "benchmarks_exit": bench,
                  "offload": load("offload.json"), "offload_mmap": load("offload-mmap.json"),
                  "weight_sync": load("weight_sync.json"), "demo_exit": demo, "demo": load("demo.json"),
                  "preflight_checks_exit": checks, "preflight_checks": load("preflight.json")}, indent=1))
PY
}
summarize
# -rA: every test's outcome in the short summary, failures with their reason (gpu-tier.json keeps those
# lines); without hypothesis' plugin (compiled, and no gpu test uses it: one import failure less to risk)
# Plugins off: the machine's own pytest plugins (xdist, cov, benchmark...) were built for its pytest, not
# the wheelhouse's; no gpu test needs one.
COLUMNS=200 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 HPCPLACE_REQUIRE_GPU=1 HPCPLACE_GPU_TIER_OUT="$out/memory_saver.json" \
  timeout "$(limit 210)" \
  "$python" -m pytest -m gpu -v -rA -p no:cacheprovider -p no:hypothesispytest $files 2>&1 | tee "$out/pytest.txt"
status=${PIPESTATUS[0]}
summarize

# The measurement, in a process started with the preload (as hpcplace-run would set it).
mapfile -t pre < <("$python" -c 'import os; from hpcplace.runtime.preload import preload_env
c, why = preload_env(os.environ, command=[os.sys.executable]); print(c.get("LD_PRELOAD", "")); print(c.get("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", ""))); print(why)')
say "${pre[2]:-no preload}"
LD_PRELOAD="${pre[0]:-}" LD_LIBRARY_PATH="${pre[1]:-}" timeout "$(limit 90)" \
  "$python" bench/bench_gpu_offload.py --gib 4 --cycles 5 --compare-cycles 3 --json "$out/offload.json" \
  > "$out/offload.txt" 2>&1
bench=$?
tail -5 "$out/offload.txt"
# The same with torch_memory_saver's reclaimable (mmap) host backup instead of pinned memory.
LD_PRELOAD="${pre[0]:-}" LD_LIBRARY_PATH="${pre[1]:-}" timeout "$(limit 90)" \
  "$python" bench/bench_gpu_offload.py --gib 4 --cycles 4 --compare-cycles 3 --cpu-backup mmap \
  --json "$out/offload-mmap.json" > "$out/offload-mmap.txt" 2>&1
mmap=$?
[ "$bench" -ne 0 ] || bench=$mmap  # the stage's exit: the first failure of its two runs
tail -3 "$out/offload-mmap.txt"
summarize
# Each output line stamped with the wall clock: the cycle time is the time between the actor's turns.
timeout "$(limit 110)" "$python" -c 'import sys; from hpcplace.cli import main; sys.exit(main())' \
  run configs/collocated-demo.yaml --local 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$out/demo.txt"
demo=${PIPESTATUS[0]}
"$python" - "$out/demo.txt" > "$out/demo.json" <<'PY'
import json, re, sys
stamps = [(float(t), rest) for t, _, rest in (l.partition(" ") for l in open(sys.argv[1], errors="replace")) if t]
actor = [t for t, rest in stamps if re.match(r"\[actor 0\] actor\[0\] gen \d+", rest)]
cycles = [round(b - a, 3) for a, b in zip(actor, actor[1:])]
print(json.dumps({"wall_s": round(stamps[-1][0] - stamps[0][0], 3) if stamps else None, "actor_turns": len(actor),
                  "cycle_s": cycles, "tms_backend": any("backend TorchMemorySaverBackend" in rest for _, rest in stamps)}))
PY
tail -5 "$out/demo.txt"
summarize
# Weight sync through the /dev/shm weight store, GPU -> shm -> GPU, next to plain copies (two slots: 2x the
# weights in /dev/shm).
shm_gib=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | awk '{print int($1 / 1048576)}')
sync_gib=$(( ${shm_gib:-0} >= 12 ? 4 : 1 ))
say "/dev/shm: ${shm_gib:-?} GiB free; weight sync with $sync_gib GiB"
timeout "$(limit 90)" "$python" bench/bench_gpu_weight_sync.py --gib "$sync_gib" --json "$out/weight_sync.json" \
  > "$out/weight_sync.txt" 2>&1
sync=$?
tail -14 "$out/weight_sync.txt"
[ "$bench" -ne 0 ] || bench=$sync  # benchmarks_exit: the first failing benchmark's
summarize
# The preflight's and the shim's GPU checks: their cost on a GPU node, and that they pass on a good one.
timeout "$(limit 60)" "$python" bench/bench_gpu_preflight.py --repeat 5 --json "$out/preflight.json" \
  > "$out/preflight.txt" 2>&1
checks=$?
cat "$out/preflight.txt"
summarize
say "results in $out (gpu-tier.json); tests exit $status, benchmarks exit $bench, demo exit $demo, preflight checks exit $checks"
exit "$status"
