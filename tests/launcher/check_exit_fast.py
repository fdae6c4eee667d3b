#!/usr/bin/env python3
"""A short job under xtimer_launch ends when its command ends, whatever the outside does:

  slow-metrics   ten connections send the agent's /metrics a header line a second (kept a 3 s job
                 alive for 42-46 s before);
  collector      XTIMER_COLLECTOR points at a closed port, at a collector that wants another token,
                 and at a port that accepts connections but never answers (each added 3-4 s to
                 every job's exit before).

The bounds are generous (seconds above the command's own time); the figures are printed.

usage: check_exit_fast.py slow-metrics|collector --bin BUILD/bin [--collector XTIMER_COLLECTOR]
"""
import argparse
import re
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, free_port, wait_for  # noqa: E402
from slow_http import SlowClients, timed_get  # noqa: E402


def launch(binary, command, env):
    e = {**os.environ, **env}
    for k in ("LD_PRELOAD", "XTIMER_AGENT_SOCKET"):
        e.pop(k, None)
    return subprocess.Popen([binary, *command], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def slow_metrics(args, work):
    port = free_port()
    t0 = time.monotonic()
    p = launch(
        os.path.join(args.bin, "xtimer_launch"),
        ["sleep", "3"],
        {"XTIMER_METRICS_PORT": str(port), "XTIMER_TIMELINE_PATH": work},
    )
    up = wait_for(lambda: timed_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200, 10)
    check(up, "the agent serves /metrics")
    slow = SlowClients(port, 10, duration=90)
    status, took = timed_get(f"http://127.0.0.1:{port}/metrics")
    check(status == 200, f"/metrics answers with 10 slow clients connected ({status}, {took:.2f} s)")
    out, _ = p.communicate(timeout=120)
    wall = time.monotonic() - t0
    slow.stop()
    print(out)
    print(f"a 3 s job with 10 slow /metrics clients ended after {wall:.2f} s")
    check(p.returncode == 0, f"exit status of the command passed through ({p.returncode})")
    check(wall < 10, f"the job ended within 10 s ({wall:.2f} s; 42-46 s before)")


def collector(args, work):
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write("right-token\n")
    os.chmod(token, 0o600)
    wrong = os.path.join(work, "wrong")
    with open(wrong, "w") as f:
        f.write("wrong-token\n")
    # A collector that wants `token`.
    log = open(os.path.join(work, "collector.log"), "w")
    coll = subprocess.Popen(
        [args.collector, "--listen", "127.0.0.1:0", "--out", os.path.join(work, "out"), "--token-file", token],
        stdout=log,
        stderr=log,
    )
    grpc_port = None

    def started():
        nonlocal grpc_port
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(os.path.join(work, "collector.log")).read())
        grpc_port = int(m.group(1)) if m else None
        return grpc_port is not None

    check(wait_for(started, 30), "the collector started")
    # A port that accepts (the kernel completes the handshake) and never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    cases = [
        ("closed port", {"XTIMER_COLLECTOR": f"127.0.0.1:{free_port()}"}),
        ("wrong token", {"XTIMER_COLLECTOR": f"127.0.0.1:{grpc_port}", "XTIMER_COLLECTOR_TOKEN_FILE": wrong}),
        ("silent port", {"XTIMER_COLLECTOR": f"127.0.0.1:{silent.getsockname()[1]}"}),
    ]
    # The same short command with no collector at all: the baseline of this machine, this run.
    base = []
    for _ in range(2):
        t0 = time.monotonic()
        p = launch(
            os.path.join(args.bin, "xtimer_launch"),
            ["sleep", "0.5"],
            {"XTIMER_METRICS_PORT": "0", "XTIMER_TIMELINE_PATH": work},
        )
        p.communicate(timeout=60)
        base.append(time.monotonic() - t0)
    baseline = min(base)
    print(f"baseline (embedded collector): {baseline:.2f} s")
    for name, env in cases:
        # The fastest of up to three runs, as for the baseline: scheduling can only make a run
        # longer, and a link that waits 3-4 s for its collector makes every run longer.
        wall = None
        for _ in range(3):
            t0 = time.monotonic()
            p = launch(
                os.path.join(args.bin, "xtimer_launch"),
                ["sleep", "0.5"],
                {"XTIMER_METRICS_PORT": "0", "XTIMER_TIMELINE_PATH": work, **env},
            )
            out, _ = p.communicate(timeout=120)
            took = time.monotonic() - t0
            print(f"--- {name}: {took:.2f} s\n{out}")
            check(p.returncode == 0, f"{name}: the command's exit status ({p.returncode})")
            wall = took if wall is None else min(wall, took)
            if wall < baseline + 2:
                break
        # One second is what a link that never reached its collector may wait (kFirstContactWait).
        check(
            wall < baseline + 2,
            f"{name}: exit {wall - baseline:.2f} s after the baseline "
            f"({wall:.2f} vs {baseline:.2f} s; 3-4 s more before)",
        )
    silent.close()
    coll.terminate()
    coll.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["slow-metrics", "collector"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--collector")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="xtimer-exit-fast-")
    try:
        (slow_metrics if args.check == "slow-metrics" else collector)(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
