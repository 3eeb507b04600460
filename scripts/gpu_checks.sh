#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go (for a lent GPU host; none runs in CI here).
#   bash scripts/gpu_checks.sh [OUT_DIR]
# Runs every bench/gpu/*.py script (bf16 numerics, throughput, MFU) and the `gpu`-marked tests,
# writing their output to OUT_DIR (default: gpu-results/).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-results}"
mkdir -p "$out"
python - <<'PY' || { echo "no CUDA GPU visible: nothing to check"; exit 1; }
import torch, sys
assert torch.cuda.is_available()
print("GPU:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
status=0
for script in bench/gpu/*.py; do
  [ -e "$script" ] || continue
  name=$(basename "$script" .py)
  echo "::: $script"
  PYTHONPATH="$(ls -d packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}" \
    timeout 900 python "$script" 2>&1 | tee "$out/$name.txt" || status=1
done
echo "::: pytest -m gpu"
PYTHONPATH="$(ls -d packages/*/src | paste -sd:)" python -m pytest -m gpu -q tests 2>&1 | tee "$out/pytest_gpu.txt" || status=1
exit $status
