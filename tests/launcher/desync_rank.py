#!/usr/bin/env python3
"""Ranks whose code takes another path (check_desync.py). Each step: clip_grads all-reduces
256 Ki floats, sync_grads all-reduces 256 Ki floats, gather_params all-gathers 16 Ki floats, the
tensor-parallel group (ranks 0-1, ranks 2-3) all-reduces its own size, and exchange_tokens sends
to and receives from every rank in one group (all-to-all-v). At --fault-step:
  skip: rank 2 skips clip_grads (the same size as sync_grads, its next call)
  size: rank 1's sync_grads all-reduces 128 Ki floats
  op:   rank 3's sync_grads all-gathers where the others all-reduce
  sub:  rank 3's tensor-parallel all-reduce has another size (only ranks 2-3 compare it)
  none: nothing; every rank finishes.

  desync_rank.py LIBPYCCL IDFILE --nproc 4 --fault skip [--steps 6] [--fault-step 2]
Without RANK in the environment it starts --nproc copies of itself as one node's ranks. Under
xtimer_run (TORCHELASTIC_RESTART_COUNT set) each round has its own id file and only the first
round has the fault.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

COUNT = 1 << 18


def fault(args, rank, step, kind, who):
    return args.fault == kind and rank == who and step == args.fault_step


def note(rank, step, what):
    # One write per line: the ranks share the log, and print() writes the newline apart.
    sys.stdout.write(json.dumps({"rank": rank, "step": step, what: time.time()}) + "\n")
    sys.stdout.flush()


def ok(rc, rank):
    # The collective is called on the line of each function below (its call site), this only
    # checks what it returned.
    if rc != 0:
        sys.exit(f"rank {rank}: collective failed")


def clip_grads(lib, args, rank, step):
    if fault(args, rank, step, "skip", 2):
        note(rank, step, "fault_at")
        return
    ok(lib.pyccl_collective(0, COUNT, 0), rank)


def sync_grads(lib, args, rank, step):
    if fault(args, rank, step, "size", 1):
        note(rank, step, "fault_at")
        ok(lib.pyccl_collective(0, COUNT // 2, 0), rank)
    elif fault(args, rank, step, "op", 3):
        note(rank, step, "fault_at")
        ok(lib.pyccl_collective(1, COUNT // 16, 0), rank)
    else:
        ok(lib.pyccl_collective(0, COUNT, 0), rank)


def gather_params(lib, rank):
    ok(lib.pyccl_collective(1, 1 << 14, 0), rank)


def tensor_parallel(lib, args, rank, step):
    count = 1000 if rank < 2 else 2000
    if fault(args, rank, step, "sub", 3):
        note(rank, step, "fault_at")
        count = 3000
    ok(lib.pyccl_collective(0, count, 1), rank)


def exchange_tokens(lib, rank, world):
    if lib.pyccl_exchange(rank, world, 512) != 0:
        sys.exit(f"rank {rank}: exchange failed")


def rank_main(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restart is not None:  # under xtimer_run: a new id per round, the fault in the first only
        args.idfile += f"-{restart}"
        if restart != "0":
            args.fault = "none"
    lib = ctypes.CDLL(args.lib)
    if lib.pyccl_init(rank, world, args.idfile.encode(), 1) != 0:
        sys.exit(f"rank {rank}: init failed")
    if lib.pyccl_split(rank // 2, world) != 0:
        sys.exit(f"rank {rank}: split failed")
    for step in range(args.steps):
        clip_grads(lib, args, rank, step)
        sync_grads(lib, args, rank, step)
        gather_params(lib, rank)
        tensor_parallel(lib, args, rank, step)
        exchange_tokens(lib, rank, world)
        time.sleep(args.step_time)
    note(rank, args.steps, "done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("idfile")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--fault", choices=["none", "skip", "size", "op", "sub"], default="none")
    ap.add_argument("--fault-step", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--step-time", type=float, default=0.05)
    args = ap.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    sys.exit(bad[0] if bad else 0)


if __name__ == "__main__":
    main()
