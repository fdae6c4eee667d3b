#!/usr/bin/env bash
# Shows the main job end to end on the simulated GPU runtime (no GPU needed):
#   1. installs what is missing and builds;
#   2. runs a 4-rank training-like job (GEMMs, kernels, NCCL allreduce; rank 3 is slow) under
#      xtimer_launch and prints what was measured;
#   3. runs 4 Python ranks of which one stalls in its data loader: the others hang in NCCL, the
#      node agent collects every rank's stacks and prints who is out of step.
# Outputs stay in build/demo/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
echo "== building (first time: a few minutes)"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target xtimer_launch xtimer_preload timing_workload simgpu pyccl \
  xtimer_stacktrace_viewer >/dev/null

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
  # One xtimer_launch per rank here, so only rank 0's agent serves /metrics.
  port=0; [ $rank = 0 ] && port=18889
  XTIMER_METRICS_PORT=$port SIMGPU_TFLOPS=$tflops RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank "$bin/xtimer_launch" \
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

echo
echo "== a hang: 4 Python ranks; rank 2 stalls in load_batch before its allreduce (XTIMER_HANG_TIMEOUT=3)"
hang=$out/hang
mkdir -p "$hang"
XTIMER_TIMELINE_PATH=$hang XTIMER_HANG_TIMEOUT=3 XTIMER_METRICS_PORT=0 XTIMER_LOG_LEVEL=error \
  setsid "$bin/xtimer_launch" python3 "$root/tests/launcher/node_ranks.py" --nproc 4 --node-rank 0 --world 4 \
  --lib "$root/build/tests/lib/libpyccl.so" --idfile "$out/hang.id" -- --stuck-rank 2 --stuck-step 3 --sleep 120 \
  >"$out/hang.log" 2>&1 &
job=$!
verdict=""
for _ in $(seq 1 300); do
  verdict=$(find "$hang" -mindepth 2 -maxdepth 2 -name verdict.json -print -quit)
  [ -n "$verdict" ] && break
  sleep 0.1
done
kill -TERM -- -"$job" 2>/dev/null || true
wait "$job" 2>/dev/null || true
if [ -z "$verdict" ]; then
  echo "no verdict after 30 s; see $out/hang.log" >&2
  exit 1
fi
python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["summary"]))' "$verdict"
echo "every rank's stacks, flame graphs (py_stack.svg, cpp_stack.svg) and verdict.json: $(dirname "$verdict")"
