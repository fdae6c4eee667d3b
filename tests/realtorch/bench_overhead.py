#!/usr/bin/env python3
"""What xtimer costs a real-torch DDP step on the host: the same job (gpt_train.py, 2 ranks,
`torchrun --standalone` on the simulated GPUs) with and without `xtimer_launch`, alternated over
rounds in one run, as a ratio of median step times with its spread over the rounds. With
--tool detail the job with the tool is torch's own TORCH_DISTRIBUTED_DEBUG=DETAIL instead (its
check of every collective across the ranks), so the two can be set side by side. --log-loss adds
an all-reduce of the loss from Python to each step (a collective that goes through
torch.distributed, whose call site xtimer records, besides DDP's bucket all-reduces).

    tests/realtorch/bench_overhead.py --peers .peers --bin build/bin --simgpu build/lib/simgpu
        [--rounds 5] [--steps 300] [--tflops 100] [--nproc 2] [--tool xtimer|detail] [--log-loss]
        [--paired] [--attribute S]

The simulated GPU is fast (SIMGPU_TFLOPS 100 by default), so the step is bound by the host, the
worst case for a preloaded library: every microsecond the hooks add on the launch path shows.
The median of each job's steps after the first 50 (warm-up) is its step time; rank 0's CPU
seconds over those steps (every thread of the process: torch's, and xtimer's poller and link in
it), divided by their number, its CPU per step, which a late-scheduled thread moves less. With --nproc 2 on a
2-core machine the ranks take both cores and xtimer's threads (the poller, the agent) compete
with them; --nproc 1 leaves them a core, as a GPU node's spare cores would.

The step threads' CPU per step: rank 0's main thread and torch's autograd thread (pt_autograd_*),
the two that make the step, from each thread's own CPU clock over the same steps. It is what the
hooks on the launch path add to the step, without the simulated GPU's threads (which spin and sleep
with the scheduling) and without xtimer's own threads (its poller takes a spare core of a GPU node),
whose CPU per step is printed apart. The ratios' median over rounds comes with a 90% interval from
resampling the rounds (bootstrap), so that one can see whether the goal can be judged.

--tflops 0.02 makes the step GPU-bound instead, as a real training step is: what a user sees, the
host cost hidden behind the GPU's time unless it outgrows the host's slack.

--paired runs both jobs of a round at once, each pinned to a core of its own (swapped every
round): this VM's speed drifts by tens of percent within seconds (a fixed Python loop took
119-189 ms of CPU over 20 s), and a pair run at once sees the same drift. Each job then shares its
one core with its simulated GPU's threads and, with xtimer, its poller: the worst case.

--attribute S runs one job with xtimer and one without instead and samples rank 0 of each with
`perf record` for S seconds: the share of the step threads' CPU that ran xtimer's code, which the
scheduling of other threads does not move as it moves the step time, and per library the step
threads' samples per step in both jobs, which shows what the hooks make other code do.
"""
import argparse
import collections
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
from checks import free_port, kill_mentioning  # noqa: E402
from node_ranks import agent_env  # noqa: E402
from peers import peers_or_skip  # noqa: E402

WARMUP = 50


def is_step_thread(tid, name, pid):
    """The threads that make the step: the rank's main thread (its tid is the pid) and torch's
    autograd thread."""
    return tid == pid or name.startswith("pt_autograd")


def rank0_records(log):
    """Rank 0's records in a job's step log (none before the log exists)."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [r for r in map(json.loads, f) if r.get("rank") == 0]


def start_job(args, with_xtimer, steps, cpu=None):
    """The job, started (on CPU `cpu` alone when given): (its Popen, its folder, its step log)."""
    out = tempfile.mkdtemp(prefix="xtimer-overhead-")
    log = os.path.join(out, "steps.jsonl")
    launcher = [args.peers.torchrun]
    env = dict(
        SIMGPU_DIR=args.simgpu,
        SIMGPU_DEVICES=str(args.nproc),
        SIMGPU_TFLOPS=str(args.tflops),
        OMP_NUM_THREADS="1",
    )
    if with_xtimer and args.tool == "xtimer":
        launcher = [os.path.join(args.bin, "xtimer_launch")] + launcher
        env.update(XTIMER_TIMELINE_PATH=os.path.join(out, "timeline"), XTIMER_METRICS_PORT=str(free_port()))
    elif with_xtimer:
        env.update(TORCH_DISTRIBUTED_DEBUG="DETAIL")
    cmd = [
        *(["taskset", "-c", str(cpu)] if cpu is not None else []),
        os.path.join(ROOT, "scripts", "simgpu.sh"),
        *launcher,
        "--standalone",
        "--nproc-per-node",
        str(args.nproc),
        os.path.join(HERE, "gpt_train.py"),
        "--steps",
        str(steps),
        "--step-log",
        log,
        "--thread-cpu-steps",
        f"{WARMUP},{steps - 1}",
        *(["--log-loss"] if args.log_loss else []),
    ]
    p = subprocess.Popen(
        cmd,
        env=agent_env(drop=("PYTHONPATH",), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return p, out, log


def step_time(args, with_xtimer):
    return finish_job(args, with_xtimer, *start_job(args, with_xtimer, args.steps))


def step_times_paired(args, round_no):
    """Both jobs at once, each on a core of its own (swapped every round, so that neither core
    favours one): the machine's drift over time then moves both alike."""
    cpus = (0, 1) if round_no % 2 == 0 else (1, 0)
    jobs = {w: start_job(args, w, args.steps, cpu) for w, cpu in zip((False, True), cpus)}
    return {w: finish_job(args, w, *job) for w, job in jobs.items()}


def finish_job(args, with_xtimer, p, out, log):
    """Waits for a job; returns its step time, rank 0's CPU per step, its step threads' CPU per
    step and xtimer's threads' CPU per step."""
    try:
        rc = p.wait(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
    kill_mentioning(out)
    if rc != 0:
        sys.exit(
            f"bench_overhead: the job {'with' if with_xtimer else 'without'} {args.tool} exited {rc}; files in {out}"
        )
    mine = rank0_records(log)
    rows = [r for r in mine if "step" in r][WARMUP:]
    snaps = [r for r in mine if "threads_at" in r]
    gaps = [b["t"] - a["t"] for a, b in zip(rows, rows[1:])]
    cpu = (rows[-1]["cpu"] - rows[0]["cpu"]) / (len(rows) - 1)
    steps = snaps[-1]["threads_at"] - snaps[0]["threads_at"]
    used = {k: v - snaps[0]["threads"].get(k, 0.0) for k, v in snaps[-1]["threads"].items()}
    pid = snaps[0]["pid"]

    threads = [(int(key.split(" ", 1)[0]), key.split(" ", 1)[1], v) for key, v in used.items()]

    def per_step(pick):
        return sum(v for tid, name, v in threads if pick(tid, name)) / steps

    step_threads = per_step(lambda tid, name: is_step_thread(tid, name, pid))
    xtimer_threads = per_step(lambda tid, name: name.startswith("xtimer"))
    subprocess.run(["rm", "-rf", out])
    return statistics.median(gaps), cpu, step_threads, xtimer_threads


def sample(args, with_xtimer):
    """Where rank 0's CPU goes, by sampling: `perf record -F 999` of the rank for --attribute
    seconds after the warm-up. Returns (the step threads' samples by library, the number of steps
    rank 0 made meanwhile, xtimer's threads' samples by thread name, all samples). Each sample is
    counted by its thread and the library it was in (the leaf frame, no call chains: a hook's frame
    is on every CUDA call's chain, so only the innermost frame says whose code ran)."""
    p, out, log = start_job(args, with_xtimer, 1_000_000)

    def rank0_steps():
        return [r for r in rank0_records(log) if "step" in r]

    try:
        pid = None
        for _ in range(1200):  # the warm-up: up to 2 minutes
            rows = rank0_steps()
            if len(rows) > WARMUP:
                pid = rows[-1]["pid"]
                break
            if p.poll() is not None:
                break
            time.sleep(0.1)
        if pid is None:
            sys.exit(f"bench_overhead: the job did not reach step {WARMUP}; files in {out}")
        data = os.path.join(out, "perf.data")
        t0 = time.time()
        rec = subprocess.run(
            ["perf", "record", "-F", "999", "-p", str(pid), "-o", data, "--", "sleep", str(args.attribute)],
            capture_output=True,
            text=True,
        )
        t1 = time.time()
        if rec.returncode != 0:
            sys.exit(f"bench_overhead: perf record failed (is perf installed and allowed?): {rec.stderr.strip()}")
        steps = sum(1 for r in rank0_steps() if t0 <= r["t"] <= t1)
        lines = subprocess.run(
            ["perf", "script", "-i", data, "-F", "comm,tid,ip,dso"], capture_output=True, text=True
        ).stdout.splitlines()
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kill_mentioning(out)
    step, mine, total = collections.Counter(), collections.Counter(), 0
    for line in lines:
        m = re.match(r"\s*(.+?)\s+(\d+)\s+[0-9a-f]+\s+\((.*)\)\s*$", line)
        if not m:
            continue
        comm, tid, dso = m.group(1), int(m.group(2)), os.path.basename(m.group(3))
        total += 1
        if is_step_thread(tid, comm, pid):
            step[dso] += 1
        if comm.startswith("xtimer"):
            mine[comm] += 1
    if not step or not steps:
        sys.exit(f"bench_overhead: no samples of rank 0's step threads, or no step ({total} samples); files in {out}")
    subprocess.run(["rm", "-rf", out])
    return step, steps, mine, total


def attribute(args):
    """The job with xtimer, then without it, each sampled for --attribute seconds: xtimer's code as
    a share of the step threads' CPU, and per library the step threads' samples per step in each,
    so that what the hooks make other libraries do (a ctypes call, a CUDA call of their own) shows
    as a difference too."""
    with_, steps_w, mine, total = sample(args, True)
    without, steps_wo, _, _ = sample(args, False)
    n = sum(with_.values())
    hooks = with_["libxtimer_preload.so"]
    cupti = with_["libcupti.so.13"]
    print(
        f"rank 0 with xtimer, {args.attribute} s at 999 Hz: {total} samples, {n} on the step threads (main, autograd)"
    )
    print(f"  xtimer's code on the step threads: {hooks} samples, {100 * hooks / n:.2f}% of their CPU; goal < 1%")
    print(
        f"  with the simulated CUPTI's callbacks that xtimer's subscription turns on: {hooks + cupti} samples, "
        f"{100 * (hooks + cupti) / n:.2f}%"
    )
    for comm, k in mine.most_common():
        print(f"  xtimer's thread {comm}: {k} samples, {100 * k / n:.2f}% of the step threads' CPU")
    per_w, per_wo = n / steps_w, sum(without.values()) / steps_wo
    print(
        f"step threads' samples per step: {per_wo:.3f} without xtimer ({steps_wo} steps), {per_w:.3f} with it "
        f"({steps_w} steps): ratio {per_w / per_wo:.4f}"
    )
    print("  by library, samples per step without / with (difference, as a share of the step without):")
    diffs = {d: with_[d] / steps_w - without[d] / steps_wo for d in set(with_) | set(without)}
    for d in sorted(diffs, key=lambda d: -abs(diffs[d]))[:12]:
        print(
            f"    {d}: {without[d] / steps_wo:.3f} / {with_[d] / steps_w:.3f} "
            f"({diffs[d]:+.3f}, {100 * diffs[d] / per_wo:+.2f}%)"
        )


def interval(values, rounds=2000, seed=1):
    """A 90% bootstrap interval of the median of `values` (the rounds resampled with replacement)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(0.05 * rounds)], medians[int(0.95 * rounds) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default=os.path.join(ROOT, ".peers"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--simgpu", default=os.path.join(ROOT, "build", "lib", "simgpu"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--tflops", type=float, default=100)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--tool", choices=("xtimer", "detail"), default="xtimer")
    ap.add_argument("--log-loss", action="store_true")
    ap.add_argument("--paired", action="store_true", help="run both jobs of a round at once, one per core")
    ap.add_argument("--attribute", type=float, default=0, help="S: sample a job with xtimer and one without, S s each")
    args = ap.parse_args()
    args.peers = peers_or_skip(args.peers)
    if args.attribute > 0:
        attribute(args)
        return
    ratios, cpu_ratios, thread_ratios, own = [], [], [], []
    for r in range(args.rounds):
        # Alternate which goes first, so that a drift of the machine does not favour one.
        order = (False, True) if r % 2 == 0 else (True, False)
        times = step_times_paired(args, r) if args.paired else {w: step_time(args, w) for w in order}
        ratios.append(times[True][0] / times[False][0])
        cpu_ratios.append(times[True][1] / times[False][1])
        thread_ratios.append(times[True][2] / times[False][2])
        own.append(times[True][3] / times[False][0])
        print(
            f"round {r + 1}: step {times[False][0] * 1e3:.2f} ms without, {times[True][0] * 1e3:.2f} ms with "
            f"{args.tool}: ratio {ratios[-1]:.4f}; rank 0's CPU per step {times[False][1] * 1e3:.2f} / "
            f"{times[True][1] * 1e3:.2f} ms: ratio {cpu_ratios[-1]:.4f}; its step threads' "
            f"{times[False][2] * 1e3:.3f} / {times[True][2] * 1e3:.3f} ms: ratio {thread_ratios[-1]:.4f}; "
            f"xtimer's threads {times[True][3] * 1e3:.3f} ms",
            flush=True,
        )
    goal = "; goal < 1.01" if args.tool == "xtimer" else ""
    for name, rs in (
        ("step time", ratios),
        ("rank 0's CPU seconds per step (every thread)", cpu_ratios),
        ("rank 0's step threads' CPU seconds per step (main, autograd)", thread_ratios),
    ):
        lo, hi = interval(rs)
        print(
            f"{name}: ratio with/without {args.tool}, median of {args.rounds} rounds: {statistics.median(rs):.4f} "
            f"(90% interval {lo:.4f}-{hi:.4f}; min {min(rs):.4f}, max {max(rs):.4f}){goal}"
        )
    if args.tool == "xtimer":
        print(
            f"xtimer's own threads (its poller, on a spare core of a GPU node): CPU per step "
            f"{statistics.median(own):.4f} of the step without it (median of {args.rounds} rounds)"
        )


if __name__ == "__main__":
    main()
