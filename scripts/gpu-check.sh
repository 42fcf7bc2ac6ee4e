#!/usr/bin/env bash
# The trainer on a GPU, one prepared run (docs/training.md, "Devices and precision"):
#   bash scripts/gpu-check.sh [auto|cpu|cuda]      (default auto: CUDA when torch sees it)
# 1. the trainer's tests; 2. an SFT stage and a GRPO step in bf16 in one process; 3. one FSDP2 GRPO step
# under torchrun --nproc_per_node 1 (nccl on CUDA, gloo on the CPU), then one with LoRA. Steps 2-3 print
# tokens/s and peak memory on `gpu-check:` lines. Set GPU_CHECK_TESTS=0 to skip step 1 (the CI test of this script does),
# GPU_CHECK_MODEL to train another model (default: smollm2-135m on CUDA, a tiny random model on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-auto}
python3 -c "import torch; print('gpu-check: torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
cuda=$(python3 -c "import torch; print(int(torch.cuda.is_available()))")
if [ "$device" = cpu ] || { [ "$device" = auto ] && [ "$cuda" = 0 ]; }; then default_model=tiny; else default_model=smollm2-135m; fi
if [ "${GPU_CHECK_TESTS:-1}" != 0 ]; then
  python3 -m pytest -q -p no:cacheprovider tests/trainer
fi
python3 scripts/gpu_check.py --device "$device" --dtype bfloat16 --model "${GPU_CHECK_MODEL:-$default_model}" \
  ${GPU_CHECK_OUT:+--out "$GPU_CHECK_OUT"}
