#!/usr/bin/env python3
"""FSDP checkpoints side by side, in one run, on the same FSDP2 state (fully_shard, gloo, CPU,
NPROC ranks): xtimer.ckpt.fsdp.FsdpShardCheckpointer under xtimer_run, DLRover's FSDP flash
checkpoint engine under dlrover-run, torch.distributed.checkpoint.async_save under torchrun.
fsdp_bench_worker.py says exactly what is timed. Prints, per method, the time the loop is
blocked, the time until the step is on disk, the loop's slowdown meanwhile, and ratios: blocked
against a memcpy of the rank's state measured in the same run (the goal: at most 1.3), and each
peer against ours (above 1: we are faster).

  bench_ckpt_fsdp.py --peers DIR --bin BUILD/bin --pypath BUILD/lib/python [--dim 1024 --layers 8]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers import base_env, dlrover_or_skip, run  # noqa: E402

WORKER = os.path.join(HERE, "fsdp_bench_worker.py")
NAMES = {"xtimer": "xtimer FsdpShardCheckpointer", "dlrover": "DLRover FSDP engine", "dcp": "DCP async_save"}


def launcher(args, peers, method):
    n = str(args.nproc)
    if method == "dlrover":
        return [peers.dlrover_run, "--standalone", "--nproc_per_node", n, WORKER]
    if method == "xtimer":
        return [os.path.join(args.bin, "xtimer_run"), "--standalone", "--nproc-per-node", n, WORKER]
    return [peers.torchrun, "--standalone", "--nproc-per-node", n, WORKER]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    # One rank by default: DLRover's FSDP engine did not commit a save of 2 ranks on one node
    # in our run ("The number of ready shards is 1 != 2" until killed).
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--methods", default="xtimer,dlrover,dcp")
    ap.add_argument("--out", help="keep the outputs here (default: a temporary folder, removed)")
    args = ap.parse_args()
    peers = dlrover_or_skip(args.peers)
    out = args.out or tempfile.mkdtemp(prefix="xtimer-peers-bench-fsdp-")
    os.makedirs(out, exist_ok=True)
    # Snapshots go to a tmpfs, as in a job (/dev/shm); a folder on the disk would add the
    # kernel's writeback of the snapshot to the disk writes measured.
    shm = tempfile.mkdtemp(prefix="xtimer-bench-fsdp-", dir="/dev/shm" if os.path.isdir("/dev/shm") else out)
    res, ok = {}, True
    methods = args.methods.split(",")
    try:
        for method in methods:
            env = base_env(
                out,
                args.pypath,
                XTIMER_PYTHON=peers.python,
                METHOD=method,
                DIM=str(args.dim),
                LAYERS=str(args.layers),
                REPEATS=str(args.repeats),
                XTIMER_CKPT_SHM_DIR=shm,
            )
            rc, _, err = run(launcher(args, peers, method), env, out, method, 900)
            # The steps written (up to REPEATS x the state) are not kept: the disk may be small.
            shutil.rmtree(os.path.join(out, f"ckpt-{method}"), ignore_errors=True)
            got = os.path.join(out, f"{method}.json")
            if rc != 0 or not os.path.exists(got):
                print(f"FAIL {method}: exit {rc}\n{err[-3000:]}")
                ok = False
                continue
            res[method] = json.load(open(got))
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        if not args.out and ok:
            shutil.rmtree(out, ignore_errors=True)
    if not ok:
        sys.exit(1)

    def steady(xs):
        # The first saves also allocate and first touch shared memory (our two slots on the first
        # two, DLRover's buffer on the first): the median from the third on.
        return statistics.median(xs[2:]) if len(xs) > 2 else xs[-1]

    first = res[methods[0]]
    state = first["bytes_per_rank"] * args.nproc
    print(
        f"state: {state / 2**20:.0f} MiB (parameters + Adam moments) over {args.nproc} ranks, "
        f"{args.layers} x Linear({args.dim}, {args.dim}); {args.repeats} disk saves each (first; median from the third)"
    )
    print(
        f"{'':30s} {'memcpy':>8s} {'blocked first':>13s} {'blocked':>8s} {'/memcpy':>8s} {'on disk':>8s} "
        f"{'slowdown':>8s}"
    )
    for m in methods:
        r = res[m]
        print(
            f"{NAMES[m]:30s} {r['memcpy']:7.3f}s {r['blocked'][0]:12.3f}s {steady(r['blocked']):7.3f}s "
            f"{steady(r['blocked']) / r['memcpy']:8.2f} {steady(r['on_disk']):7.3f}s {steady(r['slowdown']):7.2f}x"
        )
    if "xtimer" in res:
        x = res["xtimer"]
        for m in methods:
            if m != "xtimer":
                r = res[m]
                print(
                    f"ratio {NAMES[m]} / ours: blocked {steady(r['blocked']) / steady(x['blocked']):.2f}, "
                    f"on disk {steady(r['on_disk']) / steady(x['on_disk']):.2f}"
                )


if __name__ == "__main__":
    main()
