#!/usr/bin/env python3
"""Step-time overhead of xtimer on a real GPU, measured in one run, in both orders.

Runs train_step.py plain and under xtimer_launch (A B B A), with only matmuls and collectives
timed (XTIMER_KERNEL_SAMPLE=0) and with every kernel timed (=1), and reports the median step
time of each. Then checks the summary: matmul TFLOPS plausible, Triton kernels present, NCCL
allreduce present.

  overhead.py --bin BUILD/bin [--steps 300]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd_prefix, steps, env_extra, out):
    env = dict(os.environ, XTIMER_TIMELINE_PATH=out, **env_extra)
    p = subprocess.run(cmd_prefix + [sys.executable, os.path.join(HERE, "train_step.py"), "--steps", str(steps)],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"train_step failed:\n{p.stderr[-4000:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    return statistics.median(json.loads(line)["step_ms"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    launch = [os.path.join(args.bin, "xtimer_launch")]
    results = {"plain": [], "sample0": [], "sample1": []}
    with tempfile.TemporaryDirectory() as out:
        for order in (("plain", "sample0", "sample1"), ("sample1", "sample0", "plain")):
            for name in order:
                prefix = [] if name == "plain" else launch
                extra = {} if name == "plain" else {"XTIMER_KERNEL_SAMPLE": name[-1]}
                results[name].append(run(prefix, args.steps, extra, out))
        base = statistics.mean(results["plain"])
        print(f"median step time, mean of both orders ({args.steps} steps each):")
        for name, label in (("plain", "without xtimer"), ("sample0", "xtimer, matmul+collective timing"),
                            ("sample1", "xtimer, every kernel timed")):
            t = statistics.mean(results[name])
            print(f"  {label:36s} {t:8.3f} ms  ({(t / base - 1) * 100:+.2f}%)  runs: {results[name]}")
        with open(os.path.join(out, "00000-00001.summary.json")) as f:
            summary = json.load(f)
    ops = summary["ops"]
    matmuls = [o for o in ops if o["kind"] == "matmul" and o.get("tflops")]
    best = max((o["tflops"] for o in matmuls), default=0)
    triton = [o["name"] for o in ops if o["name"].startswith("triton")]
    nccl = [o for o in ops if o["name"] == "ncclAllReduce"]
    print(f"best matmul class: {best:.0f} TFLOPS; Triton kernels seen: {triton[:5]}; "
          f"ncclAllReduce classes: {len(nccl)}")
    ok = 100 < best < 2000 and triton and nccl
    print("checks:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
