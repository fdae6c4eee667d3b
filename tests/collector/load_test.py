#!/usr/bin/env python3
"""The collector under load: xtimer_collector on loopback, collector_load against it (several
processes, the real gRPC API). Prints the generator's figures (p50/p99 call latency, what was lost,
the round, the collector's peak RSS); fails only when something was lost or the round is
incomplete (no timing assertion: the machine may be shared).

With the default options it then runs the same storm against a collector that does not pace
uploads (--upload-window 0, a shorter steady phase), the baseline, and prints both p99s and
their ratio: what pacing changes, measured in the same run.

usage: load_test.py XTIMER_COLLECTOR COLLECTOR_LOAD WORKDIR [collector_load options...]
Default options: 1,250 agents x 8 ranks from 8 processes, reports every 10 s for 30 s, then the storm.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_run import Collector  # noqa: E402

COLLECTOR, LOAD, WORK = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
DEFAULT = ["--agents", "1250", "--ranks-per-agent", "8", "--processes", "8", "--period", "10",
           "--steady", "30", "--storm", "--own-dumps", "--stack-kb", "75", "--culprit", "4321", "--wait", "240"]


def run(name, options, collector_flags=()):
    """One collector, one generator run; returns (exit status, the generator's output)."""
    work = os.path.join(WORK, name)
    os.makedirs(work)
    # Every rank's stacks arrive well within the wait; the round closes when the last one is in.
    c = Collector(COLLECTOR, work, *collector_flags, env={"XTIMER_DUMP_WAIT": "180", "XTIMER_LOG_LEVEL": "warn"})
    try:
        p = subprocess.run([LOAD, "--target", c.target, "--out", c.out, "--metrics", f"127.0.0.1:{c.http_port}",
                            "--collector-pid", str(c.proc.pid), *options], timeout=1800, capture_output=True, text=True)
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


def p99(text, label):
    m = re.search(re.escape(label) + r".*?p99=([\d.]+) ms", text)
    return float(m.group(1)) if m else None


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
options = sys.argv[4:] or DEFAULT
status, paced = run("paced", options)
if not sys.argv[4:]:
    baseline_options = list(DEFAULT)
    baseline_options[baseline_options.index("--steady") + 1] = "10"
    base_status, unpaced = run("baseline", baseline_options, ["--upload-window", "0"])
    status = status or base_status
    print("storm p99, paced (--upload-window 16, the default) vs every agent uploading at once, same run:")
    for label in ("upload (storm):", "report, storm:", "all report+upload calls:"):
        a, b = p99(paced, label), p99(unpaced, label)
        ratio = f"{b / a:.1f}x lower paced" if a and b else "n/a"
        print(f"  {label:26s} {a} ms vs {b} ms ({ratio})")
sys.exit(status)
