#!/usr/bin/env python3
"""The rank side of "why is my job slow", checked from its records alone (no judge): 4 Python ranks
on 2 simulated nodes (train_rank.py, torch's DataLoader) under libxtimer_preload.so, talking to a
stand-in node agent (this script) over XTIMER_AGENT_SOCKET. Faults are turned on one after the
other through the simulated runtime's control file, and each must show in the step records the
ranks send: a slow GPU in that rank's GEMM TFLOPS, a slow node's network in the transfer time of
every member's collectives, a host-side straggler in its late arrival and, once the agent asks
for samples, in its Python stacks (the function it sleeps in), GC pauses in gc_s, a slow
DataLoader in data_s. Healthy steps come out identical on every rank (same step numbers, same
collectives) and in the files (their compact layout, read here on its own) as in the messages.

  check_records.py --mode cupti|event_pairs --lib libslowdown_train.so --preload libxtimer_preload.so
                   --site DIR --simgpu DIR [--python /usr/bin/python3] [--phases all|short]
"""
import argparse
import gzip
import json
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, wait_for  # noqa: E402

WORLD, NODE_SIZE = 4, 2
GEMM = "GEMM bf16 8192x8192x4096"


class FakeAgent(threading.Thread):
    """Accepts the ranks' connections, keeps their step records, can ask a rank for samples."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(path)
        self.sock.listen(64)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.lock = threading.Lock()
        self.records = {}  # rank -> [record]
        self.conn_of = {}  # rank -> socket of its link thread
        self.bad = []
        self.messages = {}  # type -> count

    def run(self):
        while True:
            for key, _ in self.sel.select(0.2):
                if key.fileobj is self.sock:
                    conn, _ = self.sock.accept()
                    self.sel.register(conn, selectors.EVENT_READ)
                    continue
                try:
                    data = key.fileobj.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    continue
                try:
                    msg = json.loads(data)
                except ValueError:
                    self.bad.append(data[:200])
                    continue
                with self.lock:
                    kind = msg.get("type")
                    self.messages[kind] = self.messages.get(kind, 0) + 1
                    if kind == "status":
                        self.conn_of[msg["rank"]] = key.fileobj
                    if kind == "steps":
                        if len(data) > 256 * 1024 or "world_size" not in msg:
                            self.bad.append(f"steps message of {len(data)} bytes, keys {sorted(msg)}")
                        self.records.setdefault(msg["rank"], []).extend(msg["records"])

    def sample(self, rank, seconds, hz):
        with self.lock:
            conn = self.conn_of.get(rank)
        if conn is not None:
            conn.send(json.dumps({"type": "sample", "seconds": seconds, "hz": hz}).encode())
        return conn is not None

    def snapshot(self):
        with self.lock:
            return {r: list(v) for r, v in self.records.items()}


def median(xs, default=0.0):
    xs = list(xs)
    return statistics.median(xs) if xs else default


def in_window(recs, t0, t1):
    return [r for r in recs if t0 <= r["t_begin"] and r["t_end"] <= t1]


def read_steps_file(path):
    """A steps file's records as layout-1 objects, read independently of the C++ reader: layout-2
    step lines (a header, dictionary lines) and layout-1 lines alike (docs/formats.md)."""
    out, head, tables = [], None, {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "d" in j:
                table = tables.setdefault(j["d"], {})
                for k, e in enumerate(j["add"]):
                    table[j["i"] + k] = e
            elif j.get("v") == 2:
                head, tables = j, {}
            elif "rank" in j:
                out.append(j)
            else:
                b = head["t0"] * 1000000 + j["t"]
                colls = []
                for x in j.get("c", []):
                    comm, op, size, ranks = tables["coll"][x[0]]
                    call = b + x[2]
                    timed = len(x) > 3
                    colls.append(
                        {
                            "comm": comm,
                            "seq": x[1],
                            "op": op,
                            "bytes": size,
                            "ranks": ranks,
                            "call": call / 1e6,
                            "start": (call + x[3]) / 1e6 if timed else None,
                            "end": (call + x[3] + x[4]) / 1e6 if timed else None,
                        }
                    )
                out.append(
                    {
                        "rank": head["rank"],
                        "world": head["world"],
                        "node": head["node"],
                        "pid": head["pid"],
                        "step": j["step"],
                        "t_begin": b / 1e6,
                        "t_end": (b + j["len"]) / 1e6,
                        "gpu_busy_s": j.get("busy", 0) / 1e6,
                        "gpu_idle_s": j.get("idle", max(0, j["len"] - j.get("busy", 0))) / 1e6,
                        "issue_latency_s": j["lat"] / 1e6 if "lat" in j else None,
                        "kernels": [
                            {"sig": tables["sig"][k[0]], "n": k[1], "s": k[2] / 1e6, "tflops": (k[3:] or [0])[0]}
                            for k in j.get("k", [])
                        ],
                        "colls": colls,
                        "gc_s": j.get("gc", 0) / 1e6,
                        "data_s": j.get("dl", 0) / 1e6,
                        "samples": [{"frames": tables["frames"][x[0]], "n": x[1]} for x in j.get("sm", [])],
                    }
                )
    return out


def same_record(a, b):
    """The file's record `a` says what the message's `b` says (times to the µs, 6 digits of the
    durations; a collective without a communicator is not in the file)."""

    def near(x, y):
        return (x is None) == (y is None) and (x is None or abs(x - y) <= 1e-5 * abs(y) + 1e-9)

    colls = [c for c in b["colls"] if c["comm"]]
    return (
        all(a[k] == b[k] for k in ("rank", "world", "node", "pid", "step", "t_begin", "t_end"))
        and all(near(a[k], b[k]) for k in ("gpu_busy_s", "issue_latency_s", "gc_s", "data_s"))
        and abs(a["gpu_idle_s"] - b["gpu_idle_s"]) < 2e-6 + 1e-5 * abs(b["gpu_idle_s"])
        and [(k["sig"], k["n"]) for k in a["kernels"]] == [(k["sig"], k["n"]) for k in b["kernels"]]
        and all(near(x["s"], y["s"]) and near(x["tflops"], y["tflops"]) for x, y in zip(a["kernels"], b["kernels"]))
        and [[c[k] for k in ("comm", "seq", "op", "bytes", "ranks", "call", "start", "end")] for c in a["colls"]]
        == [[c[k] for k in ("comm", "seq", "op", "bytes", "ranks", "call", "start", "end")] for c in colls]
        and a["samples"] == b.get("samples", [])
    )


def gemm_tflops(rec):
    return next((k["tflops"] for k in rec["kernels"] if k["sig"] == GEMM), None)


def transfer_times(by_rank, steps, op, ranks_in):
    """Per step: end of `op` on the members minus the last member's arrival (start)."""
    out = []
    for s in steps:
        colls = []
        for r in ranks_in:
            rec = by_rank[r].get(s)
            if rec is None:
                break
            c = [c for c in rec["colls"] if c["op"] == op and c["bytes"] > 4]
            if not c or c[0]["start"] is None:
                break
            colls.append(c[0])
        else:
            if len({(c["comm"], c["seq"]) for c in colls}) == 1:
                out.append(min(c["end"] for c in colls) - max(c["start"] for c in colls))
    return out


def last_arrivals(by_rank, steps, op, ranks_in):
    """Per step, the member of `ranks_in` whose `op` started last."""
    out = []
    for s in steps:
        starts = {}
        for r in ranks_in:
            rec = by_rank[r].get(s)
            c = [c for c in rec["colls"] if c["op"] == op and c["bytes"] > 4] if rec else []
            if c and c[0]["start"] is not None:
                starts[r] = c[0]["start"]
        if len(starts) == len(ranks_in):
            out.append(max(starts, key=starts.get))
    return out


def check_shape(recs, rank, mode):
    r = recs[len(recs) // 2]
    keys = {
        "v",
        "rank",
        "world",
        "node",
        "pid",
        "step",
        "t_begin",
        "t_end",
        "gpu_busy_s",
        "gpu_idle_s",
        "issue_latency_s",
        "kernels",
        "colls",
        "gc_s",
        "data_s",
    }
    check(
        keys <= set(r) and r["v"] == 1 and r["rank"] == rank and r["world"] == WORLD,
        f"rank {rank}: a record has the contract's fields ({sorted(set(r) ^ keys)})",
    )
    steps = [x["step"] for x in recs]
    check(steps == list(range(steps[0], steps[0] + len(steps))), f"rank {rank}: step numbers are consecutive")
    joined = all(abs(a["t_end"] - b["t_begin"]) < 1e-6 for a, b in zip(recs, recs[1:]))
    check(joined, f"rank {rank}: each step ends where the next begins")
    sums = [abs(x["gpu_busy_s"] + x["gpu_idle_s"] - (x["t_end"] - x["t_begin"])) < 1e-5 for x in recs]
    check(all(sums), f"rank {rank}: busy + idle = step length")
    ops = [[c["op"] for c in x["colls"]] for x in recs]
    check(
        median([o == ["AllGather", "AllReduce", "AllReduce"] for o in ops]) == 1,
        f"rank {rank}: a step's collectives are the node all-gather and the two all-reduces ({ops[len(ops) // 2]})",
    )
    # Kernels belong to the step in which they start on the GPU: when the GPU runs behind the host
    # across a step's boundary, one step shows 11 and its neighbour 13, so judge the typical step.
    gemm = [k for k in r["kernels"] if k["sig"] == GEMM]
    per_step = [sum(k["n"] for k in x["kernels"] if k["sig"] == GEMM) for x in recs]
    check(
        len(gemm) == 1 and median(per_step) == 12,
        f"rank {rank}: 12 GEMMs of one signature per step (median of {len(recs)} steps; {r['kernels']})",
    )
    names = {k["sig"] for x in recs for k in x["kernels"]}
    check(
        {"tl_elementwise", "tl_adam_step"} <= names and not any(n.startswith("nccl") for n in names),
        f"rank {rank}: kernels by name, NCCL's left out ({sorted(names)})",
    )
    timed = [c for x in recs for c in x["colls"] if c["start"] is not None]
    check(
        len(timed) == sum(len(x["colls"]) for x in recs) and all(c["call"] <= c["start"] <= c["end"] for c in timed),
        f"rank {rank}: every collective has call <= GPU start <= GPU end",
    )
    check(
        all(x["issue_latency_s"] is not None and x["issue_latency_s"] >= 0 for x in recs),
        f"rank {rank}: issue latency in every step",
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["cupti", "event_pairs"], default="cupti")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--site", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--phases", choices=["all", "short"], default="all")
    ap.add_argument("--phase-seconds", type=float, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (records, logs)")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the ranks (debugging)")
    args = ap.parse_args()

    out = tempfile.mkdtemp(prefix="xtimer-records-")
    ids, timeline, control = os.path.join(out, "ids"), os.path.join(out, "tl"), os.path.join(out, "control")
    os.makedirs(ids)
    open(control, "w").close()
    agent = FakeAgent(os.path.join(out, "agent.sock"))
    agent.start()
    procs = []
    use_torch = args.phases == "all"
    for rank in range(WORLD):
        env = dict(
            os.environ,
            LD_PRELOAD=args.preload,
            PYTHONPATH=args.site,
            LD_LIBRARY_PATH=args.simgpu,
            XTIMER_AGENT_SOCKET=os.path.join(out, "agent.sock"),
            XTIMER_TIMELINE_PATH=timeline,
            XTIMER_CUPTI="1" if args.mode == "cupti" else "0",
            RANK=str(rank),
            WORLD_SIZE=str(WORLD),
            LOCAL_RANK=str(rank % NODE_SIZE),
            SIMGPU_NODE=str(rank // NODE_SIZE),
            SIMGPU_NET_GBPS="2",
            SIMGPU_CONTROL=control,
        )
        env.update(kv.split("=", 1) for kv in args.env)
        cmd = [
            args.python,
            os.path.join(HERE, "train_rank.py"),
            args.lib,
            str(rank),
            str(WORLD),
            str(NODE_SIZE),
            ids,
            "--control",
            control,
            "--seconds",
            "600",
            "--ckpt-every",
            "0",
        ] + (["--torch"] if use_torch else [])
        log = open(os.path.join(out, f"rank{rank}.log"), "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    phases = []  # (name, t0, t1)
    try:
        started = wait_for(
            lambda: len(agent.snapshot()) == WORLD and all(len(v) >= 5 for v in agent.snapshot().values()),
            180,
            step=0.5,
        )
        check(started, f"every rank sends step records ({ {r: len(v) for r, v in agent.snapshot().items()} })")
        if not started:
            return
        plan = [("healthy", "", None), ("gpu", "rank=1 gpu_factor=1.6", None), ("network", "node=1 net_gbps=0.1", None)]
        if args.phases == "all":
            plan += [
                ("host", "rank=2 host_ms=80", 2),
                ("gc", "rank=3 gc_objects=300000", None),
                ("data", "rank=0 data_ms=20", None),
            ]
        for name, line, sample in plan:
            with open(control + ".tmp", "w") as f:
                f.write(line + "\n")
            os.replace(control + ".tmp", control)
            t0 = time.time()
            if sample is not None:
                check(agent.sample(sample, args.phase_seconds, 20), f"the agent asks rank {sample} for samples")
            time.sleep(args.phase_seconds)
            phases.append((name, t0, time.time()))
        with open(control, "w") as f:
            f.write("all stop=1\n")
        codes = [p.wait(timeout=120) for p in procs]
        check(codes == [0] * WORLD, f"the ranks finished ({codes})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    time.sleep(1.5)  # the last batch of records
    recs = agent.snapshot()
    check(not agent.bad, f"every message parses, carries who sent it and fits the channel ({agent.bad[:2]})")
    by_rank = {r: {x["step"]: x for x in recs.get(r, [])} for r in range(WORLD)}
    for r in range(WORLD):
        check_shape(recs[r], r, args.mode)
        path = os.path.join(timeline, f"{r:05d}-{WORLD:05d}.steps.jsonl")
        try:
            in_file = read_steps_file(path)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            in_file = []
            check(False, f"rank {r}: {path} reads as a steps file ({e!r})")
        sent = {x["step"] for x in recs[r]}
        check(
            in_file and {x["step"] for x in in_file} == sent,
            f"rank {r}: the steps file holds the records sent ({len(in_file)} in the file, {len(sent)} sent)",
        )
        differ = [x["step"] for x in in_file if x["step"] in by_rank[r] and not same_record(x, by_rank[r][x["step"]])]
        check(not differ, f"rank {r}: the file's records say what the messages say (steps {differ[:3]} differ)")
    same = all(set(by_rank[r]) == set(by_rank[0]) for r in range(WORLD))
    check(same, "every rank numbers the same steps")
    s0 = sorted(set(by_rank[0]) & set(by_rank[3]))[len(by_rank[0]) // 2]
    ids0 = [[(c["comm"], c["seq"]) for c in by_rank[r][s0]["colls"] if c["op"] == "AllReduce"] for r in range(WORLD)]
    check(all(i == ids0[0] for i in ids0), f"a step's all-reduces have the same (comm, seq) on every rank ({ids0})")

    def window(name, r):
        _, t0, t1 = next(p for p in phases if p[0] == name)
        return in_window(recs[r], t0 + 3, t1)

    healthy = {r: window("healthy", r) for r in range(WORLD)}
    base_step = median(x["t_end"] - x["t_begin"] for r in range(WORLD) for x in healthy[r])
    base_tf = median(gemm_tflops(x) for r in range(WORLD) for x in healthy[r])
    print(f"healthy: step {base_step * 1e3:.1f} ms, GEMM {base_tf:.1f} TFLOPS")
    check(85 < base_tf < 115, f"healthy GEMMs run at the simulated 100 TFLOPS ({base_tf:.1f})")
    check(all(not x.get("samples") for r in range(WORLD) for x in healthy[r]), "no samples unless asked")
    # The file against layout 1 (the messages' records, which is what the file held before) over
    # the same steps: bytes a step as written, and gzipped.
    steps_files = [os.path.join(timeline, f"{r:05d}-{WORLD:05d}.steps.jsonl") for r in range(WORLD)]
    file_bytes = b"".join(open(p, "rb").read() for p in steps_files)
    v1_bytes = b"".join((json.dumps(x, separators=(",", ":")) + "\n").encode() for r in range(WORLD) for x in recs[r])
    n = sum(len(recs[r]) for r in range(WORLD))
    for name, data in (("layout 1", v1_bytes), ("file", file_bytes)):
        step = len(data) / n
        print(
            f"figure: steps {name}: {step:.0f} bytes a step over {n} steps, "
            f"gzip {len(data) / len(gzip.compress(data)):.1f}x; "
            f"{step * 3600 / 1e6:.2f} MB per rank per hour at 1 step/s, "
            f"{step * 3600 / base_step / 1e6:.1f} MB at {1 / base_step:.1f} steps/s"
        )
    check(len(file_bytes) * 2 < len(v1_bytes), "the file is less than half the size of layout 1")

    gpu = {r: window("gpu", r) for r in range(WORLD)}
    tf = {r: median(gemm_tflops(x) for x in gpu[r]) for r in range(WORLD)}
    check(
        55 < tf[1] < 70 and all(tf[r] > 85 for r in (0, 2, 3)),
        f"slow GPU: rank 1's GEMMs at 1/1.6 of the rate, the others' unchanged "
        f"({ {r: round(v, 1) for r, v in tf.items()} })",
    )
    step_gpu = median(x["t_end"] - x["t_begin"] for r in (0, 2, 3) for x in gpu[r])
    check(step_gpu > 1.25 * base_step, f"slow GPU: every rank's step is longer ({step_gpu * 1e3:.1f} ms)")

    all_steps = lambda name: sorted({x["step"] for x in window(name, 0)})  # noqa: E731
    base_xfer = median(transfer_times(by_rank, all_steps("healthy"), "AllReduce", range(WORLD)))
    net_xfer = median(transfer_times(by_rank, all_steps("network"), "AllReduce", range(WORLD)))
    node0 = median(transfer_times(by_rank, all_steps("network"), "AllGather", (0, 1)))
    node1 = median(transfer_times(by_rank, all_steps("network"), "AllGather", (2, 3)))
    base_node0 = median(transfer_times(by_rank, all_steps("healthy"), "AllGather", (0, 1)))
    print(
        f"transfer of the 4 MiB all-reduce: healthy {base_xfer * 1e3:.1f} ms, node 1 slow {net_xfer * 1e3:.1f} ms; "
        f"node all-gathers: node 0 {base_node0 * 1e3:.1f} -> {node0 * 1e3:.1f} ms, node 1 {node1 * 1e3:.1f} ms"
    )
    # At 0.1 GB/s the all-reduce's bus bytes take 63 ms (modelled: a floor, exact); the healthy
    # transfer at 2 GB/s is 3 ms modelled but its real copies through shared memory take 14-19 ms
    # on a 2-core VM (4 ranks), so the growth is checked against the model and by a margin of 2x.
    slow_floor = 2 * (WORLD - 1) / WORLD * (4 << 20) / 0.1e9
    check(
        net_xfer >= 0.95 * slow_floor and net_xfer > 2 * base_xfer,
        f"slow network: the job's all-reduce transfers (last arrival to end) grow on every rank, to the slow "
        f"network's {slow_floor * 1e3:.0f} ms",
    )
    check(node1 > 5 * node0, "slow network: node 1's own all-gather slows, node 0's does not")

    if args.phases == "all":
        host = {r: window("host", r) for r in range(WORLD)}
        # Rank 2 is late to its first collective, the all-gather with rank 3; rank 3 waits there
        # for it and is as late as rank 2 at the job's all-reduce after.
        steps = sorted({x["step"] for x in host[0]})
        last = last_arrivals(by_rank, steps, "AllGather", (2, 3))
        share = last.count(2) / max(1, len(last))
        check(share > 0.8, f"host straggler: rank 2 reaches its first collective last in {share:.0%} of the steps")
        last = last_arrivals(by_rank, steps, "AllReduce", range(WORLD))
        share = sum(r in (2, 3) for r in last) / max(1, len(last))
        check(share > 0.8, f"host straggler: node 1 reaches the job's all-reduce last in {share:.0%} of the steps")
        stacks = {}
        for x in host[2]:
            for s in x.get("samples", []):
                stacks[s["frames"]] = stacks.get(s["frames"], 0) + s["n"]
        named = sum(n for f, n in stacks.items() if f.startswith("straggle_in_preprocessing (train_rank.py:"))
        total = sum(stacks.values())
        top = max(stacks, key=stacks.get) if stacks else None
        check(
            total >= 20 and named / total > 0.8,
            f"host straggler: rank 2's samples ({total}) are mostly in straggle_in_preprocessing ({named}); top: {top}",
        )
        check(all(not x.get("samples") for r in (0, 1, 3) for x in host[r]), "host straggler: only rank 2 sampled")
        gc_s = {r: median(x["gc_s"] for x in window("gc", r)) for r in range(WORLD)}
        check(
            gc_s[3] > 0.01 and all(gc_s[r] < 0.002 for r in (0, 1, 2)),
            f"GC pauses: rank 3's gc_s per step ({ {r: round(v, 4) for r, v in gc_s.items()} })",
        )
        data_s = {r: median(x["data_s"] for x in window("data", r)) for r in range(WORLD)}
        base_data = median(x["data_s"] for x in healthy[0])
        check(
            data_s[0] > 0.07 and all(data_s[r] < 0.03 for r in (1, 2, 3)) and 0.003 < base_data < 0.03,
            f"slow DataLoader: rank 0's data_s per step ({ {r: round(v, 4) for r, v in data_s.items()} }, "
            f"healthy {base_data:.4f})",
        )
    if not failures and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    else:
        print(f"kept {out}")


if __name__ == "__main__":
    main()
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
