#!/usr/bin/env python3
"""The slowdown judge through its live front doors, with ranks that only send step records
(fake_steps_ranks.py; no GPU runtime): messages in, slowdown.json, /metrics, log lines, sample
requests and (with a collector) /status.json and the page out.

  check_judge_live.py agent     --bin BUILD/bin --out DIR
      one xtimer_launch (embedded collector), 4 ranks: healthy, then rank 2's GPU twice as slow,
      then a host straggler on rank 1 named with its Python function after a sample request
  check_judge_live.py collector --bin BUILD/bin --out DIR
      xtimer_collector and two xtimer_launch (XTIMER_NODE_NAME node-a, node-b; node-b's clock
      2.5 s ahead), 8 ranks: rank 5's GPU twice as slow, named by the collector and in both
      agents' files
The simulated job runs twice as fast as the wall clock. Its records are the same in every run, so
the checks judge what they decide: who is named, for what cause, nothing else, and where each
slowdown's `since` (from the records) places its onset. How long after the onset a verdict came
depends on when the agent's threads ran: printed ("figure:"), not bounded (docs/benchmarks.md).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, free_port, http_get, load_json, promtool_ok, start_collector  # noqa: E402

SPEED = 2.0
# A step of the simulated job lasts about 0.1 s (0.2 s on a slow GPU): `since`, the start of the
# first slow step in the records, lies within this of the fault's onset.
SINCE_SLACK_S = 0.5


def judged_onset(what, finding, t0, onset, end):
    """Checks that a finding's `since` (simulated seconds after t0, from the records) places the
    onset at the fault's, and prints how late (in the job's seconds, by the wall clock) it came."""
    since = finding[1].get("since", 0) - t0 if finding else None
    check(
        since is not None and abs(since - onset) <= SINCE_SLACK_S,
        f"{what}: its since places the onset at the fault's ({since and round(since, 3)} s; the fault: {onset} s "
        f"to {end} s)",
    )
    if finding:
        print(f"figure: {what}: named {finding[0] - onset:.1f} s of the job's time after the onset")


class Watch:
    """Polls slowdown.json files; remembers every finding seen and when (simulated seconds)."""

    def __init__(self, paths, t0, wall0):
        self.paths, self.t0, self.wall0 = paths, t0, wall0
        self.seen = []  # (sim seconds, path, finding)
        self.files_seen = set()

    def poll(self):
        for path in self.paths:
            j = load_json(path)
            if j is None:
                continue
            self.files_seen.add(path)
            t = (time.time() - self.wall0) * SPEED
            for f in j.get("slow", []):
                self.seen.append((t, path, f))

    def first(self, pred, path=None):
        """(sim seconds, finding) of the first finding for which pred holds, or None."""
        for t, p, f in self.seen:
            if pred(f) and (path is None or p == path):
                return t, f
        return None

    def others(self, pred):
        return sorted(
            {
                f"{os.path.basename(os.path.dirname(p))}: {f.get('scope')} {f.get('rank')} {f.get('node')} "
                f"{f.get('cause')} ({f.get('detail')})"
                for t, p, f in self.seen
                if not pred(f)
            }
        )


def launch(args, out, name, ranks, world, per_node, t0, seconds, extra_env, rank_args):
    timeline = os.path.join(out, name)
    port = free_port()
    env = dict(
        os.environ, XTIMER_TIMELINE_PATH=timeline, XTIMER_METRICS_PORT=str(port), XTIMER_NODE_NAME=name, **extra_env
    )
    for k in ("LD_PRELOAD", "XTIMER_AGENT_SOCKET", "XTIMER_COLLECTOR"):
        env.pop(k, None)
    env.update(extra_env)
    cmd = [
        os.path.join(args.bin, "xtimer_launch"),
        sys.executable,
        os.path.join(HERE, "fake_steps_ranks.py"),
        "--ranks",
        ranks,
        "--world",
        str(world),
        "--per-node",
        str(per_node),
        "--t0",
        str(t0),
        "--seconds",
        str(seconds),
        "--speed",
        str(SPEED),
    ] + rank_args
    log = open(os.path.join(out, f"{name}.log"), "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, timeline, port


def run_until(procs, watch, seconds_wall, during=None):
    deadline = time.time() + seconds_wall
    while time.time() < deadline and any(p.poll() is None for p in procs):
        watch.poll()
        if during:
            during()
        time.sleep(0.25)


def stop(procs):
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def check_agent(args):
    out = args.out
    t0 = time.time() + 3  # simulated time starts about now (records near the wall clock)
    seconds = 80
    proc, timeline, port = launch(
        args, out, "node-a", "0-3", 4, 4, t0, seconds, {}, ["--slow-gpu", "2:10:36", "--host", "1:44", "--bad-message"]
    )
    path = os.path.join(timeline, "slowdown.json")
    watch = Watch([path], t0, time.time())
    metrics_slow = []

    def scrape():
        m = http_get(f"http://127.0.0.1:{port}/metrics")
        if m and 'xtimer_rank_slow{rank="2",host="node-a",cause="gpu_compute"} 1' in m and not metrics_slow:
            metrics_slow.append(m)

    run_until([proc], watch, seconds / SPEED + 10, scrape)
    stop([proc])
    log = open(os.path.join(out, "node-a.log")).read()
    gpu = lambda f: f.get("rank") == 2 and f.get("cause") == "gpu_compute" and f.get("scope") == "rank"  # noqa: E731
    host = lambda f: f.get("rank") == 1 and f.get("cause") == "host" and f.get("scope") == "rank"  # noqa: E731
    check(path in watch.files_seen, f"the agent writes {path}")
    first_gpu = watch.first(gpu)
    check(first_gpu is not None, "rank 2 gpu_compute named")
    judged_onset("rank 2 gpu_compute", first_gpu, t0, 10, 36)
    first_host = watch.first(lambda f: host(f) and "slow_fn (train.py:40)" in f.get("detail", ""))
    check(first_host is not None, "rank 1 host named with slow_fn")
    judged_onset("rank 1 host", first_host, t0, 44, seconds)
    others = watch.others(lambda f: gpu(f) or host(f))
    check(not others, f"no other rank, node or cause named at any time: {others[:5]}")
    check(
        re.search(r"slowdown: rank 2 \(node node-a\) is slow since .*gpu_compute", log) is not None,
        "log: the slowdown's start, with its cause",
    )
    m = re.search(r"slowdown over: rank 2 \(node node-a\), gpu_compute, after (\d+) s; it cost about ([\d.]+) s", log)
    # It ends 2 evaluations after the records turn healthy: how long that is depends on when the
    # agent's thread ran, so only the lower end is bounded.
    check(
        m is not None and int(m.group(1)) >= 20,
        f"log: its end, with how long it lasted (26 s of the job's time: {m and m.group(1)}) and what it cost",
    )
    check(re.search(r"asked rank 1 for 10 s of Python stack samples", log) is not None, "log: rank 1 asked for samples")
    check(
        re.search(r"rank 0 sent 1 step record\(s\) that cannot be used \(\"t_begin\" is not a number\)", log)
        is not None,
        "a broken record: one line naming the field",
    )
    samples = [json.loads(l) for l in log.splitlines() if l.startswith('{"sample"')]
    check(
        {s["sample"] for s in samples} <= {0, 1, 2, 3} and any(s["sample"] == 1 for s in samples),
        f"rank 1 (and at most a peer) got the sample request: {samples}",
    )
    check(bool(metrics_slow), "/metrics: xtimer_rank_slow{rank=2,cause=gpu_compute} 1 while it was slow")
    if metrics_slow:
        promtool_ok(metrics_slow[0], "the agent's /metrics")
        check('xtimer_rank_step_seconds{rank="3",host="node-a"}' in metrics_slow[0], "/metrics: step seconds per rank")
    j = load_json(path)
    check(
        j is not None and isinstance(j.get("step_time_s"), (int, float)) and "updated" in j,
        "slowdown.json has updated and step_time_s",
    )


def check_collector(args):
    out = args.out
    cport, hport = free_port(), free_port()
    collector = start_collector(args.bin, out, cport, hport, wait_s=15)
    t0 = time.time() + 3
    seconds = 44
    env = {"XTIMER_COLLECTOR": f"127.0.0.1:{cport}"}
    a = launch(args, out, "node-a", "0-3", 8, 4, t0, seconds, env, ["--slow-gpu", "5:12:1000"])
    b = launch(args, out, "node-b", "4-7", 8, 4, t0, seconds, env, ["--slow-gpu", "5:12:1000", "--clock-offset", "2.5"])
    paths = [
        os.path.join(out, "collected", "slowdown.json"),
        os.path.join(a[1], "slowdown.json"),
        os.path.join(b[1], "slowdown.json"),
    ]
    watch = Watch(paths, t0, time.time())
    status, page, metrics = [], [], []

    def scrape():
        st = http_get(f"http://127.0.0.1:{hport}/status.json")
        if st and '"gpu_compute"' in st and not status:
            status.append(json.loads(st))
            page.append(http_get(f"http://127.0.0.1:{hport}/") or "")
            metrics.append(http_get(f"http://127.0.0.1:{hport}/metrics") or "")

    run_until([a[0], b[0]], watch, seconds / SPEED + 10, scrape)
    stop([a[0], b[0]])
    collector.send_signal(signal.SIGTERM)
    collector.wait(timeout=30)
    gpu5 = lambda f: f.get("rank") == 5 and f.get("node") == "node-b" and f.get("cause") == "gpu_compute"  # noqa: E731
    for p in paths:
        first = watch.first(gpu5, p)
        check(first is not None, f"{os.path.relpath(p, out)}: rank 5 on node-b gpu_compute named")
        judged_onset(f"{os.path.relpath(p, out)}: rank 5 gpu_compute", first, t0, 12, seconds)
    others = watch.others(gpu5)
    check(not others, f"no other rank, node or cause named, with node-b's clock 2.5 s ahead: {others[:5]}")
    check(bool(status), "/status.json shows the slowdown")
    if status:
        st = status[0]
        check(st["slowdown"]["slow"][0]["rank"] == 5, "/status.json: slowdown.slow names rank 5")
        check(
            all("step_time_s" in r for r in st["ranks"]) and len(st["ranks"]) == 8,
            "/status.json: every rank has its step time",
        )
        check(
            '<div id="slowdown">' in page[0] and "rank 5 (node-b)" in page[0], "the page's Slowdown table names rank 5"
        )
        promtool_ok(metrics[0], "the collector's /metrics")
        check(
            'xtimer_rank_slow{rank="5",host="node-b",cause="gpu_compute"} 1' in metrics[0],
            "the collector's /metrics: rank 5 slow for gpu_compute",
        )
    agent_b = load_json(paths[2])
    check(
        agent_b is not None and sorted(r["rank"] for r in agent_b.get("ranks", [])) == [4, 5, 6, 7],
        "node-b's slowdown.json has its own 4 ranks' step times",
    )
    clog_text = open(os.path.join(out, "collector.log")).read()
    check("slowdown: rank 5 (node node-b) is slow since" in clog_text, "the collector logs the start")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["agent", "collector"])
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    {"agent": check_agent, "collector": check_collector}[args.mode](args)
    if failures:
        print(f"{len(failures)} check(s) failed; logs in {args.out}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
