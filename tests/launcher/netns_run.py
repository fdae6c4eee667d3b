#!/usr/bin/env python3
"""xtimer_run --network-check over real network paths: one network namespace per node, a real
etcd in the rendezvous namespace, one xtimer_run per node namespace. The namespaces, the bridge
and the faults are tests/netprobe/netns_scenarios.py's (imported, not copied).

  netns_run.py --bin BUILD/bin --scenario faulty8|faulty8-host|straggler8-exclude|straggler8-keep|partition3
               [--out DIR]

  faulty8             8 nodes, --nnodes 7:8, one node's traffic to every other node dropped
                      (etcd still reachable): it exits non-zero naming 'faulty', the other 7 run
                      their workers with WORLD_SIZE 7 and exit 0. Prints 'figure:' lines: start to
                      verdict, start to workers running.
  faulty8-host        the same, the cut-off node started first so that it is group rank 0 and
                      hosts the probe nobody reaches: it is left out, the others are probed again.
  straggler8-exclude  8 nodes, one rate-limited to a tenth, --exclude-straggler: it is left out
                      naming 'straggler', the other 7 run with WORLD_SIZE 7.
  straggler8-keep     the same straggler without --exclude-straggler: all 8 run (WORLD_SIZE 8)
                      and the straggler says it stays.
  partition3          3 nodes (--nnodes 2:3, the default --rdzv-conf, no network check); every
                      packet to and from one node is dropped, etcd included. The other two run
                      again with WORLD_SIZE 2 once its lease expired (no last call); the cut-off
                      node stops its worker once it could not renew its lease for a TTL. The
                      partition heals: the node is taken back (WORLD_SIZE 3). Every group whole.

The workers are a shell script that records RANK and WORLD_SIZE (no torch). Every run uses the
launcher's default probe settings (XTIMER_NETCHECK_SIZE, XTIMER_NETCHECK_TIMEOUT).
Exit status: 0 passed, 1 failed, 77 skipped (not root / namespaces unavailable).
"""
import argparse
import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netprobe"))
import netns_scenarios as ns  # noqa: E402  (namespaces, bridge, faults, cleanup)
import heartbeats  # noqa: E402  (partition3's shell workers)

ETCD_PORT = 2379
N = 8
FAULT = 5  # the faulty or slow node; started after the first, so it is not group rank 0

WORKER = 'echo "$RANK $WORLD_SIZE $GROUP_RANK $(date +%s.%N)" > "$OUT/worker$NODE.txt"'


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Node:
    """One xtimer_run in node namespace i; stderr lines stamped with the time they arrived."""

    def __init__(self, args, cluster, out, i, extra, name=None, job=None):
        """job: xtimer_run's flags after the rendezvous ones (default: the network-check job)."""
        name = name or f"node{i}"
        self.i = i
        env = dict(
            os.environ,
            OUT=out,
            NODE=str(i),
            XTIMER_METRICS_PORT="0",
            XTIMER_TIMELINE_PATH=os.path.join(out, f"timeline{i}"),
            XTIMER_CKPT_SHM_DIR=os.path.join(out, f"shm{i}"),
        )
        os.makedirs(env["XTIMER_CKPT_SHM_DIR"], exist_ok=True)
        if job is None:
            job = [
                "--nnodes",
                "7:8",
                "--nproc-per-node",
                "1",
                "--network-check",
                *extra,
                "--no-python",
                "/bin/sh",
                "-c",
                WORKER,
            ]
        cmd = [
            "ip",
            "netns",
            "exec",
            cluster.node[i],
            os.path.join(args.bin, "xtimer_run"),
            "--rdzv-backend",
            "etcd",
            "--rdzv-endpoint",
            f"{ns.RDZV_IP}:{ETCD_PORT}",
            "--rdzv-id",
            "netns",
            "--local-addr",
            cluster.ip(i),
            *job,
        ]
        self.out_path = os.path.join(out, f"{name}.out")
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(self.out_path, "w"), stderr=subprocess.PIPE)
        ns.procs.append(self.proc)
        self.lines = []  # (time, line)
        self.log_path = os.path.join(out, f"{name}.log")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        with open(self.log_path, "w") as f:
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append((time.monotonic(), line))
                f.write(line + "\n")
                f.flush()

    def wait(self, until):
        try:
            rc = self.proc.wait(timeout=max(1, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "hung"
        self.reader.join(5)
        return rc

    def first(self, text):
        return next((t for t, line in self.lines if text in line), None)

    def log(self):
        return "\n".join(line for _, line in self.lines)

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()


def start_etcd(cluster, out):
    exe = shutil.which("etcd")
    if exe is None:
        raise Failure("etcd is not installed (Debian package etcd-server; scripts/setup.sh installs it)")
    url = f"http://{ns.RDZV_IP}:{ETCD_PORT}"
    p = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            cluster.rz,
            exe,
            "--data-dir",
            os.path.join(out, "etcd"),
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-cluster",
            "default=http://127.0.0.1:2380",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(out, "etcd.log"), "w"),
    )
    ns.procs.append(p)
    probe = "import socket,sys\n" f"socket.create_connection(('{ns.RDZV_IP}', {ETCD_PORT}), 0.5).close()"
    until = time.monotonic() + 20
    while time.monotonic() < until:
        r = subprocess.run(["ip", "netns", "exec", cluster.node[0], sys.executable, "-c", probe], capture_output=True)
        if r.returncode == 0:
            return p
        time.sleep(0.2)
    raise Failure("etcd did not start in the rendezvous namespace (see etcd.log)")


def workers(out):
    rows = {}
    for i in range(N):
        try:
            with open(os.path.join(out, f"worker{i}.txt")) as f:
                rank, world, group, t = f.read().split()
            rows[i] = (int(rank), int(world), int(group), float(t))
        except (OSError, ValueError):
            pass
    return rows


def wait_until(pred, timeout):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return pred()


def run_partition(args, out):
    """partition3: see the module's docstring."""
    n, cut = 3, 2
    cluster = ns.Cluster(n, "partition3")
    start_etcd(cluster, out)
    job = ["--nnodes", "2:3", "--nproc-per-node", "1", "--no-python", "/bin/sh", "-c", heartbeats.WORKER]
    nodes = [Node(args, cluster, out, i, [], job=job) for i in range(n)]
    try:
        check(wait_until(lambda: heartbeats.in_world(out, 3, 0) == {0, 1, 2}, 60), "three nodes run with WORLD_SIZE 3")
        ns.nft(
            cluster.node[cut],
            """
table inet xpart {
  chain in { type filter hook input priority 0; policy drop; iif lo accept; }
  chain out { type filter hook output priority 0; policy drop; oif lo accept; }
}""",
        )
        t_cut = time.time()
        check(
            wait_until(lambda: heartbeats.in_world(out, 2, t_cut) == {0, 1}, 60),
            "the two other nodes run again with WORLD_SIZE 2 while the third is cut off",
        )
        again = max(
            min(r["t"] for r in heartbeats.read(out) if r["node"] == i and r["world"] == 2 and r["t"] > t_cut)
            for i in (0, 1)
        )
        stopped = wait_until(lambda: nodes[cut].first("could not renew its etcd lease"), 40)
        check(stopped, "the cut-off node says it lost its lease and stops its worker")
        time.sleep(1)
        last = max((r["t"] for r in heartbeats.read(out) if r["node"] == cut), default=0)
        check(last - t_cut < 30, f"its worker stopped {last - t_cut:.1f} s after the cut (lease_ttl 10 s)")
        close = [line for nd in nodes for _, line in nd.lines if "run: rendezvous: round 1 closed with" in line]
        check(
            len(close) == 1 and "every node of the last round still alive joined" in close[0],
            f"round 1 closed once, without waiting for the last call ({close})",
        )
        print(
            f"figure: partition3: one node cut off -> the others running again {again - t_cut:.2f} s; "
            f"its own worker stopped {last - t_cut:.2f} s (defaults: lease_ttl 10 s, last_call_timeout 30 s)"
        )
        ns.sh("ip", "netns", "exec", cluster.node[cut], "nft", "delete", "table", "inet", "xpart")
        t_heal = time.time()
        back = wait_until(lambda: heartbeats.in_world(out, 3, t_heal) == {0, 1, 2}, 90)
        check(back, "the partition healed: the node is taken back, WORLD_SIZE 3")
        if back:
            t_back = max(
                min(r["t"] for r in heartbeats.read(out) if r["node"] == i and r["world"] == 3 and r["t"] > t_heal)
                for i in range(n)
            )
            print(f"figure: partition3: healed -> all three running again {t_back - t_heal:.2f} s")
        for nd in nodes:
            nd.proc.send_signal(signal.SIGTERM)
        rcs = [nd.wait(time.monotonic() + 30) for nd in nodes]
        check(rcs == [143] * n, f"SIGTERM stops every node (rc {rcs})")
        for port, whole, desc in heartbeats.groups(out):
            check(whole, f"the group on port {port} is whole: {desc}")
        print("partition3: passed")
    finally:
        for nd in nodes:
            if nd.proc.poll() is None:
                nd.proc.kill()


def run(args, out, scenario):
    if scenario == "partition3":
        return run_partition(args, out)
    cluster = ns.Cluster(N, scenario)
    order = list(range(N))
    if scenario in ("faulty8", "faulty8-host"):
        cluster.isolate(FAULT)
        extra, left_out, word = [], True, "faulty"
        if scenario == "faulty8-host":  # the cut-off node arrives first: group rank 0, the probe's host
            order = [FAULT] + [i for i in range(N) if i != FAULT]
    elif scenario == "straggler8-exclude":
        cluster.rate(FAULT, ns.SLOW_RATE)
        extra, left_out, word = ["--exclude-straggler"], True, "straggler"
    elif scenario == "straggler8-keep":
        cluster.rate(FAULT, ns.SLOW_RATE)
        extra, left_out, word = [], False, "straggler"
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    start_etcd(cluster, out)
    t0 = time.monotonic()
    t0_wall = time.time()
    nodes = [None] * N
    for k, i in enumerate(order):
        nodes[i] = Node(args, cluster, out, i, extra)
        if k == 0:  # the first node should arrive first and host the probe (group rank 0)
            time.sleep(1.5 if scenario == "faulty8-host" else 0.5)
    until = time.monotonic() + 120
    rcs = {n.i: n.wait(until) for n in nodes}
    rows = workers(out)
    others = [i for i in range(N) if i != FAULT]
    victim = nodes[FAULT]
    if left_out:
        check(rcs[FAULT] not in (0, "hung"), f"node {FAULT} exits non-zero (rc {rcs[FAULT]})")
        lines = [l for l in victim.log().splitlines() if l.startswith("xtimer_run: ")]
        check(
            len(lines) == 1 and "left out by the network check" in lines[0] and word in lines[0],
            f"node {FAULT} says in one line that it was left out as {word}: {lines}",
        )
        check(FAULT not in rows, f"node {FAULT} ran no worker")
        check(all(rcs[i] == 0 for i in others), f"the other 7 nodes exit 0 (rc {rcs})")
        check(
            sorted(rows) == others and all(rows[i][1] == 7 for i in others),
            f"the 7 other nodes ran workers with WORLD_SIZE 7 ({rows})",
        )
        check(sorted(r[0] for r in rows.values()) == list(range(7)), f"ranks 0..6 ({rows})")
        for i in others:
            log = nodes[i].log()
            check("left out by the network check of round 0" in log, f"node {i} says nodes were left out")
            # The nodes that passed are not probed again; when the node left out was group rank 0
            # (cut off: the others never reached its probe) they were not checked yet, and are.
            check(
                "all passed it before; not probed again" in log or "network check of round 1: verdict" in log,
                f"node {i}: the round without the left-out node starts (probed only if unchecked)",
            )
    else:
        check(all(rc == 0 for rc in rcs.values()), f"all 8 nodes exit 0 (rc {rcs})")
        check(
            sorted(rows) == list(range(N)) and all(r[1] == 8 for r in rows.values()),
            f"all 8 nodes ran workers with WORLD_SIZE 8 ({rows})",
        )
        check(
            "is a straggler" in victim.log() and "it stays" in victim.log(),
            f"node {FAULT} warns that it is a straggler and stays",
        )
    tables = [n.stdout() for n in nodes if "xtimer_netprobe: " in n.stdout()]
    check(len(tables) >= 7, f"the probe's table is printed on the nodes that took part ({len(tables)})")
    check(any(word in t for t in tables) or left_out and word == "faulty", f"the table names the {word}")
    verdicts = [t for n in nodes if (t := n.first("network check of round 0: verdict"))]
    check(verdicts, "a verdict line was printed")
    t_verdict = min(verdicts) - t0
    t_workers = max(r[3] for r in rows.values()) - t0_wall
    summary = next((line for n in nodes for _, line in n.lines if "network check of round 0: verdict" in line), "")
    rank = next(
        (l.split("group rank ")[1].split(",")[0] for l in victim.log().splitlines() if "xtimer_run: left out" in l),
        None,
    )
    if rank is not None:
        print(f"{scenario}: the node left out was group rank {rank} of round 0")
    print(f"{scenario}: passed: {summary.split('run: ', 1)[-1]}")
    print(
        f"figure: {scenario}: start -> verdict {t_verdict:.2f} s, start -> all workers running "
        f"{t_workers:.2f} s (8 xtimer_run, defaults XTIMER_NETCHECK_SIZE=3M, XTIMER_NETCHECK_TIMEOUT=4)"
    )
    if left_out:
        # The node left out cannot come back into this run (P/netcheck/excluded/<its address>).
        again = Node(args, cluster, out, FAULT, extra, name="again")
        rc = again.wait(time.monotonic() + 30)
        check(
            rc == 1 and "cannot join this run again" in again.log(),
            f"node {FAULT} started again is refused (rc {rc}): {again.log()[-300:]}",
        )
    # How soon a black-holed node is judged (goal: 15 s) depends on the machine's load: the figure
    # above, and tests/bench/elastic_recovery_bench.py against xtimer_netprobe alone; no bound here.


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the build's bin folder (xtimer_run)")
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    why = ns.namespaces_available()
    if why is not None:
        print(f"SKIPPED: network namespaces unavailable ({why}); the netns scenarios need root", flush=True)
        return ns.SKIP
    atexit.register(ns.cleanup)
    signal.signal(signal.SIGTERM, ns.on_signal)
    signal.signal(signal.SIGINT, ns.on_signal)
    ns.remove_stale()
    out = args.out or f"/tmp/xtimer-netns-run-{args.scenario}-{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    try:
        run(args, out, args.scenario)
    except (Failure, RuntimeError, OSError) as e:
        print(f"{args.scenario}: FAILED: {e}")
        for f in sorted(os.listdir(out)):
            if f.endswith(".log") or f.endswith(".out"):
                with open(os.path.join(out, f)) as fh:
                    print(f"----- {f}\n{fh.read()[-2500:]}")
        print(f"(logs in {out})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
