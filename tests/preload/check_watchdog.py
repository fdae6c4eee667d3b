#!/usr/bin/env python3
"""Hang-detection checks on the simulated runtime: what must and must not be reported.

  check_watchdog.py CHECK --bin BUILD/bin --workload PATH --simgpu DIR [--seconds 60]
  CHECK: long-op | actions | steady | fork | agent-request
"""
import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402


def run(args, out, workload_args, timeout_s, action="dump", limit=300):
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=args.simgpu,
        XTIMER_TIMELINE_PATH=out,
        XTIMER_HANG_TIMEOUT=str(timeout_s),
        XTIMER_HANG_ACTION=action,
    )
    for k in ("RANK", "WORLD_SIZE", "LD_PRELOAD"):
        env.pop(k, None)
    t0 = time.time()
    p = subprocess.run(
        [os.path.join(args.bin, "xtimer_launch"), args.workload] + workload_args,
        env=env,
        capture_output=True,
        text=True,
        timeout=limit,
    )
    return p, time.time() - t0


def stacks(out):
    return glob.glob(os.path.join(out, "*.stacktrace"))


def check_long_op(args):
    with tempfile.TemporaryDirectory() as out:
        p, elapsed = run(args, out, ["long", "5000"], 10)
        check(p.returncode == 0, "a 5 s kernel under a 10 s timeout finishes")
        check("hang" not in p.stderr and not stacks(out), "... and is not reported")
        with open(os.path.join(out, "00000-00001.summary.json")) as f:
            s = json.load(f)
        o = [o for o in s["ops"] if o["name"] == "xt_long_kernel"]
        # Its 5 s of device time at least, and no more than the whole run took (however slow).
        took = o[0]["max_us"] / 1e6 if o else None
        check(o and 5 - 0.001 <= took <= elapsed, f"... and is timed as a 5 s op ({took} s, run {elapsed:.2f} s)")
    with tempfile.TemporaryDirectory() as out:
        p, _ = run(args, out, ["long", "5000"], 2)
        check(p.returncode == 0, "the same kernel under a 2 s timeout still finishes (dump does not stop the job)")
        check(p.stderr.count("hang on rank") == 1, "... is reported once")
        files = stacks(out)
        check(len(files) == 1, "... with one stack file")
        if files:
            with open(files[0]) as f:
                s = json.load(f)
            # Event pairs: the kernel is in flight. CUPTI mode: its stream has made no progress
            # since the launch, and the kernel is the last op launched on it (preload/README.md,
            # "Two timing modes").
            check("xt_long_kernel" in s.get("trigger", ""), f"... naming xt_long_kernel: {s.get('trigger')!r}")


def check_actions(args):
    with tempfile.TemporaryDirectory() as out:
        p, _ = run(args, out, ["long", "4000"], 1, action="log")
        own = [f for f in stacks(out) if json.load(open(f)).get("reason") == "hang"]
        check(
            p.returncode == 0 and p.stderr.count("hang on rank") == 1 and not own,
            "XTIMER_HANG_ACTION=log: one log line, no stack dump of the rank's own",
        )
        # The agent still reports the hang; its (embedded) collector asks for stacks.
        asked = [f for f in stacks(out) if json.load(open(f)).get("reason") == "request"]
        check(len(asked) == 1, "... the node agent's dump round still collects them (reason request)")
    with tempfile.TemporaryDirectory() as out:
        p, elapsed = run(args, out, ["long", "30000"], 1, action="abort")
        check(p.returncode == -6, f"XTIMER_HANG_ACTION=abort: the process aborts (rc {p.returncode})")
        check(
            "finished" not in p.stdout and elapsed < 30,
            f"... while the 30 s kernel still runs, not when it ends ({elapsed:.1f} s: {p.stdout.strip()!r})",
        )
        check(len(stacks(out)) == 1, "... after writing its stack file")
        check(os.path.exists(os.path.join(out, "00000-00001.summary.json")), "... and its summary")


def check_steady(args):
    with tempfile.TemporaryDirectory() as out:
        p, elapsed = run(args, out, ["steady", str(args.seconds)], 2, limit=args.seconds * 3 + 60)
        check(p.returncode == 0, f"a healthy job ran {elapsed:.0f} s: {p.stdout.strip()}")
        check("hang" not in p.stderr and not stacks(out), "zero hang reports (1.5 s kernels, 2 s timeout)")
        with open(os.path.join(out, "00000-00001.summary.json")) as f:
            s = json.load(f)
        # Every launch the workload made (it says how many: a loaded host makes fewer) was timed.
        short = [o for o in s["ops"] if o["name"] == "xt_short_kernel"]
        made = re.search(r"steady: (\d+) launches", p.stdout)
        timed = short[0]["count"] if short else 0
        check(
            made is not None and int(made.group(1)) > 0 and timed == int(made.group(1)),
            f"short kernels were timed, every one ({timed} of {made.group(1) if made else '?'})",
        )


def check_fork(args):
    with tempfile.TemporaryDirectory() as out:
        p, _ = run(args, out, ["fork"], 5, limit=60)
        check(p.returncode == 0, f"fork/exec after CUDA init: {p.stdout.strip()} {p.stderr.strip()[-300:]}")
        with open(os.path.join(out, "00000-00001.summary.json")) as f:
            s = json.load(f)
        o = [o for o in s["ops"] if o["name"] == "xt_sleep_5ms"]
        check(o and o[0]["count"] == 10, "the parent kept timing after the forks")
        check(len(glob.glob(os.path.join(out, "*.summary.json"))) == 1, "children wrote no summaries of their own")


def fake_agent_run(args, out, request_delay_s, hang_timeout_s="1"):
    """Runs the workload's 4 s kernel with the preload under a fake node agent that sends a dump
    request `request_delay_s` after the rank reports its hang (never, if None: after 2 s of
    running instead). Returns the messages the rank sent."""
    sock_path = os.path.join(out, "agent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(sock_path)
    srv.listen(1)
    srv.settimeout(10)
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=args.simgpu,
        XTIMER_TIMELINE_PATH=out,
        XTIMER_HANG_TIMEOUT=hang_timeout_s,
        XTIMER_AGENT_SOCKET=sock_path,
        LD_PRELOAD=os.path.join(os.path.dirname(os.path.abspath(args.bin)), "lib", "libxtimer_preload.so"),
    )
    for k in ("RANK", "WORLD_SIZE"):
        env.pop(k, None)
    p = subprocess.Popen([args.workload, "long", "4000"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    msgs, asked_at = [], None
    try:
        conn, _ = srv.accept()
        conn.settimeout(0.05)
        start = time.time()
        while p.poll() is None or time.time() - start < 0.5:
            try:
                data = conn.recv(1 << 20)
                if not data:
                    break
                msgs.append(json.loads(data))
                if (
                    msgs[-1]["type"] == "status"
                    and msgs[-1]["state"] == "hung"
                    and asked_at is None
                    and request_delay_s is not None
                ):
                    asked_at = time.time() + request_delay_s
            except socket.timeout:
                pass
            if request_delay_s is None and asked_at is None and time.time() - start > 0.5:
                asked_at = time.time()
            if asked_at is not None and time.time() >= asked_at:
                conn.send(json.dumps({"type": "dump", "request_id": "round-1"}).encode())
                asked_at = float("inf")
        conn.close()
    finally:
        srv.close()
        p.kill() if p.poll() is None else None
        p.wait()
    return msgs


def check_agent_request(args):
    """A dump request that arrives right after the rank's own hang report is answered with the
    hang dump (written or being written), not by a second dump that overwrites it."""
    for delay, when in ((0, "at once"), (1.0, "1 s later (hang dump already sent)")):
        with tempfile.TemporaryDirectory() as out:
            msgs = fake_agent_run(args, out, delay)
            written = [m for m in msgs if m["type"] == "dump_written"]
            check(
                any(m["type"] == "status" and m["state"] == "hung" for m in msgs),
                f"request {when}: the rank reported its hang",
            )
            check(
                any(m["request_id"] == "round-1" for m in written),
                f"request {when}: a dump_written answers the request ({[m['request_id'] for m in written]})",
            )
            files = stacks(out)
            reasons = [json.load(open(f)).get("reason") for f in files]
            check(reasons == ["hang"], f"request {when}: the one stack file still says reason hang ({reasons})")
            check(
                all(m["path"] == files[0] for m in written) if files else False,
                f"request {when}: ... and is the file named",
            )
    with tempfile.TemporaryDirectory() as out:
        msgs = fake_agent_run(args, out, None, hang_timeout_s="30")
        written = [m for m in msgs if m["type"] == "dump_written"]
        reasons = [json.load(open(f)).get("reason") for f in stacks(out)]
        check(
            [m["request_id"] for m in written] == ["round-1"] and reasons == ["request"],
            f"a request with no hang of the rank's own writes a fresh dump (reason request: {reasons})",
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    args = ap.parse_args()
    {
        "long-op": check_long_op,
        "actions": check_actions,
        "steady": check_steady,
        "fork": check_fork,
        "agent-request": check_agent_request,
    }[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
