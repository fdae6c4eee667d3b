#!/usr/bin/env python3
"""What xtimer adds to a kernel launch on the simulated runtime (goal: under 300 ns, all
included), in both timing modes: event-pair mode (one end event per plain kernel) and CUPTI
activity records.

Runs launch_overhead_bench in rounds, each round four processes: without the library (the
baseline), under xtimer_launch with XTIMER_CUPTI=0 timing every launch with its end event, under
xtimer_launch in CUPTI mode (the simulated libcupti.so.13 records every kernel), and with
XTIMER_CUPTI=0 XTIMER_KERNEL_SAMPLE=0 (hooked, no events). Rounds interleave so drift on a shared
machine touches all alike; the figures are medians over rounds. One cudaEventRecord (and a
start/end pair), measured in the baseline process, says what part of the added cost is the event.
BM_Step (256 launches and a sync) gives the cost per step. The timed runs must have timed (almost)
every launch, or the figure would mean nothing. The simulated libcupti's own cost is not the real
CUPTI's: the CUPTI figures say what xtimer's side costs; tests/gpu/overhead.py measures both on a
real GPU.

  launch_overhead.py BENCH XTIMER_LAUNCH SIMGPU_DIR [--rounds N] [--compare-lib OLD/libxtimer_preload.so]

--compare-lib runs the timed modes once more per round with another build of the library (the
one before a change), so "unchanged" is measured in the same run.
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(bench, launch, simgpu, mode, step=False):
    """ns per call of each benchmark; `mode` None = without the library, else (XTIMER_CUPTI,
    XTIMER_KERNEL_SAMPLE[, XTIMER_PRELOAD_LIB]) under xtimer_launch; and the share of the launches
    it timed. `step` runs BM_Step alone, else the launch benchmarks (so the share is about the
    gated launches)."""
    env = dict(os.environ, LD_LIBRARY_PATH=simgpu)
    env.pop("LD_PRELOAD", None)
    env.pop("XTIMER_PRELOAD_LIB", None)
    if mode is not None and len(mode) > 2:
        env["XTIMER_PRELOAD_LIB"] = mode[2]
        mode = mode[:2]
    with tempfile.TemporaryDirectory() as out:
        env["XTIMER_TIMELINE_PATH"] = out
        cmd = [
            bench,
            "--benchmark_format=json",
            "--benchmark_filter=" + ("BM_Step" if step else "BM_Launch|BM_EventRecord"),
        ]
        if mode is not None:
            env["XTIMER_CUPTI"], env["XTIMER_KERNEL_SAMPLE"] = mode
            cmd = [launch] + cmd
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"launch_overhead_bench failed: {p.stderr.strip()[-500:]}")
        rows = {b["name"].split("/")[0]: b for b in json.loads(p.stdout)["benchmarks"]}
        timed_share, timing_mode = None, None
        summaries = glob.glob(os.path.join(out, "*.summary.json"))
        if mode is not None:
            if not summaries:
                sys.exit("the hooks did not run: no summary was written")
            with open(summaries[0]) as f:
                s = json.load(f)
            timing_mode = s.get("timing_mode")
            ops, untimed = s["ops"], s["untimed"]
            names = ("xt_empty_kernel", "xt_gate_kernel")
            timed = sum(o["count"] for o in ops if o["name"] in names)
            if timing_mode == "cupti":
                # Launches are counted from the records: compare with what the program launched.
                launched = rows["BM_Step"]["iterations"] * 256 if step else rows["BM_Launch"]["iterations"]
                timed_share = min(1.0, timed / max(1, launched))  # warm-up runs add launches
            else:
                missed = sum(v for k, v in untimed.items() if k != "cupti_dropped")
                missed -= untimed["sampled_out"] if mode[1] == "0" else 0
                timed_share = timed / max(1, timed + missed) if mode[1] != "0" else 1.0
    times = {name: r["real_time"] for name, r in rows.items()}
    times.update({name + ":cpu": r["cpu_time"] for name, r in rows.items()})
    return times, timed_share, timing_mode


def main():
    bench, launch, simgpu = sys.argv[1:4]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    compare = sys.argv[sys.argv.index("--compare-lib") + 1] if "--compare-lib" in sys.argv else None
    modes = {"bare": None, "pairs": ("0", "1"), "cupti": ("1", "1"), "hooked": ("0", "0")}
    if compare:  # the same runs with another build of the library (before a change), interleaved
        modes.update({"pairs_before": ("0", "1", compare), "cupti_before": ("1", "1", compare)})
    launch_ns = {m: [] for m in modes}
    launch_cpu = {m: [] for m in modes}  # CPU time of the launching thread: what a busy machine moves least
    step_ns = {m: [] for m in modes}
    pair, single = [], []
    shares = {"pairs": [], "cupti": [], "pairs_before": []}
    step_shares = {"pairs": [], "cupti": []}
    for i in range(rounds):
        for m, mode in modes.items():
            r, share, timing_mode = run(bench, launch, simgpu, mode)
            if m == "cupti" and timing_mode != "cupti":
                sys.exit(f"CUPTI mode did not run (timing_mode {timing_mode}); is libcupti.so.13 in {simgpu}?")
            launch_ns[m].append(r["BM_Launch"])
            launch_cpu[m].append(r["BM_Launch:cpu"])
            rs, step_share, _ = run(bench, launch, simgpu, mode, step=True)
            step_ns[m].append(rs["BM_Step"])
            if m in step_shares:
                step_shares[m].append(step_share)
            if m == "bare":
                pair.append(r["BM_EventRecordPair"])
                single.append(r["BM_EventRecord"])
            if m in shares:
                shares[m].append(share)
        print(
            f"round {i + 1}/{rounds}: launch ns bare {launch_ns['bare'][-1]:.0f}, event pairs "
            f"{launch_ns['pairs'][-1]:.0f}, cupti {launch_ns['cupti'][-1]:.0f}, hooked untimed "
            f"{launch_ns['hooked'][-1]:.0f}; step us bare {step_ns['bare'][-1] / 1e3:.0f}, event pairs "
            f"{step_ns['pairs'][-1] / 1e3:.0f}, cupti {step_ns['cupti'][-1] / 1e3:.0f}",
            flush=True,
        )
    if min(shares["cupti"]) < 0.9:
        sys.exit(
            f"cupti: only {min(shares['cupti']):.0%} of the launches were timed; the figures would not be about "
            f"timed launches"
        )
    if min(shares["pairs"]) < 0.9:
        # A launch that found no free event skips the event record, so the event-pair figure is
        # then too low: the comparison below still holds against CUPTI mode, the < 300 ns one does not.
        print(
            f"WARNING: event-pair mode timed only {min(shares['pairs']):.0%} of the launches (the poller did not "
            f"give events back fast enough on this machine); the event-pair figures are an underestimate"
        )
    med = {m: statistics.median(v) for m, v in launch_ns.items()}
    step = {m: statistics.median(v) for m, v in step_ns.items()}
    bare, events, one = med["bare"], statistics.median(pair), statistics.median(single)
    print(f"simulated runtime, median of {rounds} rounds, ns per call:")
    print(f"  cudaLaunchKernel without xtimer (baseline)  {bare:8.1f}")
    print(
        f"  cudaLaunchKernel timed, event-pair mode     {med['pairs']:8.1f}   ({med['pairs'] / bare:.2f}x baseline; "
        f"{min(shares['pairs']):.1%} of its launches timed)"
    )
    print(
        f"  cudaLaunchKernel timed, CUPTI records       {med['cupti']:8.1f}   ({med['cupti'] / bare:.2f}x baseline; "
        f"{min(shares['cupti']):.1%} of its launches timed)"
    )
    print(f"  one cudaEventRecord                         {one:8.1f}   (a start/end pair {events:.1f})")
    print(
        f"  added per timed launch, event-pair mode     {med['pairs'] - bare:8.1f}   (target < 300, the event included)"
    )
    print(f"    of which the hooks, besides the event     {med['pairs'] - bare - one:8.1f}")
    print(f"  added per timed launch, CUPTI mode          {med['cupti'] - bare:8.1f}")
    cpu = {m: statistics.median(v) for m, v in launch_cpu.items()}
    print(
        f"  the same in CPU time of the launching thread: baseline {cpu['bare']:.1f}, added in event-pair mode "
        f"{cpu['pairs'] - cpu['bare']:.1f} (target < 300), in CUPTI mode {cpu['cupti'] - cpu['bare']:.1f}"
        + (
            f"; before: event-pair mode {cpu['pairs_before'] - cpu['bare']:.1f}, CUPTI mode "
            f"{cpu['cupti_before'] - cpu['bare']:.1f}"
            if compare
            else ""
        )
    )
    print(
        f"  added per launch with XTIMER_CUPTI=0 XTIMER_KERNEL_SAMPLE=0 (no events) {med['hooked'] - bare:8.1f}   "
        f"({med['hooked'] / bare:.2f}x baseline)"
    )
    print(
        f"  step of 256 launches + sync, us: baseline {step['bare'] / 1e3:.1f}, event-pair mode "
        f"{step['pairs'] / 1e3:.1f}, CUPTI {step['cupti'] / 1e3:.1f}"
    )
    print(
        f"  share of the step launches timed: event-pair mode {min(step_shares['pairs']):.0%} (no free event while "
        f"the pool grows counts as untimed), CUPTI {min(step_shares['cupti']):.0%}"
    )
    print(
        f"  ratio CUPTI / event-pair mode: per launch {med['cupti'] / med['pairs']:.2f}, per step "
        f"{step['cupti'] / step['pairs']:.2f}"
    )
    if compare:
        print(
            f"  before ({compare}) -> now, added per timed launch: event-pair mode {med['pairs_before'] - bare:.1f} -> "
            f"{med['pairs'] - bare:.1f}, CUPTI mode {med['cupti_before'] - bare:.1f} -> {med['cupti'] - bare:.1f}; "
            f"step us: event-pair mode {step['pairs_before'] / 1e3:.1f} -> {step['pairs'] / 1e3:.1f}, CUPTI "
            f"{step['cupti_before'] / 1e3:.1f} -> {step['cupti'] / 1e3:.1f}"
        )
        print(
            f"  before -> now, share of the launches timed in event-pair mode: "
            f"{min(shares['pairs_before']):.1%} -> {min(shares['pairs']):.1%}"
        )


if __name__ == "__main__":
    main()
