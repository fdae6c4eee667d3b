#!/usr/bin/env bash
# Runs any command on the simulated GPU runtime (tests/simgpu), so that the CUDA build of
# PyTorch from PyPI, unmodified, sees simulated GPUs on a machine without one:
#
#   scripts/simgpu.sh <command...>
#   SIMGPU_DEVICES=2 scripts/simgpu.sh xtimer_launch torchrun --nproc-per-node 2 train.py
#
# Kernels are no-ops of modelled duration under their real names; copies and NCCL move real
# bytes; values computed by kernels are not (tests/simgpu/torch/README.md). SIMGPU_* variables
# (tests/simgpu/README.md) pass through to the command and every process it starts.
#
# What it sets, and why:
# - LD_PRELOAD += the simulated libcudart.so.13, libcublas.so.13, libcublasLt.so.13,
#   libnccl.so.2, libcupti.so.13: torch's libraries find the nvidia wheels' real ones through
#   DT_RPATH, which the loader searches before LD_LIBRARY_PATH; a library already loaded under a
#   soname satisfies every later request for it. Then libsimgpu_gaps.so: a clean error for each
#   function torch imports that the simulation lacks. Whatever LD_PRELOAD held before (for
#   example libxtimer_preload.so) stays first, so its hooks still interpose.
# - LD_LIBRARY_PATH += the simulated libcuda.so.1 (no wheel ships one) and stubs/ (cuDNN,
#   cuSPARSE, ... for a torch installed without its nvidia wheels; with them, the real ones load).
#
# The simulated libraries come from SIMGPU_DIR, else the checkout's build/lib/simgpu.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SIMGPU_DIR:-$root/build/lib/simgpu}

if [ $# -eq 0 ]; then
  echo "usage: scripts/simgpu.sh <command...>   (runs it on the simulated GPU runtime)" >&2
  exit 2
fi
libs=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcupti.so.13 libsimgpu_gaps.so)
for lib in libcuda.so.1 "${libs[@]}"; do
  if [ ! -f "$dir/$lib" ]; then
    echo "simgpu.sh: $dir/$lib is missing; build the simulated runtime first (cmake --build build --target simgpu) or set SIMGPU_DIR" >&2
    exit 2
  fi
done

preload=
for lib in "${libs[@]}"; do preload=${preload:+$preload:}$dir/$lib; done
export LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD:}$preload
export LD_LIBRARY_PATH=$dir:$dir/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$@"
