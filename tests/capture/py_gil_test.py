#!/usr/bin/env python3
"""A Python process whose main thread is stuck in a C call that holds the GIL is dumped on the
dump signal: its Python stack is captured all the same, the main thread is marked as the GIL
holder, the blocked read() is not failed, and the process finishes normally afterwards. Each
thread carries the name threading gave it (read without the GIL while the main thread holds it).

usage: py_gil_test.py INTERPRETER LIBRARY [--symbolized]"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

interp, lib = sys.argv[1], sys.argv[2]
want_symbols = "--symbolized" in sys.argv
here = os.path.dirname(os.path.abspath(__file__))
out_dir = tempfile.mkdtemp(prefix="xtimer-py-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
atexit.register(shutil.rmtree, out_dir, True)
path = os.path.join(out_dir, "00000-00001.stacktrace")
env = dict(os.environ)
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
    env.pop(k, None)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


proc = subprocess.Popen(
    [interp, os.path.join(here, "py_target.py"), lib, out_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
)
try:
    if proc.stdout.readline().strip() != b"ready":
        fail("target did not start")
    time.sleep(0.3)  # now inside read(), GIL held
    os.kill(proc.pid, signal.SIGUSR2)
    deadline = time.time() + 30
    dump = None
    while time.time() < deadline:
        try:
            with open(path) as f:
                dump = json.load(f)
            if not want_symbols or dump.get("symbolized"):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    if dump is None:
        fail("no stack file")
    if want_symbols and not dump.get("symbolized"):
        fail("stack file not symbolised")
    proc.stdin.write(b"x")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=30)
finally:
    if proc.poll() is None:
        proc.kill()
if proc.returncode != 0 or b"done 120" not in out:
    fail(f"target did not finish normally: rc={proc.returncode} out={out!r}")

print("python:", dump["capture"]["python"], "reason:", dump["reason"])
if dump["reason"] != "signal":
    fail("reason is not signal")
main = [t for t in dump["threads"] if t["main"]]
if len(main) != 1:
    fail("no main thread")
main = main[0]
py_funcs = [f["function"] for f in main["python"]]
print("main thread python frames (root first):", py_funcs, "holds_gil:", main["holds_gil"])
if not py_funcs or py_funcs[0] != "<module>" or py_funcs[-1] != "stuck_with_gil":
    fail("main thread's Python stack is not <module> ... stuck_with_gil")
if main["holds_gil"] is not True:
    fail("main thread is not marked as holding the GIL")
workers = [t for t in dump["threads"] if any(f["function"] == "worker_sleeping" for f in t["python"])]
if len(workers) != 1:
    fail("worker thread's Python stack not found")
if workers[0]["holds_gil"] is not False:
    fail("worker thread marked as holding the GIL")
if sum(1 for t in dump["threads"] if t["holds_gil"]) != 1:
    fail("more than one GIL holder")
# The names threading gave the threads, read without the GIL (non-ASCII ones included).
print("python names:", [t.get("python_name") for t in dump["threads"]], dump["capture"].get("python_thread_names"))
if dump["capture"].get("python_thread_names") != "ok":
    fail("thread names not read: %s" % dump["capture"].get("python_thread_names"))
if main.get("python_name") != "MainThread":
    fail("main thread's Python name is %r, not MainThread" % main.get("python_name"))
if workers[0].get("python_name") != "py-worker \u00e9\u5de5\U0001f9f5":
    fail("worker thread's Python name is %r" % workers[0].get("python_name"))
if want_symbols:
    names = [f.get("function", "") for f in main["native"]]
    if not any("xtc_read_byte_holding_gil" in n for n in names):
        fail(f"native frames of the main thread lack xtc_read_byte_holding_gil: {names}")
    print("main thread native frames:", len(names), "e.g.", [n for n in names if n][-4:])
print("OK")
