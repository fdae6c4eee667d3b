#!/usr/bin/env python3
"""A stand-in for `torchrun --nproc-per-node N` on one simulated node: starts N rank processes
(tests/preload/hang_rank.py) with RANK, WORLD_SIZE and LOCAL_RANK set, waits for them, and exits
with the first non-zero exit status (like torchrun without restarts).

  node_ranks.py --nproc 4 --node-rank 1 --world 8 --idfile F -- HANG_RANK_ARGS...
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
    ap.add_argument("--lib", required=True)
    ap.add_argument("--idfile", required=True)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    rest = [a for a in args.rest if a != "--"]
    procs = []
    for local in range(args.nproc):
        rank = args.node_rank * args.nproc + local
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(local))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "..", "preload", "hang_rank.py"),
                    args.lib,
                    str(rank),
                    str(args.world),
                    args.idfile,
                ]
                + rest,
                env=env,
            )
        )
    # A terminated launcher terminates its ranks, as torchrun does.
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    sys.exit(bad[0] if bad else 0)


if __name__ == "__main__":
    main()
