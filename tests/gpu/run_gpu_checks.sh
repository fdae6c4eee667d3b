#!/usr/bin/env bash
# The checks that need a real GPU (never run in CI): builds the preload library and the
# launcher, then runs the step-time overhead check (both timing modes), the CUPTI check (Triton
# kernels from torch.compile) and the hang check in both timing modes against real PyTorch.
#   tests/gpu/run_gpu_checks.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-gpu
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXTIMER_PRELOAD_ONLY=ON >/dev/null
cmake --build "$build" --target xtimer_preload xtimer_launch -j "$(nproc)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
python3 "$root/tests/gpu/overhead.py" --bin "$build/bin" --steps "${STEPS:-300}"
python3 "$root/tests/gpu/cupti_check.py" --bin "$build/bin" --steps "${CUPTI_STEPS:-100}"
XTIMER_CUPTI=0 python3 "$root/tests/gpu/hang_check.py" --bin "$build/bin"
XTIMER_CUPTI=1 python3 "$root/tests/gpu/hang_check.py" --bin "$build/bin"
