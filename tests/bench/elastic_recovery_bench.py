#!/usr/bin/env python3
"""What a user gets with the default settings, against the peers, measured in the same run.

  elastic_recovery_bench.py --bin BUILD/bin [--peers-python .peers/bin/python] [--no-netns] [--out DIR]

Rows (seconds; the ratio is xtimer over the baseline of the same row):
  node lost -> training again   3 nodes x 1 gloo DDP worker (elastic_bench_train.py) on localhost,
                                --nnodes 2:3 --max-restarts 3, every rendezvous setting at its default;
                                one node's launcher and worker SIGKILLed; until both other ranks did a
                                step in the world of 2. Baseline: torchrun's c10d rendezvous.
  node added -> training again  2 nodes train (--nnodes 2:3), a third starts; until all three ranks
                                did a step in the world of 3. Baseline: torchrun's c10d rendezvous.
Each scenario is a job of its own (own store, own --rdzv-id).
  black-holed node -> verdict   8 network namespaces (tests/netprobe/netns_scenarios.py), one node's
                                packets to the others dropped, from the start of the processes:
                                xtimer_netprobe with its defaults (faulty8-defaults); baseline:
                                xtimer_run --network-check with its defaults (tests/launcher/netns_run.py
                                faulty8). Needs root; skipped with one line otherwise.
xtimer_run uses a real etcd (Debian's etcd-server). torchrun comes from the project's peers
environment (.peers/, made by scripts/setup_peers.sh); without it the torchrun rows are skipped with
one line. The workers run on the peers' Python (torch 2.x) under both launchers when it is there,
else on Debian's /usr/bin/python3 (xtimer rows only). Figures only: nothing is asserted.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TRAIN = os.path.join(HERE, "elastic_bench_train.py")
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import free_port, wait_for  # noqa: E402
from local_etcd import Etcd  # noqa: E402


def steps(out):
    rows = []
    try:
        with open(os.path.join(out, "steps.jsonl")) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def first_steps(out, world, after, old_workers=()):
    """rank -> the time of its first step in a world of `world` after `after`, by a worker process
    that is not one of `old_workers` (a new round starts new workers)."""
    firsts = {}
    for r in steps(out):
        if r["world"] == world and r["t"] > after and r["pid"] not in old_workers:
            firsts[r["rank"]] = min(firsts.get(r["rank"], r["t"]), r["t"])
    return firsts


def workers(out):
    return {r["pid"] for r in steps(out)}


def kill_node(pid):
    """SIGKILL a launcher and every process under it, as when its machine dies (torchrun's
    workers do not die with their agent)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    todo, tree = [pid], []
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop(procs, out):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            pass
        kill_node(p.pid)
        p.wait()
    for pid in {r["pid"] for r in steps(out)}:  # workers a torchrun agent left behind
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"elastic_bench_train.py" in f.read():
                    os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def node_lost(name, start, out):
    """Three nodes train; node 2 (not the first, which hosts torchrun's store) is SIGKILLed with
    its workers. Seconds until both other ranks did a step in a new world of 2, or None and why."""
    procs = [start(0)]
    time.sleep(1)  # the first node hosts torchrun's store
    procs += [start(1), start(2)]
    try:
        if not wait_for(lambda: len(first_steps(out, 3, 0)) == 3, 240):
            return None, f"{name}: three nodes never trained together (logs in {out})"
        time.sleep(3)
        old = workers(out)
        kill_node(procs[2].pid)
        t_kill = time.time()
        procs[2].wait()
        got = wait_for(lambda: len(first_steps(out, 2, t_kill, old)) == 2 and first_steps(out, 2, t_kill, old), 180)
        if not got:
            return None, f"{name}: the two other nodes did not train again within 180 s of the kill (logs in {out})"
        return max(got.values()) - t_kill, None
    finally:
        stop(procs, out)


def node_added(name, start, out):
    """Two nodes train (their first round waits last_call_timeout: 2 of MAX 3); a third starts.
    Seconds until all three ranks did a step in a new world of 3, or None and why."""
    procs = [start(0)]
    time.sleep(1)
    procs.append(start(1))
    try:
        if not wait_for(lambda: len(first_steps(out, 2, 0)) == 2, 240):
            return None, f"{name}: two nodes never trained together (logs in {out})"
        time.sleep(3)
        old = workers(out)
        t_add = time.time()
        procs.append(start(2))
        # torchrun's store waits give up after 60 s: 100 s is enough to see it either way.
        got = wait_for(lambda: len(first_steps(out, 3, t_add, old)) == 3 and first_steps(out, 3, t_add, old), 100)
        if not got:
            return None, f"{name}: the new node did not train with the others within 100 s (logs in {out})"
        return max(got.values()) - t_add, None
    finally:
        stop(procs, out)


def lost_and_added(name, make_start, tmp):
    """Both scenarios, each a job of its own (its own folder, store and id)."""
    results = []
    for what, scenario in (("lost", node_lost), ("added", node_added)):
        out = os.path.join(tmp, f"{name}-{what}")
        os.makedirs(out)
        start, done = make_start(out, what)
        try:
            secs, why = scenario(name, start, out)
        finally:
            done()
        if why:
            print(why, flush=True)
        results.append(secs)
    return results


def run_xtimer(args, python, tmp):
    def make_start(out, rid):
        etcd = Etcd(out)
        env = dict(
            os.environ,
            OUT=out,
            XTIMER_PYTHON=python,
            XTIMER_METRICS_PORT="0",
            XTIMER_TIMELINE_PATH=os.path.join(out, "timeline"),
            XTIMER_CKPT_SHM_DIR=os.path.join(out, "shm"),
        )
        os.makedirs(env["XTIMER_CKPT_SHM_DIR"])

        def start(i):
            return subprocess.Popen(
                [
                    os.path.join(args.bin, "xtimer_run"),
                    *etcd.rendezvous_args("2:3", rid),
                    "--nproc-per-node",
                    "1",
                    "--max-restarts",
                    "3",
                    TRAIN,
                ],
                env=env,
                stdout=open(os.path.join(out, f"node{i}.out"), "w"),
                stderr=open(os.path.join(out, f"node{i}.log"), "w"),
                start_new_session=True,
            )

        return start, etcd.stop

    return lost_and_added("xtimer_run", make_start, tmp)


def run_torchrun(python, tmp):
    def make_start(out, rid):
        port = free_port()
        # torchrun 2.8 shares one TCPStore between its rendezvous and the workers, and each agent
        # works out that store's address once, at its first rendezvous: a node added later asks
        # the new round for it (MASTER_ADDR, MASTER_PORT) and waits, since the agent that hosts
        # the store never publishes it again, until every agent's 60 s store timeout. Its
        # documented opt-out publishes it in every round (and lets a restarted gloo group start,
        # pytorch/pytorch#135712).
        env = dict(os.environ, OUT=out, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        env.pop("LD_PRELOAD", None)

        def start(i):
            return subprocess.Popen(
                [
                    python,
                    "-m",
                    "torch.distributed.run",
                    "--nnodes",
                    "2:3",
                    "--nproc-per-node",
                    "1",
                    "--max-restarts",
                    "3",
                    "--rdzv-backend",
                    "c10d",
                    "--rdzv-endpoint",
                    f"127.0.0.1:{port}",
                    "--rdzv-id",
                    rid,
                    TRAIN,
                ],
                env=env,
                stdout=open(os.path.join(out, f"node{i}.out"), "w"),
                stderr=open(os.path.join(out, f"node{i}.log"), "w"),
                start_new_session=True,
            )

        return start, lambda: None

    return lost_and_added("torchrun", make_start, tmp)


def figure(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def run_netns(args, tmp):
    """(standalone probe seconds, xtimer_run seconds, why not) from the two netns scripts."""
    probe = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tests", "netprobe", "netns_scenarios.py"),
            "--bin",
            os.path.join(args.bin, "xtimer_netprobe"),
            "--scenario",
            "faulty8-defaults",
            "--out",
            os.path.join(tmp, "netns-probe"),
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 77:
        return None, None, probe.stdout.strip().splitlines()[-1]
    run = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tests", "launcher", "netns_run.py"),
            "--bin",
            args.bin,
            "--scenario",
            "faulty8",
            "--out",
            os.path.join(tmp, "netns-run"),
        ],
        capture_output=True,
        text=True,
    )
    standalone = figure(r"probe time; wall ([0-9.]+) s", probe.stdout)
    launcher = figure(r"start -> verdict ([0-9.]+) s", run.stdout)
    why = None
    if standalone is None or launcher is None:
        why = (
            f"a netns run failed (probe rc {probe.returncode}, run rc {run.returncode}):\n"
            f"{probe.stdout[-1500:]}\n{run.stdout[-1500:]}"
        )
    return standalone, launcher, why


def fmt(x):
    return f"{x:8.2f} s" if x is not None else "       -  "


def ratio(a, b):
    return f"{a / b:5.2f}x" if a and b else "    -"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--peers-python", default=os.path.join(ROOT, ".peers", "bin", "python"))
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = args.out or tempfile.mkdtemp(prefix="xtimer-elastic-bench-")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    have_peers = (
        os.access(args.peers_python, os.X_OK)
        and subprocess.run([args.peers_python, "-c", "import torch.distributed.run"], capture_output=True).returncode
        == 0
    )
    python = args.peers_python if have_peers else "/usr/bin/python3"
    torch_version = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    print(
        f"elastic_recovery_bench: every setting at its default (lease_ttl 10 s, last_call_timeout 30 s, "
        f"XTIMER_NETCHECK_TIMEOUT 4 s, xtimer_netprobe --timeout 30 s --connect-timeout 4 s --size 64M); "
        f"workers on {python} (torch {torch_version}); logs in {tmp}",
        flush=True,
    )
    x_lost, x_added = run_xtimer(args, python, tmp)
    t_lost = t_added = None
    if have_peers:
        t_lost, t_added = run_torchrun(python, tmp)
    else:
        print(
            f"torchrun rows skipped: no peers environment at {args.peers_python} "
            f"(create it with scripts/setup_peers.sh, or pass --peers-python)"
        )
    standalone = launcher = None
    if not args.no_netns:
        standalone, launcher, why = run_netns(args, tmp)
        if why:
            print(f"black-holed node row skipped: {why}")
    print(f"{'row':34} {'xtimer':>10} {'baseline':>10}  ratio")
    print(f"{'node lost -> training again':34} {fmt(x_lost)} {fmt(t_lost)}  {ratio(x_lost, t_lost)}  (torchrun c10d)")
    print(
        f"{'node added -> training again':34} {fmt(x_added)} {fmt(t_added)}  {ratio(x_added, t_added)}  "
        f"(torchrun c10d)"
    )
    print(
        f"{'black-holed node -> verdict':34} {fmt(standalone)} {fmt(launcher)}  {ratio(standalone, launcher)}  "
        f"(xtimer_netprobe alone vs xtimer_run --network-check)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
