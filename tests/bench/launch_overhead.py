#!/usr/bin/env python3
"""What the hooks add to a kernel launch on the simulated runtime (issue 2's < 300 ns target).

Runs launch_overhead_bench in rounds, each round three processes: without the library (the
baseline), under xtimer_launch timing every launch, and under xtimer_launch with
XTIMER_KERNEL_SAMPLE=0 (hooked, no events). Rounds interleave so drift on a shared machine
touches all three alike; the figures are medians over rounds. "Without the events" subtracts one
start/end cudaEventRecord pair, measured in the baseline process, which the target excludes.
The timed runs must have timed (almost) every launch, or the figure would mean nothing.

  launch_overhead.py BENCH XTIMER_LAUNCH SIMGPU_DIR [--rounds N]
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(bench, launch, simgpu, sample):
    """ns per call of each benchmark; with `sample` set, under xtimer_launch (and the share of
    launches it timed)."""
    env = dict(os.environ, LD_LIBRARY_PATH=simgpu)
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryDirectory() as out:
        env["XTIMER_TIMELINE_PATH"] = out
        cmd = [bench, "--benchmark_format=json"]
        if sample is not None:
            env["XTIMER_KERNEL_SAMPLE"] = str(sample)
            cmd = [launch] + cmd
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"launch_overhead_bench failed: {p.stderr.strip()[-500:]}")
        rows = {b["name"].split("/")[0]: b for b in json.loads(p.stdout)["benchmarks"]}
        timed_share = None
        summaries = glob.glob(os.path.join(out, "*.summary.json"))
        if sample is not None:
            if not summaries:
                sys.exit("the hooks did not run: no summary was written")
            with open(summaries[0]) as f:
                ops = json.load(f)["ops"]
            with open(summaries[0]) as f:
                untimed = json.load(f)["untimed"]
            timed = sum(o["count"] for o in ops if o["name"] in ("xt_empty_kernel", "xt_gate_kernel"))
            missed = sum(untimed.values()) - (untimed["sampled_out"] if sample == 0 else 0)
            timed_share = timed / max(1, timed + missed) if sample else 1.0
    return {name: r["real_time"] for name, r in rows.items()}, timed_share


def main():
    bench, launch, simgpu = sys.argv[1:4]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    base, timed, untimed, pair, shares = [], [], [], [], []
    for i in range(rounds):
        b, _ = run(bench, launch, simgpu, None)
        t, share = run(bench, launch, simgpu, 1)
        u, _ = run(bench, launch, simgpu, 0)
        base.append(b["BM_Launch"])
        pair.append(b["BM_EventRecordPair"])
        timed.append(t["BM_Launch"])
        untimed.append(u["BM_Launch"])
        shares.append(share)
        print(f"round {i + 1}/{rounds}: bare {b['BM_Launch']:.0f} ns, timed {t['BM_Launch']:.0f} ns, "
              f"hooked untimed {u['BM_Launch']:.0f} ns", flush=True)
    if min(shares) < 0.9:
        sys.exit(f"only {min(shares):.0%} of the launches were timed; the figures would not be about timed launches")
    bare, hooked, hooked0, events = (statistics.median(x) for x in (base, timed, untimed, pair))
    print(f"simulated runtime, median of {rounds} rounds, ns per call:")
    print(f"  cudaLaunchKernel without xtimer (baseline)  {bare:8.1f}")
    print(f"  cudaLaunchKernel timed by xtimer            {hooked:8.1f}   ({hooked / bare:.2f}x baseline; "
          f"{min(shares):.1%} of its launches timed)")
    print(f"  one start/end event-record pair             {events:8.1f}")
    print(f"  added per timed launch, all included        {hooked - bare:8.1f}")
    print(f"  added per timed launch, without the events  {hooked - bare - events:8.1f}   (target < 300)")
    print(f"  added per launch with XTIMER_KERNEL_SAMPLE=0 (no events) {hooked0 - bare:8.1f}   "
          f"({hooked0 / bare:.2f}x baseline)")


if __name__ == "__main__":
    main()
