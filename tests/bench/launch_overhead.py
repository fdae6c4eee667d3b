#!/usr/bin/env python3
"""Runs launch_overhead_bench under xtimer_launch on the simulated runtime and prints what the
hooks add per launch: hooked - direct (all of it) and hooked - direct - one event-record pair
(the hooks' own work, which the < 300 ns target is about). Repeats the run so the median of
several same-run differences is reported. Also runs with XTIMER_KERNEL_SAMPLE=0 (no events).

  launch_overhead.py BENCH XTIMER_LAUNCH SIMGPU_DIR [--repetitions N]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(bench, launch, simgpu, sample, reps):
    env = dict(os.environ, LD_LIBRARY_PATH=simgpu, XTIMER_KERNEL_SAMPLE=str(sample))
    with tempfile.TemporaryDirectory() as out:
        env["XTIMER_TIMELINE_PATH"] = out
        p = subprocess.run([launch, bench, "--benchmark_format=json", f"--benchmark_repetitions={reps}",
                            "--benchmark_report_aggregates_only=false"], env=env, capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            sys.exit(f"benchmark failed: {p.stderr}")
        rows = [b for b in json.loads(p.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
        summary_written = any(f.endswith(".summary.json") for f in os.listdir(out))
    by = {}
    for b in rows:
        by.setdefault(b["name"].split("/")[0], []).append(b["real_time"])
    return by, summary_written


def main():
    bench, launch, simgpu = sys.argv[1:4]
    reps = int(sys.argv[sys.argv.index("--repetitions") + 1]) if "--repetitions" in sys.argv else 5
    timed, written = run(bench, launch, simgpu, 1, reps)
    if not written:
        sys.exit("the hooks did not run: no summary was written")
    direct = statistics.median(timed["BM_LaunchDirect"])
    hooked = statistics.median(timed["BM_LaunchHooked"])
    events = statistics.median(timed["BM_EventRecordPair"])
    print(f"simulated runtime, median of {reps} repetitions, ns per call:")
    print(f"  cudaLaunchKernel direct (baseline)         {direct:8.1f}")
    print(f"  cudaLaunchKernel through the xtimer hook   {hooked:8.1f}   ({hooked / direct:.2f}x baseline)")
    print(f"  one start/end event-record pair            {events:8.1f}")
    print(f"  added per timed launch, all included       {hooked - direct:8.1f}")
    print(f"  added per timed launch, without the events {hooked - direct - events:8.1f}   (target < 300)")
    untimed, _ = run(bench, launch, simgpu, 0, reps)
    d0 = statistics.median(untimed["BM_LaunchDirect"])
    h0 = statistics.median(untimed["BM_LaunchHooked"])
    print(f"  added per launch with XTIMER_KERNEL_SAMPLE=0 (no events) {h0 - d0:8.1f}   ({h0 / d0:.2f}x baseline)")


if __name__ == "__main__":
    main()
