#!/usr/bin/env python3
"""What finding ranks out of step costs and how fast it is, on the simulated runtime.

1. Host time per collective call under xtimer_launch with the fingerprints (XTIMER_DESYNC=1)
   and without (XTIMER_DESYNC=0), rounds interleaved, medians, and their ratio; the program
   without the library as the baseline (collective_cost_bench).
2. Latency from the mismatched call to the desync verdict: four simulated ranks
   (tests/launcher/desync_rank.py) with a same-size skip, another size, another operation and a
   sub-communicator fault, each run --runs times: the time from the faulty rank's call (its own
   clock) to verdict.json's modification time, median and worst. With --across, the same on
   two nodes (two xtimer_launch agents of two ranks each, reporting to an xtimer_collector):
   the time to the collector's verdict, which compares the ranks of every node.

The first figure is a whole collective call on the simulated runtime (its stream worker and
futexes included), so on a loaded machine its noise is larger than the fingerprint's few stores;
fingerprint_bench gives the stores alone against a clock read.

  desync_bench.py BUILD_DIR [--rounds 5] [--runs 3] [--across]
"""
import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import free_port, start_collector  # noqa: E402
from node_ranks import Agents, agent_command, agent_env  # noqa: E402


def cost(build, desync, calls):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "lib", "simgpu"), XTIMER_METRICS_PORT="0")
    for k in ("LD_PRELOAD", "XTIMER_AGENT_SOCKET", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    cmd = [os.path.join(build, "tests", "collective_cost_bench"), "--calls", str(calls)]
    with tempfile.TemporaryDirectory() as out:
        env["XTIMER_TIMELINE_PATH"] = out
        if desync is not None:
            env["XTIMER_DESYNC"] = desync
            cmd = [os.path.join(build, "bin", "xtimer_launch")] + cmd
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"collective_cost_bench failed: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["ns_per_call"]


def latency(build, fault):
    with tempfile.TemporaryDirectory() as out:
        env = dict(
            os.environ,
            LD_LIBRARY_PATH=os.path.join(build, "lib", "simgpu"),
            XTIMER_TIMELINE_PATH=os.path.join(out, "tl"),
            XTIMER_METRICS_PORT="0",
            XTIMER_HANG_TIMEOUT="600",
        )
        for k in ("LD_PRELOAD", "XTIMER_AGENT_SOCKET", "RANK", "WORLD_SIZE", "XTIMER_DESYNC"):
            env.pop(k, None)
        log = os.path.join(out, "log")
        cmd = [
            os.path.join(build, "bin", "xtimer_launch"),
            sys.executable,
            os.path.join(HERE, "..", "launcher", "desync_rank.py"),
            os.path.join(build, "tests", "lib", "libpyccl.so"),
            os.path.join(out, "id"),
            "--fault",
            fault,
        ]
        with open(log, "w") as f:
            p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + 60
            found = []
            while time.time() < deadline and not found:
                found = glob.glob(os.path.join(out, "tl", "desync-*", "verdict.json"))
                time.sleep(0.02)
            if not found:
                return None
            t = os.path.getmtime(found[0])
            with open(log, errors="replace") as f:
                at = [json.loads(x)["fault_at"] for x in f if x.startswith("{") and "fault_at" in x]
            return t - at[0] if at else None
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def fault_time(logs):
    """The faulty rank's own clock at its mismatched call, from the ranks' JSON lines."""
    for path in logs:
        with open(path, errors="replace") as f:
            at = [json.loads(x)["fault_at"] for x in f if x.startswith("{") and "fault_at" in x]
        if at:
            return at[0]
    return None


def latency_across(build, fault):
    """Two agents of two ranks each and a collector: seconds to the collector's verdict."""
    bin_dir = os.path.join(build, "bin")
    with tempfile.TemporaryDirectory() as out:
        port, http = free_port(), free_port()
        col = start_collector(bin_dir, out, port, http)
        job = Agents()
        logs = []
        try:
            for node in range(2):
                env = agent_env(
                    drop=("XTIMER_DESYNC",),
                    LD_LIBRARY_PATH=os.path.join(build, "lib", "simgpu"),
                    XTIMER_TIMELINE_PATH=os.path.join(out, f"node{node}"),
                    XTIMER_METRICS_PORT="0",
                    XTIMER_HANG_TIMEOUT="600",
                    XTIMER_COLLECTOR=f"127.0.0.1:{port}",
                )
                rank_argv = [
                    os.path.join(HERE, "..", "launcher", "desync_rank.py"),
                    os.path.join(build, "tests", "lib", "libpyccl.so"),
                    os.path.join(out, "id"),
                    "--fault",
                    fault,
                ]
                logs.append(os.path.join(out, f"node{node}.log"))
                job.spawn(agent_command(bin_dir, 2, node, 4, rank_argv), env, logs[-1])
            deadline = time.time() + 60
            found = []
            while time.time() < deadline and not found:
                found = glob.glob(os.path.join(out, "collected", "desync-*", "verdict.json"))
                time.sleep(0.02)
            at = fault_time(logs)
            return os.path.getmtime(found[0]) - at if found and at is not None else None
        finally:
            job.kill()
            col.kill()
            col.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--across", action="store_true", help="also two nodes and a collector")
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    base, on, off = [], [], []
    for _ in range(args.rounds):  # interleaved: drift on a shared machine touches all alike
        base.append(cost(build, None, args.calls))
        on.append(cost(build, "1", args.calls))
        off.append(cost(build, "0", args.calls))
    b, n, f = statistics.median(base), statistics.median(on), statistics.median(off)
    print(f"host time per all-reduce call, median of {args.rounds} rounds of {args.calls} calls:")
    print(f"  without xtimer            {b:8.1f} ns")
    print(f"  xtimer, XTIMER_DESYNC=0   {f:8.1f} ns  (+{f - b:.1f} ns)")
    print(f"  xtimer, XTIMER_DESYNC=1   {n:8.1f} ns  (+{n - b:.1f} ns)")
    print(f"  fingerprints: {n - f:+.1f} ns per call; ratio with/without {n / f:.3f}")

    modes = [("one node, the agent's verdict", latency)]
    if args.across:
        modes.append(("two nodes, the collector's verdict", latency_across))
    for what, measure in modes:
        print(f"latency from the mismatched call to verdict.json, {what} ({args.runs} runs each):")
        for fault in ("skip", "size", "op", "sub"):
            ts = [measure(build, fault) for _ in range(args.runs)]
            got = [t for t in ts if t is not None]
            if not got:
                print(f"  {fault:5s} no verdict")
                continue
            print(
                f"  {fault:5s} median {statistics.median(got):.2f} s, worst {max(got):.2f} s"
                + (f" ({len(ts) - len(got)} run(s) without a verdict)" if len(got) < len(ts) else "")
            )


if __name__ == "__main__":
    main()
