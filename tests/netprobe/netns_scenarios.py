#!/usr/bin/env python3
"""Network-check scenarios over real network paths: one Linux network namespace per simulated
node, the rendezvous in a namespace of its own, all joined by a bridge in a "switch" namespace.

  netns_scenarios.py --bin build/bin/xtimer_netprobe --scenario straggler8

Faults are made with what this kernel has (no netem): tc tbf for slow nodes, nftables
"numgen random mod 100 < N drop" for loss on one path, an output filter for a node whose packets
to the other nodes are all dropped, a link set down for a node that never started.

Exit status: 0 passed, 1 failed, 77 skipped (not root / namespaces unavailable). Namespaces are
removed on every exit path; leftovers of a killed run are removed by the next run.
"""
import argparse
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import time

SKIP = 77
SUBNET = "10.77.0"
RDZV_IP = f"{SUBNET}.254"
RDZV_PORT = 29400
BASE_RATE = "200mbit"  # every node's link, both directions
SLOW_RATE = "20mbit"  # a tenth: the straggler's link
SIZE = "3M"  # bytes per direction per test
TIMEOUT = "4"  # --timeout: every connect, send and wait
PREFIX = "xnp"  # namespace names: xnp<pid><role>

namespaces = []
procs = []


def sh(*cmd, check=True, input=None):
    r = subprocess.run(cmd, input=input, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for ns in reversed(namespaces):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    namespaces.clear()


def on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


def remove_stale():
    """Namespaces of earlier runs whose process is gone (a run killed with SIGKILL)."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(PREFIX + r"(\d+)[a-z]+\d*", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def namespaces_available():
    if os.geteuid() != 0:
        return "not running as root"
    for tool in ("ip", "tc", "nft"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"'{tool}' is not installed"
    probe = f"{PREFIX}{os.getpid()}probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"'ip netns add' failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def add_ns(name):
    sh("ip", "netns", "add", name)
    namespaces.append(name)
    sh("ip", "-n", name, "link", "set", "lo", "up")


def tc(ns, words):
    """`tc WORDS...` in namespace ns (WORDS: one string, split at spaces)."""
    sh("ip", "netns", "exec", ns, "tc", *words.split())


def tbf(ns, dev, rate):
    tc(ns, f"qdisc replace dev {dev} root tbf rate {rate} burst 64kb latency 100ms")


def nft(ns, rules):
    sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=rules)


class Cluster:
    def __init__(self, n, tag, base_rate=BASE_RATE):
        self.n = n
        base = f"{PREFIX}{os.getpid()}"
        self.sw = f"{base}sw"
        self.rz = f"{base}rz"
        self.node = [f"{base}n{i}" for i in range(n)]
        add_ns(self.sw)
        sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.sw, "link", "set", "br0", "up")
        self._attach(self.rz, "vrz", RDZV_IP)
        for i in range(n):
            self._attach(self.node[i], f"v{i}", self.ip(i))
            if base_rate:
                self.rate(i, base_rate)

    def ip(self, i):
        return f"{SUBNET}.{i + 1}"

    def _attach(self, ns, port, ip):
        add_ns(ns)
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.sw)
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.sw, "link", "set", port, "master", "br0")
        sh("ip", "-n", self.sw, "link", "set", port, "up")

    def rate(self, i, rate):
        """Limits node i's link both ways: its egress in its namespace, its ingress at the switch."""
        tbf(self.node[i], "eth0", rate)
        tbf(self.sw, f"v{i}", rate)

    def rate_out(self, i, rate):
        """Limits only what node i sends (its egress), as a shaped uplink."""
        tbf(self.node[i], "eth0", rate)

    def isolate(self, i):
        """Every packet from node i to another node is dropped; the rendezvous still reaches it."""
        nft(
            self.node[i],
            f"""
table inet xnp {{
  chain out {{
    type filter hook output priority 0; policy accept;
    ip daddr {SUBNET}.0/24 ip daddr != {RDZV_IP} drop
  }}
}}""",
        )

    def lossy_path(self, i, j, percent):
        """Drops `percent`% of the packets between nodes i and j only, both ways."""
        for a, b in ((i, j), (j, i)):
            nft(
                self.node[a],
                f"""
table inet xnp {{
  chain out {{
    type filter hook output priority 0; policy accept;
    ip daddr {self.ip(b)} numgen random mod 100 < {percent} drop
  }}
}}""",
            )

    def slow_path(self, i, j, rate):
        """Only the traffic between nodes i and j goes at `rate`: an htb class chosen by a u32
        filter on the destination address, on each of the two nodes' egress."""
        for a, b in ((i, j), (j, i)):
            ns = self.node[a]
            tc(ns, "qdisc replace dev eth0 root handle 1: htb default 10")
            tc(ns, f"class add dev eth0 parent 1: classid 1:10 htb rate {BASE_RATE}")
            tc(ns, f"class add dev eth0 parent 1: classid 1:20 htb rate {rate}")
            tc(ns, f"filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst {self.ip(b)}/32 flowid 1:20")

    def link_down(self, i):
        sh("ip", "-n", self.node[i], "link", "set", "eth0", "down")


def run_probe(args, cluster, outdir, skip=(), extra=(), defaults=False, timeout=None):
    """defaults: no --timeout and no --size, what a user gets (XTIMER_NETPROBE_TIMEOUT unset);
    with `timeout`, the defaults but that --timeout."""
    common = ["--rdzv", f"{RDZV_IP}:{RDZV_PORT}", "--nnodes", str(cluster.n)]
    sizing = []
    if timeout is not None:
        common += ["--timeout", str(timeout)]
    elif not defaults:
        common += ["--timeout", TIMEOUT]
        sizing = ["--size", SIZE]
    env = dict(os.environ)
    env.pop("XTIMER_NETPROBE_TIMEOUT", None)
    server_log = open(os.path.join(outdir, "serve.log"), "w")
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            cluster.rz,
            args.bin,
            "--serve",
            *common,
            *sizing,
            "--json",
            os.path.join(outdir, "report.json"),
            *extra,
        ],
        stdout=server_log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    procs.append(server)
    nodes = {}
    t0 = time.monotonic()
    for i in range(cluster.n):
        if i in skip:
            continue
        log = open(os.path.join(outdir, f"node{i}.log"), "w")
        p = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                cluster.node[i],
                args.bin,
                *common,
                "--node-rank",
                str(i),
                "--json",
                os.path.join(outdir, f"node{i}.json"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        procs.append(p)
        nodes[i] = p
    deadline = time.monotonic() + 120
    codes = {}
    for i, p in [("serve", server)] + list(nodes.items()):
        try:
            codes[i] = p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[i] = "hung"
    wall = time.monotonic() - t0
    with open(os.path.join(outdir, "report.json")) as f:
        report = json.load(f)
    return report, codes, wall


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def expect(report, codes, node_status, link_status, exit_code, outdir):
    """node_status: rank -> status (others must be ok); link_status: (a, b) -> status (others ok,
    or 'node' when they touch a node at fault)."""
    check(report.get("format") == "xtimer-netprobe", "report format")
    check(codes["serve"] == exit_code, f"--serve exit {codes['serve']}, expected {exit_code}")
    for i, code in codes.items():
        if i == "serve":
            continue
        check(code == exit_code, f"node {i} exit {code}, expected {exit_code}")
        with open(os.path.join(outdir, f"node{i}.json")) as f:
            mine = json.load(f)
        check(mine.get("self") == i, f"node {i} report names self {mine.get('self')}")
        check(
            [n["status"] for n in mine["nodes"]] == [n["status"] for n in report["nodes"]],
            f"node {i}'s report differs from the rendezvous'",
        )
    bad_nodes = set()
    for n in report["nodes"]:
        want = node_status.get(n["rank"], "ok")
        check(n["status"] == want, f"node {n['rank']} is {n['status']} ({n.get('reason', '')}), expected {want}")
        if want != "ok":
            bad_nodes.add(n["rank"])
            check(n.get("decided", False) or want == "missing", f"node {n['rank']} verdict not decided")
    for l in report["links"]:
        a, b = l["nodes"]
        want = link_status.get((a, b))
        if want is None:
            want = "node" if (a in bad_nodes or b in bad_nodes) and l["status"] != "ok" else "ok"
        check(l["status"] == want, f"link {a}-{b} is {l['status']} ({l.get('reason', '')}), expected {want}")
    for pair, want in link_status.items():
        check(any(tuple(l["nodes"]) == pair for l in report["links"]), f"link {pair} was not tested")
    check(report["healthy"] == (exit_code == 0), "healthy flag")


def describe(report, wall):
    rounds = report["rounds"]
    kinds = ", ".join(f"{r['kind']} {r['elapsed_s']:.2f} s" for r in rounds)
    bws = [n["bandwidth_mbps"] for n in report["nodes"] if n.get("bandwidth_mbps")]
    med = sorted(bws)[len(bws) // 2] if bws else 0
    return (
        f"{len(rounds)} round(s) [{kinds}]; probe time {report['probe_time_s']:.2f} s "
        f"(wall {wall:.2f} s incl. process start); median node bandwidth {med:.1f} MB/s"
    )


# A user's first try: unshaped 8-node network, node 6 black-holed, node 3's uplink shaped to the
# rate given; every default but --timeout (64M per test).
SLOW_NODE = {"slownode8": "40mbit", "slownode8-1mb": "8mbit"}


def slow_node(args, outdir, rate, timeout=None, extra=()):
    c = Cluster(8, "slownode", base_rate=None)
    c.isolate(6)
    c.rate_out(3, rate)
    return run_probe(args, c, outdir, defaults=True, timeout=timeout, extra=list(extra))


def scenario(name, args, outdir):
    if name == "healthy8":
        c = Cluster(8, name)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {}, {}, 0, outdir)
        check(len(report["rounds"]) == 1, f"{len(report['rounds'])} rounds, expected one")
    elif name == "straggler8":
        c = Cluster(8, name)
        c.rate(5, SLOW_RATE)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {5: "straggler"}, {(4, 5): "node"}, 1, outdir)
    elif name == "faulty8":
        c = Cluster(8, name)
        c.isolate(3)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {3: "faulty"}, {(2, 3): "node"}, 1, outdir)
    elif name == "faulty8-defaults":
        # The same black-holed node with every default (64M per test, 30 s deadline): its tests
        # fail at the 4 s connect deadline, so the verdict comes in two short rounds.
        c = Cluster(8, name)
        c.isolate(3)
        report, codes, wall = run_probe(args, c, outdir, defaults=True)
        expect(report, codes, {3: "faulty"}, {(2, 3): "node"}, 1, outdir)
        check(report["size"] == 64 << 20 and report["timeout_s"] == 30, "the defaults were used")
        print(
            f"figure: faulty8-defaults: black-holed node -> verdict {report['probe_time_s']:.2f} s "
            f"(probe time; wall {wall:.2f} s incl. process start), xtimer_netprobe defaults"
        )
        check(
            report["probe_time_s"] <= 15,
            f"judged within 15 s with the defaults " f"(took {report['probe_time_s']:.1f} s)",
        )
    elif name in SLOW_NODE:
        report, codes, wall = slow_node(args, outdir, SLOW_NODE[name], args.timeout, args.extra)
        expect(report, codes, {3: "straggler", 6: "faulty"}, {}, 1, outdir)
        print(
            f"figure: {name}: verdict after {report['probe_time_s']:.2f} s (probe time; wall {wall:.2f} s "
            f"incl. process start), --timeout {report['timeout_s']:g}, {report['size']} bytes per test"
        )
    elif name == "badlink8":
        c = Cluster(8, name)
        c.lossy_path(2, 3, 50)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {}, {(2, 3): "bad"}, 1, outdir)
    elif name == "slowpath8":
        c = Cluster(8, name)
        c.slow_path(4, 5, SLOW_RATE)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {}, {(4, 5): "bad"}, 1, outdir)
        link = next(l for l in report["links"] if l["nodes"] == [4, 5])
        check(
            link.get("completed") is True and "slow" in link.get("reason", ""),
            f"link 4-5 should be slow, not failed: {link.get('reason')}",
        )
    elif name == "allpairs8":
        c = Cluster(8, name)
        c.lossy_path(1, 6, 50)
        report, codes, wall = run_probe(args, c, outdir, extra=["--all-pairs"])
        expect(report, codes, {}, {(1, 6): "bad"}, 1, outdir)
        check(len(report["links"]) == 28, f"{len(report['links'])} links tested, expected 28")
        allpairs = [r for r in report["rounds"] if r["kind"] == "all-pairs"]
        check(len(allpairs) == 7, f"{len(allpairs)} all-pairs rounds, expected 7")
    elif name == "missing8":
        c = Cluster(8, name)
        c.link_down(4)
        report, codes, wall = run_probe(args, c, outdir, skip=(4,))
        expect(report, codes, {4: "missing"}, {}, 1, outdir)
        # At --timeout (4 s), not at the 30 s default: half of that is a margin no scheduler
        # delay reaches.
        limit = 15
        joined = report["probe_time_s"] - sum(r["elapsed_s"] for r in report["rounds"])
        check(
            joined <= limit,
            f"missing node declared after {joined:.1f} s (--timeout {TIMEOUT} s), limit {limit} s",
        )
    elif name == "mixed16":
        c = Cluster(16, name)
        c.rate(6, SLOW_RATE)
        c.isolate(11)
        report, codes, wall = run_probe(args, c, outdir)
        expect(report, codes, {6: "straggler", 11: "faulty"}, {(6, 7): "node", (10, 11): "node"}, 1, outdir)
        print(f"16-node total probe time: {report['probe_time_s']:.2f} s")
    else:
        raise SystemExit(f"unknown scenario {name}")
    print(f"{name}: passed: {describe(report, wall)}")
    for n in report["nodes"]:
        if n["status"] != "ok":
            print(f"  node {n['rank']}: {n['status']}: {n.get('reason', '')}")
    for l in report["links"]:
        if l["status"] == "bad":
            print(f"  link {l['nodes'][0]}-{l['nodes'][1]}: bad: {l.get('reason', '')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--out", default=None, help="folder for logs and reports (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=None, help="slownode8*: --timeout (default: the default)")
    ap.add_argument("--extra", action="append", default=[], help="slownode8*: one more --serve flag")
    args = ap.parse_args()
    why = namespaces_available()
    if why is not None:
        print(f"SKIPPED: network namespaces unavailable ({why}); the netns scenarios need root", flush=True)
        return SKIP
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    remove_stale()
    outdir = args.out or f"/tmp/xtimer-netprobe-{args.scenario}-{os.getpid()}"
    os.makedirs(outdir, exist_ok=True)
    try:
        scenario(args.scenario, args, outdir)
    except (Failure, RuntimeError, OSError, KeyError, ValueError) as e:
        print(f"{args.scenario}: FAILED: {e}")
        for f in sorted(os.listdir(outdir)):
            if f.endswith(".log"):
                with open(os.path.join(outdir, f)) as fh:
                    text = fh.read()
                print(f"----- {f}\n{text[-3000:]}")
        print(f"(logs and reports in {outdir})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
