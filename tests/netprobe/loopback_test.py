#!/usr/bin/env python3
"""Whole xtimer_netprobe runs over loopback; no root, no namespaces, no GPU.

  loopback_test.py --bin build/bin/xtimer_netprobe [--out DIR]

Checks exit codes (0 healthy, 1 problems, 2 probe failed), the JSON report, node 0 hosting the
rendezvous, a node that never starts (missing, within the deadline), hostile input to the
rendezvous and to a node (one line on stderr, never a crash or a hang), and bad flags.
Exit status 0 when every case passed, else 1.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

BIN = None
OUT = None
failures = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(args, name, env=None):
    log = open(os.path.join(OUT, name + ".log"), "w")
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen([BIN, *args], stdout=log, stderr=subprocess.STDOUT, env=e)


def finish(p, name, limit):
    try:
        rc = p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = "hung"
    with open(os.path.join(OUT, name + ".log")) as f:
        return rc, f.read()


def check(case, cond, what):
    if not cond:
        failures.append(f"{case}: {what}")
        print(f"  FAIL {what}")
    return cond


def case_healthy():
    """4 nodes, node 0 hosts the rendezvous: all ok, one round, exit 0, a full report each."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "4", "--timeout", "10", "--size", "2M"]
    procs = [
        start([*common, "--node-rank", str(i), "--json", os.path.join(OUT, f"healthy{i}.json")], f"healthy{i}")
        for i in range(4)
    ]
    results = [finish(p, f"healthy{i}", 60) for i, p in enumerate(procs)]
    for i, (rc, log) in enumerate(results):
        check("healthy", rc == 0, f"node {i} exit {rc}, expected 0:\n{log}")
    with open(os.path.join(OUT, "healthy2.json")) as f:
        r = json.load(f)
    check("healthy", r["format"] == "xtimer-netprobe" and r["version"] == 1, "format/version")
    check("healthy", r["self"] == 2 and r["exit_code"] == 0 and r["healthy"] is True, "self/exit/healthy")
    check("healthy", [n["status"] for n in r["nodes"]] == ["ok"] * 4, f"statuses {r['nodes']}")
    check("healthy", [l["nodes"] for l in r["links"]] == [[0, 1], [2, 3]], f"links {r['links']}")
    check("healthy", len(r["rounds"]) == 1 and r["rounds"][0]["kind"] == "neighbours", "one round")
    for n in r["nodes"]:
        check(
            "healthy",
            n["bandwidth_mbps"] > 0 and n["latency_us"] > 0 and n["time_s"] > 0,
            f"node {n['rank']} figures {n}",
        )
    for key in (
        "backend",
        "nnodes",
        "size",
        "streams",
        "straggler_factor",
        "min_bandwidth_mbps",
        "timeout_s",
        "all_pairs",
        "max_rounds",
        "probe_time_s",
        "reference_time_s",
        "summary",
        "time",
    ):
        check("healthy", key in r, f"report lacks '{key}'")
    log = results[0][1]
    check("healthy", "round 1 (neighbours): 2 tests in 1 step" in log, f"progress line:\n{log}")
    check("healthy", ": healthy" in log, "final table")


def case_missing():
    """3 nodes expected, 2 started: the third is missing once --timeout passes; exit 1."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "3", "--timeout", "2", "--size", "1M"]
    t0 = time.monotonic()
    procs = [
        start([*common, "--node-rank", str(i), "--json", os.path.join(OUT, f"missing{i}.json")], f"missing{i}")
        for i in range(2)
    ]
    results = [finish(p, f"missing{i}", 30) for i, p in enumerate(procs)]
    wall = time.monotonic() - t0
    for i, (rc, log) in enumerate(results):
        check("missing", rc == 1, f"node {i} exit {rc}, expected 1:\n{log}")
    with open(os.path.join(OUT, "missing0.json")) as f:
        r = json.load(f)
    check(
        "missing",
        [n["status"] for n in r["nodes"]] == ["ok", "ok", "missing"],
        f"statuses {[n['status'] for n in r['nodes']]}",
    )
    # At --timeout, not at the 30 s default: a bound half-way to that no scheduler delay reaches.
    check("missing", 2 <= wall < 15, f"took {wall:.1f} s with --timeout 2 (the default is 30 s)")
    check("missing", "missing" in results[0][1], "table names the missing node")


def frame(obj_bytes):
    return b"XTNP" + struct.pack(">I", len(obj_bytes)) + obj_bytes


def case_hostile_rendezvous():
    """Garbage, oversized and truncated frames, bad fields and a silent client do not disturb
    --serve: each is dropped with one line, and the real nodes finish normally."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--timeout", "30", "--size", "1M"]
    serve = start(["--serve", *common, "--json", os.path.join(OUT, "hostile_serve.json")], "hostile_serve")
    socks = []

    def connect():
        deadline = time.monotonic() + 5
        while True:
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    payloads = [
        b"GET / HTTP/1.0\r\n\r\n",  # not our protocol
        b"XTNP" + struct.pack(">I", 0xFFFFFFFF),  # oversized length
        frame(b'{"type": "join", "version": 1')[:-3],  # truncated, then closed
        frame(b'{"type": "join", "version": 1, "rank": "x"}'),  # mistyped field
        frame(b"[1, 2, 3]"),  # not an object
        frame(b'{"type": "result", "id": 1, "ok": true}'),  # before joining
        b"XTNP" + struct.pack(">I", 1 << 20) + b"x" * (100 << 10),  # big, never joining
    ]
    for p in payloads:
        s = connect()
        s.sendall(p)
        socks.append(s)
    socks[2].close()
    silent = connect()  # says nothing at all
    socks.append(silent)
    time.sleep(0.3)
    nodes = [start([*common, "--node-rank", str(i)], f"hostile{i}") for i in range(2)]
    results = [finish(p, f"hostile{i}", 30) for i, p in enumerate(nodes)]
    t_nodes = time.monotonic()
    rc, log = finish(serve, "hostile_serve", 30)
    # It does not wait for the silent client's --timeout (30 s): half of it is a margin no
    # scheduler delay reaches.
    lingered = time.monotonic() - t_nodes
    check("hostile", lingered < 15, f"--serve lingered {lingered:.1f} s after the nodes finished")
    for s in socks:
        s.close()
    for i, (nrc, nlog) in enumerate(results):
        check("hostile", nrc == 0, f"node {i} exit {nrc}, expected 0:\n{nlog}")
    check("hostile", rc == 0, f"--serve exit {rc}, expected 0:\n{log}")
    dropped = [l for l in log.splitlines() if "dropped a connection" in l]
    check("hostile", len(dropped) >= 6, f"{len(dropped)} 'dropped' lines, expected one per bad client:\n{log}")
    for needle in (
        "not an xtimer_netprobe peer",
        "exceeds the limit",
        "middle of a message",
        "field 'rank' is not an integer",
        "not a JSON object",
        "before joining",
        "without joining",
    ):
        check("hostile", needle in log, f"no line saying '{needle}':\n{log}")


def fake_rendezvous(reply):
    """A server that accepts one node, reads a little, sends `reply` and holds the connection."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def serve():
        c, _ = srv.accept()
        c.settimeout(5)
        try:
            c.recv(4096)
            c.sendall(reply)
            time.sleep(3)
        except OSError:
            pass
        c.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return port


def recv_frame(sock):
    def exactly(n):
        b = b""
        while len(b) < n:
            chunk = sock.recv(n - len(b))
            if not chunk:
                raise OSError("closed")
            b += chunk
        return b

    header = exactly(8)
    return json.loads(exactly(struct.unpack(">I", header[4:])[0]))


def case_forged_stop():
    """A node that reports a stopped test it was never asked to stop, with impossible figures, is
    dropped with one line; the probe goes on and ends."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--timeout", "30", "--size", "1M"]
    serve = start(["--serve", *common, "--json", os.path.join(OUT, "forged_serve.json")], "forged_serve")
    deadline = time.monotonic() + 5
    while True:
        try:
            fake = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    join = {
        "type": "join",
        "version": 2,
        "rank": 0,
        "nnodes": 2,
        "backend": "tcp",
        "host": "fake",
        "addr": "127.0.0.1",
        "port": 9,
    }
    fake.sendall(frame(json.dumps(join).encode()))
    node = start([*common, "--node-rank", "1"], "forged1")
    while True:
        msg = recv_frame(fake)
        if msg["type"] == "test":
            break
    forged = {
        "type": "result",
        "id": msg["id"],
        "ok": True,
        "stopped": True,
        "latency_us": 1,
        "fwd_bytes": 1 << 60,
        "fwd_s": 1,
        "bwd_bytes": 0,
        "bwd_s": 0,
    }
    fake.sendall(frame(json.dumps(forged).encode()))
    nrc, nlog = finish(node, "forged1", 60)
    rc, log = finish(serve, "forged_serve", 30)
    fake.close()
    check("forged", "sent a stopped test it was not asked to stop" in log, f"no line for the forged stop:\n{log}")
    check("forged", rc == 1 and nrc == 1, f"--serve exit {rc}, node exit {nrc}, expected 1 and 1:\n{log}\n{nlog}")


def case_hostile_to_node():
    """A node whose rendezvous answers garbage or a huge length stops at once with exit 2."""
    for name, reply, needle in (
        ("garbage", b"SSH-2.0-OpenSSH_9.2\r\n", "not an xtimer_netprobe peer"),
        ("huge", b"XTNP\xff\xff\xff\xff", "exceeds the limit"),
        ("unknown", frame(b'{"type": "reboot"}'), "unknown message 'reboot'"),
        ("badtest", frame(b'{"type": "test", "id": 1, "role": "initiator"}'), "bad test"),
        ("badstop", frame(b'{"type": "stop", "id": "x"}'), "'id'"),
        ("truncstop", frame(b'{"type": "stop", "id": 1}')[:-2], "truncated"),
    ):
        port = fake_rendezvous(reply)
        t0 = time.monotonic()
        p = start(
            ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--node-rank", "1", "--timeout", "30"], f"node_{name}"
        )
        rc, log = finish(p, f"node_{name}", 60)
        took = time.monotonic() - t0
        check("node", rc == 2, f"{name}: exit {rc}, expected 2:\n{log}")
        # At once, not at its --timeout (30 s): half of it is a margin no scheduler delay reaches.
        check("node", took < 15, f"{name}: took {took:.1f} s with --timeout 30")
        check("node", needle in log, f"{name}: no '{needle}' in:\n{log}")
        errors = [l for l in log.splitlines() if l.startswith("xtimer_netprobe:")]
        check("node", len(errors) == 1, f"{name}: expected one error line:\n{log}")


def case_unreachable():
    """No rendezvous at all: exit 2 shortly after the deadline (from XTIMER_NETPROBE_TIMEOUT)."""
    port = free_port()
    t0 = time.monotonic()
    report = os.path.join(OUT, "unreachable.json")
    if os.path.exists(report):
        os.remove(report)
    p = start(
        ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--node-rank", "1", "--json", report],
        "unreachable",
        env={"XTIMER_NETPROBE_TIMEOUT": "1"},
    )
    rc, log = finish(p, "unreachable", 20)
    wall = time.monotonic() - t0
    check("unreachable", rc == 2, f"exit {rc}, expected 2:\n{log}")
    check("unreachable", "cannot reach the rendezvous" in log, log)
    # After its 1 s deadline, and not at the 30 s default's: half of it is a margin no scheduler
    # delay reaches.
    check("unreachable", 0.9 < wall < 15, f"took {wall:.1f} s with a 1 s deadline (the default is 30 s)")
    # The report is written when the probe itself fails too (docs/formats.md): exit_code 2, error.
    check("unreachable", os.path.exists(report), "--json written when the probe failed")
    if os.path.exists(report):
        with open(report) as f:
            r = json.load(f)
        check(
            "unreachable",
            r.get("format") == "xtimer-netprobe"
            and r.get("exit_code") == 2
            and r.get("healthy") is False
            and "cannot reach the rendezvous" in r.get("error", "")
            and r.get("self") == 1,
            f"report of a failed probe: {r}",
        )
    # --serve that cannot listen: the same.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    report = os.path.join(OUT, "serve_busy.json")
    p = start(
        ["--serve", "--rdzv", f"127.0.0.1:{busy.getsockname()[1]}", "--nnodes", "2", "--json", report], "serve_busy"
    )
    rc, log = finish(p, "serve_busy", 20)
    busy.close()
    check("unreachable", rc == 2 and "cannot listen" in log, f"--serve on a busy port: exit {rc}:\n{log}")
    r = json.load(open(report)) if os.path.exists(report) else {}
    check(
        "unreachable",
        r.get("exit_code") == 2 and "cannot listen" in r.get("error", "") and "self" not in r,
        f"--serve's report of a failed probe: {r}",
    )


def case_rank_taken():
    """Two nodes claiming the same rank: the second is refused with one line, exit 2."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "3", "--timeout", "3", "--size", "1M"]
    serve = start(["--serve", *common], "taken_serve")
    time.sleep(0.3)
    a = start([*common, "--node-rank", "1"], "taken_a")
    time.sleep(0.5)
    b = start([*common, "--node-rank", "1"], "taken_b")
    rc_b, log_b = finish(b, "taken_b", 20)
    check("taken", rc_b == 2 and "already joined" in log_b, f"second node: exit {rc_b}:\n{log_b}")
    c = start([*common, "--node-rank", "0"], "taken_c")
    for p, name in ((a, "taken_a"), (c, "taken_c"), (serve, "taken_serve")):
        rc, log = finish(p, name, 30)
        check("taken", rc == 1, f"{name}: exit {rc}, expected 1 (node 2 missing):\n{log}")


def case_bad_flags():
    for args, flag in (
        (["--nnodes", "2"], "--rdzv"),
        (["--rdzv", "h:1", "--nnodes", "2", "--backend", "rdma"], "--backend"),
        (["--rdzv", "h:1", "--nnodes", "2", "--rounds", "11"], "--rounds"),
        (["--rdzv", "h:1", "--nnodes", "2", "--straggler-factor", "1"], "--straggler-factor"),
        (["--rdzv", "h:1", "--nnodes", "2", "--min-bandwidth", "fast"], "--min-bandwidth"),
        (["--rdzv", "h:1", "--nnodes", "2", "--timeout", "-1"], "--timeout"),
        (["--rdzv", "h:1", "--nnodes", "2", "--size", "1T"], "--size"),
        (["--rdzv", "h:1", "--nnodes", "2", "--bogus"], "--bogus"),
    ):
        r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=10)
        lines = r.stderr.strip().splitlines()
        check("flags", r.returncode == 2, f"{args}: exit {r.returncode}")
        check("flags", len(lines) == 1 and flag in lines[0], f"{args}: stderr {r.stderr!r}")
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
    check("flags", r.returncode == 0 and "--all-pairs" in r.stdout, "--help")


def case_unwritable_json():
    """A report that cannot be written is a failed probe (exit 2), said in one line."""
    port = free_port()
    common = ["--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--timeout", "5", "--size", "1M"]
    a = start([*common, "--node-rank", "0", "--json", "/proc/self/no/such/dir/r.json"], "json0")
    b = start([*common, "--node-rank", "1"], "json1")
    rc_a, log_a = finish(a, "json0", 30)
    rc_b, _ = finish(b, "json1", 30)
    check("json", rc_a == 2 and "cannot write --json" in log_a, f"exit {rc_a}:\n{log_a}")
    check("json", rc_b == 0, f"the other node: exit {rc_b}")


def main():
    global BIN, OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", default=f"/tmp/xtimer-netprobe-loopback-{os.getpid()}")
    args = ap.parse_args()
    BIN = args.bin
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    cases = [
        case_bad_flags,
        case_healthy,
        case_missing,
        case_hostile_rendezvous,
        case_hostile_to_node,
        case_forged_stop,
        case_unreachable,
        case_rank_taken,
        case_unwritable_json,
    ]
    for c in cases:
        t0 = time.monotonic()
        before = len(failures)
        try:
            c()
        except Exception as e:  # a crash of the test itself is a failure too
            failures.append(f"{c.__name__}: {type(e).__name__}: {e}")
            print(f"  FAIL {type(e).__name__}: {e}")
        status = "passed" if len(failures) == before else "FAILED"
        print(f"{c.__name__}: {status} ({time.monotonic() - t0:.1f} s)", flush=True)
    if failures:
        print(f"{len(failures)} failure(s); logs in {OUT}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
