#!/usr/bin/env python3
"""Flash checkpoint side by side, in one run: DLRover's DdpCheckpointer (under dlrover-run, whose
agent persists), ours (xtimer.ckpt.DdpCheckpointer under xtimer_run, whose node agent persists) and
torch.distributed.checkpoint.async_save (under torchrun), on the same state, one worker each.

For each: the time the training loop is blocked by a disk save, the time until that step is on
disk by the method's own account and until its files are synced (durable), and the time a
new job takes to load it. Before each method, os.sync(): none writes back another's files.
Prints a table and ratios (peer / ours: above 1, we are faster). ckpt_bench_worker.py says
exactly what is timed.

  bench_ckpt.py --peers DIR --bin BUILD/bin --pypath BUILD/lib/python [--size 1G] [--repeats 3]
               [--shm-dir /dev/shm]

Our segments go to a new folder in --shm-dir (a tmpfs, as DLRover's buffer in /dev/shm), removed at
the end, as are the buffers DLRover's agent leaves in /dev/shm. Also printed: the worker's CPU
seconds and page faults during a save, and each save's blocked time.

The suite runs it with --size 64M; docs/benchmarks.md's figures come from --size 1G.
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
from peers import base_env, dlrover_buffers_removed, dlrover_or_skip, run  # noqa: E402

WORKER = os.path.join(HERE, "ckpt_bench_worker.py")


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def launcher(args, peers, method):
    if method == "dlrover":
        return [peers.dlrover_run, "--standalone", "--nproc_per_node", "1", WORKER]
    if method == "xtimer":
        return [os.path.join(args.bin, "xtimer_run"), "--standalone", "--nproc-per-node", "1", WORKER]
    return [peers.torchrun, "--standalone", "--nproc-per-node", "1", WORKER]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--size", type=size_arg, default=size_arg("64M"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="keep the outputs here (default: a temporary folder, removed)")
    ap.add_argument(
        "--shm-dir",
        default="/dev/shm",
        help="where our segments go (a folder is made there and removed); DLRover's are in /dev/shm",
    )
    args = ap.parse_args()
    peers = dlrover_or_skip(args.peers)
    out = args.out or tempfile.mkdtemp(prefix="xtimer-peers-bench-ckpt-")
    os.makedirs(out, exist_ok=True)
    # Not under OUT: a folder on disk would make our "shared memory" a disk file's page cache,
    # written back to disk while the next save copies into it (DLRover's buffer is in /dev/shm).
    shm = tempfile.mkdtemp(prefix="xtimer-peers-bench-ckpt-", dir=args.shm_dir)
    with dlrover_buffers_removed():
        res, ok = {}, True
        try:
            for method in ("dlrover", "xtimer", "dcp"):
                for phase in ("save", "load"):
                    # Each starts with nothing of another's left to write back: DLRover's saves
                    # leave their files dirty in the page cache, written back while the next
                    # method's saves sync theirs.
                    os.sync()
                    env = base_env(
                        out,
                        args.pypath,
                        XTIMER_PYTHON=peers.python,
                        METHOD=method,
                        PHASE=phase,
                        SIZE=str(args.size),
                        REPEATS=str(args.repeats),
                        XTIMER_CKPT_SHM_DIR=shm,
                    )
                    rc, _, err = run(launcher(args, peers, method), env, out, f"{method}-{phase}", 900)
                    got = os.path.join(out, f"{method}-{phase}.json")
                    if rc != 0 or not os.path.exists(got):
                        print(f"FAIL {method} {phase}: exit {rc}\n{err[-3000:]}")
                        ok = False
                        continue
                    res.setdefault(method, {}).update(json.load(open(got)))
        finally:
            shutil.rmtree(shm, ignore_errors=True)
            if not args.out and ok:
                shutil.rmtree(out, ignore_errors=True)
    if not ok:
        sys.exit(1)

    def steady(xs):
        # The first saves also allocate and first touch the shared memory: DLRover's one buffer
        # on its first save, our two slots on the first two. Steady: the median from the third.
        return statistics.median(xs[2:]) if len(xs) > 2 else xs[-1]

    print(
        f"state: {args.size / 2**30:.3f} GiB of float32 in 16 tensors, {args.repeats} disk saves each "
        f"(the first, then the median from the third on)"
    )
    print(
        f"{'':24s} {'blocked first':>13s} {'blocked':>9s} {'on disk first':>13s} {'on disk':>9s} "
        f"{'durable first':>13s} {'durable':>9s} {'load':>8s}  loaded"
    )
    names = {"dlrover": "DLRover DdpCheckpointer", "xtimer": "xtimer DdpCheckpointer", "dcp": "DCP async_save"}
    for m in ("dlrover", "xtimer", "dcp"):
        r = res[m]
        print(
            f"{names[m]:24s} {r['blocked'][0]:12.3f}s {steady(r['blocked']):8.3f}s {r['on_disk'][0]:12.3f}s "
            f"{steady(r['on_disk']):8.3f}s {r['durable'][0]:12.3f}s {steady(r['durable']):8.3f}s {r['load']:7.3f}s  "
            f"step {r.get('loaded_step')} "
            f"{'intact' if r.get('loaded_ok') else 'WRONG'}"
        )
    print("a save's cost in the worker, steady (median from the third): CPU seconds, minor and major page faults")
    for m in ("dlrover", "xtimer"):
        c = res[m].get("save_cost")
        if c:
            cpu, minf, majf = (steady([row[i] for row in c]) for i in range(3))
            first = f"{c[0][0]:.3f}s {c[0][1]:.0f} {c[0][2]:.0f}"
            print(f"  {names[m]:24s} cpu {cpu:6.3f}s  minor {minf:8.0f}  major {majf:5.0f}   (first save: {first})")
    for m in ("dlrover", "xtimer", "dcp"):
        print(f"  {names[m]:24s} blocked per save: {' '.join(f'{b:.3f}' for b in res[m]['blocked'])}")
    x = res["xtimer"]
    for m in ("dlrover", "dcp"):
        r = res[m]
        print(
            f"ratio {names[m]} / ours: blocked {steady(r['blocked']) / steady(x['blocked']):.2f}, "
            f"on disk {steady(r['on_disk']) / steady(x['on_disk']):.2f}, "
            f"durable {steady(r['durable']) / steady(x['durable']):.2f}, load {r['load'] / x['load']:.2f}"
        )
    bad = [m for m in res if not res[m].get("loaded_ok")]
    if bad:
        print(f"FAIL the state loaded back is not the one saved: {bad}")
        sys.exit(1)


if __name__ == "__main__":
    main()
