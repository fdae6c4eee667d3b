#!/usr/bin/env python3
"""The collector under load: xtimer_collector on loopback, collector_load against it (several
processes, the real gRPC API). Prints the generator's figures (p50/p99 call latency, what was lost,
the round, the collector's peak RSS); fails only when something was lost or the round is
incomplete (no timing assertion: the machine may be shared).

usage: load_test.py XTIMER_COLLECTOR COLLECTOR_LOAD WORKDIR [collector_load options...]
Default options: 1,250 agents x 8 ranks from 8 processes, reports every 10 s for 30 s, then the storm.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_run import Collector  # noqa: E402

COLLECTOR, LOAD, WORK = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
options = sys.argv[4:] or ["--agents", "1250", "--ranks-per-agent", "8", "--processes", "8", "--period", "10",
                           "--steady", "30", "--storm", "--own-dumps", "--stack-kb", "75", "--culprit", "4321",
                           "--wait", "240"]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
# Every rank's stacks arrive well within the wait; the round closes when the last one is in.
c = Collector(COLLECTOR, WORK, env={"XTIMER_DUMP_WAIT": "180", "XTIMER_LOG_LEVEL": "warn"})
try:
    p = subprocess.run([LOAD, "--target", c.target, "--out", c.out, "--metrics", f"127.0.0.1:{c.http_port}",
                        "--collector-pid", str(c.proc.pid), *options], timeout=1800)
finally:
    rc = c.stop(timeout=120)
log = c.log_text().splitlines()
print("collector log (last lines):")
for line in log[-8:]:
    print("  " + line[:300])
# The stacks of 10,000 ranks take space: keep the verdict, drop the rest.
for d in os.listdir(c.out) if os.path.isdir(c.out) else []:
    rdir = os.path.join(c.out, d)
    for f in os.listdir(rdir):
        if f.endswith(".stacktrace"):
            os.unlink(os.path.join(rdir, f))
if rc != 0:
    print(f"xtimer_collector exited with {rc}")
sys.exit(p.returncode or (rc != 0))
