#!/usr/bin/env python3
"""xtimer's slowdown judge beside NVIDIA's straggler detection (nvidia-resiliency-ext 0.4.1), on
the same slowdowns of real torch on the simulated GPUs.

    tests/realtorch/bench_nvrx.py --peers .peers --bin build/bin --simgpu build/lib/simgpu
        [--pypath build/lib/python] [--faults gpu,host,gc,data] [--tools xtimer,nvrx,both]
        [--healthy 30] [--watch 60] [--report 5]

Each run is check_realtorch.py's job (gpt_train.py, DDP, 2 ranks, `torchrun --standalone`,
SIMGPU_TFLOPS=0.02: a GPU-bound step): healthy for --healthy s, then rank 1's fault for up to
--watch s:
  gpu   its GPU 2x slower (gpu_factor=2)
  host  300 ms a step in prepare_batch (host_ms=300)
  gc    GC pauses (gc_objects=1000000)
  data  its DataLoader's samples 100 ms slower (--loader, data_ms=100)
Tools, one job each:
  xtimer  xtimer_launch torchrun: the judge's slowdown.json (the agent's, every second)
  nvrx    plain torchrun; gpt_train.py --nvrx-report: the Detector's section "step" around each
          step with CUDA profiling (its CUPTI module, libcupti.so.12 on the simulation), a report
          every --report s (its interval; the ranks agree on it), identify_stragglers() at its
          default thresholds (0.75) on rank 0
  both    the two in one job: nvrx's CUPTI calls reach xtimer's hand-over (its libcupti.so.12
          references bind to libxtimer_cupti_handover.so's entry points), so xtimer goes on with event
          pairs; each one's namings, and xtimer's CUPTI line
For each run: anything named while healthy, the seconds from the onset to the first naming of
rank 1, and what named it (xtimer: the cause; nvrx: which score). Prints a Markdown table.
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_realtorch import Job  # noqa: E402
from checks import load_json  # noqa: E402
from peers import peers_or_skip  # noqa: E402

FAULTS = {
    "gpu": ("rank=1 gpu_factor=2", []),
    "host": ("rank=1 host_ms=300", []),
    "gc": ("rank=1 gc_objects=1000000", []),
    "data": ("rank=1 data_ms=100", ["--loader"]),
}


def xtimer_named(job, since):
    """(wall time, what) of each finding naming a rank in the judge's verdict now."""
    found = (load_json(os.path.join(job.timeline, "slowdown.json")) or {}).get("slow", [])
    return [(time.time(), f"rank {f['rank']} {f.get('cause')}") for f in found if f.get("rank") is not None]


def nvrx_named(job, since):
    """(report time, what) of each rank rank 0's reports named after `since`."""
    named = []
    for r in job.rows("nvrx"):
        if r["nvrx"] < since:
            continue
        for kind, ranks in r.get("stragglers", {}).items():
            named += [(r["nvrx"], f"rank {k} {kind}") for k in ranks]
        for kind, by in r.get("sections", {}).items():
            named += [(r["nvrx"], f"rank {k} {kind} {name}") for name, ranks in by.items() for k in ranks]
    return named


def run(args, fault, tool):
    control, train = FAULTS[fault]
    out = tempfile.mkdtemp(prefix=f"xtimer-nvrx-{fault}-{tool}-")
    train = ["--steps", "100000", *train]
    if tool == "nvrx":
        job = Job(args, out, train + ["--nvrx-report", str(args.report)], launcher=[args.peers.torchrun])
        named_now = nvrx_named
    elif tool == "both":
        job = Job(args, out, train + ["--nvrx-report", str(args.report)])

        def named_now(job, since):
            return [(t, f"xtimer: {w}") for t, w in xtimer_named(job, since)] + [
                (t, f"nvrx: {w}") for t, w in nvrx_named(job, since)
            ]

    else:
        job = Job(args, out, train)
        named_now = xtimer_named
    row = {"fault": fault, "tool": tool, "healthy": set(), "onset_s": None, "what": "", "after": set()}
    try:
        t = time.time()
        while len(job.steps(0)) < 5 and job.proc.poll() is None and time.time() - t < 300:
            time.sleep(0.5)
        start = time.time()
        while time.time() - start < args.healthy:
            row["healthy"] |= {what for _, what in named_now(job, start)}
            time.sleep(0.5)
        job.set_control(control)
        onset = time.time()
        while time.time() - onset < args.watch:
            seen = named_now(job, onset)
            row["after"] |= {what for _, what in seen}
            first = [(t, what) for t, what in seen if what.split(": ")[-1].startswith("rank 1 ")]
            if first and row["onset_s"] is None:
                row["onset_s"], row["what"] = first[0][0] - onset, first[0][1]
            time.sleep(0.5)
        row["steps"] = len(job.steps(0))
        if tool == "both":  # what xtimer's log says of CUPTI once nvrx took it
            with open(job.log_path, errors="replace") as f:
                row["cupti"] = sorted({line.strip()[:160] for line in f if "CUPTI" in line})
    finally:
        job.kill()
    if job.proc.returncode not in (None, 0, -9) and not job.steps(0):
        print(f"bench_nvrx: the {tool} job exited {job.proc.returncode}; files in {out}:\n{job.tail()}", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--pypath", default="")
    ap.add_argument("--faults", default="gpu,host,gc,data")
    ap.add_argument("--tools", default="xtimer,nvrx")
    ap.add_argument("--healthy", type=float, default=30)
    ap.add_argument("--watch", type=float, default=60)
    ap.add_argument("--report", type=float, default=5, help="nvrx: its report interval (s)")
    args = ap.parse_args()
    args.peers = peers_or_skip(args.peers)
    rows = []
    for fault in args.faults.split(","):
        for tool in args.tools.split(","):
            row = run(args, fault, tool)
            rows.append(row)
            print(f"bench_nvrx: {row}", flush=True)
    print(
        "| fault (rank 1) | tool | named while healthy | onset -> rank 1 named | what named it | all it named after |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        at = f"{r['onset_s']:.1f} s" if r["onset_s"] is not None else f"not in {args.watch:.0f} s"
        print(
            f"| {r['fault']} | {r['tool']} | {', '.join(sorted(r['healthy'])) or 'nothing'} | {at} | "
            f"{r['what'] or '-'} | {', '.join(sorted(r['after'])) or 'nothing'} |"
        )


if __name__ == "__main__":
    main()
