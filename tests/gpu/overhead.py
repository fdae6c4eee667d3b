#!/usr/bin/env python3
"""Step-time overhead of xtimer on a real GPU, measured in one run, in both orders.

Runs train_step.py plain and under xtimer_launch (A B C D D C B A): event pairs with only matmuls
and collectives timed (XTIMER_CUPTI=0 XTIMER_KERNEL_SAMPLE=0), event pairs on every hooked kernel
(XTIMER_CUPTI=0), and CUPTI activity records (XTIMER_CUPTI=1), and reports the median
step time of each and the CUPTI / event-pair ratio. Then checks the CUPTI run's summary: CUPTI
mode ran, matmul TFLOPS plausible, Triton kernels present, NCCL allreduce present.

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
    p = subprocess.run(
        cmd_prefix + [sys.executable, os.path.join(HERE, "train_step.py"), "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
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
    modes = {
        "plain": None,
        "sample0": {"XTIMER_CUPTI": "0", "XTIMER_KERNEL_SAMPLE": "0"},
        "sample1": {"XTIMER_CUPTI": "0", "XTIMER_KERNEL_SAMPLE": "1"},
        "cupti": {"XTIMER_CUPTI": "1"},
    }
    results = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as out:
        for order in (list(modes), list(reversed(modes))):
            for name in order:
                prefix = [] if modes[name] is None else launch
                os.makedirs(os.path.join(out, name), exist_ok=True)
                results[name].append(run(prefix, args.steps, modes[name] or {}, os.path.join(out, name)))
        base = statistics.mean(results["plain"])
        print(f"median step time, mean of both orders ({args.steps} steps each):")
        for name, label in (
            ("plain", "without xtimer"),
            ("sample0", "xtimer, matmul+collective timing"),
            ("sample1", "xtimer, event pairs, hooked kernels"),
            ("cupti", "xtimer, CUPTI, every kernel"),
        ):
            t = statistics.mean(results[name])
            print(f"  {label:36s} {t:8.3f} ms  ({(t / base - 1) * 100:+.2f}%)  runs: {results[name]}")
        print(
            f"  ratio CUPTI / event pairs per step: "
            f"{statistics.mean(results['cupti']) / statistics.mean(results['sample1']):.3f}"
        )
        with open(os.path.join(out, "cupti", "00000-00001.summary.json")) as f:
            summary = json.load(f)
    ops = summary["ops"]
    matmuls = [o for o in ops if o["kind"] == "matmul" and o.get("tflops")]
    best = max((o["tflops"] for o in matmuls), default=0)
    triton = [o["name"] for o in ops if o["name"].startswith("triton")]
    nccl = [o for o in ops if o["name"] == "ncclAllReduce"]
    print(
        f"best matmul class: {best:.0f} TFLOPS; Triton kernels seen: {triton[:5]}; "
        f"ncclAllReduce classes: {len(nccl)}"
    )
    mode = summary.get("timing_mode")
    print(f"timing mode of the last run (CUPTI): {mode} {summary.get('timing_note', '')}")
    ok = 100 < best < 2000 and triton and nccl and mode == "cupti"
    print("checks:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
