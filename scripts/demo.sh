#!/usr/bin/env bash
# Shows the main job end to end on the simulated GPU runtime (no GPU needed):
#   1. installs what is missing and builds;
#   2. runs a 4-rank training-like job (GEMMs, kernels, NCCL allreduce; rank 3 is slow) under
#      xtimer_launch and prints what was measured;
# Outputs stay in build/demo/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
echo "== building (first time: a few minutes)"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target xtimer_launch xtimer_preload timing_workload simgpu >/dev/null

bin=$root/build/bin
out=$root/build/demo
rm -rf "$out"
mkdir -p "$out/timeline"
export LD_LIBRARY_PATH=$root/build/lib/simgpu  # the simulated CUDA 13 runtime, cuBLAS, NCCL
export XTIMER_TIMELINE_PATH=$out/timeline XTIMER_TRACE=200

echo "== a 4-rank job under xtimer_launch; rank 3's (simulated) GPU does 200 TFLOPS, the others 400"
pids=()
for rank in 0 1 2 3; do
  tflops=400; [ $rank = 3 ] && tflops=200
  SIMGPU_TFLOPS=$tflops RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank "$bin/xtimer_launch" \
    "$root/build/tests/timing_workload" train $rank 4 "$out/nccl.id" 20 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

echo
echo "== what was measured (the busiest ops of each rank)"
python3 "$root/scripts/summary_table.py" "$out/timeline" --top 4
echo
echo "outputs in $out/timeline:"
ls "$out/timeline"
echo "rank 3's matmuls run at half the TFLOPS of the others, and ranks 0-2 wait for it in ncclAllReduce."
echo "open a *.trace.json in https://ui.perfetto.dev to see each stream's ops on a timeline"
