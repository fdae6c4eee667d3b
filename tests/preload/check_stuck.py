#!/usr/bin/env python3
"""A GPU op that never finishes while the host thread does something else, on the simulated
runtime, in the timing mode XTIMER_CUPTI selects (CUPTI by default, event pairs with 0).

  check_stuck.py CHECK --bin BUILD/bin --workload cupti_workload --lib libpyccl.so --simgpu DIR
  CHECK:
    ranks   four ranks, each under its own xtimer_launch, no collector: rank 1 launches a long
            kernel and sleeps in Python, the others wait in an allreduce rank 1 never joins.
            Every rank writes a stack file on its own; rank 1's names the kernel and its stream;
            xtimer_stacktrace_viewer --path names rank 1 as not in the allreduce.
    dlsym   a kernel launched through a dlsym'd cuLaunchKernelEx runs past the timeout while the
            host works. CUPTI mode: found while the host works, kernel and stream named. Event
            pairs cannot see such a launch: found once the host blocks in cudaStreamSynchronize.
    graph   a graph replay whose second kernel runs past the timeout, launched by cudaGraphLaunch
            (both modes: found while the host works) and by a dlsym'd cuGraphLaunch (CUPTI mode
            only; event pairs find the cudaStreamSynchronize).
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, load_json, wait_for  # noqa: E402

import hang_job  # noqa: E402  (tests/preload)

HERE = os.path.dirname(os.path.abspath(__file__))
CUPTI = os.environ.get("XTIMER_CUPTI") != "0"
MODE = "CUPTI" if CUPTI else "event pairs"


def wall(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def env_for(args, out, timeout):
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=args.simgpu,
        XTIMER_TIMELINE_PATH=out,
        XTIMER_HANG_TIMEOUT=str(timeout),
        XTIMER_METRICS_PORT="0",
    )
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD"):
        env.pop(k, None)
    return env


def stuck_op(stack, name):
    return next((o for o in stack.get("inflight_ops", []) if o["name"] == name and o["state"] == "running"), None)


def check_named(stack, name, label):
    """The stack file's trigger and in-flight list name the stuck op and its stream."""
    op = stuck_op(stack, name)
    trigger = stack.get("trigger", "")
    check(
        op is not None, f"{label}: {name} is in flight, running ({[o['name'] for o in stack.get('inflight_ops', [])]})"
    )
    if op is None:
        return
    check(
        name in trigger and op["stream"] in trigger,
        f"{label}: the trigger names {name} and stream {op['stream']}: " f"{trigger!r}",
    )
    if CUPTI and op["kind"] == "kernel" and not op["name"].endswith("GraphLaunch"):
        check(
            op.get("last_on_stream") is True and "no progress" in trigger,
            f"{label}: as the last op launched on a stream that made no progress ({op})",
        )


def check_ranks(args):
    world, stuck, timeout = 4, 1, 2.0
    out = tempfile.mkdtemp(prefix="xtimer-stuck-")
    timeline = os.path.join(out, "timeline")
    procs, kernel_at = [], {}

    def on_message(msg):
        if "kernel_at" in msg:
            kernel_at[msg["rank"]] = msg["kernel_at"]

    try:
        for r in range(world):
            env = dict(env_for(args, timeline, timeout), RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r))
            p = hang_job.start_rank(args, out, env, r, world, stuck, 1, on_message, ["--stuck-kernel-ms", "60000"])
            procs.append(p)

        def stack(r):
            return load_json(os.path.join(timeline, f"{r:05d}-{world:05d}.stacktrace"))

        wait_for(lambda: all(stack(r) for r in range(world)), 30)
        for r in range(world):
            s = stack(r)
            check(
                s is not None and s["reason"] == "hang", f"{MODE}: rank {r} wrote a stack file on its own (reason hang)"
            )
        s = stack(stuck)
        if s:
            check_named(s, "pyccl_stuck_kernel", f"{MODE}: rank {stuck}")
            if stuck in kernel_at:
                # Found by the watchdog, at its timeout: a scheduler-proof margin (5 timeouts) that a
                # watchdog firing late by a multiple of its timeout still exceeds.
                delay = wall(s["time"]) - kernel_at[stuck]
                check(
                    delay <= 5 * timeout,
                    f"{MODE}: rank {stuck} found it {delay:.2f} s after the launch " f"(timeout {timeout} s)",
                )
            main = [t for t in s["threads"] if t.get("main")]
            fns = [f["function"] for f in main[0].get("python", [])] if main else []
            check(fns[-2:] == ["train_step", "load_batch"], f"{MODE}: rank {stuck} sleeps in load_batch ({fns})")
        for r in range(world):
            if r != stuck and stack(r):
                check(stuck_op(stack(r), "ncclAllReduce") is not None, f"{MODE}: rank {r} waits in ncclAllReduce")

        merged = os.path.join(out, "merged")
        p = subprocess.run(
            [os.path.join(args.bin, "xtimer_stacktrace_viewer"), "--path", timeline, "--out", merged],
            capture_output=True,
            text=True,
            timeout=120,
        )
        check(p.returncode == 0, f"{MODE}: the viewer merged the stack files: {p.stdout.strip()[:300]}")
        verdict = load_json(os.path.join(merged, "verdict.json")) or {}
        check(verdict.get("ranks_missing") in ([], ""), f"{MODE}: no rank missing ({verdict.get('ranks_missing')})")
        named = [x for x in verdict.get("suspects", []) if x.get("rank") == stuck]
        check(
            bool(named)
            and "absent" in named[0].get("kinds", [])
            and any("load_batch" in f for f in named[0].get("frames", [])),
            f"{MODE}: the verdict names rank {stuck}, not in the allreduce, in load_batch ({named})",
        )
        check(
            all(x.get("rank") == stuck for x in verdict.get("suspects", [])),
            f"{MODE}: and no other rank ({[x.get('rank') for x in verdict.get('suspects', [])]})",
        )
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
    if not failures:
        subprocess.run(["rm", "-rf", out])
    else:
        print(f"files kept in {out}")


def run_workload(args, argv, timeout=1):
    """Runs cupti_workload ARGV under xtimer_launch; (the one stack file or None, the launch time,
    how many stack files, when the host work ended)."""
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run(
            [os.path.join(args.bin, "xtimer_launch"), args.workload] + argv,
            env=env_for(args, out, timeout),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if not check(p.returncode == 0, f"{' '.join(argv)}: ran to the end"):
            print(f"exit status {p.returncode}\n{p.stdout}\n{p.stderr[-2000:]}")
        launched = next((json.loads(l)["launched_at"] for l in p.stdout.splitlines() if "launched_at" in l), None)
        host_done = next((json.loads(l)["host_done_at"] for l in p.stdout.splitlines() if "host_done_at" in l), None)
        files = [f for f in os.listdir(out) if f.endswith(".stacktrace")]
        stack = load_json(os.path.join(out, files[0])) if len(files) == 1 else None
        return stack, launched, len(files), host_done


def check_found(args, argv, name, while_host_works, label):
    """`name` is found stuck while the host works (the stack file's time is before the workload
    said its host work ended: an order, which a late thread cannot turn around while the host
    works 6 timeouts long), or only once the host blocks in cudaStreamSynchronize."""
    stack, launched, n, host_done = run_workload(args, argv)
    check(n == 1 and stack is not None and stack["reason"] == "hang", f"{label}: one stack file, reason hang ({n})")
    if stack is None or launched is None or host_done is None:
        return
    found = wall(stack["time"])
    if while_host_works:
        check(
            found < host_done,
            f"{label}: found while the host works ({found - launched:.2f} s after the launch; "
            f"host work ended {host_done - launched:.2f} s after it)",
        )
        check_named(stack, name, label)
    else:
        check(
            found >= host_done and "cudaStreamSynchronize" in stack.get("trigger", ""),
            f"{label}: found once the host blocks in cudaStreamSynchronize "
            f"({found - host_done:.2f} s after its host work, {stack.get('trigger')!r})",
        )


def check_dlsym(args):
    check_found(args, ["stuck-dlsym", "8000", "6000"], "cupti_stuck_kernel", CUPTI, f"{MODE}: dlsym'd cuLaunchKernelEx")


def check_graph(args):
    check_found(args, ["stuck-graph", "8000", "6000"], "cudaGraphLaunch", True, f"{MODE}: cudaGraphLaunch replay")
    check_found(
        args, ["stuck-graph", "8000", "6000", "dlsym"], "cuGraphLaunch", CUPTI, f"{MODE}: dlsym'd cuGraphLaunch replay"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["ranks", "dlsym", "graph"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    {"ranks": check_ranks, "dlsym": check_dlsym, "graph": check_graph}[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
