#!/usr/bin/env python3
"""xtimer_run --evict-slow-nodes against its goal, on the simulated runtime: 4 nodes and a spare
(tests/launcher/check_evict.py's job: etcd, a collector, train_rank.py's loop), node 2's GPU at
half speed `--warmup` seconds after the four train. Two runs of `--seconds` each, with the
thresholds' defaults (--evict-slow-cost 0.2, --evict-slow-after 10):

  evict  --evict-slow-nodes: node 2 leaves, the spare takes its place
  keep   without the flag: the job goes on at the slow node's pace

Prints the seconds from the onset to the eviction and to the job's step time back within 10% of
its healthy value (goal: 45 s), and the job's steps over the run in both, with their ratio.

  evict_bench.py --bin BUILD/bin --lib libslowdown_train.so --simgpu DIR [--python PY]
                 [--seconds 300] [--warmup 30]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import check_evict  # noqa: E402
from checks import wait_for  # noqa: E402

GOAL_S = 45


def one(args, evict):
    out = tempfile.mkdtemp(prefix=f"xtimer-evict-bench-{'evict' if evict else 'keep'}-")
    job = check_evict.Job(args, out, 4, 1, "4:4", evict)
    result = {}
    try:
        if not wait_for(lambda: job.training(4), 120, 0.2):
            sys.exit("the four nodes did not start training (files in " + out + ")")
        t0 = time.time()
        s0 = job.steps_done()
        healthy, onset = check_evict.slow_gpu_episode(job, args.warmup)
        slow = job.nodes[check_evict.SLOW_NODE]
        if evict:
            wait_for(lambda: slow.first(check_evict.EVICTED)[0] is not None, 120, 0.2)
            t_evict = slow.first(check_evict.EVICTED)[0]
            back = check_evict.recovered_at(job, t_evict, healthy) if t_evict else None
            result.update(evict_s=(t_evict - onset) if t_evict else None, back_s=(back - onset) if back else None)
        left = t0 + args.seconds - time.time()
        if left > 0:
            time.sleep(left)
        result.update(healthy=healthy, steps=job.steps_done() - s0, seconds=time.time() - t0)
        result["slow_step"] = sorted(job.step_times(onset + 15, onset + 25) or [0])[-1]
    finally:
        job.stop()
    shutil.rmtree(out, ignore_errors=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--warmup", type=float, default=30)
    args = ap.parse_args()
    ev = one(args, True)
    keep = one(args, False)
    fmt = lambda x: "never" if x is None else f"{x:.1f} s"  # noqa: E731
    print(
        f"evict: healthy step {ev['healthy']:.3f} s; slow GPU onset -> eviction {fmt(ev.get('evict_s'))}, "
        f"-> step time back within 10% {fmt(ev.get('back_s'))} (goal {GOAL_S} s: "
        f"{'met' if ev.get('back_s') is not None and ev['back_s'] <= GOAL_S else 'NOT met'})"
    )
    print(f"evict: {ev['steps']} steps in {ev['seconds']:.0f} s")
    print(f"keep:  {keep['steps']} steps in {keep['seconds']:.0f} s (step while slow {keep['slow_step']:.3f} s)")
    ratio = ev["steps"] / keep["steps"] if keep["steps"] else float("nan")
    print(f"steps with eviction / without: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
