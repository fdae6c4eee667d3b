#!/usr/bin/env python3
"""The collector under load: xtimer_collector on loopback, collector_load against it (several
processes, the real gRPC API). Prints the generator's figures (p50/p99 call latency, what was lost,
the round, the collector's peak RSS); fails only when something was lost or the round is
incomplete (no timing assertion: the machine may be shared).

With the default options it then runs the same storm against a collector that does not pace
uploads (--upload-window 0, a shorter steady phase), the baseline, and prints both p99s and
their ratio: what pacing changes, measured in the same run. Then the burst of hang reports
alone (no uploads) against the collector and against NULL_COLLECTOR, the same gRPC service
with handlers that do nothing: what the collector adds to what this machine's gRPC costs.

usage: load_test.py XTIMER_COLLECTOR COLLECTOR_LOAD WORKDIR [NULL_COLLECTOR] [collector_load options...]
Default options: 1,250 agents x 8 ranks from 8 processes, reports every 10 s for 30 s, then the storm.
"""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_run import Collector  # noqa: E402

COLLECTOR, LOAD, WORK = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
NULL = sys.argv[4] if len(sys.argv) > 4 and not sys.argv[4].startswith("-") else None
OPTIONS = sys.argv[5 if NULL else 4 :]
DEFAULT = [
    "--agents",
    "1250",
    "--ranks-per-agent",
    "8",
    "--processes",
    "8",
    "--period",
    "10",
    "--steady",
    "30",
    "--storm",
    "--own-dumps",
    "--stack-kb",
    "75",
    "--culprit",
    "4321",
    "--wait",
    "240",
]
# The hang reports alone: every agent reports at once, nothing is uploaded, the run ends 2 s later.
BURST = [
    "--agents",
    "1250",
    "--ranks-per-agent",
    "8",
    "--processes",
    "8",
    "--period",
    "10",
    "--steady",
    "3",
    "--storm",
    "--no-uploads",
    "--culprit",
    "4321",
    "--wait",
    "2",
]


def run(name, options, collector_flags=(), judge_round=True):
    """One collector, one generator run; returns (exit status, the generator's output)."""
    work = os.path.join(WORK, name)
    os.makedirs(work)
    # Every rank's stacks arrive well within the wait; the round closes when the last one is in.
    c = Collector(COLLECTOR, work, *collector_flags, env={"XTIMER_DUMP_WAIT": "180", "XTIMER_LOG_LEVEL": "warn"})
    try:
        judged = ["--out", c.out, "--metrics", f"127.0.0.1:{c.http_port}"] if judge_round else []
        p = subprocess.run(
            [LOAD, "--target", c.target, *judged, "--collector-pid", str(c.proc.pid), *options],
            timeout=1800,
            capture_output=True,
            text=True,
        )
    finally:
        rc = c.stop(timeout=120)
    print(f"== {name}: collector_load {' '.join(options)}; xtimer_collector {' '.join(collector_flags)}")
    print(p.stdout + p.stderr)
    print("collector log (last lines):")
    for line in c.log_text().splitlines()[-6:]:
        print("  " + line[:300])
    # The stacks of 10,000 ranks take space: keep the verdict, drop the rest.
    for d in os.listdir(c.out) if os.path.isdir(c.out) else []:
        rdir = os.path.join(c.out, d)
        for f in os.listdir(rdir):
            if f.endswith(".stacktrace"):
                os.unlink(os.path.join(rdir, f))
    if rc != 0:
        print(f"xtimer_collector exited with {rc}")
    return p.returncode or (rc != 0), p.stdout


def burst_against_null():
    """The burst alone against NULL_COLLECTOR; returns (exit status, the generator's output)."""
    work = os.path.join(WORK, "null")
    os.makedirs(work)
    log = open(os.path.join(work, "null.log"), "w+")
    proc = subprocess.Popen([NULL, "--listen", "127.0.0.1:0"], stdout=log, stderr=log)
    try:
        port = None
        for _ in range(300):
            log.seek(0)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read())
            if m:
                port = m.group(1)
                break
            time.sleep(0.05)
        if port is None:
            print("null_collector did not start")
            return 1, ""
        p = subprocess.run([LOAD, "--target", f"127.0.0.1:{port}", *BURST], timeout=600, capture_output=True, text=True)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    print(f"== burst, null: collector_load {' '.join(BURST)}; null_collector (handlers that do nothing)")
    print(p.stdout + p.stderr)
    return p.returncode, p.stdout


def quantile(text, label, q="p99"):
    """A figure of collector_load's output: the `q` ("p50", "p99") on the line starting with `label`."""
    m = re.search(re.escape(label) + r".*?" + q + r"=([\d.]+) ms", text)
    return float(m.group(1)) if m else None


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
options = OPTIONS or DEFAULT
status, paced = run("paced", options)
if not OPTIONS:
    baseline_options = list(DEFAULT)
    baseline_options[baseline_options.index("--steady") + 1] = "10"
    base_status, unpaced = run("baseline", baseline_options, ["--upload-window", "0"])
    status = status or base_status
    print("storm p99, paced (--upload-window 16, the default) vs every agent uploading at once, same run:")
    for label in ("upload (storm):", "report, storm:", "all report+upload calls:"):
        a, b = quantile(paced, label), quantile(unpaced, label)
        ratio = f"{b / a:.1f}x lower paced" if a and b else "n/a"
        print(f"  {label:26s} {a} ms vs {b} ms ({ratio})")
if not OPTIONS and NULL:
    # The floor: what the same burst costs against a server that does nothing, same run.
    null_status, null_out = burst_against_null()
    coll_status, coll_out = run("burst", BURST, judge_round=False)
    status = status or null_status or coll_status
    label = "hang reports sent at once (the burst):"
    print(
        "the burst of hang reports alone, xtimer_collector vs a gRPC server that does nothing "
        "(null_collector), same run:"
    )
    for what in ("p50", "p99"):
        a, b = quantile(coll_out, label, what), quantile(null_out, label, what)
        ratio = f"{a / b:.2f}x the floor" if a and b else "n/a"
        print(f"  {what}: {a} ms vs {b} ms ({ratio})")
sys.exit(status)
