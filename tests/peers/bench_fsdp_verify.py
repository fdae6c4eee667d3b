#!/usr/bin/env python3
"""What verifying the checksums of a step's files costs a FsdpShardCheckpointer load: one rank
(gloo, CPU) saves SIZE of tensors to disk (the persister writes DCP's files and records their
checksums), then loads that step from disk alone (no snapshot in memory) REPEATS times with
verify_files=True and with verify_files=False, alternating, into the same preallocated state.
Prints the median of each, their ratio, the check before the load alone (get_storage_reader:
kinds, sizes, checksums) and the checksum's rate. The files are in the page cache (just written):
the check reads each file once more than DCP's reader does, so on a cold cache that read brings
them in for DCP's. Nothing is asserted on time; it fails only if a load returns other values.

  bench_fsdp_verify.py --peers DIR --pypath BUILD/lib/python [--size 1G --repeats 5]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers import base_env, free_port, peers_or_skip  # noqa: E402

WORKER = r"""
import json, os, statistics, sys, time, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
import xtimer.ckpt.fsdp as fsdp
from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType
torch.set_num_threads(1)
dist.init_process_group("gloo")
OUT, size, repeats = os.environ["OUT"], int(os.environ["SIZE"]), int(os.environ["REPEATS"])
n = 8  # tensors of size / 8 bytes each
per = size // n // 4
torch.manual_seed(0)
state = {"w%d" % i: torch.randn(per) for i in range(n)}
state["step"] = 1
ck = FsdpShardCheckpointer(os.path.join(OUT, "ckpt"), shm_dir=os.environ["SHM"])
t = time.perf_counter()
ck.save_checkpoint(1, state, storage_type=StorageType.DISK)
ck.wait_latest_checkpoint(600)
while not os.path.exists(os.path.join(OUT, "ckpt", "1", ".metadata")):
    time.sleep(0.05)
on_disk = time.perf_counter() - t
ck.close()
for f in os.listdir(os.environ["SHM"]):  # the snapshot's memory back; the load reads the disk
    os.unlink(os.path.join(os.environ["SHM"], f))

class NoPersister:  # a load starts the rank's persister; its start is not what is measured
    rank, step = 0, -1
    def taken(self): return True
    def wait_taken(self): pass
    def close(self): pass
fsdp._start_persister = lambda owner, r: NoPersister()
target = {k: torch.empty_like(v) for k, v in state.items() if k != "step"}
times = {True: [], False: []}
checks = {True: [], False: []}
empty = os.path.join(OUT, "shm-empty")
os.makedirs(empty, exist_ok=True)
for r in range(repeats):
    for verify in ((True, False) if r % 2 == 0 else (False, True)):
        for v in target.values():
            v.zero_()
        sd = dict(target, step=0)
        c = FsdpShardCheckpointer(os.path.join(OUT, "ckpt"), shm_dir=empty, verify_files=verify)
        t0 = time.perf_counter()
        reader = c.get_storage_reader()
        t1 = time.perf_counter()
        dcp.load(sd, storage_reader=reader)
        t2 = time.perf_counter()
        c.close()
        if sd["step"] != 1 or not all(torch.equal(sd[k], state[k]) for k in target):
            sys.exit("the load returned other values")
        times[verify].append(t2 - t0)
        checks[verify].append(t1 - t0)
step_dir = os.path.join(OUT, "ckpt", "1")
nbytes = sum(os.path.getsize(os.path.join(step_dir, f)) for f in os.listdir(step_dir) if f.endswith(".distcp"))
json.dump({"on_disk": on_disk, "times": {str(k): v for k, v in times.items()},
           "checks": {str(k): v for k, v in checks.items()}, "bytes": nbytes},
          open(os.path.join(OUT, "result.json"), "w"))
"""


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--bin")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix="xtimer-peers-bench-fsdp-verify-")
    shm = tempfile.mkdtemp(prefix="xtimer-bench-fsdp-verify-", dir="/dev/shm" if os.path.isdir("/dev/shm") else out)
    try:
        env = base_env(out, args.pypath, SIZE=str(parse_size(args.size)), REPEATS=str(args.repeats), SHM=shm)
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        p = subprocess.run(
            [peers.python, "-c", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if p.returncode != 0:
            print(p.stdout[-3000:])
            print(f"the benchmark failed (exit {p.returncode})")
            sys.exit(1)
        r = json.load(open(os.path.join(out, "result.json")))
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    gib = r["bytes"] / (1 << 30)
    on, off = med(r["times"]["True"]), med(r["times"]["False"])
    con, coff = med(r["checks"]["True"]), med(r["checks"]["False"])
    print(f"step of {gib:.2f} GiB in .distcp files, 1 rank, written by the persister in {r['on_disk']:.2f} s")
    print(f"load with verify_files=True : median {on:.3f} s  ({', '.join(f'{x:.3f}' for x in r['times']['True'])})")
    print(f"load with verify_files=False: median {off:.3f} s  ({', '.join(f'{x:.3f}' for x in r['times']['False'])})")
    print(f"ratio verified / not verified: {on / off:.2f}")
    print(
        f"check before the load (get_storage_reader): {con:.3f} s verified, {coff:.3f} s without checksums; "
        f"checksums at {gib / max(con - coff, 1e-9):.1f} GiB/s"
    )


if __name__ == "__main__":
    main()
