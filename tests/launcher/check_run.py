#!/usr/bin/env python3
"""End-to-end checks of xtimer_run: real gloo DDP workers with Debian's CPU torch,
several nodes as several xtimer_run processes on localhost, a real etcd.

  check_run.py CHECK --bin BUILD/bin --pypath BUILD/lib/python [--lib libpyccl.so --simgpu DIR]
  CHECK: crash | exhausted | agent-killed | sigterm | static | etcd-crash | etcd-node-lost | etcd-scale-out
         | etcd-below-min | etcd-netcheck | etcd-lost-defaults | etcd-lost-while-joining | etcd-node-unit | hang
         | seed-sft | seed-switchbox | seed-straggler   (the seed's dlrover-run command lines, unchanged)
         | torchrun-flags | numa | precheck | comm-perf | min-bandwidth  (flags that act)

Timings printed as 'figure:' lines are the README's recovery figures (not asserted), split into
phases: detection (the fault until an agent says so), rendezvous (until the last node has its
new round), worker start (until every worker's process group is up: Python, torch, gloo),
checkpoint load, and the first step done. Each node's stderr is stamped with the wall time as it
arrives, so the agents' lines can be placed on the same clock as the workers' events.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, free_port, wait_for  # noqa: E402
from local_etcd import Etcd  # noqa: E402

import heartbeats  # noqa: E402  (tests/launcher: the re-rendezvous checks' shell workers)

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's, with torch


def steps(out):
    rows = []
    try:
        with open(os.path.join(out, "steps.jsonl")) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except OSError:
        pass
    return rows


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Run:
    """One xtimer_run (one node)."""

    def __init__(self, args, out, run_args, script_args, env=None, name="node", cmd=None):
        self.log_path = os.path.join(out, f"{name}.log")
        e = dict(
            os.environ,
            OUT=out,
            PYTHONPATH=args.pypath,
            XTIMER_PYTHON=PYTHON,
            XTIMER_METRICS_PORT="0",
            XTIMER_TIMELINE_PATH=os.path.join(out, "timeline"),
            XTIMER_CKPT_SHM_DIR=os.path.join(out, "shm"),
        )
        os.makedirs(e["XTIMER_CKPT_SHM_DIR"], exist_ok=True)
        e.update(env or {})
        cmd = cmd or [os.path.join(args.bin, "xtimer_run")] + run_args + script_args
        self.proc = subprocess.Popen(
            cmd,
            env=e,
            stdout=open(os.path.join(out, f"{name}.out"), "w"),
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.stamped = []  # (wall time the line arrived, line)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        with open(self.log_path, "w") as f:
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace")
                self.stamped.append((time.time(), line.rstrip("\n")))
                f.write(line)
                f.flush()

    def first_line(self, text, after):
        """When the first stderr line containing `text` arrived after `after`, or None."""
        return next((t for t, line in list(self.stamped) if t > after and text in line), None)

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.reader.join(10)
        return rc

    def log(self):
        with open(self.log_path) as f:
            return f.read()


def train(steps_n=30, step_s=0.1):
    return ["--max-restarts", "3", os.path.join(HERE, "elastic_train.py")], {
        "STEPS": str(steps_n),
        "STEP_S": str(step_s),
    }


def check_resumed(rows, world_of_restart, what):
    """Every rank of every round agrees on the parameters at each step, and each round after the
    first started from a checkpoint no more than 5 steps old."""
    by_step = {}
    for r in rows:
        by_step.setdefault((r["step"], r["restart"], r["world"]), set()).add(r["digest"])
    check(all(len(d) == 1 for d in by_step.values()), f"{what}: every rank holds the same parameters at each step")
    rounds = sorted({(r["restart"], r["start"]) for r in rows})
    check(len(rounds) >= 2, f"{what}: the workers ran again after the failure (rounds {rounds})")
    for restart, start in rounds[1:]:
        before = [r["step"] for r in rows if (r["restart"], r["start"]) < (restart, start)]
        last = max(before) if before else -1
        check(
            start > 0 and last - start < 5,
            f"{what}: round (restart {restart}) resumed at step {start}, the last step done before was {last}",
        )


def events(out):
    try:
        with open(os.path.join(out, "events.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


# One worker a node that writes heartbeats (heartbeats.WORKER).
HEARTBEAT_NODE = ["--nproc-per-node", "1", "--no-python", "/bin/sh", "-c", heartbeats.WORKER]


def nodes_of(args, out, n, node_args, env=None):
    """n xtimer_run nodes, node{i}, each with the arguments node_args(i) and the environment env
    (or env(i))."""
    return [Run(args, out, node_args(i), [], env(i) if callable(env) else env, name=f"node{i}") for i in range(n)]


def print_phases(what, out, nodes, t_fault, detected_by, round_of, restart_pred):
    """One figure line for a recovery: the fault at t_fault; the first agent line containing one
    of `detected_by`; every node's line 'round <round_of>'; the workers of the new round (events
    matching restart_pred) started, initialised and loaded; every such rank's first step."""
    t_detect = min((t for n in nodes for text in detected_by if (t := n.first_line(text, t_fault))), default=None)
    rounds = [n.first_line(f"run: round {round_of} ", t_fault) for n in nodes]
    evs = [e for e in events(out) if restart_pred(e) and e["started"] > t_fault]
    firsts = {}
    for r in steps(out):
        if restart_pred(r) and r["t"] > t_fault:
            firsts[r["rank"]] = min(firsts.get(r["rank"], r["t"]), r["t"])
    if t_detect is None or None in rounds or not evs or not firsts:
        print(f"figure: {what}: phases not all seen (detect {t_detect}, rounds {rounds}, {len(evs)} starts)")
        return
    t_round = max(rounds)
    t_init = max(e["initialized"] for e in evs)
    load = max(e["loaded"] - e["initialized"] for e in evs)
    t_first = max(firsts.values())
    print(
        f"figure: {what}: {t_first - t_fault:.2f} s = detection {t_detect - t_fault:.2f} s + rendezvous "
        f"{t_round - t_detect:.2f} s + worker start {t_init - t_round:.2f} s + checkpoint load {load:.2f} s "
        f"+ first step {t_first - t_init - load:.2f} s"
    )


# ---------------------------------------------------------------- single node (static)


def c_crash(args, out):
    run_args, env = train()
    env["CRASH_AT"] = "8:1"
    r = Run(args, out, ["--standalone", "--nproc-per-node", "2"] + run_args, [], env)
    rc = r.wait(240)
    log = r.log()
    check(rc == 0, f"the job finishes with exit 0 after one crash (rc {rc})")
    check("rank 1 (local rank 1)" in log and "exit code 7" in log, "the crash is named: rank 1, exit code 7")
    rows = steps(out)
    check(all(any(x["rank"] == k and x["step"] == 29 for x in rows) for k in (0, 1)), "both ranks reach the last step")
    check(any(x["restart"] == 1 for x in rows), "the second round has TORCHELASTIC_RESTART_COUNT=1")
    check_resumed(rows, None, "crash")
    crash_t = os.path.getmtime(os.path.join(out, "CRASH_AT.done"))
    print_phases(
        "crash -> training again (standalone, 2 workers)", out, [r], crash_t, ["failed"], 1, lambda x: x["restart"] == 1
    )


def c_exhausted(args, out):
    logs = os.path.join(out, "logs")
    r = Run(
        args,
        out,
        [
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "2",
            "--log-dir",
            logs,
            "--redirects",
            "1",
            "--tee",
            "2",
            "--rdzv-id",
            "bad",
            "--no-python",
            "/bin/sh",
            "-c",
            'echo "worker $RANK out"; '
            'echo "worker $RANK bad input at restart $TORCHELASTIC_RESTART_COUNT" >&2; '
            'test "$RANK" = 1 && exit 5; sleep 30',
        ],
        [],
    )
    rc = r.wait(120)
    log = r.log()
    check(rc == 1, f"exit 1 once --max-restarts 2 is used up (rc {rc})")
    check("no restarts left (--max-restarts 2)" in log, "the summary says the restarts are used up")
    check("rank      : 1 (local_rank: 1)" in log and "exit code 5" in log, "the summary names rank 1 and exit code 5")
    check("| worker 1 bad input at restart 2" in log, "the summary ends with the failed worker's last stderr line")
    check(log.count("warning: run: rank 1 (local rank 1)") == 3, "three rounds ran (restart 0, 1, 2)")
    # torchrun's --log-dir layout: DIR/<rdzv-id>_<random>/attempt_<restart>/<local rank>/std{out,err}.log;
    # --redirects 1 sends stdout to the file only, --tee 2 stderr to the file and the terminal.
    outs = sorted(glob.glob(os.path.join(logs, "bad_*", "attempt_2", "1", "stdout.log")))
    errs = sorted(glob.glob(os.path.join(logs, "bad_*", "attempt_2", "1", "stderr.log")))
    check(
        len(outs) == 1 and open(outs[0]).read() == "worker 1 out\n",
        f"--redirects 1: rank 1's stdout in its file ({outs})",
    )
    check(
        len(errs) == 1 and "worker 1 bad input at restart 2" in open(errs[0]).read(),
        f"--tee 2: rank 1's stderr in its file ({errs})",
    )
    with open(os.path.join(out, "node.out")) as f:
        check("worker 1 out" not in f.read(), "--redirects 1: stdout not on the terminal")


def worker_pids(out):
    return sorted({r["pid"] for r in steps(out)})


def c_agent_killed(args, out):
    run_args, env = train(steps_n=10000)
    r = Run(args, out, ["--nproc-per-node", "2"] + run_args, [], env)
    check(wait_for(lambda: len(worker_pids(out)) == 2, 120), "two workers train")
    pids = worker_pids(out)
    r.proc.kill()  # SIGKILL: no chance to clean up
    r.proc.wait()
    # Workers that outlive their agent never go: the limit only stops the wait.
    gone = wait_for(lambda: not any(alive(p) for p in pids), 30, 0.1)
    check(gone, f"no worker is left 30 s after xtimer_run was SIGKILLed (pids {pids})")
    for p in pids:
        if alive(p):
            os.kill(p, signal.SIGKILL)


def c_sigterm(args, out):
    run_args, env = train(steps_n=10000)
    r = Run(args, out, ["--nproc-per-node", "2"] + run_args, [], env)
    check(wait_for(lambda: len(worker_pids(out)) == 2, 120), "two workers train")
    pids = worker_pids(out)
    r.proc.send_signal(signal.SIGTERM)
    rc = r.wait(30)
    check(rc == 128 + signal.SIGTERM, f"xtimer_run exits with 143 after SIGTERM (rc {rc})")
    check(not any(alive(p) for p in pids), "its workers are gone")


def static_node_args(node_rank, port, nproc):
    """xtimer_run's arguments for node `node_rank` of two static nodes on this host."""
    return [
        "--nnodes",
        "2",
        "--node-rank",
        str(node_rank),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        port,
        "--nproc-per-node",
        str(nproc),
    ]


def c_static(args, out):
    """torchrun's static rendezvous: two nodes, fixed ranks, node 0's address and port given. A
    worker of node 1 crashes; node 0's worker fails with its peer; each node restarts its own
    workers and the job finishes from the checkpoint with the same world."""
    run_args, env = train(steps_n=30)
    env["CRASH_AT"] = "8:1"
    port = str(free_port())
    nodes = nodes_of(args, out, 2, lambda i: static_node_args(i, port, 1) + run_args, env)
    rcs = [n.wait(300) for n in nodes]
    check(rcs == [0, 0], f"both static nodes finish with exit 0 after one crash (rc {rcs})")
    check(
        "rank 1 (local rank 0)" in nodes[1].log() and "exit code 7" in nodes[1].log(),
        "node 1 names its failed worker: rank 1, exit code 7",
    )
    rows = steps(out)
    check({r["rank"] for r in rows if r["step"] == 29} == {0, 1}, "both ranks reach the last step")
    check({r["world"] for r in rows} == {2}, "the world stays 2")
    check(any(r["restart"] == 1 for r in rows), "the second round has TORCHELASTIC_RESTART_COUNT=1")
    check_resumed(rows, None, "static")


# ---------------------------------------------------------------- several nodes (etcd)


def etcd_args(etcd, nnodes, rid, extra=""):
    return etcd.rendezvous_args(nnodes, rid, "last_call_timeout=2,join_timeout=60,lease_ttl=3" + extra)


def c_etcd_crash(args, out):
    with Etcd(out) as etcd:
        run_args, env = train(steps_n=40)
        env["CRASH_AT"] = "10:3"
        nodes = nodes_of(
            args, out, 3, lambda i: etcd_args(etcd, "3", "crash") + ["--nproc-per-node", "2"] + run_args, env
        )
        rcs = [n.wait(300) for n in nodes]
        check(rcs == [0, 0, 0], f"all three nodes finish with exit 0 (rc {rcs})")
        rows = steps(out)
        check({r["rank"] for r in rows if r["step"] == 39} == set(range(6)), "all 6 ranks reach the last step")
        check({r["world"] for r in rows} == {6}, "the world stays 6")
        check_resumed(rows, None, "etcd crash")
        crash_t = os.path.getmtime(os.path.join(out, "CRASH_AT.done"))
        print_phases(
            "crash -> all 6 workers (3 nodes x 2) training again",
            out,
            nodes,
            crash_t,
            ["failed", "stopping the workers"],
            1,
            lambda x: x["restart"] == 1,
        )


def c_etcd_node_lost(args, out):
    with Etcd(out) as etcd:
        run_args, env = train(steps_n=100000)
        nodes = nodes_of(
            args, out, 3, lambda i: etcd_args(etcd, "2:3", "lost") + ["--nproc-per-node", "1"] + run_args, env
        )
        check(
            wait_for(lambda: len({r["rank"] for r in steps(out) if r["world"] == 3}) == 3, 180),
            "three nodes train with world size 3",
        )
        wait_for(lambda: max(r["step"] for r in steps(out)) >= 12, 60)
        victim = nodes[2]
        os.killpg(victim.proc.pid, signal.SIGKILL)  # the whole node: agent and its worker
        t_kill = time.time()
        victim.proc.wait()
        ok = wait_for(lambda: len({r["rank"] for r in steps(out) if r["world"] == 2 and r["t"] > t_kill}) == 2, 120)
        check(ok, "the two remaining nodes train on with world size 2")
        rows = steps(out)
        after = [r for r in rows if r["world"] == 2 and r["t"] > t_kill]
        before = [r["step"] for r in rows if r["world"] == 3]
        if after:
            check(
                min(r["start"] for r in after) >= max(before) - 5,
                f"the smaller world resumed from the newest checkpoint (step {min(r['start'] for r in after)}, "
                f"last done {max(before)})",
            )
            print_phases(
                "node SIGKILLed -> training again with 2 nodes (lease TTL 3 s)",
                out,
                nodes[:2],
                t_kill,
                ["lost", "failed", "stopping the workers"],
                1,
                lambda x: x["world"] == 2,
            )
        for n in nodes[:2]:
            os.killpg(n.proc.pid, signal.SIGTERM)
            n.wait(30)


def c_etcd_scale_out(args, out):
    with Etcd(out) as etcd:
        run_args, env = train(steps_n=100000)
        common = etcd_args(etcd, "2:3", "grow") + ["--nproc-per-node", "1"] + run_args
        nodes = nodes_of(args, out, 2, lambda i: common, env)
        check(
            wait_for(lambda: len({r["rank"] for r in steps(out) if r["world"] == 2}) == 2, 180),
            "two nodes train with world size 2",
        )
        wait_for(lambda: max(r["step"] for r in steps(out)) >= 8, 60)
        t_add = time.time()
        nodes.append(Run(args, out, common, [], env, name="node2"))
        ok = wait_for(lambda: len({r["rank"] for r in steps(out) if r["world"] == 3}) == 3, 180)
        check(ok, "a third node joins mid-run: three ranks train with world size 3")
        rows = steps(out)
        grown = [r for r in rows if r["world"] == 3]
        if grown:
            check(min(r["start"] for r in grown) > 0, "the grown world resumed from a checkpoint, not step 0")
            print_phases(
                "node added -> training with 3 nodes",
                out,
                nodes,
                t_add,
                ["waiting to join"],
                1,
                lambda x: x["world"] == 3,
            )
        for n in nodes:
            os.killpg(n.proc.pid, signal.SIGTERM)
            n.wait(30)


def c_etcd_below_min(args, out):
    def below_min(endpoint, rid, *more):  # 2 to 3 nodes wanted, this one alone comes
        flags = ["--nnodes", "2:3", "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint, "--rdzv-id", rid]
        return flags + list(more) + ["--no-python", "/bin/true"]

    with Etcd(out) as etcd:
        r = Run(args, out, below_min(f"127.0.0.1:{etcd.port}", "few", "--rdzv-conf", "join_timeout=3"), [])
        rc = r.wait(60)
        log = r.log()
        check(rc == 1, f"exit 1 when too few nodes come (rc {rc})")
        check("only 1 of at least 2 node(s) joined" in log, "the message says how many nodes came")
    r = Run(args, out, below_min("127.0.0.1:1", "x"), [], name="noetcd")
    rc = r.wait(60)
    check(rc == 1 and "cannot be reached" in r.log(), f"no etcd: exit 1 and a line naming the endpoint (rc {rc})")


def c_etcd_netcheck(args, out):
    """--network-check over loopback, 3 healthy nodes: the probe runs before any worker, every
    node prints its table, the workers start; after a worker fails, the new round (same nodes,
    all passed) is not probed again."""
    with Etcd(out) as etcd:
        worker = [
            'echo "$RANK $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT" >> "$OUT/ranks.txt"; '
            'test "$TORCHELASTIC_RESTART_COUNT" = 0 || exit 0; test "$RANK" = 1 && exit 3; exec sleep 60'
        ]
        common = (
            etcd_args(etcd, "3", "netcheck")
            + ["--network-check", "--nproc-per-node", "1", "--max-restarts", "1", "--no-python", "/bin/sh", "-c"]
            + worker
        )
        nodes = nodes_of(args, out, 3, lambda i: common)
        rcs = [n.wait(120) for n in nodes]
        check(rcs == [0, 0, 0], f"all three nodes finish with exit 0 (rc {rcs})")
        for i, n in enumerate(nodes):
            log = n.log()
            with open(os.path.join(out, f"node{i}.out")) as f:
                table = f.read()
            verdict = log.find("network check of round 0: verdict")
            check(verdict >= 0 and "3 passed, 0 left out" in log, f"node {i}: round 0 was probed and all passed")
            check(0 <= verdict < log.find("run: round 0 "), f"node {i}: the probe ran before the workers started")
            # One round, or two when a loopback test of a busy machine came out slow.
            check("xtimer_netprobe: 3 nodes, tcp backend, " in table, f"node {i} prints the probe's table")
            check(
                "the 3 nodes of round 1 all passed it before; not probed again" in log,
                f"node {i}: the round after the failure is not probed again",
            )
        with open(os.path.join(out, "ranks.txt")) as f:
            seen = sorted(tuple(map(int, line.split())) for line in f if line.strip())
        check(
            seen == sorted((r, 3, k) for r in range(3) for k in (0, 1)),
            f"three workers ran with WORLD_SIZE 3 in both rounds ({seen})",
        )


# ---------------------------------------------------------------- re-rendezvous (shell workers)


def check_groups_whole(out, what):
    for port, whole, desc in heartbeats.groups(out):
        check(whole, f"{what}: the group on port {port} is whole: {desc}")


def close_lines(nodes, round_no):
    return [
        line for n in nodes for _, line in list(n.stamped) if f"run: rendezvous: round {round_no} closed with" in line
    ]


def stop_all(nodes):
    for n in nodes:
        if n.proc.poll() is None:
            os.killpg(n.proc.pid, signal.SIGTERM)
    for n in nodes:
        n.wait(30)


def c_etcd_lost_defaults(args, out):
    """Three nodes with the default --rdzv-conf (lease_ttl 10 s, last_call_timeout 30 s); one is
    SIGKILLed. The two others form a new round as soon as its lease expired: they are every node of
    the last round still alive and nobody else waits, so the round does not wait for the last call."""
    etcd = Etcd(out)
    nodes = []
    try:
        common = etcd.rendezvous_args("2:3", "defaults") + HEARTBEAT_NODE
        nodes = nodes_of(args, out, 3, lambda i: common, lambda i: {"NODE": str(i)})
        check(wait_for(lambda: heartbeats.in_world(out, 3, 0) == {0, 1, 2}, 60), "three nodes run with world size 3")
        os.killpg(nodes[2].proc.pid, signal.SIGKILL)
        t_kill = time.time()
        nodes[2].proc.wait()
        ok = wait_for(lambda: heartbeats.in_world(out, 2, t_kill) == {0, 1}, 60)
        check(ok, "the two other nodes run again with world size 2")
        lines = close_lines(nodes[:2], 1)
        check(
            len(lines) == 1 and "every node of the last round still alive joined" in lines[0],
            f"round 1 closed once, when every node still alive had joined ({lines})",
        )
        if ok:
            again = max(
                min(r["t"] for r in heartbeats.read(out) if r["world"] == 2 and r["node"] == n and r["t"] > t_kill)
                for n in (0, 1)
            )
            # At the lease's end (10 s), not after the rendezvous' last call (10 + 30 s): the close
            # line above says which (no wall-clock bound; elastic_recovery_bench.py has the goal).
            print(
                f"figure: node SIGKILLed -> workers running again, defaults (lease_ttl 10 s, last_call_timeout "
                f"30 s): {again - t_kill:.2f} s"
            )
        stop_all(nodes)
        check_groups_whole(out, "lost at the defaults")
    finally:
        stop_all(nodes)
        etcd.stop()


def c_etcd_lost_while_joining(args, out):
    """Three nodes run; a fourth comes and waits; one of the three is SIGKILLed at that moment. The
    next round must take the newcomer in (it waits outside, so the round does not close without it)
    and must wait for the killed node's lease to expire; it then closes at once, before the last
    call, with the two survivors and the newcomer: one new round, every group whole."""
    etcd = Etcd(out)
    nodes = []
    try:
        common = etcd.rendezvous_args("2:4", "joining", "last_call_timeout=10,lease_ttl=3") + HEARTBEAT_NODE
        nodes = nodes_of(args, out, 3, lambda i: common, lambda i: {"NODE": str(i)})
        check(wait_for(lambda: heartbeats.in_world(out, 3, 0) == {0, 1, 2}, 60), "three nodes run with world size 3")
        # Node 2 is frozen as the newcomer starts: the survivors may notice the newcomer and
        # rejoin before this script, on a loaded machine, sees it wait; a frozen node 2 cannot
        # rejoin, so it is lost while the newcomer joins whatever the timing. Its lease expires.
        nodes.append(Run(args, out, common, [], {"NODE": "3"}, name="node3"))
        os.killpg(nodes[2].proc.pid, signal.SIGSTOP)
        t_kill = time.time()
        check(wait_for(lambda: nodes[3].first_line("waiting to be taken", 0), 30), "the fourth node waits to join")
        os.killpg(nodes[2].proc.pid, signal.SIGKILL)
        nodes[2].proc.wait()
        ok = wait_for(lambda: heartbeats.in_world(out, 3, t_kill) == {0, 1, 3}, 60)
        check(ok, "nodes 0, 1 and the newcomer run with world size 3")
        time.sleep(3)  # a round that closed without the newcomer would restart for it by now
        after = [r for r in heartbeats.read(out) if r["t"] > t_kill]
        ports = {r["port"] for r in after if r["node"] == 3}
        check(
            len(ports) == 1
            and {r["node"] for r in after if r["port"] in ports} == {0, 1, 3}
            and not any(r["world"] == 2 for r in after),
            f"one new round after the kill, with the newcomer in it ({sorted(ports)})",
        )
        lines = close_lines(nodes[:2] + nodes[3:], 1)
        check(
            len(lines) == 1 and "every node of the last round still alive joined" in lines[0],
            f"round 1 closed once, when the newcomer and every node still alive had joined ({lines})",
        )
        stop_all(nodes)
        check_groups_whole(out, "lost while joining")
    finally:
        stop_all(nodes)
        etcd.stop()


def c_etcd_node_unit(args, out):
    """dlrover-run's --node-unit 2 with three nodes (2:3): a round takes a multiple of 2 nodes, so two
    train and the third waits without restarting them. Each node spells the flag another way."""
    etcd = Etcd(out)
    nodes = []
    try:
        worker = 'echo "$NODE $GROUP_RANK $WORLD_SIZE $MASTER_PORT $(date +%s.%N)" >> "$OUT/hb.txt"; sleep 4'
        base = etcd.rendezvous_args("2:3", "unit") + ["--nproc-per-node", "1"]
        spellings = [["--node_unit", "2"], ["--node_unit=2"], ["--node-unit", "2"]]
        nodes = nodes_of(
            args,
            out,
            3,
            lambda i: base + spellings[i] + ["--no-python", "/bin/sh", "-c", worker],
            lambda i: {"NODE": str(i)},
        )
        done = wait_for(lambda: sum(n.proc.poll() is not None for n in nodes) >= 2, 60)
        rcs = [n.proc.poll() for n in nodes]
        rows = heartbeats.read(out)
        check(done and sorted(rc for rc in rcs if rc is not None) == [0, 0], f"two nodes finish with exit 0 ({rcs})")
        check(
            len(rows) == 2 and {r["world"] for r in rows} == {2} and {r["rank"] for r in rows} == {0, 1},
            f"two workers ran, with WORLD_SIZE 2 ({rows})",
        )
        spare = [n for n, rc in zip(nodes, rcs) if rc is None]
        check(
            len(spare) == 1 and spare[0].first_line("waiting to be taken", 0) is not None,
            "the third node waits, outside the round",
        )
        check(not any("for a new round" in n.log() for n in nodes), "the waiting node restarted nobody")
        if len(spare) == 1:
            os.killpg(spare[0].proc.pid, signal.SIGTERM)
            rc = spare[0].wait(10)
            check(rc == 128 + signal.SIGTERM, f"SIGTERM stops the waiting node at once (rc {rc})")
    finally:
        stop_all(nodes)
        etcd.stop()


# ---------------------------------------------------------------- hang (simulated NCCL)


def c_hang(args, out):
    env = {"LD_LIBRARY_PATH": args.simgpu, "XTIMER_HANG_TIMEOUT": "2", "XTIMER_DUMP_WAIT": "10"}
    r = Run(
        args,
        out,
        [
            "--nproc-per-node",
            "4",
            "--max-restarts",
            "1",
            "--no-python",
            PYTHON,
            os.path.join(HERE, "elastic_hang.py"),
            args.lib,
            out,
            "--stuck-rank",
            "2",
        ],
        [],
        env,
    )
    rc = r.wait(180)
    log = r.log()
    check(rc == 0, f"the job finishes after the hang and one restart (rc {rc})")
    check("rank 2" in log or "hangs" in log, "xtimer_run says a rank hangs")
    verdicts = glob.glob(os.path.join(out, "timeline", "*", "verdict.json"))
    check(len(verdicts) >= 1, f"a merged verdict was written before the restart ({verdicts})")
    text = open(verdicts[0]).read() if verdicts else ""
    check("load_batch" in text, "the verdict names the stuck rank's Python function (load_batch)")
    # Four workers print JSON lines into one file: lines may run into each other, so take every
    # {...} that parses.
    with open(os.path.join(out, "node.out")) as f:
        rows = []
        for text in re.findall(r"\{[^{}]*\}", f.read()):
            try:
                rows.append(json.loads(text))
            except ValueError:
                pass
    done = [x for x in rows if x.get("done")]
    check(len(done) == 4, f"all four ranks finish in the second round ({len(done)})")
    # Phases: rank 2 entered load_batch right after its step-2 allreduce; the agent's 'hangs' line
    # (after XTIMER_HANG_TIMEOUT); its new round (stacks merged and written, workers stopped); every
    # rank's first allreduce of the new round (Python start, simulated NCCL set-up, one step).
    t_round = r.first_line("run: round 1 ", 0)
    t_hang = max(
        (
            x["allreduce_at"]
            for x in rows
            if x.get("rank") == 2
            and x.get("step") == 2
            and "allreduce_at" in x
            and (t_round is None or x["allreduce_at"] < t_round)
        ),
        default=None,
    )
    t_detect = r.first_line("hangs", t_hang or 0)
    again = [
        min(
            (
                x["allreduce_at"]
                for x in rows
                if x.get("rank") == k and "allreduce_at" in x and t_round and x["allreduce_at"] > t_round
            ),
            default=None,
        )
        for k in range(4)
    ]
    if t_hang and t_detect and t_round and all(again):
        print(
            f"figure: hang -> training again (1 node x 4 workers, XTIMER_HANG_TIMEOUT=2): {max(again) - t_hang:.2f} s "
            f"= detection {t_detect - t_hang:.2f} s + stacks merged, workers stopped, new round "
            f"{t_round - t_detect:.2f} s + worker start and first step {max(again) - t_round:.2f} s"
        )


# ---------------------------------------------------------------- dlrover-run's command lines and flags

# The seed's dlrover-run lines (its swift guide and DLRover user guide), with only the program's
# name changed. $SCRIPT stands for the training script's path; the rest is the seed's text.
SEED_LINES = {
    "seed-sft": "xtimer_run --nnodes 1:$NODE_NUM --nproc_per_node=1  $SCRIPT --model $model --model_type qwen3 "
    "--train_type lora  --torch_dtype bfloat16 --dataset $dataset --num_train_epochs 4 "
    "--per_device_train_batch_size 1 --per_device_eval_batch_size 1 --learning_rate 5e-7 "
    "--gradient_accumulation_steps 8 --eval_steps 500 --save_steps 10 --save_total_limit 20 "
    "--logging_steps 1 --output_dir $output --warmup_ratio 0.01 --dataloader_num_workers 4 "
    "--temperature 1.0 --system You\\ are\\ a\\ helpful\\ assistant. --lora_rank 8 --lora_alpha 32 "
    "--target_modules all-linear --dataset_num_proc 1 --use_flash_ckpt true "
    "--callbacks deepspeed_elastic graceful_exit --deepspeed $deepspeed_config_or_type",
    "seed-switchbox": "xtimer_run --network-check --switchbox-check --nnodes=$NODE_NUM --nproc_per_node=1 "
    "--max_restarts=3 $SCRIPT",
    "seed-straggler": "xtimer_run --exclude-straggler --network-check --nnodes=$NODE_NUM --nproc_per_node=1 "
    "--max_restarts=3 $SCRIPT",
}


def c_seed(args, out, which):
    """One of the seed's lines on two nodes, through a shell as a manifest runs it. The elastic
    rendezvous comes from the environment (PET_*, as torchrun and dlrover-run read it), so the
    line itself is the seed's. Real gloo workers on the simulated runtime; each must see the
    script's own arguments exactly as the shell split them."""
    with Etcd(out) as etcd:
        line = SEED_LINES[which]
        env = {
            "PATH": args.bin + os.pathsep + os.environ["PATH"],
            "NODE_NUM": "2",
            "LD_LIBRARY_PATH": args.simgpu or "",
            "SCRIPT": os.path.join(HERE, "dlrover_seed_train.py"),
            "model": "/model/qwen3",
            "dataset": "/data/d.json",
            "output": os.path.join(out, "output"),
            "deepspeed_config_or_type": "zero1",
            "PET_RDZV_BACKEND": "etcd",
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{etcd.port}",
            "PET_RDZV_ID": which,
            "PET_LOCAL_ADDR": "127.0.0.1",
            "PET_RDZV_CONF": "last_call_timeout=5,join_timeout=60,lease_ttl=3",
        }
        nodes = [Run(args, out, [], [], env, name=f"node{i}", cmd=["/bin/sh", "-c", "exec " + line]) for i in range(2)]
        rcs = [n.wait(180) for n in nodes]
        check(rcs == [0, 0], f"{which}: both nodes finish with exit 0 (rc {rcs})")
        # What the shell hands the script: the line after $SCRIPT, variables expanded, words split.
        tail = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], line.split("$SCRIPT", 1)[1])
        expected = shlex.split(tail)
        rows = []
        try:
            with open(os.path.join(out, "seed.jsonl")) as f:
                rows = [json.loads(x) for x in f if x.strip()]
        except OSError:
            pass
        check(
            sorted(r["rank"] for r in rows) == [0, 1] and all(r["world"] == 2 for r in rows),
            f"{which}: two workers ran with WORLD_SIZE 2 ({[(r['rank'], r['world']) for r in rows]})",
        )
        check(all(r["sum"] == 12.0 for r in rows), f"{which}: their gloo allreduces met ({[r['sum'] for r in rows]})")
        check(
            all(r["argv"] == expected for r in rows),
            f"{which}: the script got its arguments untouched ({len(expected)} of them)",
        )
        if which == "seed-sft":
            check(all("You are a helpful assistant." in r["argv"] for r in rows), "the escaped spaces are one argument")
        for i, n in enumerate(nodes):
            log = n.log()
            check("unknown option" not in log, f"{which}: node {i}: no 'unknown option'")
            if which != "seed-sft":
                check("2 passed, 0 left out" in log, f"{which}: node {i}: the network check ran and both passed")
            if which == "seed-switchbox":
                warns = [x for x in log.splitlines() if "warning: run: --switchbox-check:" in x]
                check(
                    len(warns) == 1,
                    f"{which}: node {i}: one warning line says why --switchbox-check does nothing " f"({warns})",
                )


def c_min_bandwidth(args, out):
    """dlrover-run's --min-bandwidth is the network check's floor: two healthy nodes on loopback
    (which pass without it: seed-switchbox) are both faulty under a floor of 10^9 MB/s and leave."""
    with Etcd(out) as etcd:
        common = etcd_args(etcd, "2", "floor") + [
            "--network-check",
            "--min-bandwidth",
            "1e9",
            "--nproc-per-node",
            "1",
            "--no-python",
            "/bin/true",
        ]
        nodes = nodes_of(args, out, 2, lambda i: common)
        rcs = [n.wait(60) for n in nodes]
        check(rcs == [1, 1], f"both nodes are left out and exit 1 (rc {rcs})")
        for i, n in enumerate(nodes):
            log = n.log()
            check(
                "left out by the network check" in log and "is under --min-bandwidth 1000000000 MB/s" in log,
                f"node {i} says it is under the floor",
            )


def c_torchrun_flags(args, out):
    """torchrun's --run-path is a switch (the flag after it is not its value) and runs the script
    with Python; --local-ranks-filter shows only the listed local ranks' output."""
    script = os.path.join(out, "hello.py")
    with open(script, "w") as f:
        f.write(
            "import os, sys\n"
            "r = os.environ['LOCAL_RANK']\n"
            "print(f'local {r} out {sys.argv[1:]}', flush=True)\n"
            "print(f'local {r} err', file=sys.stderr, flush=True)\n"
        )
    r = Run(args, out, ["--run-path", "--nproc-per-node", "2", "--local-ranks-filter", "1", script, "a", "b"], [])
    rc = r.wait(60)
    log = r.log()
    with open(os.path.join(out, "node.out")) as f:
        stdout = f.read()
    check(rc == 0, f"--run-path --nproc-per-node 2 SCRIPT: exit 0 (rc {rc}; {log[-300:]!r})")
    check("local 1 out ['a', 'b']" in stdout, "local rank 1's stdout is shown, with the script's arguments")
    check("local 1 err" in log, "local rank 1's stderr is shown")
    check("local 0 out" not in stdout and "local 0 err" not in log, "local rank 0's output is not shown")
    check("warning" not in log, f"no warning ({[x for x in log.splitlines() if 'warning' in x]})")


def c_numa(args, out):
    """--numa-affinity against a fake topology: two GPUs on two NUMA nodes, each node one of the
    CPUs this test may use; each worker runs on its GPU's node's CPUs only (and without the flag
    on all of them)."""
    allowed = sorted(os.sched_getaffinity(0))
    cpu0, cpu1 = allowed[0], allowed[-1]
    fs = os.path.join(out, "sysfs")
    for pci, node in (("0000:1b:00.0", 0), ("0000:b1:00.0", 1)):
        d = os.path.join(fs, "bus", "pci", "devices", pci)
        os.makedirs(d)
        for name, text in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", str(node))):
            with open(os.path.join(d, name), "w") as f:
                f.write(text + "\n")
    for node, cpu in ((0, cpu0), (1, cpu1)):
        d = os.path.join(fs, "devices", "system", "node", f"node{node}")
        os.makedirs(d)
        with open(os.path.join(d, "cpulist"), "w") as f:
            f.write(f"{cpu}\n")
    worker = ["--no-python", "/bin/sh", "-c", 'grep Cpus_allowed_list /proc/self/status > "$OUT/$TAG.$LOCAL_RANK"']

    def cpus(tag, rank):
        with open(os.path.join(out, f"{tag}.{rank}")) as f:
            return f.read().split(":")[1].strip()

    for tag, flags in (("bound", ["--numa-affinity"]), ("free", [])):
        r = Run(
            args,
            out,
            ["--standalone", "--nproc-per-node", "2"] + flags + worker,
            [],
            {"XTIMER_SYSFS_ROOT": fs, "TAG": tag},
            name=tag,
        )
        rc = r.wait(60)
        check(rc == 0, f"{tag}: exit 0 (rc {rc})")
        if tag == "bound":
            check(
                cpus(tag, 0) == str(cpu0) and cpus(tag, 1) == str(cpu1),
                f"each worker runs on its GPU's NUMA node's CPUs ({cpus(tag, 0)}, {cpus(tag, 1)}; "
                f"expected {cpu0}, {cpu1})",
            )
            check(
                f"--numa-affinity: local rank 1 (GPU 0000:b1:00.0) on NUMA node 1: CPUs {cpu1}" in r.log(),
                "xtimer_run says where each worker is bound",
            )
        else:
            want = os.popen("grep Cpus_allowed_list /proc/self/status").read().split(":")[1].strip()
            check(
                cpus(tag, 0) == want and cpus(tag, 1) == want,
                f"without --numa-affinity the workers keep every CPU ({cpus(tag, 0)}; {want})",
            )
    if cpu0 == cpu1:
        print("note: this machine lets the test use one CPU only: both nodes have the same CPU")


def c_precheck(args, out):
    """--precheck 1 on two elastic nodes: one has two working simulated GPUs, the other a driver
    but no GPU. The second fails its check and never joins; the first measures its GPUs, joins,
    and trains alone once the round's last call is over."""
    with Etcd(out) as etcd:
        common = etcd_args(etcd, "1:2", "precheck") + [
            "--precheck",
            "1",
            "--nproc-per-node",
            "1",
            "--no-python",
            "/bin/sh",
            "-c",
            'echo "$RANK $WORLD_SIZE" >> "$OUT/ranks.txt"',
        ]
        sim = {"LD_LIBRARY_PATH": args.simgpu, "SIMGPU_TFLOPS": "50"}
        good = Run(args, out, common, [], dict(sim, SIMGPU_DEVICES="2"), name="good")
        bad = Run(args, out, common, [], dict(sim, SIMGPU_DEVICES="0"), name="bad")
        rcs = [good.wait(120), bad.wait(120)]
        check(rcs == [0, 1], f"the node with GPUs finishes with exit 0, the one without exits 1 (rc {rcs})")
        blog, glog = bad.log(), good.log()
        check(
            "--precheck: this node failed its GPU check, so it does not join the job: cudaGetDeviceCount: no "
            "CUDA-capable device is detected" in blog,
            "the failed node says why it does not join",
        )
        check("run: round" not in blog, "the failed node never joined a round")
        tflops = [float(x) for x in re.findall(r"GPU \d: 2048x2048 fp32 matmul at ([\d.]+) TFLOPS", glog)]
        check(
            len(tflops) == 2 and all(35 <= t <= 65 for t in tflops),
            f"each of the good node's 2 GPUs ran a timed matmul near SIMGPU_TFLOPS=50 ({tflops})",
        )
        check("allreduce of 16 MiB over 2 GPUs" in glog, "the good node's GPUs ran an allreduce together")
        check(glog.find("this node's GPUs passed") < glog.find("run: round 0 "), "the check ran before it joined")
        with open(os.path.join(out, "ranks.txt")) as f:
            check(f.read().split() == ["0", "1"], "the good node's worker ran alone: RANK 0, WORLD_SIZE 1")


def c_comm_perf(args, out):
    """--comm-perf-test on two static nodes x two workers over the simulated NCCL at 0.2 GB/s
    (SIMGPU_NET_GBPS): before the workers, the 4 ranks allreduce at three sizes and each node
    prints the table. The simulated link lets no allreduce end before its bus bytes went at
    0.2 GB/s, so no row may show more; a row near it shows the timing and nccl-tests' factor
    2(n-1)/n are right (the largest sizes may be slower: the CPUs move the data)."""
    port = str(free_port())
    worker = ["--no-python", "/bin/sh", "-c", 'echo "$RANK" >> "$OUT/ranks.txt"; echo "worker $RANK starts" >&2']
    sim = {"LD_LIBRARY_PATH": args.simgpu, "SIMGPU_DEVICES": "2", "SIMGPU_NET_GBPS": "0.2"}
    nodes = nodes_of(args, out, 2, lambda i: static_node_args(i, port, 2) + ["--comm-perf-test"] + worker, sim)
    rcs = [n.wait(120) for n in nodes]
    check(rcs == [0, 0], f"both nodes finish with exit 0 (rc {rcs})")
    with open(os.path.join(out, "ranks.txt")) as f:
        check(sorted(f.read().split()) == ["0", "1", "2", "3"], "then the 4 workers ran")
    for i, n in enumerate(nodes):
        with open(os.path.join(out, f"node{i}.out")) as f:
            table = f.read()
        check(
            f"allreduce (float32, sum) over 4 rank(s) on 2 node(s), timed on rank {2 * i}" in table,
            f"node {i} prints the table of its local rank 0",
        )
        rows = re.findall(r"(\d+) MiB +([\d.]+) ms +([\d.]+) GB/s +([\d.]+) GB/s", table)
        check([r[0] for r in rows] == ["1", "8", "64"], f"node {i}: rows for 1, 8 and 64 MiB ({rows})")
        busbw = [float(r[3]) for r in rows]
        print(f"figure: node {i}: allreduce busbw over 4 ranks at SIMGPU_NET_GBPS=0.2 (1, 8, 64 MiB): {busbw} GB/s")
        check(
            busbw and max(busbw) <= 0.22 and max(busbw) >= 0.1,
            f"node {i}: no row beats the simulated link's 0.2 GB/s and one comes near it ({busbw})",
        )
        # The agent says so before it starts the workers, whose stderr passes through it.
        log = n.log()
        check(
            0 <= log.find("--comm-perf-test done") < log.find(f"worker {2 * i} starts"),
            f"node {i}: the test was done before its workers started",
        )


CHECKS = {
    "crash": c_crash,
    "exhausted": c_exhausted,
    "agent-killed": c_agent_killed,
    "sigterm": c_sigterm,
    "static": c_static,
    "etcd-crash": c_etcd_crash,
    "etcd-node-lost": c_etcd_node_lost,
    "etcd-scale-out": c_etcd_scale_out,
    "etcd-below-min": c_etcd_below_min,
    "etcd-netcheck": c_etcd_netcheck,
    "etcd-lost-defaults": c_etcd_lost_defaults,
    "etcd-lost-while-joining": c_etcd_lost_while_joining,
    "etcd-node-unit": c_etcd_node_unit,
    "hang": c_hang,
    "seed-sft": lambda a, o: c_seed(a, o, "seed-sft"),
    "seed-switchbox": lambda a, o: c_seed(a, o, "seed-switchbox"),
    "seed-straggler": lambda a, o: c_seed(a, o, "seed-straggler"),
    "torchrun-flags": c_torchrun_flags,
    "min-bandwidth": c_min_bandwidth,
    "numa": c_numa,
    "precheck": c_precheck,
    "comm-perf": c_comm_perf,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--lib")
    ap.add_argument("--simgpu")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix=f"xtimer-run-{args.check}-")
    try:
        CHECKS[args.check](args, out)
    finally:
        if failures:
            for name in sorted(glob.glob(os.path.join(out, "*.log"))):
                print(f"--- {name}\n" + open(name).read()[-3000:])
    print(f"{len(failures)} failed" if failures else "all passed")
    if not failures:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
