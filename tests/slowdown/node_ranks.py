#!/usr/bin/env python3
"""A stand-in for `torchrun --nproc-per-node N` on one simulated node of the slowdown scenarios:
starts N train_rank.py processes with RANK, WORLD_SIZE, LOCAL_RANK and SIMGPU_NODE set, waits for
them, and exits with the first non-zero exit status.

  node_ranks.py --nproc 4 --node-rank 1 --world 8 -- TRAIN_RANK_ARGS (LIB ID_DIR --control ...)
"""
import argparse
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--node-rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("lib")
    ap.add_argument("id_dir")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    rest = [a for a in args.rest if a != "--"]
    procs = []
    for local in range(args.nproc):
        rank = args.node_rank * args.nproc + local
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(args.world),
            LOCAL_RANK=str(local),
            SIMGPU_NODE=str(args.node_rank),
        )
        procs.append(
            subprocess.Popen(
                [
                    args.python,
                    os.path.join(HERE, "train_rank.py"),
                    args.lib,
                    str(rank),
                    str(args.world),
                    str(args.nproc),
                    args.id_dir,
                ]
                + rest,
                env=env,
            )
        )
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    sys.exit(bad[0] if bad else 0)


if __name__ == "__main__":
    main()
