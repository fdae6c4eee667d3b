#!/usr/bin/env bash
# Shows the main job end to end on the simulated GPU runtime (no GPU needed):
#   1. installs what is missing and builds;
#   2. runs a 4-rank training-like job (GEMMs, kernels, NCCL allreduce; rank 3's GPU is slow)
#      under one xtimer_launch, prints what was measured and the node agent's verdict on why the
#      job is slow (rank, cause, cost), and draws it (slowdown.svg);
#   3. runs 4 Python ranks of which one stalls in its data loader: the others hang in NCCL, the
#      node agent collects every rank's stacks and prints who is out of step;
#   4. runs a small DDP job (gloo, CPU torch) under xtimer_run with 2 workers and SIGKILLs one
#      mid-run: xtimer_run restarts both and they resume from the flash checkpoint.
# Outputs stay in build/demo/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
echo "== building (first time: a few minutes)"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target xtimer_launch xtimer_run xtimer_preload timing_workload simgpu pyccl \
  xtimer_stacktrace_viewer xtimer_slowdown xtimer_ckpt_all >/dev/null

bin=$root/build/bin
out=$root/build/demo
rm -rf "$out"
mkdir -p "$out/timeline"
export LD_LIBRARY_PATH=$root/build/lib/simgpu  # the simulated CUDA 13 runtime, cuBLAS, NCCL
export XTIMER_TIMELINE_PATH=$out/timeline XTIMER_TRACE=200

echo "== why is my job slow: 4 ranks under one xtimer_launch; rank 3's (simulated) GPU does 50 TFLOPS, the others 100"
# The ranks share one node agent, whose judge compares them step by step (one agent per rank
# would see one rank each). 100 steps: about 40 s, several times what the judge needs.
XTIMER_METRICS_PORT=18889 "$bin/xtimer_launch" bash -c '
  for rank in 0 1 2 3; do
    tflops=100; [ $rank = 3 ] && tflops=50
    SIMGPU_TFLOPS=$tflops RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank "$0" train $rank 4 "$1" 100 &
  done
  wait' "$root/build/tests/timing_workload" "$out/nccl.id" >"$out/slow.log" 2>&1

echo
echo "== what was measured (the busiest ops of each rank)"
python3 "$root/scripts/summary_table.py" "$out/timeline" --top 4
echo
echo "== what the node agent judged while the job ran (its log lines; slowdown.json holds the same)"
if ! grep -E "xtimer\[[0-9]+\]: (warning: )?slowdown" "$out/slow.log"; then
  echo "the agent named no slowdown; see $out/slow.log" >&2
  exit 1
fi
"$bin/xtimer_slowdown" --path "$out/timeline" --quiet >/dev/null  # the same judgement, drawn
echo
echo "outputs in $out/timeline:"
ls "$out/timeline"
echo "slowdown.svg draws each rank's step time and the verdicts; open a *.trace.json in https://ui.perfetto.dev"
echo "to see each stream's ops on a timeline"

echo
echo "== a hang: 4 Python ranks; rank 2 stalls in load_batch before its allreduce (XTIMER_HANG_TIMEOUT=3)"
hang=$out/hang
mkdir -p "$hang"
XTIMER_TIMELINE_PATH=$hang XTIMER_HANG_TIMEOUT=3 XTIMER_METRICS_PORT=0 XTIMER_LOG_LEVEL=error \
  setsid "$bin/xtimer_launch" python3 "$root/tests/common/node_ranks.py" --nproc 4 --node-rank 0 --world 4 -- \
  "$root/tests/preload/hang_rank.py" "$root/build/tests/lib/libpyccl.so" '{rank}' '{world}' "$out/hang.id" \
  --stuck-rank 2 --stuck-step 3 --sleep 120 \
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

echo
echo "== elastic: a DDP job (gloo, CPU torch) under xtimer_run with 2 workers; worker rank 1 is SIGKILLed at step 6"
el=$out/elastic
mkdir -p "$el/shm"
OUT=$el STEPS=16 STEP_S=0.2 PYTHONPATH=$root/build/lib/python XTIMER_PYTHON=/usr/bin/python3 XTIMER_METRICS_PORT=0 \
  XTIMER_CKPT_SHM_DIR=$el/shm XTIMER_TIMELINE_PATH=$el/timeline \
  "$bin/xtimer_run" --standalone --nproc-per-node 2 --max-restarts 2 "$root/tests/launcher/elastic_train.py" \
  >"$el/run.log" 2>&1 &
run=$!
victim=""
for _ in $(seq 1 600); do
  victim=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(next((r["pid"] for r in rows if r["rank"] == 1 and r["step"] >= 6), ""))' "$el/steps.jsonl" 2>/dev/null || true)
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] && kill -KILL "$victim" && echo "killed worker pid $victim (rank 1)"
rc=0
wait "$run" || rc=$?
grep -E "xtimer\[[0-9]+\]: (warning: )?run:" "$el/run.log" || true
python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for restart in sorted({r["restart"] for r in rows}):
    mine = [r for r in rows if r["restart"] == restart]
    done, start = sorted(r["step"] for r in mine), mine[0]["start"]
    print(f"restart count {restart}: steps {done[0]}-{done[-1]}, resumed from step {start}")' "$el/steps.jsonl"
if [ "$rc" != 0 ]; then
  echo "xtimer_run exited $rc; see $el/run.log" >&2
  exit 1
fi
echo "the job went on after losing a worker and finished (exit 0); its log: $el/run.log"
