#!/usr/bin/env python3
"""Flash checkpoint with CUDA tensors, on a real GPU (not run in CI; needs torch with CUDA).

For --size bytes of CUDA tensors (default 8 GiB), in steady state (both slots written once):
  the time save_checkpoint(MEMORY) blocks (device -> pinned staging -> shared memory, overlapped)
  against the device-to-host copy time of the same bytes into one pinned buffer (the floor of any
  save that gets the bytes off the GPU), and against a pageable `.cpu()` copy.

    PYTHONPATH=build/lib/python python3 tests/gpu/ckpt_gpu_bench.py --size 8G

Needs about 2.3 x --size free in the shared-memory folder and --size of pinned host memory.
Prints figures and ratios; exits 1 only if something does not work (or the data differs).
"""
import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import torch

from xtimer.ckpt import Checkpointer, StorageType


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)i?B?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s}")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def make_state(total, device):
    state, left, i = {"model": {}, "optimizer": {}}, total, 0
    sizes = [256 << 20, 64 << 20, 16 << 20, 1 << 20]
    while left > 0:
        n = min(sizes[i % len(sizes)], left)
        dtype = torch.bfloat16 if i % 2 == 0 else torch.float32
        t = torch.randn(max(1, n // (2 if dtype == torch.bfloat16 else 4)), device=device).to(dtype)
        (state["model"] if i % 2 == 0 else state["optimizer"])[f"p{i}"] = t
        left -= t.numel() * t.element_size()
        i += 1
    return state


def leaves(state):
    return list(state["model"].values()) + list(state["optimizer"].values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("8G"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ckpt_gpu_bench: torch has no CUDA device here", file=sys.stderr)
        return 1
    dev = torch.device("cuda", torch.cuda.current_device())
    free = shutil.disk_usage(args.shm_dir).free
    if free < 2.3 * args.size:
        print(
            f"ckpt_gpu_bench: {args.shm_dir} has {free / 2**30:.1f} GiB free, needs about "
            f"{2.3 * args.size / 2**30:.1f} GiB (use --shm-dir or a smaller --size)",
            file=sys.stderr,
        )
        return 1
    state = make_state(args.size, dev)
    ts = leaves(state)
    total = sum(t.numel() * t.element_size() for t in ts)
    print(
        f"{torch.cuda.get_device_name(dev)}; {len(ts)} CUDA tensors, {total / 2**30:.2f} GiB; "
        f"{os.cpu_count()} cores"
    )

    # Baselines: device -> one pinned buffer (async copies, one sync), and pageable .cpu().
    pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    d2h = []
    for _ in range(args.repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        off = 0
        for t in ts:
            n = t.numel() * t.element_size()
            pinned[off : off + n].copy_(t.reshape(-1).view(torch.uint8), non_blocking=True)
            off += n
        torch.cuda.synchronize()
        d2h.append(time.perf_counter() - t0)
    d2h_s = min(d2h[1:])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for t in ts:
        t.cpu()
    pageable_s = time.perf_counter() - t0
    del pinned

    root = tempfile.mkdtemp(prefix="xtimer-ckpt-gpubench-")
    shm = tempfile.mkdtemp(prefix="xtimer-ckpt-gpubench-", dir=args.shm_dir)
    try:
        c = Checkpointer(os.path.join(root, "ckpt"), shm_dir=shm, copy_threads=args.threads, saver=False)
        for step in (1, 2):
            c.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
        blocking = []
        for step in range(3, 3 + args.repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            assert c.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
            blocking.append(time.perf_counter() - t0)
        save_s = statistics.median(blocking)
        step, got = c.load_checkpoint()
        ok = step == 2 + args.repeats and all(
            torch.equal(
                a.view(torch.uint8) if a.element_size() == 1 else a.reshape(-1).view(torch.int16),
                b.reshape(-1).view(torch.int16),
            )
            for a, b in zip(ts, leaves(got))
        )
        c.close()
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    gb = total / 1e9
    print(f"device->pinned copy (one buffer)  : {d2h_s * 1e3:9.1f} ms  ({gb / d2h_s:6.2f} GB/s)")
    print(f"device->pageable .cpu()           : {pageable_s * 1e3:9.1f} ms  ({gb / pageable_s:6.2f} GB/s)")
    print(
        f"save_checkpoint(MEMORY) blocking  : {save_s * 1e3:9.1f} ms  ({gb / save_s:6.2f} GB/s; "
        f"runs {', '.join(f'{b * 1e3:.1f}' for b in blocking)} ms)"
    )
    print(f"RATIO memory save / device->pinned copy = {save_s / d2h_s:6.2f}")
    print(f"RATIO pageable .cpu() / memory save     = {pageable_s / save_s:6.2f}")
    print(f"loaded back bit-identical: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
