#!/usr/bin/env bash
# GPU tier: torch_memory_saver + NVML on a real NVIDIA GPU. Installs the gpu extras when missing,
# runs the gpu-marked tests (failing, not skipping, when no GPU is usable) and records the numbers.
#   scripts/gpu-tier.sh [RESULTS_DIR]      (default: gpu-tier-results/)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-tier-results}"
mkdir -p "$out"
if ! python3 -c 'import torch_memory_saver, pynvml, safetensors' 2>/dev/null; then
  python3 -m pip install -e '.[gpu,test]'
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' \
  | tee "$out/torch.txt"
HPCPLACE_REQUIRE_GPU=1 HPCPLACE_GPU_TIER_OUT="$out/memory_saver.json" \
  python3 -m pytest -m gpu tests/gpu -v -rs -s 2>&1 | tee "$out/pytest.txt"
status=${PIPESTATUS[0]}
echo "results in $out/ (memory_saver.json: freed GiB, pause/resume ms, graph replay)"
exit "$status"
