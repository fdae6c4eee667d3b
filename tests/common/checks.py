"""What the Python test scripts share: a check that prints and remembers what failed, reading a
JSON file that may not be (completely) written yet, waiting for a condition, a free loopback port
and an HTTP GET that may fail.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    from checks import check, failures, load_json, wait_for
"""
import json
import socket
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
