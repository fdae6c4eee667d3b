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

The simulated GPU is fast (SIMGPU_TFLOPS 100 by default), so the step is bound by the host, the
worst case for a preloaded library: every microsecond the hooks add on the launch path shows.
The median of each job's steps after the first 50 (warm-up) is its step time; rank 0's CPU
seconds over those steps (every thread of the process: torch's, and xtimer's poller and link in
it), divided by their number, its CPU per step, which a late-scheduled thread moves less. With --nproc 2 on a
2-core machine the ranks take both cores and xtimer's threads (the poller, the agent) compete
with them; --nproc 1 leaves them a core, as a GPU node's spare cores would.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
from checks import free_port, kill_mentioning  # noqa: E402
from node_ranks import agent_env  # noqa: E402
from peers import peers_or_skip  # noqa: E402

WARMUP = 50


def step_time(args, with_xtimer):
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
        os.path.join(ROOT, "scripts", "simgpu.sh"),
        *launcher,
        "--standalone",
        "--nproc-per-node",
        str(args.nproc),
        os.path.join(HERE, "gpt_train.py"),
        "--steps",
        str(args.steps),
        "--step-log",
        log,
        *(["--log-loss"] if args.log_loss else []),
    ]
    p = subprocess.Popen(
        cmd,
        env=agent_env(drop=("PYTHONPATH",), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
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
    with open(log) as f:
        rows = [r for r in map(json.loads, f) if r.get("rank") == 0 and "step" in r][WARMUP:]
    gaps = [b["t"] - a["t"] for a, b in zip(rows, rows[1:])]
    cpu = (rows[-1]["cpu"] - rows[0]["cpu"]) / (len(rows) - 1)
    subprocess.run(["rm", "-rf", out])
    return statistics.median(gaps), cpu


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
    args = ap.parse_args()
    args.peers = peers_or_skip(args.peers)
    ratios, cpu_ratios = [], []
    for r in range(args.rounds):
        # Alternate which goes first, so that a drift of the machine does not favour one.
        order = (False, True) if r % 2 == 0 else (True, False)
        times = {w: step_time(args, w) for w in order}
        ratios.append(times[True][0] / times[False][0])
        cpu_ratios.append(times[True][1] / times[False][1])
        print(
            f"round {r + 1}: step {times[False][0] * 1e3:.2f} ms without, {times[True][0] * 1e3:.2f} ms with "
            f"{args.tool}: ratio {ratios[-1]:.4f}; rank 0's CPU per step {times[False][1] * 1e3:.2f} / "
            f"{times[True][1] * 1e3:.2f} ms: ratio {cpu_ratios[-1]:.4f}",
            flush=True,
        )
    goal = "; goal < 1.01" if args.tool == "xtimer" else ""
    for name, rs in (("step time", ratios), ("rank 0's CPU seconds per step (every thread)", cpu_ratios)):
        print(
            f"{name}: ratio with/without {args.tool}, median of {args.rounds} rounds: {statistics.median(rs):.4f} "
            f"(min {min(rs):.4f}, max {max(rs):.4f}){goal}"
        )


if __name__ == "__main__":
    main()
