#!/usr/bin/env python3
"""Kernels compiled by nvcc 13, launched with <<<...>>> (__cudaLaunchKernel with a cudaKernel_t,
as PyTorch 2.15's are), are timed and named in CUPTI mode (its callbacks and records). Event-pair
mode does not see them: the library exports only cu*/nccl* hooks, and __cudaLaunchKernel is not
one (docs/design.md, "Timing modes").

  check_nvcc_launch.py --bin BUILD/bin --program simgpu_registered_kernels_test --simgpu DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402

WANT = ("add_one(float*, int)", "void demo::scale<float>(float*, float)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    for cupti, mode in (("1", "cupti"),):
        out = tempfile.mkdtemp(prefix=f"xtimer-nvcc-{mode}-")
        env = dict(
            os.environ, LD_LIBRARY_PATH=args.simgpu, XTIMER_TIMELINE_PATH=out, XTIMER_CUPTI=cupti, SIMGPU_TFLOPS="0.1"
        )
        env["SIMGPU_CONTROL"] = os.path.join(out, "control")
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD"):
            env.pop(k, None)
        cmd = [
            os.path.join(args.bin, "xtimer_launch"),
            args.program,
            # Every case but the stuck kernel (which never completes): the job runs long enough for
            # the poller to see its events (a process that exits within its first second loses
            # its event-pair timings; CUPTI's records are flushed at exit).
            "--gtest_filter=-*Stuck*",
        ]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"{mode}: the nvcc-compiled program ran under xtimer_launch ({p.returncode})")
        try:
            with open(os.path.join(out, "00000-00001.summary.json")) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            summary = {}
        kernels = {o["name"]: o for o in summary.get("ops", []) if o.get("kind") == "kernel"}
        check(summary.get("timing_mode") == mode, f"{mode}: the summary says so ({summary.get('timing_mode')})")
        for name in WANT:
            check(
                kernels.get(name, {}).get("launches", 0) >= 1,
                f"{mode}: {name} is named ({ {k: v.get('launches') for k, v in kernels.items()} })",
            )
        subprocess.run(["rm", "-rf", out])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
