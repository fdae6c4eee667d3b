#!/usr/bin/env python3
"""Every diagnosis on real PyTorch: torch 2.15 (.peers, the CUDA 13 build from PyPI, unmodified)
trains a small GPT (gpt_train.py) on simulated GPUs with backend nccl, under
`xtimer_launch torchrun` or `xtimer_run` (scripts/simgpu.sh), and the checks read what xtimer
names.

  check_realtorch.py CASE --peers .peers --bin build/bin --simgpu build/lib/simgpu [--pypath ...]

CASE:
  timings        DDP, 2 ranks: each rank's summary names torch's own kernels (demangled), the
                 matmuls with m x n x k and TFLOPS, DDP's bucket all-reduces with their sizes;
                 the step records count the steps the loop ran
  timings-run    the same, the job launched by xtimer_run instead of xtimer_launch torchrun
  fsdp-timings   FSDP2 (fully_shard), 2 ranks: its all-gathers and reduce-scatters
  hang           rank 1 sleeps in load_shard_slowly before backward(): the agent's verdict
                 names rank 1 and that function
  hang-run       the same under xtimer_run (whose agent writes the verdict, then restarts)
  stuck-kernel   rank 1's 200th vectorized elementwise kernel never completes: its watchdog
                 reports the kernel by name, and the verdict names rank 1
  slowdown       rank 1's GPU becomes 2x slower mid-run: the judge names rank 1, gpu_compute
  slowdown-host  after a healthy half minute, rank 1 spends 300 ms a step in prepare_batch:
                 named host with that function while it lasts, no longer named once it ended;
                 then GC pauses on rank 1 (gc_objects): named python_gc; nothing else named
  slowdown-data  the same with a DataLoader of 2 workers (--loader); rank 1's samples take
                 100 ms more to load (data_ms): named data_loading. (With 2 workers per rank
                 on 2 shared cores a starved rank is sometimes named `host` as well:
                 docs/real_torch_on_simgpu.md.)
  megatron       Megatron-Core's own dist_checkpointing: a weight split over 2 tensor-parallel
                 ranks saved, loaded whole on 2 data-parallel ranks, every byte as saved
  megatron-flash xtimer.ckpt.megatron (megatron_flash.py): GPT (2 layers, distributed optimizer)
                 saved at TP 2 x DP 2 on 4 simulated GPUs by xtimer's flash strategy, loaded at
                 TP 2 x DP 1 from memory and from disk and at TP 1 x DP 4 from disk (also by
                 megatron's own strategy): every byte as gathered at save time; a piece saved per
                 TP rank is refused at TP 1 in one line
  healthy        minutes of training under xtimer_run with a checkpoint every 25 steps and an eval
                 pass every 100: nothing named (--seconds, 240)
  desync         every step all-reduces the loss after backward(); rank 1 skips it at step 8, so
                 its next collective is DDP's broadcast of its buffers in the next forward where
                 rank 0 all-reduces the loss: the agent's desync verdict names rank 1 alone,
                 what each side called and each side's Python call site (rank 0: the loss
                 all-reduce's line; rank 1: the model(x) line). DDP's bucket all-reduces, issued
                 from autograd's thread, carry the backward() line on both ranks up to there.
  kill-in-collective  under xtimer_run, rank 0 is SIGKILLed while it waits in DDP's all-reduce
                 for rank 1: the workers restart and train to the end
  profiler       torch.profiler (CPU and CUDA) runs for steps 10 to 14 mid-run, xtimer on CUPTI by
                 default: each rank's exported Chrome trace holds torch's kernels by their real
                 names; xtimer handed CUPTI over, said so once per rank, and its summary still
                 times the matmuls and DDP's all-reduces of every step, with step records
  profiler-first torch.profiler starts before the program's first CUDA call (steps -1 to 5):
                 Kineto takes CUPTI first, its trace holds the kernels; xtimer times with event
                 pairs from the start and says why once per rank
  ckpt           DDP on cuda under xtimer_run with xtimer's flash checkpoint: rank 1 is SIGKILLed
                 at step 12, the workers restart and resume, and every byte of the parameters
                 and AdamW state they load (read back with device-to-host copies) is what was
                 saved
  ckpt-fsdp      the same with FSDP2 (fully_shard) and FsdpShardCheckpointer (DLRover's FSDP
                 API: get_state_dict, dcp.load from get_storage_reader, set_state_dict): every
                 byte of each rank's shards of the parameters and AdamW state, stamped with
                 host-to-device copies at each save, is what was saved, after dcp.load and
                 after set_state_dict, read from the shared-memory snapshots
Nothing here bounds a time: latencies are printed ("figure:" lines) for the benchmarks.
Exit 77 (skip) when the peer environment is missing.
"""
import argparse
import functools
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
from checks import check, failures, free_port, kill_mentioning, load_json, wait_for  # noqa: E402
from node_ranks import agent_env  # noqa: E402
from peers import peers_or_skip  # noqa: E402

WORLD = 2
# Slow enough a simulated GPU that the step is GPU-bound on a loaded 2-core host, as a real
# training step is: a slow GPU then costs time and can be named.
TFLOPS = "0.02"


class Job:
    """`scripts/simgpu.sh xtimer_launch torchrun --nproc-per-node 2 gpt_train.py ARGS` in a
    session of its own, its timeline and logs in `out`; with `run`, `xtimer_run` (or `launcher`)
    in place of `xtimer_launch torchrun`."""

    def __init__(self, args, out, train_args, env=None, launcher=None, run=False):
        self.out = out
        if run:  # xtimer_run (torchrun's flags) instead of xtimer_launch torchrun
            launcher = launcher or [os.path.join(args.bin, "xtimer_run")]
            env = {"XTIMER_PYTHON": args.peers.python, "PYTHONPATH": args.pypath, **(env or {})}
        self.timeline = os.path.join(out, "timeline")
        self.control = os.path.join(out, "control")
        self.steps_log = os.path.join(out, "steps.jsonl")
        open(self.control, "w").close()
        cmd = [
            os.path.join(ROOT, "scripts", "simgpu.sh"),
            *(launcher or [os.path.join(args.bin, "xtimer_launch"), args.peers.torchrun]),
            "--standalone",
            "--nproc-per-node",
            str(WORLD),
            os.path.join(HERE, "gpt_train.py"),
            "--step-log",
            self.steps_log,
            *train_args,
        ]
        values = dict(
            SIMGPU_DIR=args.simgpu,
            XTIMER_TIMELINE_PATH=self.timeline,
            XTIMER_METRICS_PORT=str(free_port()),
            SIMGPU_DEVICES=str(WORLD),
            SIMGPU_TFLOPS=TFLOPS,
            SIMGPU_CONTROL=self.control,
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        values.update(env or {})
        self.log_path = os.path.join(out, "job.log")
        self.log = open(self.log_path, "w")
        self.started = time.time()
        self.proc = subprocess.Popen(
            cmd,
            env=agent_env(drop=("PYTHONPATH",), **values),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def steps(self, rank=None):
        try:
            with open(self.steps_log) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            return []
        return [r for r in rows if "step" in r and (rank is None or r["rank"] == rank)]

    def rows(self, key):
        """The step log's rows that carry `key` (saved, loaded)."""
        try:
            with open(self.steps_log) as f:
                return [r for r in (json.loads(line) for line in f if line.strip()) if key in r]
        except (OSError, ValueError):
            return []

    def summary(self, rank):
        return load_json(os.path.join(self.timeline, f"{rank:05d}-{WORLD:05d}.summary.json")) or {}

    def set_control(self, line):
        with open(self.control + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(self.control + ".tmp", self.control)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        kill_mentioning(self.out)  # torchrun's workers, in sessions of their own
        self.log.close()

    def tail(self, n=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])


def ops(summary, kind=None):
    return [o for o in summary.get("ops", []) if kind is None or o.get("kind") == kind]


def finished(job, steps, timeout):
    rc = job.wait(timeout)
    ok = check(rc == 0, f"the job ran its {steps} steps and exited 0 (rc {rc})")
    if not ok:
        print(job.tail())
    return ok


def case_timings(args, out, run=False):
    steps = 40
    job = Job(args, out, ["--steps", str(steps), "--bucket-mb", "0.25"], run=run)
    try:
        if not finished(job, steps, 400):
            return
        for rank in range(WORLD):
            s = job.summary(rank)
            check(s.get("final") is True, f"rank {rank}: a final summary ({s.get('timing_mode')} timing)")
            kernels = [o["name"] for o in ops(s, "kernel")]
            check(
                any(n.startswith("void at::native::") for n in kernels),
                f"rank {rank}: torch's own kernels by their demangled names ({len(kernels)} kernels, "
                f"e.g. {[n[:90] for n in kernels[:2]]})",
            )
            check(
                any("elementwise_kernel" in n for n in kernels)
                and any("layer_norm" in n.lower() or "LayerNorm" in n for n in kernels),
                f"rank {rank}: elementwise and layer-norm kernels are there",
            )
            mm = ops(s, "matmul")
            shapes = sorted({(o.get("m"), o.get("n"), o.get("k")) for o in mm})
            check(
                bool(mm) and all(o.get("m", 0) > 0 and o.get("k", 0) > 0 and o.get("tflops", 0) > 0 for o in mm),
                f"rank {rank}: {len(mm)} matmul classes with m x n x k and TFLOPS ({shapes[:4]} ...)",
            )
            # The LM head: tokens (8 x 64) x vocab 512 x dim 128, in some orientation.
            check(
                any(sorted((o["m"], o["n"], o["k"])) == [128, 512, 512] for o in mm),
                f"rank {rank}: the LM head's matmul (512 x 512 x 128) is named with its shape",
            )
            ar = [o for o in ops(s, "collective") if o["name"] == "ncclAllReduce"]
            sizes = sorted({o.get("bytes") for o in ar})
            launches = sum(o.get("launches", 0) for o in ar)
            check(
                len(sizes) >= 2 and launches >= 2 * steps,
                f"rank {rank}: DDP's bucket all-reduces, {len(sizes)} sizes ({sizes}), {launches} launches",
            )
            records = []
            path = os.path.join(job.timeline, f"{rank:05d}-{WORLD:05d}.steps.jsonl")
            if os.path.exists(path):
                with open(path) as f:
                    records = [line for line in f if line.strip()]
            print(f"figure: rank {rank}: {len(records)} step records for {steps} steps")
            # The detector needs a few steps to find the period (docs/formats.md, step records).
            check(
                len(records) >= steps - 6,
                f"rank {rank}: the step detector found the loop's steps ({len(records)} records of {steps})",
            )
    finally:
        job.kill()


def case_fsdp_timings(args, out):
    steps = 20
    job = Job(args, out, ["--steps", str(steps), "--wrap", "fsdp"])
    try:
        if not finished(job, steps, 400):
            return
        for rank in range(WORLD):
            s = job.summary(rank)
            for api in ("ncclAllGather", "ncclReduceScatter"):
                classes = [o for o in ops(s, "collective") if o["name"] == api]
                launches = sum(o.get("launches", 0) for o in classes)
                sizes = sorted({o.get("bytes") for o in classes})
                # One per FSDP unit (the two blocks and the root) a step, at least; sizes differ.
                check(
                    launches >= 3 * steps and len(sizes) >= 2 and all(b > 0 for b in sizes),
                    f"rank {rank}: FSDP2's {api}: {launches} launches in {len(sizes)} sizes ({sizes})",
                )
    finally:
        job.kill()


def hang_verdict(job, timeout):
    return wait_for(lambda: glob.glob(os.path.join(job.timeline, "*", "verdict.json")), timeout, step=0.2)


def suspects_in(verdict, rank, text):
    return any(
        s.get("rank") == rank and any(text in str(f) for f in s.get("frames", [])) for s in verdict.get("suspects", [])
    )


def case_hang(args, out, run=False):
    hang_timeout = 10
    # Under xtimer_run the hang also restarts the workers (XTIMER_HANG_ACTION=restart, its
    # default) after the verdict is written: with no restarts allowed, the job then ends.
    job = Job(
        args,
        out,
        ["--steps", "400", "--stall-rank", "1", "--stall-step", "15"],
        env={"XTIMER_HANG_TIMEOUT": str(hang_timeout), "XTIMER_DUMP_WAIT": "20"},
        run=run,
    )
    try:
        stalled = wait_for(lambda: [r for r in job.steps(0) if r["step"] >= 14], 300, step=0.2)
        check(bool(stalled), "rank 0 reached step 14 (the stall is at step 15)")
        t0 = stalled[0]["t"] if stalled else time.time()
        verdicts = hang_verdict(job, hang_timeout + 90)
        check(bool(verdicts), "the agent merged a hang round and wrote verdict.json")
        if verdicts:
            took = os.path.getmtime(verdicts[0]) - t0
            print(f"figure: hang verdict {took:.1f} s after the stall (XTIMER_HANG_TIMEOUT {hang_timeout} s)")
            v = load_json(verdicts[0]) or {}
            check(v.get("kind", "hang") == "hang", f"the verdict is a hang ({v.get('kind')})")
            check(
                suspects_in(v, 1, "load_shard_slowly"),
                f"the verdict names rank 1 in load_shard_slowly: {json.dumps(v.get('suspects'))[:400]}",
            )
            check(not any(s.get("rank") == 0 for s in v.get("suspects", [])), "rank 0 is not a suspect")
            rdir = os.path.dirname(verdicts[0])
            check(len(glob.glob(os.path.join(rdir, "*.stacktrace"))) == WORLD, "both ranks' stacks are in the round")
    finally:
        job.kill()


def line_of(path, text):
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def case_desync(args, out):
    train = os.path.join(HERE, "gpt_train.py")
    loss_line = line_of(train, "dist.all_reduce(loss.detach())")
    forward_line = line_of(train, "logits = model(x)")
    job = Job(
        args,
        out,
        ["--steps", "40", "--log-loss", "--skip-rank", "1", "--skip-step", "8"],
        env={"XTIMER_HANG_TIMEOUT": "30", "XTIMER_DESYNC_ACTION": "report"},
    )
    try:
        verdicts = wait_for(lambda: glob.glob(os.path.join(job.timeline, "desync-*", "verdict.json")), 300, step=0.2)
        check(bool(verdicts), "the agent wrote a desync verdict")
        if not verdicts:
            print(job.tail())
            return
        skipped = [r for r in job.steps(1) if r["step"] == 7]
        if skipped:
            print(f"figure: desync verdict {os.path.getmtime(verdicts[0]) - skipped[0]['t']:.1f} s after step 7's end")
        v = load_json(verdicts[0]) or {}
        print(json.dumps(v.get("sides")))
        check(v.get("kind") == "desync", f"the verdict is a desync ({v.get('kind')})")
        check([s.get("rank") for s in v.get("suspects", [])] == [1], f"rank 1 alone is named: {v.get('suspects')}")
        sides = {tuple(s.get("ranks", [])): s for s in v.get("sides", [])}
        zero, one = sides.get((0,), {}), sides.get((1,), {})
        check(zero.get("op") == "AllReduce" and zero.get("count") == 1, f"rank 0 all-reduced the loss: {zero}")
        check(one.get("op") == "Broadcast" and one.get("count", 0) > 1, f"rank 1 broadcast DDP's buffers: {one}")
        check(zero.get("site") == f"main (gpt_train.py:{loss_line})", "rank 0's call site is the loss all-reduce")
        check(one.get("site") == f"main (gpt_train.py:{forward_line})", "rank 1's call site is model(x)")
    finally:
        job.kill()


def case_stuck_kernel(args, out):
    hang_timeout = 10
    job = Job(args, out, ["--steps", "400"], env={"XTIMER_HANG_TIMEOUT": str(hang_timeout), "XTIMER_DUMP_WAIT": "20"})
    try:
        wait_for(lambda: len(job.steps(1)) >= 10, 300, step=0.2)
        job.set_control("rank=1 stuck_kernel=vectorized_elementwise_kernel stuck_launch=200")
        t0 = time.time()
        verdicts = hang_verdict(job, 150)
        check(bool(verdicts), "the agent merged a hang round and wrote verdict.json")
        stack = load_json(os.path.join(job.timeline, f"{1:05d}-{WORLD:05d}.stacktrace")) or {}
        trigger = str(stack.get("trigger", ""))
        inflight = [o.get("name", "") for o in stack.get("inflight_ops", [])]
        check(
            "vectorized_elementwise_kernel" in trigger or any("vectorized_elementwise_kernel" in n for n in inflight),
            f"rank 1's watchdog names the stuck kernel (trigger {trigger[:160]!r}, in flight {inflight[:3]})",
        )
        if verdicts:
            print(f"figure: stuck-kernel verdict {os.path.getmtime(verdicts[0]) - t0:.1f} s after the fault was set")
            v = load_json(verdicts[0]) or {}
            check(
                any(
                    s.get("rank") == 1
                    and "not_started" in s.get("kinds", [])
                    and "vectorized_elementwise_kernel" in s.get("reason", "")
                    for s in v.get("suspects", [])
                ),
                f"the verdict names rank 1, its collective not started, its GPU at the stuck kernel: "
                f"{json.dumps(v.get('suspects'))[:400]}",
            )
            check(
                not any(s.get("rank") == 0 for s in v.get("suspects", [])), "rank 0 (waiting for it) is not a suspect"
            )
    finally:
        job.kill()


def case_slowdown(args, out):
    job = Job(args, out, ["--steps", "100000"])
    judged = os.path.join(job.timeline, "slowdown.json")
    try:
        healthy_s = 30  # about 280 steps of 0.107 s; a minute before 2026-12-02 (the suite's 25 minutes)
        wait_for(lambda: len(job.steps(0)) >= 5, 300, step=0.5)
        healthy = []
        end = time.time() + healthy_s
        while time.time() < end:
            healthy.extend((load_json(judged) or {}).get("slow", []))
            time.sleep(0.5)
        check(
            not healthy, f"a healthy half minute names nothing ({[(f.get('rank'), f.get('cause')) for f in healthy]})"
        )
        before = len(job.steps(0))
        job.set_control("rank=1 gpu_factor=2")
        t0 = time.time()

        seen = []  # every finding read while waiting

        def named():
            found = (load_json(judged) or {}).get("slow", [])
            seen.extend(found)
            return [f for f in found if f.get("rank") == 1 and f.get("cause") == "gpu_compute"]

        found = wait_for(named, 120, step=0.5)
        check(bool(found), f"the judge names rank 1, gpu_compute ({(load_json(judged) or {}).get('slow')})")
        if found:
            print(
                f"figure: slow GPU named {time.time() - t0:.1f} s after the onset ({len(job.steps(0)) - before} steps)"
            )
        wrong = [
            f"{f.get('rank')}/{f.get('cause')}" for f in seen if (f.get("rank"), f.get("cause")) != (1, "gpu_compute")
        ]
        check(not wrong, f"nothing else was named, before or with it ({wrong})")
    finally:
        job.kill()


def case_slowdown_host(args, out):
    faults = [
        ("host", "rank=1 host_ms=300", {"rank": 1, "cause": "host"}, "prepare_batch"),
        ("gc", "rank=1 gc_objects=1000000", {"rank": 1, "cause": "python_gc"}, "Python GC pauses"),
    ]
    rank_causes(Job(args, out, ["--steps", "100000"]), faults)


def case_slowdown_data(args, out):
    faults = [("data", "rank=1 data_ms=100", {"rank": 1, "cause": "data_loading"}, "DataLoader")]
    rank_causes(Job(args, out, ["--steps", "100000", "--loader"]), faults)


def rank_causes(job, faults):
    """A healthy half minute names nothing; then each (name, control line, finding wanted, words
    of its detail) in turn: named while it lasts, no longer once it ended, nothing else named."""
    judged = os.path.join(job.timeline, "slowdown.json")
    seen = []  # every finding read, with the phase it was read in

    def findings(phase):
        found = (load_json(judged) or {}).get("slow", [])
        seen.extend((phase, f) for f in found)
        return found

    def matching(found, want):
        return [f for f in found if all(f.get(k) == v for k, v in want.items())]

    try:
        wait_for(lambda: len(job.steps(0)) >= 5, 300, step=0.5)
        end = time.time() + 30
        while time.time() < end:
            findings("healthy")
            time.sleep(0.5)
        for name, line, want, detail in faults:
            job.set_control(line)
            t0 = time.time()
            named = wait_for(lambda: matching(findings(name), want), 90, step=0.5)
            check(
                bool(named),
                f"{name}: the judge names {want} ({[(f.get('rank'), f.get('cause')) for _, f in seen[-4:]]})",
            )
            if named:
                print(
                    f"figure: {name} named {time.time() - t0:.1f} s after the onset: {named[0].get('detail', '')[:160]}"
                )
                if detail:
                    # A host straggler's Python samples are asked for when it is first suspected and
                    # may come after it is named; the named finding's detail is updated then.
                    told = wait_for(
                        lambda: [f for f in matching(findings(name), want) if detail in f.get("detail", "")],
                        30,
                        step=0.5,
                    )
                    check(bool(told), f"{name}: the detail names {detail} ({time.time() - t0:.1f} s after the onset)")
            job.set_control("")
            gone = wait_for(lambda: not matching(findings(name + "-after"), want), 60, step=0.5)
            check(bool(gone), f"{name}: no longer named once it ended")
        check(not [f for p, f in seen if p == "healthy"], "the healthy half minute names nothing")
        causes = {name: want for name, _, want, _ in faults}
        wrong = {
            f"{p}: {f.get('rank')}/{f.get('cause')}"
            for p, f in seen
            if p in causes and f.get("rank") is not None and not matching([f], causes[p])
        }
        check(not wrong, f"no other rank or cause is named during a fault ({sorted(wrong)[:6]})")
    finally:
        job.kill()


def case_healthy(args, out):
    """A few healthy minutes of training under xtimer_run with the flash checkpoint every 25 steps
    (every 125th to disk) and an eval pass every 100 steps: the judge names nothing at any time."""
    ckpt, shm = os.path.join(out, "ckpt"), os.path.join(out, "shm")
    os.makedirs(shm)
    train = ["--steps", "100000", "--ckpt", ckpt, "--ckpt-every", "25", "--eval-every", "100"]
    env = {"XTIMER_PYTHON": args.peers.python, "XTIMER_CKPT_SHM_DIR": shm, "PYTHONPATH": args.pypath}
    job = Job(args, out, train, env=env, launcher=[os.path.join(args.bin, "xtimer_run")])
    judged = os.path.join(job.timeline, "slowdown.json")
    try:
        wait_for(lambda: len(job.steps(0)) >= 5 or job.proc.poll() is not None, 300, step=0.5)
        if not check(job.proc.poll() is None, f"the job runs (exit {job.proc.poll()}; {job.log_path})"):
            return
        first, seen, reads = len(job.steps(0)), [], 0
        end = time.time() + args.seconds
        while time.time() < end:
            v = load_json(judged)
            if v is not None:
                reads += 1
                seen.extend(v.get("slow", []))
            time.sleep(0.5)
        steps = len(job.steps(0)) - first
        disk = [r for r in job.rows("saved") if (r["saved"] + 1) % 125 == 0]
        evals = job.rows("evaluated")
        print(
            f"figure: healthy {args.seconds:.0f} s: {steps} steps of rank 0, {len(job.rows('saved'))} saves "
            f"({len(disk)} to disk), {len(evals)} eval passes, slowdown.json read {reads} times"
        )
        check(steps > 0 and reads > 0, f"the job trained and was judged ({steps} steps, {reads} verdicts read)")
        check(bool(disk) and bool(evals), f"disk checkpoints and eval passes among them ({len(disk)}, {len(evals)})")
        check(not seen, f"nothing named ({[(f.get('rank'), f.get('cause'), f.get('scope')) for f in seen][:6]})")
    finally:
        job.kill()


def case_megatron(args, out):
    """Megatron-Core's own dist_checkpointing on the simulated GPU: a weight split over 2
    tensor-parallel ranks saved, then loaded whole on 2 data-parallel ranks (resharded)."""
    ckpt = os.path.join(out, "ckpt")
    os.makedirs(ckpt)
    script = os.path.join(HERE, "megatron_ckpt.py")
    for mode, tp in (("save", "2"), ("load", "1")):
        env = agent_env(drop=("PYTHONPATH",), SIMGPU_DIR=args.simgpu, SIMGPU_DEVICES=str(WORLD), MODE=mode, TP=tp)
        cmd = [
            os.path.join(ROOT, "scripts", "simgpu.sh"),
            args.peers.torchrun,
            "--standalone",
            "--nproc-per-node",
            str(WORLD),
            script,
            ckpt,
        ]
        with open(os.path.join(out, f"{mode}.log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=400).returncode
        if not check(rc == 0, f"{mode} with TP {tp}: both ranks exit 0 (exit {rc}; {out}/{mode}.log)"):
            return
        rows = load_json(os.path.join(ckpt, f"{mode}.json")) or []
        print(f"figure: megatron {mode} (TP {tp}): {rows}")
    files = sorted(os.listdir(ckpt))
    check(
        "metadata.json" in files and any(f.endswith(".distcp") for f in files), f"megatron's torch_dist files ({files})"
    )
    check(
        len(rows) == WORLD and all(r.get("equal") for r in rows),
        f"the whole weight loaded on both data-parallel ranks, every byte as saved by the 2 TP ranks ({rows})",
    )


def case_megatron_flash(args, out):
    """xtimer's Megatron strategy: save TP 2 x DP 2 (4 ranks), then TP 1 x DP 4 from disk in the
    same job; a second job (2 ranks) loads TP 2 x DP 1 from memory and from disk."""
    ckpt = os.path.join(out, "ckpt", "iter_0000001")
    shm, empty = os.path.join(out, "shm"), os.path.join(out, "shm-empty")
    for d in (ckpt, shm, empty):
        os.makedirs(d)
    script = os.path.join(HERE, "megatron_flash.py")
    rows = {}
    for mode, n in (("save", 4), ("load", 2)):
        env = agent_env(
            SIMGPU_DIR=args.simgpu,
            SIMGPU_DEVICES=str(n),
            MODE=mode,
            XTIMER_CKPT_SHM_DIR=shm,
            SHM_EMPTY=empty,
            PYTHONPATH=args.pypath,
            OMP_NUM_THREADS="1",
        )
        cmd = [os.path.join(ROOT, "scripts", "simgpu.sh"), args.peers.torchrun, "--standalone"]
        cmd += ["--nproc-per-node", str(n), script, ckpt]
        with open(os.path.join(out, f"{mode}.log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=500).returncode
        if not check(rc == 0, f"{mode} on {n} ranks: every rank exits 0 (exit {rc}; {out}/{mode}.log)"):
            return
        rows[mode] = load_json(os.path.join(out, "ckpt", f"{mode}.json")) or []
        if not check(len(rows[mode]) == n, f"{mode}: a row per rank ({rows[mode]})"):
            return
    save, load = rows["save"], rows["load"]
    r0 = save[0]
    print(
        f"figure: megatron-flash blocked {[r['blocked_s'] for r in save]} s, written {[r['written_s'] for r in save]} s"
    )
    check(
        r0.get("strategy") == "xtimer.ckpt.megatron.FlashSaveStrategy",
        f"picked by name from megatron's registry ({r0.get('strategy')})",
    )
    check(r0.get("truth_covered"), f"the gathered truth covers every tensor whole ({r0.get('truth_keys')} tensors)")
    check(
        all("metadata.json" not in r["at_return"] and ".metadata" not in r["at_return"] for r in save),
        f"nothing says complete when the save returns ({[r['at_return'] for r in save]})",
    )
    files = r0["files"]
    check(
        "metadata.json" in files
        and ".metadata" in files
        and "common.pt" in files
        and sum(f.endswith(".distcp") for f in files) == 4,
        f"megatron's torch_dist files after the request ran ({files})",
    )
    refused = [r.get("refused") for r in save]
    check(
        all(isinstance(x, str) and "\n" not in x and "tp_extra" in x for x in refused),
        f"a piece saved per TP rank is refused at TP 1 in one line naming it ({refused[0]})",
    )
    for rows_, name, source in (
        (save, "megatron_tp1", None),
        (save, "disk_tp1", {"memory": [], "disk": "all"}),
        (load, "memory_tp2", {"memory": [0, 1, 2, 3], "disk": []}),
        (load, "disk_tp2", {"memory": [], "disk": "all"}),
    ):
        got = [r[name] for r in rows_]
        secs = [r[name + "_s"] for r in rows_]
        print(f"figure: megatron-flash {name}: (shards, bytes) {[(g['shards'], g['bytes']) for g in got]}; {secs} s")
        check(
            all(g["shards"] > 0 and g["n_differ"] == 0 for g in got),
            f"{name}: every shard equal, byte for byte, to the save's ({[(g['shards'], g['differ']) for g in got]})",
        )
        check(
            all(g["iteration"] == 7 and g["extra"] == {"seed": 1234, "consumed": 640} for g in got),
            f"{name}: the common and extra state as saved ({[(g['iteration'], g['extra']) for g in got]})",
        )
        if source is not None:
            check(
                all(g.get("from") == source for g in got),
                f"{name}: read from {source} ({[g.get('from') for g in got]})",
            )


def case_ckpt(args, out):
    steps, crash = 20, 12
    ckpt = os.path.join(out, "ckpt")
    shm = os.path.join(out, "shm")
    os.makedirs(shm)
    job = Job(
        args,
        out,
        ["--steps", str(steps), "--ckpt", ckpt, "--crash-rank", "1", "--crash-step", str(crash)],
        env={
            "XTIMER_PYTHON": args.peers.python,
            "XTIMER_CKPT_SHM_DIR": shm,
            "PYTHONPATH": args.pypath,
        },
        launcher=[os.path.join(args.bin, "xtimer_run"), "--max-restarts", "1"],
    )
    try:
        if not finished(job, steps, 500):
            return
        saved = {(r["rank"], r["saved"]): r["digest"] for r in job.rows("saved") if r["restart"] == 0}
        loads = [r for r in job.rows("loaded") if r["restart"] == 1]
        check(len(loads) == WORLD, f"both workers of the second round loaded a checkpoint ({loads})")
        for r in loads:
            want = saved.get((r["rank"], r["loaded"]))
            check(
                r["loaded"] >= crash - 2 and want == r["digest"],
                f"rank {r['rank']}: resumed after step {r['loaded']} (crash at {crash}) with every byte of "
                f"parameters and AdamW state as saved ({r['digest']} vs {want})",
            )
        last = {r["rank"]: r["step"] for r in job.steps()}
        check(all(last.get(k) == steps - 1 for k in range(WORLD)), f"both ranks trained to the end ({last})")
        check(bool(glob.glob(os.path.join(ckpt, "*"))), "the disk saves are in the checkpoint folder")
    finally:
        job.kill()


def case_ckpt_fsdp(args, out):
    """FSDP2 on cuda under xtimer_run with FsdpShardCheckpointer (DLRover's FSDP API): rank 1
    is SIGKILLed at step 12; both workers resume from the shared-memory snapshots with every
    byte of their shards of the parameters and of AdamW's state as saved."""
    steps, crash = 20, 12
    ckpt, shm = os.path.join(out, "ckpt"), os.path.join(out, "shm")
    os.makedirs(shm)
    train = ["--steps", str(steps), "--wrap", "fsdp", "--ckpt", ckpt, "--crash-rank", "1", "--crash-step", str(crash)]
    job = Job(
        args,
        out,
        train,
        env={"XTIMER_CKPT_SHM_DIR": shm},
        launcher=[os.path.join(args.bin, "xtimer_run"), "--max-restarts", "1"],
        run=True,
    )
    try:
        if not finished(job, steps, 500):
            return
        saved = {(r["rank"], r["saved"]): r for r in job.rows("saved") if r["restart"] == 0}
        dcp_rows = {r["rank"]: r for r in job.rows("dcp_loaded") if r["restart"] == 1}
        sets = {r["rank"]: r for r in job.rows("set_state") if r["restart"] == 1}
        loads = [r for r in job.rows("loaded") if r["restart"] == 1]
        check(len(loads) == WORLD, f"both workers of the second round loaded a checkpoint ({len(loads)} loads)")
        # A memory save is skipped (on every rank) while a persister copies the last disk save:
        # the resume is from the newest step that every rank saved.
        newest = max((s for r, s in saved if all((k, s) in saved for k in range(WORLD))), default=None)
        for r in loads:
            rank, step = r["rank"], r["loaded"]
            want = saved.get((rank, step), {}).get("pieces", {})
            got = r.get("pieces", {})
            before = saved.get((rank, max((s for k, s in saved if k == rank and s < step), default=-1)), {})
            before = before.get("pieces", {})
            # The stamps make every floating-point piece differ from one save to the next, so
            # that equal bytes cannot be the memory's leftovers.
            same_as_before = sorted(n for n in want if n != "mask" and before.get(n) == want[n])
            check(
                bool(want) and bool(before) and not same_as_before,
                f"rank {rank}: every stamped piece of step {step} differs from the save before ({same_as_before[:4]})",
            )
            # Every piece: torch places none of them with a kernel here (tests/realtorch/README.md,
            # "What the bytes compare"), and the writes are checked below.
            compared = sorted(want)
            differ = [n for n in compared if got.get(n) != want[n]]
            check(
                step == newest and set(got) == set(want) and not differ,
                f"rank {rank}: resumed after step {step} (newest both saved; crash at {crash}), every byte of its "
                f"{len(compared)} pieces (parameter shards, buffers, AdamW state) as saved "
                f"(differ: {differ[:6]})",
            )
            mid = dcp_rows.get(rank, {}).get("pieces", {})
            differ_mid = [n for n in compared if mid.get(n) != want[n]]
            check(
                bool(mid) and not differ_mid,
                f"rank {rank}: already so after dcp.load, before set_state_dict (differ: {differ_mid[:6]})",
            )
            for what, rows in (("dcp.load", dcp_rows), ("set_state_dict", sets)):
                writes = rows.get(rank, {}).get("writes")
                print(f"figure: rank {rank}: {what} wrote device memory by {writes}")
                kernels = {k: v for k, v in (writes or {}).items() if not k.startswith("copy")}
                check(
                    writes is not None and not kernels,
                    f"rank {rank}: {what} placed everything on the device with copies, no kernel ({kernels})",
                )
            print(f"figure: rank {rank} loaded step {step} from {r.get('source')}")
            check(
                (r.get("source") or {}).get("memory") == list(range(WORLD)),
                f"rank {rank}: every saving rank's part came from shared memory ({r.get('source')})",
            )
        last = {r["rank"]: r["step"] for r in job.steps()}
        check(all(last.get(k) == steps - 1 for k in range(WORLD)), f"both ranks trained to the end ({last})")
        disk = glob.glob(os.path.join(ckpt, "*", ".metadata"))
        check(bool(disk), f"the disk saves are in the checkpoint folder in DCP's layout ({len(disk)} steps)")
    finally:
        job.kill()


def case_kill_in_collective(args, out):
    steps = 30
    job = Job(
        args,
        out,
        ["--steps", str(steps), "--stall-rank", "1", "--stall-step", "15", "--stall-seconds", "20"],
        env={"XTIMER_PYTHON": args.peers.python, "PYTHONPATH": args.pypath},
        launcher=[os.path.join(args.bin, "xtimer_run"), "--max-restarts", "1"],
    )
    try:
        # Rank 0 is in the all-reduce of step 15's backward, waiting for rank 1.
        row = wait_for(lambda: [r for r in job.steps(0) if r["step"] == 14 and r["restart"] == 0], 300, step=0.2)
        check(bool(row), "rank 0 reached step 14 (rank 1 stalls in step 15)")
        if not row:
            return
        time.sleep(3)
        os.kill(row[0]["pid"], signal.SIGKILL)
        t0 = time.time()
        again = wait_for(lambda: [r for r in job.steps(0) if r["restart"] == 1], 200, step=0.2)
        check(bool(again), "xtimer_run restarted the workers after rank 0 died inside the all-reduce")
        if again:
            print(f"figure: training again {again[0]['t'] - t0:.1f} s after the kill")
        finished(job, steps, 300)
        last = {r["rank"]: r["step"] for r in job.steps() if r["restart"] == 1}
        check(all(last.get(k) == steps - 1 for k in range(WORLD)), f"the second round trained to the end ({last})")
    finally:
        job.kill()


def profiler_job(args, out, window, steps):
    traces = os.path.join(out, "traces")
    os.makedirs(traces)
    job = Job(args, out, ["--steps", str(steps), f"--profile-steps={window}", "--profile-dir", traces])
    return job, traces


def check_trace(traces, rank):
    """The profiler's own Chrome trace: CUDA kernels with their real names."""
    trace = load_json(os.path.join(traces, f"rank{rank}.json")) or {}
    events = trace.get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    names = sorted({e.get("name", "") for e in kernels})
    check(
        any(n.startswith("void at::native::") for n in names),
        f"rank {rank}: the profiler's trace holds {len(kernels)} CUDA kernel events, {len(names)} names "
        f"(e.g. {[n[:70] for n in names[:2]]})",
    )


def log_lines(job, text):
    """The lines of the job's log that contain `text`, per process (xtimer[pid]: ...)."""
    with open(job.log_path, errors="replace") as f:
        lines = [line.strip() for line in f if text in line and line.startswith("xtimer[")]
    pids = {}
    for line in lines:
        pids.setdefault(line.split("]")[0], []).append(line)
    return pids


def check_still_timed(job, rank, steps):
    s = job.summary(rank)
    mm = ops(s, "matmul")
    launches = sum(o.get("launches", 0) for o in mm)
    check(bool(mm) and launches >= 4 * steps, f"rank {rank}: matmuls timed every step ({launches} launches)")
    ar = [o for o in ops(s, "collective") if o["name"] == "ncclAllReduce"]
    timed = sum(o.get("count", 0) for o in ar)
    check(timed >= 2 * steps, f"rank {rank}: DDP's all-reduces timed every step ({timed})")
    path = os.path.join(job.timeline, f"{rank:05d}-{WORLD:05d}.steps.jsonl")
    records = 0
    if os.path.exists(path):
        with open(path) as f:
            records = sum(1 for line in f if line.strip())
    check(records >= steps - 8, f"rank {rank}: step records go on ({records} lines for {steps} steps)")
    return s


def profiler_case(args, out, window, steps, said, unsaid, note_words, rank_checks=None):
    """torch.profiler over the steps of `window` ("A:B") under xtimer: the job ends, each rank logs
    `said` once and never `unsaid`, its trace has torch's kernels, the matmuls and all-reduces of
    every step are still timed, and its summary says event pairs with `note_words` in the note;
    then `rank_checks(rank, summary)`."""
    job, traces = profiler_job(args, out, window, steps)
    try:
        if not finished(job, steps, 500):
            return
        lines = log_lines(job, said)
        check(
            len(lines) == WORLD and all(len(v) == 1 for v in lines.values()),
            f"one '{said}' line per rank ({sum(len(v) for v in lines.values())} lines, {len(lines)} processes)",
        )
        check(not log_lines(job, unsaid), f"no '{unsaid}' line")
        for rank in range(WORLD):
            check_trace(traces, rank)
            s = check_still_timed(job, rank, steps)
            note = s.get("timing_note", "")
            check(
                s.get("timing_mode") == "event_pairs" and note_words in note,
                f"rank {rank}: event pairs, the note says why ({s.get('timing_mode')}, {note!r})",
            )
            if rank_checks:
                rank_checks(rank, s)
    finally:
        job.kill()


def case_profiler(args, out):
    """Later than xtimer: CUPTI handed over (no start-up fallback), torch's kernels from before it."""

    def kernels_before(rank, s):
        kernels = [o["name"] for o in ops(s, "kernel")]
        check(
            any(n.startswith("void at::native::") for n in kernels),
            f"rank {rank}: torch's kernels from before the hand-over, by name ({len(kernels)} classes)",
        )

    profiler_case(args, out, "10:14", 30, "CUPTI handed over", "CUPTI not used", "handed over", kernels_before)


def case_profiler_first(args, out):
    """Before xtimer's start: event pairs from the start, nothing to hand over."""
    profiler_case(args, out, "-1:5", 20, "CUPTI not used", "CUPTI handed over", "subscriber")


CASES = {
    "healthy": case_healthy,
    "megatron": case_megatron,
    "megatron-flash": case_megatron_flash,
    "slowdown-host": case_slowdown_host,
    "slowdown-data": case_slowdown_data,
    "desync": case_desync,
    "kill-in-collective": case_kill_in_collective,
    "ckpt": case_ckpt,
    "timings": case_timings,
    "timings-run": functools.partial(case_timings, run=True),
    "fsdp-timings": case_fsdp_timings,
    "hang": case_hang,
    "hang-run": functools.partial(case_hang, run=True),
    "ckpt-fsdp": case_ckpt_fsdp,
    "stuck-kernel": case_stuck_kernel,
    "slowdown": case_slowdown,
    "profiler": case_profiler,
    "profiler-first": case_profiler_first,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--pypath", default="")
    ap.add_argument("--seconds", type=float, default=240, help="healthy: how long the judge is watched")
    args = ap.parse_args()
    args.peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix=f"xtimer-realtorch-{args.case}-")
    started = time.time()
    CASES[args.case](args, out)
    print(f"{args.case}: {time.time() - started:.0f} s")
    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {out}")
        sys.exit(1)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
