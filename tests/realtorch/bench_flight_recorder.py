#!/usr/bin/env python3
"""xtimer beside PyTorch's Flight Recorder on the same hang, real torch on the simulated GPUs.

    tests/realtorch/bench_flight_recorder.py --peers .peers --bin build/bin --simgpu build/lib/simgpu
        [--timeout 20] [--cases hang,desync] [--tools fr,xtimer,both,detail]

Cases (gpt_train.py, DDP, 2 ranks, `torchrun --standalone`):
  hang    rank 1 sleeps in load_shard_slowly before its backward() at step 15: rank 0 waits in a
          DDP bucket all-reduce
  desync  every step all-reduces the loss (--log-loss); rank 1 skips it at step 15, so its next
          all-reduce (a DDP bucket) meets rank 0's loss all-reduce: another size at one
          sequence number
Tools:
  fr      Flight Recorder: TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1,
          the dumps into a folder (TORCH_NCCL_DEBUG_INFO_TEMP_FILE), the process group's timeout
          = --timeout; the verdict is torch's own analyzer (torch.distributed.flight_recorder
          .fr_trace) on the dumps
  xtimer  xtimer_launch with XTIMER_HANG_TIMEOUT = --timeout; its verdict.json
  both    the two at once
  detail  TORCH_DISTRIBUTED_DEBUG=DETAIL alone (torch checks every collective's kind and shapes
          across the ranks with an extra gloo collective first); its error, from the job's log
For each run: seconds from the stall (rank 0's last step before it) to each rank's dump, and to
a verdict, and what the verdict names (the rank, its Python frame). Prints a Markdown table.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
from checks import free_port, kill_mentioning, load_json, wait_for  # noqa: E402
from node_ranks import agent_env  # noqa: E402
from peers import peers_or_skip  # noqa: E402

STALL_STEP = 15


def step_rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def run(args, case, tool):
    out = tempfile.mkdtemp(prefix=f"xtimer-fr-{case}-{tool}-")
    fr_dir, timeline, steps_log = (os.path.join(out, d) for d in ("fr", "timeline", "steps.jsonl"))
    os.makedirs(fr_dir)
    train = [os.path.join(HERE, "gpt_train.py"), "--steps", "400", "--step-log", steps_log]
    if case == "hang":
        train += ["--stall-rank", "1", "--stall-step", str(STALL_STEP)]
    else:
        train += ["--log-loss", "--skip-rank", "1", "--skip-step", str(STALL_STEP)]
    env = dict(
        SIMGPU_DIR=args.simgpu,
        SIMGPU_DEVICES="2",
        SIMGPU_TFLOPS="0.02",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    launcher = [args.peers.torchrun]
    if tool in ("fr", "both"):
        env.update(
            TORCH_NCCL_TRACE_BUFFER_SIZE="2000",
            TORCH_NCCL_DUMP_ON_TIMEOUT="1",
            TORCH_NCCL_DEBUG_INFO_TEMP_FILE=os.path.join(fr_dir, "nccl_trace_rank_"),
        )
        train += ["--pg-timeout", str(args.timeout)]
    if tool == "detail":
        env.update(TORCH_DISTRIBUTED_DEBUG="DETAIL")
    if tool in ("xtimer", "both"):
        env.update(
            XTIMER_HANG_TIMEOUT=str(args.timeout),
            XTIMER_TIMELINE_PATH=timeline,
            XTIMER_METRICS_PORT=str(free_port()),
            XTIMER_DUMP_WAIT="20",
        )
        launcher = [os.path.join(args.bin, "xtimer_launch")] + launcher
    cmd = [os.path.join(ROOT, "scripts", "simgpu.sh"), *launcher, "--standalone", "--nproc-per-node", "2", *train]
    log = open(os.path.join(out, "job.log"), "w")
    proc = subprocess.Popen(
        cmd, env=agent_env(drop=("PYTHONPATH",), **env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    row = {"case": case, "tool": tool}
    try:
        before = wait_for(
            lambda: [r for r in step_rows(steps_log) if r.get("rank") == 0 and r.get("step") == STALL_STEP - 1],
            300,
            step=0.1,
        )
        t0 = before[0]["t"] if before else time.time()
        deadline = args.timeout + 120
        steps0 = sorted(
            r["t"] for r in step_rows(steps_log) if r.get("rank") == 0 and 5 <= r.get("step", -1) < STALL_STEP
        )
        if len(steps0) > 2:
            row["step_ms"] = round(1e3 * sorted(b - a for a, b in zip(steps0, steps0[1:]))[(len(steps0) - 1) // 2], 1)
        if tool == "detail":
            log_path = os.path.join(out, "job.log")

            def said():
                with open(log_path, errors="replace") as f:
                    return [line.strip() for line in f if "mismatch" in line.lower() or "Detected" in line]

            lines = wait_for(said, deadline, 0.2)
            row["detail_s"] = round(os.path.getmtime(log_path) - t0, 1) if lines else None
            row["detail_says"] = " | ".join(dict.fromkeys(lines))[:700] if lines else f"nothing within {deadline} s"
        if tool in ("fr", "both"):
            dumps = wait_for(lambda: len(glob.glob(os.path.join(fr_dir, "nccl_trace_rank_*"))) >= 2, deadline, 0.2)
            files = sorted(glob.glob(os.path.join(fr_dir, "nccl_trace_rank_*")))
            row["fr_dumps_s"] = [round(os.path.getmtime(f) - t0, 1) for f in files]
            row["fr_ranks_dumped"] = len(files)
            if not dumps:
                row["fr_note"] = f"{len(files)} of 2 ranks dumped within {deadline} s"
            if files:
                time.sleep(1)  # a dump still being written
                a0 = time.time()
                p = subprocess.run(
                    [args.peers.python, "-m", "torch.distributed.flight_recorder.fr_trace", fr_dir],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                row["fr_verdict_s"] = round(max(os.path.getmtime(f) for f in files) - t0 + time.time() - a0, 1)
                text = (p.stdout + p.stderr).strip()
                row["fr_says"] = " | ".join(line for line in text.splitlines() if line.strip())[:700]
        if tool in ("xtimer", "both"):
            pattern = "desync-*" if case == "desync" else "*"
            verdicts = wait_for(lambda: glob.glob(os.path.join(timeline, pattern, "verdict.json")), deadline, 0.2)
            stacks = glob.glob(os.path.join(timeline, "*.stacktrace"))
            row["xt_dumps_s"] = sorted(round(os.path.getmtime(f) - t0, 1) for f in stacks)
            if verdicts:
                # The stacks and the call sites are added after the verdict is first written.
                time.sleep(3)
                v = load_json(verdicts[0]) or {}
                row["xt_verdict_s"] = round(os.path.getctime(os.path.dirname(verdicts[0])) - t0, 1)
                row["xt_says"] = json.dumps({k: v.get(k) for k in ("kind", "summary", "suspects") if k in v})[:700]
            else:
                row["xt_note"] = f"no verdict within {deadline} s"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        kill_mentioning(out)  # torchrun's workers, in sessions of their own
        log.close()
    row["exit"] = proc.returncode
    if args.keep:
        row["files"] = out
    else:
        shutil.rmtree(out, ignore_errors=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default=os.path.join(ROOT, ".peers"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--simgpu", default=os.path.join(ROOT, "build", "lib", "simgpu"))
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--cases", default="hang,desync")
    ap.add_argument("--tools", default="fr,xtimer,both")
    ap.add_argument("--keep", action="store_true", help="keep each run's files and print where")
    args = ap.parse_args()
    args.peers = peers_or_skip(args.peers)
    rows = []
    for case in args.cases.split(","):
        for tool in args.tools.split(","):
            print(f"running {case} with {tool} ...", flush=True)
            row = run(args, case, tool)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| case | tool | dumps (s after the stall) | verdict (s) | what it names |")
    print("|------|------|---------------------------|-------------|---------------|")
    for r in rows:
        if r["tool"] in ("fr", "both"):
            print(
                f"| {r['case']} | {r['tool']}: Flight Recorder | {r.get('fr_dumps_s')} | {r.get('fr_verdict_s')} "
                f"| {r.get('fr_says', r.get('fr_note', ''))} |"
            )
        if r["tool"] == "detail":
            print(
                f"| {r['case']} | TORCH_DISTRIBUTED_DEBUG=DETAIL (step {r.get('step_ms')} ms) | - | "
                f"{r.get('detail_s')} | {r.get('detail_says')} |"
            )
        if r["tool"] in ("xtimer", "both"):
            print(
                f"| {r['case']} | {r['tool']}: xtimer | {r.get('xt_dumps_s')} | {r.get('xt_verdict_s')} "
                f"| {r.get('xt_says', r.get('xt_note', ''))} |"
            )


if __name__ == "__main__":
    main()
