#!/usr/bin/env python3
"""The CUPTI timing backend on a real GPU, with real Triton kernels from torch.compile.

Runs train_step.py (bf16 nn.Linear matmuls through cuBLAS/cuBLASLt, a torch.compile'd Triton
kernel, a single-rank NCCL allreduce per step) under xtimer_launch three times and checks:
  - CUPTI mode (the default): timing_mode is cupti; the Triton kernels (launched by Triton's
    launcher through a dlsym'd cuLaunchKernelEx) are counted, at least once per step, and timed;
    matmuls keep their names, shapes and TFLOPS, ncclAllReduce its bandwidth; no cuBLAS or NCCL
    kernel is counted a second time as a plain kernel;
  - XTIMER_CUPTI=0: event_pairs, timing_note says so; what it sees of the Triton kernels is
    printed (0 when Triton launches through dlsym, the reason for CUPTI);
  - slot taken: with torch.profiler recording CUDA activity from the first line (its CUPTI
    subscriber comes first), xtimer falls back to event pairs and says so.

  cupti_check.py --bin BUILD/bin [--steps 100]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(args, extra_env, pre=None):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, XTIMER_TIMELINE_PATH=out, **extra_env)
        cmd = [os.path.join(args.bin, "xtimer_launch"), sys.executable]
        if pre:
            cmd += ["-c", pre, os.path.join(HERE, "train_step.py")]
        else:
            cmd += [os.path.join(HERE, "train_step.py")]
        cmd += ["--steps", str(args.steps)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            sys.exit(f"train_step failed:\n{p.stderr[-4000:]}")
        with open(os.path.join(out, "00000-00001.summary.json")) as f:
            return json.load(f), p.stderr


def gemm_like(name):
    n = name.lower()
    return any(k in n for k in ("gemm", "xmma", "nvjet", "cutlass", "ncclkernel", "nccldevkernel"))


# Runs train_step.py with torch.profiler recording CUDA activity from its first line.
PROFILED = """
import runpy, sys, torch
sys.argv = sys.argv[1:]
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()

    s, _ = run(args, {"XTIMER_CUPTI": "1"})
    ops = s["ops"]
    check(s.get("timing_mode") == "cupti", f"CUPTI mode ran ({s.get('timing_mode')}, {s.get('timing_note')})")
    triton = [o for o in ops if o["kind"] == "kernel" and o["name"].startswith("triton")]
    check(
        bool(triton) and all(o["count"] >= args.steps for o in triton),
        f"Triton kernels counted at least once per step: {[(o['name'], o['count']) for o in triton][:6]}",
    )
    check(all(o["p50_us"] > 0 for o in triton), "... and timed")
    matmuls = [o for o in ops if o["kind"] == "matmul" and o.get("tflops")]
    check(
        bool(matmuls) and all(o["name"].startswith("cublas") for o in matmuls),
        f"matmuls keep their cuBLAS names and TFLOPS: {[(o['name'], round(o['tflops'])) for o in matmuls][:4]}",
    )
    nccl = [o for o in ops if o["name"] == "ncclAllReduce"]
    check(bool(nccl) and nccl[0].get("busbw_gbps") is not None, "ncclAllReduce keeps its name and bandwidth")
    twice = [o["name"] for o in ops if o["kind"] == "kernel" and gemm_like(o["name"])]
    check(not twice, f"no cuBLAS/NCCL kernel counted again as a plain kernel: {twice[:4]}")
    check(s["untimed"].get("cupti_dropped", 0) == 0, "no CUPTI record dropped")
    cupti_triton = {o["name"]: o for o in triton}

    s, err = run(args, {"XTIMER_CUPTI": "0"})
    check(
        s.get("timing_mode") == "event_pairs" and s.get("timing_note") == "XTIMER_CUPTI=0",
        "XTIMER_CUPTI=0: event pairs, the summary says why",
    )
    check(err.count("CUPTI not used") == 1, "... and the log says so once")
    seen = {o["name"]: o for o in s["ops"] if o["name"] in cupti_triton}
    print(f"     event pairs see {len(seen)} of {len(cupti_triton)} Triton kernel classes")
    for name, o in seen.items():
        ratio = cupti_triton[name]["p50_us"] / o["p50_us"]
        print(
            f"     {name}: p50 CUPTI {cupti_triton[name]['p50_us']:.1f} us / event pair {o['p50_us']:.1f} us "
            f"= {ratio:.2f}"
        )

    s, err = run(args, {"XTIMER_CUPTI": "1"}, pre=PROFILED)
    note = s.get("timing_note", "")
    check(
        s.get("timing_mode") == "event_pairs" and "subscriber" in note,
        f"torch.profiler holds the slot: event pairs, the note says why ({note!r})",
    )

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
