#!/usr/bin/env python3
"""One rank of the 4-rank hang check (check_hang.py). Every rank runs training steps whose
gradients are allreduced; the rank named by --stuck-rank sleeps in load_batch before its
allreduce of step --stuck-step, so the others wait for it inside NCCL (with --stuck-kernel-ms,
after launching a kernel that runs that long).

  hang_rank.py LIBPYCCL RANK WORLD IDFILE --stuck-rank 2 --stuck-step 3 [--sleep 30]
"""
import argparse
import ctypes
import json
import sys
import time


def load_dataset(rank, args):
    if rank == args.stuck_rank and args.stuck_before_init:
        time.sleep(args.sleep)  # still reading its data while the others set up the communicator


def load_batch(lib, rank, step, args):
    if rank == args.stuck_rank and step == args.stuck_step and not args.stuck_before_init:
        if args.stuck_kernel_ms:
            # A kernel that does not finish (a deadlocked custom kernel), launched before the sleep.
            if lib.pyccl_launch_kernel(args.stuck_kernel_ms) != 0:
                sys.exit(f"rank {rank}: kernel launch failed")
            print(json.dumps({"rank": rank, "kernel_at": time.time()}), flush=True)
        time.sleep(args.sleep)  # the data loader hangs on this rank
    return [step] * 4


def all_reduce_grads(lib, rank, step):
    print(json.dumps({"rank": rank, "step": step, "allreduce_at": time.time()}), flush=True)
    if lib.pyccl_allreduce() != 0:
        sys.exit(f"rank {rank}: allreduce failed")


def train_step(lib, rank, step, args):
    batch = load_batch(lib, rank, step, args)
    time.sleep(args.step_time)
    all_reduce_grads(lib, rank, step)
    return sum(batch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("rank", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("idfile")
    ap.add_argument("--stuck-rank", type=int, default=-1)
    ap.add_argument("--stuck-step", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sleep", type=float, default=30)
    ap.add_argument("--step-time", type=float, default=0, help="seconds of (host) work per step")
    ap.add_argument(
        "--stuck-kernel-ms",
        type=int,
        default=0,
        help="the stuck rank first launches a kernel that runs this long, then sleeps",
    )
    ap.add_argument(
        "--stuck-before-init",
        action="store_true",
        help="the stuck rank sleeps in load_dataset before any CUDA or NCCL call",
    )
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)  # releases the GIL during calls, like torch's C++ code
    load_dataset(args.rank, args)
    print(json.dumps({"rank": args.rank, "init_at": time.time()}), flush=True)
    if lib.pyccl_init(args.rank, args.world, args.idfile.encode(), 16) != 0:
        sys.exit(f"rank {args.rank}: init failed")
    for step in range(args.steps):
        train_step(lib, args.rank, step, args)
    print(json.dumps({"rank": args.rank, "done": True}), flush=True)


if __name__ == "__main__":
    main()
