#!/usr/bin/env bash
# Builds .whl/ (ignored by git): every wheel the GPU tier needs except torch, for CPython 3.12 x86_64
# manylinux (the lent GPU machines: no network, a preinstalled CUDA torch). Run here, with PyPI:
#   scripts/gpu-wheelhouse.sh [DIR]       (default .whl; then carry it: see README "GPU tier")
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.whl}"
python="${PYTHON:-python3}"
rm -rf "$dir" && mkdir -p "$dir"
# hpcplace's own dependencies, the gpu extra (no torch), the test tools, and their dependencies.
pkgs=(pyyaml jinja2 markupsafe submitit cloudpickle typing_extensions hydra-core==1.3.2 omegaconf==2.3.0
      packaging torch_memory_saver==0.0.10 nvidia-ml-py numpy safetensors
      pytest iniconfig pluggy pygments hypothesis attrs sortedcontainers)
"$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$dir" "${pkgs[@]}"
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) is an sdist only: build its wheel here (pure Python).
if ! ls "$dir"/antlr4_python3_runtime-*.whl >/dev/null 2>&1; then
  "$python" -m pip wheel --no-deps -w "$dir" antlr4-python3-runtime==4.9.3
fi
"$python" -m pip wheel --no-deps -w "$dir" .   # hpcplace itself (setuptools from PyPI, in isolation)
ls -1 "$dir"
du -sh "$dir" | awk '{print "wheelhouse size:", $1}'
test "$(du -sm "$dir" | cut -f1)" -le 64 || { echo "wheelhouse over 64 MiB" >&2; exit 1; }
