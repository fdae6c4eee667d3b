#!/usr/bin/env python3
"""Megatron-Core checkpoints side by side, in one run, on the same state: xtimer's flash strategy
(xtimer.ckpt.megatron.FlashSaveStrategy) against megatron-core's own asynchronous save (its
default torch_dist strategy, TorchDistSaveShardedStrategy, through dist_checkpointing.save(...,
async_sharded_save=True) and megatron's AsyncCallsQueue, as Megatron-LM's --async-save does).
Real torch 2.15 and megatron-core 0.16.1 (.peers) on simulated GPUs: GPT with 2 layers,
tensor parallel over NPROC ranks, megatron's distributed optimizer (Adam), one step taken.

Per round, on every rank, the same sharded state dict made afresh each time (not timed):
  memcpy     the rank's shards copied device to host into buffers allocated and touched
             beforehand (the simulated device's copies are memcpy)
  mcore      megatron's own work in dist_checkpointing.save around the strategy (validation,
             common.pt), measured with a strategy that does nothing
  queue      megatron's AsyncCallsQueue starting a request that does nothing (its caller forks
             a process per request)
  xtimer     save(..., FlashSaveStrategy) and the request scheduled: blocked; until megatron's
             finalize ran (metadata.json written after every rank's files): to disk;
             xtimer_copy: the part of blocked spent in the strategy's plan and copy into shared
             memory (device -> pinned staging -> segment, with checksums); xtimer_strategy: all
             of the strategy's async_save; *_save: until dist_checkpointing.save returned (the
             rest of blocked is megatron's AsyncCallsQueue starting the request)
  megatron   the same with megatron's TorchDistSaveShardedStrategy
The two savers alternate in order from round to round; medians over the rounds after a first
(warm-up) round. Prints the ratios: xtimer's save / (memcpy + mcore) and, with the request started,
xtimer blocked / (memcpy + mcore + queue) (the goal: at most 1.3),
megatron / xtimer for blocked and to disk (above 1: xtimer is ahead).

  python3 tests/peers/bench_ckpt_megatron.py --peers .peers --pypath build/lib/python \\
      --simgpu build/lib/simgpu [--nproc 2 --hidden 1280 --rounds 4] [--persistent]

--persistent (megatron's persistent async worker, one spawned process, for both savers) needs a
real GPU: megatron's own request hands CUDA tensors to that worker through CUDA IPC, which the
simulated GPU does not support ("CUDA error: operation not supported").
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


sys.path.insert(0, os.path.join(ROOT, "tests", "realtorch"))
from megatron_flash import build  # noqa: E402  the test's model: GPT, 2 layers, megatron's optimizer


def worker(out, hidden, vocab, rounds, persistent):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue, AsyncRequest
    from megatron.core.dist_checkpointing.strategies.base import AsyncSaveShardedStrategy
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
    from xtimer.ckpt.megatron import FlashSaveStrategy

    class Nothing(AsyncSaveShardedStrategy):  # megatron's own work around a strategy
        def async_save(self, sharded_state_dict, checkpoint_dir):
            return AsyncRequest(None, (), [])

    rank, world = dist.get_rank(), dist.get_world_size()
    ddp, opt = build(world, hidden, vocab)
    fmt = {"distrib_optim_sharding_type": "fully_reshardable"}

    def state():
        model_sd = ddp.module.sharded_state_dict()
        return {"model": model_sd, "optimizer": opt.sharded_state_dict(model_sd, metadata=fmt), "iteration": 1}

    datas = [t.data for t in nested_values(state()) if isinstance(t, ShardedTensor) and t.data is not None]
    nbytes = sum(t.numel() * t.element_size() for t in datas)
    bufs = [torch.empty(t.shape, dtype=t.dtype).zero_() for t in datas]
    queue = AsyncCallsQueue(persistent=persistent)
    savers = {"xtimer": FlashSaveStrategy(), "megatron": TorchDistSaveShardedStrategy("torch_dist", 1)}
    names = (
        "memcpy",
        "mcore",
        "queue",
        "xtimer_blocked",
        "xtimer_strategy",
        "xtimer_copy",
        "xtimer_save",
        "xtimer_disk",
    )
    names += ("megatron_blocked", "megatron_save", "megatron_disk")
    times = {k: [] for k in names}

    def folder(name):
        d = os.path.join(out, name)
        if rank == 0:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        dist.barrier()
        return d

    def timed_save(name, n):
        d = folder(f"{name}_{n}")
        sd = state()
        dist.barrier()
        t0 = time.perf_counter()
        req = dist_checkpointing.save(sd, d, sharded_strategy=savers[name], async_sharded_save=True)
        times[f"{name}_save"].append(time.perf_counter() - t0)
        queue.schedule_async_request(req)
        blocked = time.perf_counter() - t0
        queue.maybe_finalize_async_calls(blocking=True)
        disk = time.perf_counter() - t0
        assert os.path.exists(os.path.join(d, "metadata.json"))
        return blocked, disk

    for n in range(rounds + 1):
        dist.barrier()
        t0 = time.perf_counter()
        for b, t in zip(bufs, datas):
            b.copy_(t)
        memcpy = time.perf_counter() - t0
        sd = state()
        d = folder(f"nothing_{n}")
        dist.barrier()
        t0 = time.perf_counter()
        dist_checkpointing.save(sd, d, sharded_strategy=Nothing("torch_dist", 1), async_sharded_save=True)
        mcore = time.perf_counter() - t0
        dist.barrier()
        t0 = time.perf_counter()
        queue.schedule_async_request(AsyncRequest(os.getpid, (), []))  # what starting any request costs
        started = time.perf_counter() - t0
        queue.maybe_finalize_async_calls(blocking=True)
        order = ("xtimer", "megatron") if n % 2 == 0 else ("megatron", "xtimer")
        got = {name: timed_save(name, n) for name in order}
        if n == 0:
            for name in savers:
                times[f"{name}_save"].pop()
            continue  # warm-up: the persister's start, first allocations
        times["memcpy"].append(memcpy)
        times["mcore"].append(mcore)
        times["queue"].append(started)
        for name, (blocked, disk) in got.items():
            times[f"{name}_blocked"].append(blocked)
            times[f"{name}_disk"].append(disk)
        times["xtimer_copy"].append(savers["xtimer"].last_save["copy_s"])
        times["xtimer_strategy"].append(savers["xtimer"].last_save["strategy_s"])
        for name in ("xtimer", "megatron"):
            if rank == 0:
                shutil.rmtree(os.path.join(out, f"{name}_{n - 1}"), ignore_errors=True)
    savers["xtimer"].wait()
    rows = [None] * world
    dist.all_gather_object(rows, {"rank": rank, "bytes": nbytes, "times": times})
    if rank == 0:
        with open(os.path.join(out, "bench.json"), "w") as f:
            json.dump(rows, f)
    dist.barrier()
    queue.close()
    dist.destroy_process_group()


def report(rows, rounds):
    """Per round, the slowest rank's time of each measure (the job waits for it); medians over
    the rounds, and the ratios of the medians."""
    keys = list(rows[0]["times"])
    per_round = {k: [max(r["times"][k][n] for r in rows) for n in range(rounds)] for k in keys}
    med = {k: statistics.median(v) for k, v in per_round.items()}
    mib = max(r["bytes"] for r in rows) / 2**20
    print(f"state per rank: {mib:.0f} MiB ({len(rows)} ranks, TP {len(rows)}); the slowest rank, median of {rounds}")
    for k in keys:
        print(f"  {k:18s} {med[k]:7.3f} s   rounds: {' '.join(f'{x:.3f}' for x in per_round[k])}")
    base = [m + c for m, c in zip(per_round["memcpy"], per_round["mcore"])]
    goal = [x / b for x, b in zip(per_round["xtimer_save"], base)]
    goal_q = [x / (b + q) for x, b, q in zip(per_round["xtimer_blocked"], base, per_round["queue"])]
    ahead = [m / x for m, x in zip(per_round["megatron_blocked"], per_round["xtimer_blocked"])]
    disk = [m / x for m, x in zip(per_round["megatron_disk"], per_round["xtimer_disk"])]
    for name, v in (
        ("xtimer save / (memcpy + megatron's own work)", goal),
        ("xtimer blocked, request started / (memcpy + megatron's own work + queue)", goal_q),
        ("megatron async blocked / xtimer blocked", ahead),
        ("megatron async to disk / xtimer to disk", disk),
    ):
        print(f"ratio {name}: {statistics.median(v):.2f} (rounds: {' '.join(f'{x:.2f}' for x in v)})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True, help="the peer environment (.peers: torch 2.15)")
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=1280)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--persistent",
        action="store_true",
        help="megatron's persistent async worker (one process) instead of a fork per save",
    )
    ap.add_argument("--out", help="keep the outputs here (default: a temporary folder, removed)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.hidden, args.vocab, args.rounds, args.persistent)
        return
    sys.path.insert(0, HERE)
    from peers import peers_or_skip

    peers = peers_or_skip(args.peers)
    out = args.out or tempfile.mkdtemp(prefix="xtimer-bench-megatron-")
    os.makedirs(out, exist_ok=True)
    shm = tempfile.mkdtemp(prefix="xtimer-bench-megatron-", dir="/dev/shm" if os.path.isdir("/dev/shm") else out)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.path.abspath(args.pypath),
        SIMGPU_DIR=os.path.abspath(args.simgpu),
        SIMGPU_DEVICES=str(args.nproc),
        XTIMER_CKPT_SHM_DIR=shm,
        OMP_NUM_THREADS="1",
    )
    cmd = [os.path.join(ROOT, "scripts", "simgpu.sh"), peers.torchrun, "--standalone"]
    cmd += ["--nproc-per-node", str(args.nproc), os.path.abspath(__file__), "--worker", out]
    cmd += ["--hidden", str(args.hidden), "--vocab", str(args.vocab), "--rounds", str(args.rounds)]
    cmd += ["--peers", args.peers, "--pypath", args.pypath, "--simgpu", args.simgpu]
    cmd += ["--persistent"] if args.persistent else []
    try:
        with open(os.path.join(out, "job.log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            print(f"the benchmark job failed (exit {rc}); see {out}/job.log")
            sys.exit(1)
        with open(os.path.join(out, "bench.json")) as f:
            rows = json.load(f)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    report(rows, args.rounds)
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":  # megatron's async caller starts processes that import this file
    main()
