#!/usr/bin/env python3
"""Why is my job slow, end to end, on the simulated runtime: Python ranks (train_rank.py, torch's
DataLoader, Debian's /usr/bin/python3) under xtimer_launch, faults turned on and off mid-run
through the simulated runtime's control file, and the judge's slowdown.json read every half
second. Each fault must be named (the right rank, or node, and cause) while it lasts or as it
fades, with its `since` (from the ranks' records) at its onset, and at no time may anything else
be named; a healthy run, with a checkpoint-like pause on every rank every 50 steps, must name
nothing. How soon after the onset a fault is named depends on when the threads of a shared
machine run: printed as a figure, and judged against its goal (15 s) by
tests/bench/slowdown_latency.py, not here.

  check_slowdown.py LAYOUT --bin BUILD/bin --lib libslowdown_train.so --simgpu DIR [--python PY]
  LAYOUT: one-node   4 ranks under one agent (its embedded judge)
          two-nodes  8 ranks under 2 agents and a collector
          both       the two at once, each its own job (what CI runs: half the wall time)
  Each layout: a healthy run of 2 minutes (--healthy), then one fault after the other, each
  held --hold seconds and over (named nowhere) before the next: a slow GPU, a host straggler
  (named with its Python function), GC pauses, a slow DataLoader; two-nodes first a slow network
  on one node.

Prints "figure:" lines: detection latency per cause (seconds, and the job's steps in them), step
records' bytes per rank per hour. Then
xtimer_slowdown judges the ranks' steps files after the run: it must find the same faults, and
name nothing else ("offline:" lines).
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, free_port, load_json, start_collector, wait_for  # noqa: E402
from node_ranks import Agents, agent_command, agent_env  # noqa: E402

# `since` is the start of the first slow step: the step under way when the control file changed
# began up to a step before, and a rank reads the file once a step. In the job's steps (the
# verdict's step_time_s), with a floor in seconds.
SINCE_SLACK_STEPS, SINCE_SLACK_FLOOR_S = 3, 2.0


class Watcher(threading.Thread):
    """Reads every slowdown.json twice a second; keeps (time, file, verdict) for each change."""

    def __init__(self, paths):
        super().__init__(daemon=True)
        self.paths, self.seen, self.stop = paths, [], False
        self.lock = threading.Lock()
        self.last = {}

    def run(self):
        while not self.stop:
            now = time.time()
            for p in self.paths:
                v = load_json(p)
                if v is None:
                    continue
                with self.lock:
                    self.seen.append((now, p, v))
                    self.last[p] = v
            time.sleep(0.5)

    def between(self, t0, t1):
        with self.lock:
            return [s for s in self.seen if t0 <= s[0] < t1]


def matches(finding, want):
    return all(finding.get(k) == v for k, v in want.items() if k != "detail")


def describe(f):
    who = f"rank {f.get('rank')}" if f.get("rank") is not None else f"node {f.get('node')}"
    return f"{who} {f.get('cause')}/{f.get('scope')} ({f.get('detail', '')[:100]})"


class Job(Agents):
    def __init__(self, args, out, nodes, nproc, control, extra_env):
        super().__init__()
        self.out, self.nodes = out, nodes
        ids = os.path.join(out, "ids")
        os.makedirs(ids, exist_ok=True)
        for node in range(nodes):
            env = agent_env(
                drop=("PYTHONPATH",),
                LD_LIBRARY_PATH=args.simgpu,
                XTIMER_TIMELINE_PATH=os.path.join(out, f"node{node}"),
                XTIMER_METRICS_PORT=str(free_port()),
                XTIMER_NODE_NAME=f"node{node}",
                SIMGPU_NET_GBPS="2",
                SIMGPU_CONTROL=control,
                **extra_env,
            )
            train_rank = [os.path.join(HERE, "train_rank.py"), args.lib, "{rank}", "{world}", "{nproc}", ids]
            cmd = agent_command(
                args.bin,
                nproc,
                node,
                nodes * nproc,
                train_rank + ["--control", control, "--seconds", "1200", "--torch"],
                python=args.python,
                simgpu_node=True,
            )
            self.spawn(cmd, env, os.path.join(out, f"agent{node}.log"))

    def timelines(self):
        return [os.path.join(self.out, f"node{n}") for n in range(self.nodes)]


def set_control(path, line):
    with open(path + ".tmp", "w") as f:
        f.write(line + "\n")
    os.replace(path + ".tmp", path)


def run(args, layout, started):
    """One layout's job, from start to checks. `started` (a barrier) lines up the healthy runs of
    layouts that run at once."""
    out = tempfile.mkdtemp(prefix=f"xtimer-slowdown-{layout}-")
    control = os.path.join(out, "control")
    set_control(control, "")
    collector = None
    if layout == "one-node":
        nodes, nproc = 1, 4
        faults = [
            ("gpu", "rank=1 gpu_factor=1.6", {"rank": 1, "cause": "gpu_compute", "scope": "rank"}),
            (
                "host",
                "rank=2 host_ms=80",
                {"rank": 2, "cause": "host", "scope": "rank", "detail": "straggle_in_preprocessing"},
            ),
            ("gc", "rank=3 gc_objects=300000", {"rank": 3, "cause": "python_gc", "scope": "rank"}),
            ("data", "rank=0 data_ms=20", {"rank": 0, "cause": "data_loading", "scope": "rank"}),
        ]
        extra = {}
    else:
        nodes, nproc = 2, 4
        faults = [
            ("network", "node=1 net_gbps=0.1", {"node": "node1", "cause": "network", "scope": "node"}),
            ("gpu", "rank=6 gpu_factor=1.6", {"rank": 6, "cause": "gpu_compute", "scope": "rank"}),
            (
                "host",
                "rank=5 host_ms=80",
                {"rank": 5, "cause": "host", "scope": "rank", "detail": "straggle_in_preprocessing"},
            ),
            ("gc", "rank=2 gc_objects=300000", {"rank": 2, "cause": "python_gc", "scope": "rank"}),
            ("data", "rank=7 data_ms=20", {"rank": 7, "cause": "data_loading", "scope": "rank"}),
        ]
        port, http = free_port(), free_port()
        collector = start_collector(args.bin, out, port, http)
        extra = {"XTIMER_COLLECTOR": f"127.0.0.1:{port}"}
    if args.only:
        faults = [f for f in faults if f[0] in args.only.split(",")]
    job = Job(args, out, nodes, nproc, control, extra)
    judged = [os.path.join(tl, "slowdown.json") for tl in job.timelines()]
    if collector:
        judged.insert(0, os.path.join(out, "collected", "slowdown.json"))
    watcher = Watcher(judged)
    watcher.start()
    phases = []
    t_start = time.time()
    try:
        # The judge has every rank's steps: a verdict with a step time.
        ready = wait_for(lambda: all((load_json(p) or {}).get("step_time_s") for p in judged), 240, step=1)
        check(
            bool(ready),
            f"{layout}: every slowdown.json judges the job's steps ({time.time() - t_start:.0f} s "
            f"after the start; {judged})",
        )
        if not ready:
            started.abort()
            return
        try:
            started.wait(timeout=300)
        except threading.BrokenBarrierError:
            pass
        t = time.time()
        time.sleep(args.healthy)
        phases.append(("healthy", None, t, time.time(), time.time()))
        for name, line, want in faults:
            set_control(control, line)
            t_on = time.time()
            time.sleep(args.hold)
            set_control(control, "")
            t_off = time.time()
            # The next fault starts once this one is no longer named anywhere.
            gone = wait_for(
                lambda: not any(matches(f, want) for p in judged for f in (load_json(p) or {}).get("slow", [])),
                40,
                step=0.5,
            )
            check(bool(gone), f"{layout}: {name}: no longer named after the fault ended ({time.time() - t_off:.1f} s)")
            time.sleep(2)
            phases.append((name, want, t_on, t_off, time.time()))
        set_control(control, "all stop=1")
        codes = [p.wait(timeout=120) for p in job.procs]
        check(codes == [0] * nodes, f"{layout}: the job finished ({codes})")
    finally:
        watcher.stop = True
        job.kill()
        if collector:
            collector.kill()
            collector.wait()

    # ---- what was named, and when
    for name, want, t0, t_off, t1 in phases:
        seen = watcher.between(t0, t1)
        wrong, jobwide = {}, {}
        for when, path, v in seen:
            for f in v.get("slow", []):
                if want is not None and matches(f, want):
                    continue
                # During a fault, a finding of the whole job names no rank (e.g. a checkpoint step
                # on top of a straggler's): reported, not a failure. On a healthy job, anything is.
                named = want is None or f.get("rank") is not None or f.get("node") is not None
                (wrong if named else jobwide).setdefault(describe(f), (when - t0, path))

        def where(d):
            return [(k, round(w[0], 1), os.path.basename(os.path.dirname(w[1]))) for k, w in d.items()][:4]

        check(not wrong, f"{layout}: {name}: no other rank or node named at any time ({where(wrong)})")
        if jobwide:
            print(f"note: {layout}: {name}: the job (no rank) was also named: {where(jobwide)}")
        if want is None:
            check(
                len(seen) > 0 and all(not v.get("slow") for _, _, v in seen),
                f"{layout}: healthy for {t1 - t0:.0f} s, with a checkpoint pause every 50 steps: nothing named",
            )
            continue
        first = {}
        for when, path, v in seen:
            for f in v.get("slow", []):
                if matches(f, want) and path not in first:
                    first[path] = (when, f, v)
        main = judged[0]
        if main not in first:
            check(False, f"{layout}: {name}: {want} named in {main}")
            continue
        when, f, v = first[main]
        latency = when - t0
        step = v.get("step_time_s") or 0
        slack = max(SINCE_SLACK_FLOOR_S, SINCE_SLACK_STEPS * step)
        since = f.get("since", 0) - t0
        check(
            -slack <= since <= t_off - t0,
            f"{layout}: {name}: {describe(f)} named, its since at the onset ({since:+.1f} s; the fault lasted "
            f"{t_off - t0:.1f} s; slack {slack:.1f} s)",
        )
        steps = f", about {latency / step:.0f} steps of {step:.3f} s" if step else ""
        print(
            f"figure: detection latency {layout} {name}: {latency:.1f} s{steps} (since {since:+.1f} s, "
            f"cost {f.get('cost')}, score {f.get('score')}): {f.get('detail')}"
        )
        if "detail" in want:
            # A host straggler is asked for Python samples when first suspected; they may come a
            # step or two after it is named, and the named finding's detail is updated then.
            told = [
                w
                for w, p, v in seen
                if p == main
                for g in v.get("slow", [])
                if matches(g, want) and want["detail"] in g.get("detail", "")
            ]
            check(
                bool(told),
                f"{layout}: {name}: the detail names {want['detail']}"
                + (f" ({min(told) - t0:.1f} s after the onset)" if told else ""),
            )
        for path in judged[1:]:
            check(path in first, f"{layout}: {name}: also named in {path}")
    # ---- the same judgement offline, from the files the ranks wrote (xtimer_slowdown)
    offline = os.path.join(out, "offline")
    os.makedirs(offline, exist_ok=True)
    for tl in job.timelines():
        for p in glob.glob(os.path.join(tl, "*.steps.jsonl")):
            shutil.copy(p, offline)
    r = subprocess.run(
        [os.path.join(args.bin, "xtimer_slowdown"), "--path", offline, "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    verdict = load_json(os.path.join(offline, "slowdown.json")) or {}
    episodes = verdict.get("episodes", [])
    check(
        r.returncode == 0 and os.path.exists(os.path.join(offline, "slowdown.svg")),
        f"{layout}: xtimer_slowdown judges the steps files ({r.returncode}: {r.stderr.strip()[-200:]})",
    )
    # The judge replays the records in the order they ended, not in the batches they came in live:
    # its windows differ a little, its verdicts may not.
    for name, want, t0, t_off, t1 in phases:
        if want is not None:
            check(any(matches(e, want) for e in episodes), f"offline: {layout}: {name}: found in the steps files")
    others = [
        describe(e)
        for e in episodes
        if (e.get("rank") is not None or e.get("node") is not None)
        and not any(w is not None and matches(e, w) for _, w, *_ in phases)
    ]
    check(not others, f"offline: {layout}: nothing else named ({others[:3]})")
    # ---- the records' size: bytes per rank per hour
    sizes = [os.path.getsize(p) for tl in job.timelines() for p in glob.glob(os.path.join(tl, "*.steps.jsonl"))]
    # Step lines only (not the header and dictionary lines of the compact layout).
    lines = [
        sum(1 for line in open(p) if line.startswith(('{"step"', '{"v":1')))
        for tl in job.timelines()
        for p in glob.glob(os.path.join(tl, "*.steps.jsonl"))
    ]
    span = phases[-1][4] - phases[0][2] if phases else 0
    if sizes and span > 0:
        per_rank = sum(sizes) / len(sizes)
        print(
            f"figure: steps files {layout}: {per_rank / 1e3:.0f} kB per rank over {span:.0f} s "
            f"({sum(sizes) / max(1, sum(lines)):.0f} bytes a step, {sum(lines) / len(lines) / span:.1f} steps/s): "
            f"{per_rank / span * 3600 / 1e6:.1f} MB per rank per hour"
        )
    if not failures:
        shutil.rmtree(out, ignore_errors=True)
    else:
        print(f"kept {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layout", choices=["one-node", "two-nodes", "both"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--healthy", type=float, default=120, help="seconds of healthy run first")
    ap.add_argument("--hold", type=float, default=14, help="seconds each fault lasts")
    ap.add_argument("--only", default="", help="these faults only (comma-separated names), for a quick look")
    args = ap.parse_args()
    layouts = ["one-node", "two-nodes"] if args.layout == "both" else [args.layout]
    started = threading.Barrier(len(layouts))

    def guarded(layout):
        try:
            run(args, layout, started)
        except Exception as e:  # a failure, not a thread dying quietly
            started.abort()
            check(False, f"{layout}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(layout,)) for layout in layouts]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"figure: {args.layout}: {time.time() - t0:.0f} s of wall time")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
