"""What the Python test scripts share: a check that prints and remembers what failed, reading a
JSON file that may not be (completely) written yet, waiting for a condition, a free loopback port,
an HTTP GET that may fail, promtool's judgement of a /metrics text, and an xtimer_collector on
loopback, and the killing of every process of a test's job.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    from checks import check, failures, load_json, wait_for
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

failures = []


def check(cond, what):
    """Prints `ok   what` or `FAIL what`, remembers failures; returns `cond`."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def load_json(path):
    """The parsed file, or None if it is missing or not (yet) valid JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def wait_for(pred, timeout, step=0.05):
    """Calls `pred` until it returns something true or `timeout` seconds pass; its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    """The body of a GET, or None when it fails (refused, timed out, an HTTP error)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def promtool_ok(text, what):
    """promtool parses the exposition strictly and lints names (e.g. counters end in _total)."""
    if shutil.which("promtool") is None:
        return check(False, "promtool is installed (Debian: prometheus)")
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    return check(p.returncode == 0, f"{what}: promtool check metrics accepts it {(p.stdout + p.stderr).strip()[:300]}")


def start_collector(bin_dir, out, port, http, extra=(), log_mode="w", wait_s=20):
    """xtimer_collector with gRPC on 127.0.0.1:port and HTTP on 127.0.0.1:http, its rounds in
    out/collected and its log in out/collector.log; returns the process once /metrics answers
    (or after wait_s)."""
    log = open(os.path.join(out, "collector.log"), log_mode)
    proc = subprocess.Popen(
        [
            os.path.join(bin_dir, "xtimer_collector"),
            "--listen",
            f"127.0.0.1:{port}",
            "--out",
            os.path.join(out, "collected"),
            "--http",
            f"127.0.0.1:{http}",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for(lambda: http_get(f"http://127.0.0.1:{http}/metrics") is not None, wait_s, step=0.1)
    return proc


def kill_mentioning(text):
    """SIGKILLs every process whose command line contains `text` (a test's own temporary folder):
    the workers that torchrun starts in sessions of their own outlive a SIGKILL of the launcher's
    process group. Returns how many it killed."""
    killed = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed
