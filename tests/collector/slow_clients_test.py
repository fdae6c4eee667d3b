#!/usr/bin/env python3
"""xtimer_collector --http against slow clients: 40 connections that send a header line
a second (more than the server's workers) do not keep other requests from being answered, are
closed by the server once their request deadline passes, and do not hold SIGTERM (four of them
blocked every request and held SIGTERM for 43 s before).

usage: slow_clients_test.py XTIMER_COLLECTOR WORKDIR
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_run import Collector  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402
from slow_http import SlowClients, timed_get  # noqa: E402

COLLECTOR, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

c = Collector(COLLECTOR, WORK)
base = f"http://127.0.0.1:{c.http_port}"
status, took = timed_get(base + "/metrics")
check(status == 200, f"/metrics answers before the slow clients ({status}, {took:.2f} s)")

slow = SlowClients(c.http_port, 40, path="/", duration=90)
time.sleep(2)  # they hold what they can
# Every request of a normal client is answered while the slow ones dribble; the generous bound
# (they dribble for 90 s) separates "answered" from "waited for the slow clients".
worst = 0.0
for path in ["/metrics", "/status.json", "/", "/metrics"]:
    status, took = timed_get(base + path)
    worst = max(worst, took)
    check(status == 200, f"GET {path} answered while 40 slow clients are connected ({status}, {took:.2f} s)")
print(f"slowest answer among the slow clients: {worst:.2f} s")
check(worst < 15, f"answers came within 15 s ({worst:.2f} s)")
time.sleep(6)  # past the request deadline (5 s)
closed = slow.closed_by_server()
check(closed == 40, f"the server closed every slow connection after its request deadline ({closed} of 40)")

# SIGTERM with slow clients connected (a fresh set, in the middle of their headers).
slow.stop()
slow = SlowClients(c.http_port, 10, path="/", duration=90)
time.sleep(1)
t0 = time.monotonic()
rc = c.stop(timeout=60)
took = time.monotonic() - t0
slow.stop()
print(f"SIGTERM to exit with 10 slow clients connected: {took:.2f} s")
check(rc == 0, f"exit status 0 after SIGTERM ({rc})")
check(took < 10, f"SIGTERM is not held by slow clients: {took:.2f} s (43 s before)")
sys.exit(1 if failures else 0)
