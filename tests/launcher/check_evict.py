#!/usr/bin/env python3
"""xtimer_run --evict-slow-nodes on the simulated runtime: several xtimer_run processes on this
host (one a node, each its own loopback address, node name and SIMGPU_NODE), a real etcd, a real
xtimer_collector whose judge's verdict comes back to every agent, and ranks of the slowdown
scenarios' training loop (tests/slowdown/train_rank.py: GEMMs on the simulated GPU, the node's
all-gather and the job's all-reduces on the simulated NCCL). A node's GPU becomes slower mid-run
through the simulated runtime's control file (`node=N gpu_factor=F`).

  check_evict.py MODE --bin BUILD/bin --lib libslowdown_train.so --simgpu DIR [--python PY]
  MODE: spare    4 nodes (--nnodes 4:4) and 1 spare waiting: node 2's GPU at half speed; node 2
                 is evicted (its log line, the etcd key, xtimer_slow_node_evictions_total, a row
                 on the collector's status page), the spare takes its place, every rank of the
                 new round resumes from the flash checkpoint (xtimer.ckpt: its first step is the
                 loaded step + 1, the survivors' the step they saved last, the bytes loaded are
                 those saved), the job's step time comes back within 10% of its healthy value,
                 and node 2 cannot join the run again (what CI runs, about 60 s)
        network  the same with node 2's network at a tenth of the others' (`node=2 net_gbps=0.2`),
                 two ranks per node: the judge pins the slower transfers on node 2 (cause network,
                 scope node), and it is evicted, replaced and resumed as above
        smaller  4 nodes (--nnodes 3:4), no spare: node 2 is evicted, the job goes on with 3
        atmin    4 nodes (--nnodes 4:4), no spare: node 2 stays and says so
        host     4 nodes + 1 spare, node 2's rank a host-side straggler: named, never evicted
        gc, data the same with GC pauses, with a slow torch DataLoader (Debian's CPU torch)
        all      4 nodes + 1 spare, every node's GPU at half speed: the job is slower, nobody is
                 named or evicted
        healthy  4 nodes + 1 spare with the flag on and no fault: nobody is evicted

Prints "figure:" lines: the seconds from the onset to the eviction and to the step time back
within 10%, and the step times. tests/bench/evict_bench.py runs the same job for longer, with
and without the flag, and judges the 45 s goal; no wall-clock bound here.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, free_port, http_get, start_collector, wait_for  # noqa: E402
from local_etcd import Etcd  # noqa: E402
from node_ranks import agent_env  # noqa: E402
from check_run import Run  # noqa: E402

TRAIN_RANK = os.path.join(HERE, "..", "slowdown", "train_rank.py")
SLOW_NODE = 2  # the node whose GPU slows down
EVICTED = "evicting this node"


class Node(Run):
    """One xtimer_run (check_run.Run: its stderr lines stamped with the wall time they arrived)."""

    def __init__(self, args, out, index, run_args, env):
        self.index, self.name = index, f"node{index}"
        self.metrics_port = int(env["XTIMER_METRICS_PORT"])
        cmd = [os.path.join(args.bin, "xtimer_run")] + run_args
        # Run's defaults (PYTHONPATH, timeline, shared memory) give way to this job's own env.
        super().__init__(argparse.Namespace(pypath=env.get("PYTHONPATH", "")), out, [], [], env, self.name, cmd)

    def trained(self):
        """True once a worker of this node printed that it trains (its stdout, in NODE.out)."""
        try:
            with open(self.log_path[:-4] + ".out") as f:
                return '"training_at"' in f.read()
        except OSError:
            return False

    def rank(self):
        """The global rank of this node's worker (its last "training_at" line), or None."""
        try:
            with open(self.log_path[:-4] + ".out") as f:
                rows = [json.loads(line) for line in f if '"training_at"' in line]
        except (OSError, ValueError):
            return None
        return rows[-1]["rank"] if rows else None

    def rows(self):
        """The JSON lines its workers printed on stdout, every round's, in order."""
        try:
            with open(self.log_path[:-4] + ".out") as f:
                lines = [line for line in f if line.startswith("{")]
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the worker's end
        return out

    def resumed(self):
        """Its newest worker's start from the flash checkpoint once that worker has done a step:
        (the step its previous worker saved last or None, the start_step row, the first_step row);
        None before."""
        rows = self.rows()
        starts = [i for i, r in enumerate(rows) if "start_step" in r]
        if not starts:
            return None
        i = starts[-1]
        first = next((r for r in rows[i:] if "first_step" in r), None)
        if first is None:
            return None
        before = [r["saved"] for r in rows[:i] if "saved" in r]
        return (before[-1] if before else None), rows[i], first

    def first(self, text, after=0):
        return next(((t, line) for t, line in list(self.stamped) if t > after and text in line), (None, None))

    def text(self):
        return "\n".join(line for _, line in list(self.stamped))

    def counter(self):
        body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        for line in (body or "").splitlines():
            if line.startswith("xtimer_slow_node_evictions_total"):
                return float(line.split()[-1])
        return None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.reader.join(10)


class Job:
    """The collector, etcd and the nodes; the collector's verdicts read twice a second."""

    def __init__(self, args, out, nodes, spares, nnodes, evict, extra_flags=(), flash=False, train_args="", nproc=1):
        self.args, self.out = args, out
        self.control = os.path.join(out, "control")
        set_control(self.control, "")
        self.etcd = Etcd(out)
        port, http = free_port(), free_port()
        self.http = http
        self.collector = start_collector(args.bin, out, port, http)
        self.verdicts = []  # (wall time read, verdict)
        self.nodes = []
        self.stopping = False
        ids = os.path.join(out, "ids")
        os.makedirs(ids, exist_ok=True)
        # Each round's ranks share their communicators' ids in a folder of the round's own
        # (its master port), so a new round never reads the last one's.
        # With `flash`, the ranks resume from xtimer.ckpt's flash checkpoint in out/ckpt (its Python
        # package beside bin/, after xtimer_run's own PYTHONPATH).
        lib_python = os.path.realpath(os.path.join(args.bin, "..", "lib", "python"))
        flash_env = f'export PYTHONPATH="$PYTHONPATH:{lib_python}"; ' if flash else ""
        flash_args = f" --flash-ckpt {os.path.join(out, 'ckpt')}" if flash else ""
        worker = (
            f'd={ids}/$MASTER_PORT; mkdir -p "$d"; {flash_env}exec {args.python} {TRAIN_RANK} {args.lib} '
            f'"$RANK" "$WORLD_SIZE" "$LOCAL_WORLD_SIZE" "$d" --control {self.control} --seconds 100000 '
            f'--ckpt-every 0 --progress "$d/progress-$RANK"{flash_args}{train_args}'
        )
        flags = self.etcd.rendezvous_args(nnodes, "evict", "last_call_timeout=2,join_timeout=120,lease_ttl=3")
        flags += ["--nproc-per-node", str(nproc), "--max-restarts", "3", "--stop-grace", "2"]
        if evict:
            flags += ["--evict-slow-nodes"] + list(extra_flags)
        for i in range(nodes + spares):
            env = agent_env(
                drop=("PYTHONPATH",),
                LD_LIBRARY_PATH=args.simgpu,
                XTIMER_COLLECTOR=f"127.0.0.1:{port}",
                XTIMER_TIMELINE_PATH=os.path.join(out, f"node{i}"),
                XTIMER_METRICS_PORT=str(free_port()),
                XTIMER_NODE_NAME=f"node{i}",
                XTIMER_CKPT_SHM_DIR=os.path.join(out, f"shm{i}"),
                SIMGPU_NODE=str(i),
                SIMGPU_NET_GBPS="2",
                SIMGPU_CONTROL=self.control,
            )
            os.makedirs(env["XTIMER_CKPT_SHM_DIR"], exist_ok=True)
            addr = ["--local-addr", f"127.0.0.{i + 2}"]
            run_args = [a for a in flags] + addr
            # etcd's own address stays 127.0.0.1; --local-addr given twice: the last one wins.
            run_args += ["--no-python", "/bin/sh", "-c", worker]
            if i == nodes:  # the spare comes once the others train
                wait_for(lambda: self.training(nodes), 120, 0.2)
            self.nodes.append(Node(args, out, i, run_args, env))
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def training(self, n):
        return sum(1 for node in self.nodes if node.trained()) >= n

    def _watch(self):
        path = os.path.join(self.out, "collected", "slowdown.json")
        last = None
        while not self.stopping:
            try:
                with open(path) as f:
                    v = json.load(f)
                if v.get("updated") != last:
                    last = v.get("updated")
                    self.verdicts.append((time.time(), v))
            except (OSError, ValueError):
                pass
            time.sleep(0.5)

    def step_times(self, since, until=None):
        """The judged step times of the verdicts read between `since` and `until` (wall times)."""
        return [
            v["step_time_s"]
            for t, v in list(self.verdicts)
            if v.get("step_time_s") and t >= since and (until is None or t <= until)
        ]

    def steps_done(self):
        """The job's steps so far: rank 0's steps summed over the rounds (each round's progress
        file counts its own ranks' steps from 0, resumed from a checkpoint or not)."""
        total = 0
        ids = os.path.join(self.out, "ids")
        for d in os.listdir(ids):
            try:
                with open(os.path.join(ids, d, "progress-0")) as f:
                    total += json.load(f)["steps"]
            except (OSError, ValueError, KeyError):
                pass
        return total

    def named(self):
        """Every finding any verdict had: (cause, scope, node)."""
        return {(f["cause"], f["scope"], f.get("node")) for _, v in list(self.verdicts) for f in v.get("slow", [])}

    def stop(self):
        self.stopping = True
        for n in self.nodes:
            n.stop()
        self.collector.terminate()
        self.collector.wait()
        self.etcd.stop()


def set_control(path, line):
    with open(path + ".tmp", "w") as f:
        f.write(line + "\n")
    os.replace(path + ".tmp", path)


def healthy_step(job, seconds):
    """The job's step time over `seconds` of verdicts from now (median)."""
    t0 = time.time()
    time.sleep(seconds)
    return statistics.median(job.step_times(t0) or [0])


def recovered_at(job, after, healthy, within=1.10, timeout=120):
    """The wall time the first verdict came, after `after`, that judges no rank of the slow node
    (so the new round's ranks are in it) and has the job's step time within `within` of
    `healthy`; None if none by the timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for t, v in list(job.verdicts):
            st = v.get("step_time_s")
            nodes = {r.get("node") for r in v.get("ranks", [])}
            if t > after and st and nodes and f"node{SLOW_NODE}" not in nodes and st <= healthy * within:
                return t
        time.sleep(0.5)
    return None


def slow_gpu_episode(job, warmup_s, factor=2.0):
    """Healthy for `warmup_s`, then the slow node's GPU at 1/factor speed. Returns (healthy step
    time, the onset's wall time)."""
    healthy = healthy_step(job, warmup_s)
    onset = time.time()
    set_control(job.control, f"node={SLOW_NODE} gpu_factor={factor}")
    return healthy, onset


# What stays with a node and evicts it: the control line that slows node 2 mid-run, the cause the
# verdict must give, and what the check calls it.
STAYING = {
    "gpu": (f"node={SLOW_NODE} gpu_factor=2", "gpu_compute", "its GPU slowed down", 1),
    # Its network at a tenth of the others' (SIMGPU_NET_GBPS=2). The job's all-reduce slows down,
    # and so does node 2's own all-gather (the simulation has one network per node, so its
    # communicators inside the node slow too): two ranks per node, so that the judge can pin the
    # slower transfers on the one node both communicators share. With one rank per node only the
    # job's all-reduce slows down, which every node shares: that is the job's network, never
    # evicted.
    "network": (f"node={SLOW_NODE} net_gbps=0.2", "network", "its network slowed down", 2),
}


def c_spare(args, out, fault="gpu"):
    control, cause, what, nproc = STAYING[fault]
    job = Job(args, out, 4, 1, "4:4", True, ["--evict-slow-after", "6"], flash=True, nproc=nproc)
    try:
        check(wait_for(lambda: job.training(4), 120, 0.2), "four nodes train")
        spare = job.nodes[4]
        check(
            wait_for(lambda: spare.first("waiting to be taken into the next one")[0] is not None, 30),
            "the fifth node waits as a spare",
        )
        healthy = healthy_step(job, 12)
        onset = time.time()
        set_control(job.control, control)
        slow = job.nodes[SLOW_NODE]
        ok = wait_for(lambda: slow.first(EVICTED)[0] is not None, 60, 0.2)
        check(ok, f"node {SLOW_NODE} is evicted after {what}")
        t_evict, line = slow.first(EVICTED)
        check(line is not None and cause in line and "node2" in line, f"its log line names the verdict: {line}")
        if fault == "network":
            named = {f for f in job.named() if f[0] == "network"}
            check(named == {("network", "node", "node2")}, f"the network slowdown is pinned on node2 alone: {named}")
        rc = slow.proc.wait(30) if ok else None
        check(rc == 1, f"the evicted node exits 1 (rc {rc})")
        check("it cannot join run 'evict' again" in slow.text(), "it says it cannot join the run again")
        back = recovered_at(job, t_evict or onset, healthy) if ok else None
        check(back is not None, "the job's step time comes back within 10% of its healthy value")
        check(
            wait_for(lambda: spare.first(f"world size {4 * nproc}")[0] is not None, 30),
            "the spare trains in the new round",
        )
        others = [n for n in job.nodes if n.index not in (SLOW_NODE,)]
        for n in others:
            check(n.proc.poll() is None, f"{n.name} still runs")
        counters = [n.counter() for n in others]
        check(all(c == 1 for c in counters), f"xtimer_slow_node_evictions_total is 1 on every node left ({counters})")
        row = wait_for(lambda: eviction_row(job, "node2"), 10, 0.2)
        check(
            row is not None and cause in row and "evicted as slow" in row,
            f"the collector's status page has a row for the eviction: {row}",
        )
        check_resumed(job, others, spare)
        key = etcd_get(job.etcd, "/xtimer/run/evict/evicted/127.0.0.4")
        check(key is not None and key.get("cause") == cause and key.get("name") == "node2", f"etcd key: {key}")
        # The evicted address is refused at once.
        again = subprocess.run(
            [os.path.join(args.bin, "xtimer_run")]
            + job.etcd.rendezvous_args("4:4", "evict")
            + ["--local-addr", "127.0.0.4", "--no-python", "/bin/true"],
            capture_output=True,
            text=True,
            timeout=30,
            env=agent_env(XTIMER_METRICS_PORT="0"),
        )
        check(
            again.returncode == 1 and "was evicted from run 'evict' as a slow node" in again.stderr,
            f"the evicted node cannot join again: {again.stderr.strip()[-200:]}",
        )
        after = job.step_times((back or time.time()) + 0)
        print(
            f"figure: healthy step {healthy:.3f} s; slow {fault} onset -> eviction {t_evict - onset:.1f} s", flush=True
        )
        if back:
            print(
                f"figure: onset -> step time back within 10% {back - onset:.1f} s (eviction -> back "
                f"{back - t_evict:.1f} s); step after {statistics.median(after or [0]):.3f} s",
                flush=True,
            )
    finally:
        job.stop()


def eviction_row(job, name):
    """The row of node `name`'s eviction on the collector's status page, or None."""
    page = http_get(f"http://127.0.0.1:{job.http}/") or ""
    start = page.find(f'<tr class="slow" data-node="{name}">')
    return page[start : page.find("</tr>", start)] if start >= 0 else None


def check_resumed(job, nodes, spare):
    """Every node of the round after the eviction resumed from the flash checkpoint: its first step
    is the step it loaded + 1, that step is not 0, and the bytes it loaded are the ones some rank
    saved at that step (replicated state: every rank saves the same); a node of the last round
    loaded from its own memory the step its worker saved last (or the next one, when the worker was
    stopped between the save and its line), the spare from what the savers persisted."""
    saved = {r["saved"]: r["sha"] for n in job.nodes for r in n.rows() if "saved" in r}
    for n in nodes:
        got = wait_for(n.resumed, 30, 0.2)
        if not check(got is not None, f"{n.name} starts from the flash checkpoint and does a step"):
            continue
        last, start, first = got
        step = start["start_step"]
        check(step > 0, f"{n.name} resumes after step {step}, not from step 0")
        check(first["first_step"] == step + 1, f"{n.name}'s first step is {first['first_step']}, after step {step}")
        check(saved.get(step) == start["sha"], f"{n.name} loaded the bytes saved at step {step}: {start['sha']}")
        if n is not spare:
            check(last is not None and step in (last, last + 10), f"{n.name} loaded its own last save ({last}): {step}")
        print(f"figure: {n.name} resumed after step {step} (its last save before: {last})", flush=True)


def c_smaller(args, out):
    job = Job(args, out, 4, 0, "3:4", True, ["--evict-slow-after", "6"])
    try:
        check(wait_for(lambda: job.training(4), 120, 0.2), "four nodes train")
        healthy, onset = slow_gpu_episode(job, 12)
        slow = job.nodes[SLOW_NODE]
        check(wait_for(lambda: slow.first(EVICTED)[0] is not None, 60, 0.2), "node 2 is evicted without a spare")
        t_evict = slow.first(EVICTED)[0] or onset
        others = [n for n in job.nodes if n.index != SLOW_NODE]
        check(
            wait_for(lambda: all(n.first("world size 3", t_evict)[0] for n in others), 60),
            "the three others go on with world size 3",
        )
        back = recovered_at(job, t_evict, healthy, timeout=60)
        print(
            f"figure: smaller: onset -> eviction {t_evict - onset:.1f} s; step back "
            f"{(back - onset) if back else float('nan'):.1f} s after the onset",
            flush=True,
        )
    finally:
        job.stop()


def c_atmin(args, out):
    job = Job(args, out, 4, 0, "4:4", True, ["--evict-slow-after", "6"])
    try:
        check(wait_for(lambda: job.training(4), 120, 0.2), "four nodes train")
        slow_gpu_episode(job, 12)
        slow = job.nodes[SLOW_NODE]
        check(
            wait_for(lambda: slow.first("is slow and stays: the job cannot go on without it")[0] is not None, 60, 0.2),
            "node 2 stays at MIN and says so",
        )
        check(slow.first(EVICTED)[0] is None and slow.proc.poll() is None, "nobody is evicted")
    finally:
        job.stop()


# A rank's slowdown that would follow the job to any node: the workload's control words, the
# cause the judge must name, and train_rank.py's arguments (torch's DataLoader for the data cause).
FOLLOWING = {
    "host": ("host_ms=60", "host", ""),
    "gc": ("gc_objects=1500000", "python_gc", ""),
    "data": ("data_ms=20", "data_loading", " --torch"),
}


def c_follows(args, out, mode):
    """A host-side straggler (a sleep in the rank's preprocessing), GC pauses or a slow DataLoader
    would follow the job to any node: named, reported, never acted on."""
    words, cause, train_args = FOLLOWING[mode]
    job = Job(args, out, 4, 1, "4:4", True, ["--evict-slow-after", "6"], train_args=train_args)
    try:
        check(wait_for(lambda: job.training(4), 180, 0.2), "four nodes train")
        healthy_step(job, 12)
        slow = job.nodes[SLOW_NODE]
        # The fault is a rank's (the workload's own control words); which rank node 2 runs is the
        # rendezvous's choice.
        set_control(job.control, f"rank={slow.rank()} {words}")
        said = wait_for(lambda: slow.first("would follow the job to any node")[0] is not None, 60, 0.2)
        check(said, f"node 2 is named slow for a {mode} cause and says it stays")
        line = slow.first("would follow the job to any node")[1] or ""
        check(cause in line, f"the cause named is {cause}: {line}")
        time.sleep(10)
        check(all(n.first(EVICTED)[0] is None for n in job.nodes), f"nobody is evicted for a {mode} cause")
        check(slow.proc.poll() is None, "node 2 still runs")
    finally:
        job.stop()


def c_all(args, out):
    """Every node's GPU slows down together: the job is slow, no node is, and nobody is evicted."""
    job = Job(args, out, 4, 1, "4:4", True, ["--evict-slow-after", "6"])
    try:
        check(wait_for(lambda: job.training(4), 120, 0.2), "four nodes train")
        healthy = healthy_step(job, 12)
        set_control(job.control, "all gpu_factor=2")
        slower = wait_for(lambda: (healthy_step(job, 4) or 0) > 1.3 * healthy, 60, 0.5)
        check(slower, f"every node's GPU at half speed slows the job (healthy step {healthy:.3f} s)")
        time.sleep(15)
        check(all(n.first(EVICTED)[0] is None for n in job.nodes), "nobody is evicted when every node slows down")
        check(all(n.proc.poll() is None for n in job.nodes), "every node still runs")
        named = sorted(x for x in job.named() if x[1] != "job")
        check(not named, f"no node or rank named slow, only the job: {named[:3]} ({sorted(job.named())[:3]})")
    finally:
        job.stop()


def c_healthy(args, out):
    job = Job(args, out, 4, 1, "4:4", True)
    try:
        check(wait_for(lambda: job.training(4), 120, 0.2), "four nodes train")
        time.sleep(args.healthy)
        check(all(n.first(EVICTED)[0] is None for n in job.nodes), "nobody is evicted in a healthy run")
        check(all(n.proc.poll() is None for n in job.nodes), "every node still runs")
        check(not job.named(), f"nothing named: {job.named()}")
    finally:
        job.stop()


def etcd_get(etcd, key):
    import base64
    import urllib.request

    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{etcd.port}/v3/kv/range", body, timeout=5) as r:
            kvs = json.load(r).get("kvs", [])
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None
    except (OSError, ValueError, KeyError):
        return None


MODES = {
    "spare": c_spare,
    "network": lambda args, out: c_spare(args, out, "network"),
    "smaller": c_smaller,
    "atmin": c_atmin,
    "host": lambda args, out: c_follows(args, out, "host"),
    "gc": lambda args, out: c_follows(args, out, "gc"),
    "data": lambda args, out: c_follows(args, out, "data"),
    "all": c_all,
    "healthy": c_healthy,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=sorted(MODES))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--healthy", type=float, default=40)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix=f"xtimer-evict-{args.mode}-")
    t0 = time.time()
    MODES[args.mode](args, out)
    print(f"{args.mode}: {time.time() - t0:.1f} s, files in {out}", flush=True)
    if failures:
        sys.exit(1)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
