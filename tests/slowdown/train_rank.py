#!/usr/bin/env python3
"""One rank of the slowdown scenarios: a training loop on the simulated runtime. Each step takes a
batch from a DataLoader (torch's, with --torch), prepares it, runs the GPU step (train_lib.cc:
GEMMs, kernels, a node all-gather, the job's all-reduces, a wait), and every --ckpt-every steps
saves a "checkpoint" (a pause on every rank). It knows nothing of xtimer.

Faults come from the control file (--control, the simulated runtime's SIMGPU_CONTROL), re-read
every 0.2 s; lines whose selector (all, rank=N, node=N) matches this rank apply, later lines win:
  host_ms=N     sleep N ms per step in straggle_in_preprocessing() (a host-side straggler)
  gc_objects=N  keep N objects alive and collect garbage every step (GC pauses)
  data_ms=N     each sample of the dataset takes N ms more to load (a slow DataLoader)
  stop=1        every rank stops after the current step (also after --seconds)
(gpu_factor and net_gbps in the same file are the simulated runtime's.)

Prints one JSON line when it starts training and when it ends.

With --flash-ckpt DIR the loop keeps a stand-in for a model (4 KiB that every step derives from the
last) in xtimer.ckpt's flash checkpoint (replicated, as DDP's): a memory save every
--flash-ckpt-every steps ({"rank", "saved": STEP, "sha"}), and at start the newest checkpoint is
loaded and the loop goes on after its step ({"rank", "start_step": STEP, "sha"} of what was
loaded, 0 and "" when none; then {"rank", "first_step": STEP} once the first step is done).

  train_rank.py LIB RANK WORLD NODE_SIZE ID_DIR --control FILE --seconds S [--torch] [--progress FILE]
                [--flash-ckpt DIR [--flash-ckpt-every N]]
"""
import argparse
import ctypes
import gc
import json
import os
import sys
import time


class Faults:
    KEYS = ("host_ms", "gc_objects", "data_ms", "stop")

    def __init__(self, path, rank, node):
        self.path, self.rank, self.node = path, rank, node
        self.values = dict.fromkeys(self.KEYS, 0)
        self.stamp = None
        self.next_check = 0

    def refresh(self):
        now = time.monotonic()
        if now < self.next_check or not self.path:
            return
        self.next_check = now + 0.2
        try:
            st = os.stat(self.path)
        except OSError:
            self.values = dict.fromkeys(self.KEYS, 0)
            return
        if (st.st_mtime_ns, st.st_size) == self.stamp:
            return
        self.stamp = (st.st_mtime_ns, st.st_size)
        values = dict.fromkeys(self.KEYS, 0)
        with open(self.path) as f:
            for line in f:
                words = line.split("#")[0].split()
                selectors = [w for w in words if w == "all" or w.startswith(("rank=", "node="))]
                if not selectors or not all(
                    w == "all" or w == f"rank={self.rank}" or w == f"node={self.node}" for w in selectors
                ):
                    continue
                for w in words:
                    key, _, value = w.partition("=")
                    if key in values:
                        values[key] = float(value)
        self.values = values

    def __getitem__(self, key):
        return self.values[key]


class Samples:
    """A map-style dataset: each sample costs a little host time (data_ms more under the fault)."""

    def __init__(self, faults, torch=None):
        self.faults, self.torch = faults, torch

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        time.sleep((1 + self.faults["data_ms"]) / 1000)
        row = [float((i * 7 + k) % 13) for k in range(64)]
        return self.torch.tensor(row) if self.torch else row


def plain_loader(dataset, batch_size):
    i = 0
    while True:
        yield [dataset[i + k] for k in range(batch_size)]
        i += batch_size


def straggle_in_preprocessing(ms):
    time.sleep(ms / 1000)


def prepare(batch):
    return len(batch)


def save_checkpoint(seconds):
    time.sleep(seconds)


class FlashState:
    """The model stand-in in xtimer.ckpt: `step` steps done, `w` what they made (numpy, so the
    save is the core's copy into shared memory, not the tree's JSON)."""

    def __init__(self, rank, folder, every):
        if "torch" not in sys.modules:
            sys.modules["torch"] = None  # no torch here: xtimer.ckpt stays on its NumPy path
        import hashlib

        import numpy
        from xtimer.ckpt import Checkpointer

        self.rank, self.every, self.hashlib, self.np = rank, every, hashlib, numpy
        self.ckpt = Checkpointer(folder, replicated=True)
        self.step, state = self.ckpt.load_checkpoint()
        self.w = numpy.zeros(4096, dtype=numpy.uint8) if state is None else state["w"]
        if state is not None and state["step"] != self.step:
            sys.exit(f"rank {rank}: checkpoint of step {self.step} holds step {state['step']}")
        sha = self.sha() if state is not None else ""
        print(json.dumps({"rank": rank, "start_step": self.step, "sha": sha}), flush=True)

    def sha(self):
        return self.hashlib.sha256(self.w.tobytes()).hexdigest()[:16]

    def after(self, step):
        """Step `step` is done: the state moves on, and is saved every `every` steps."""
        digest = self.hashlib.sha256(self.w.tobytes() + step.to_bytes(8, "little")).digest()
        self.w = self.np.frombuffer(digest * 128, dtype=self.np.uint8).copy()
        if step % self.every == 0:
            from xtimer.ckpt import StorageType

            if self.ckpt.save_checkpoint(step, {"step": step, "w": self.w}, storage_type=StorageType.MEMORY):
                print(json.dumps({"rank": self.rank, "saved": step, "sha": self.sha()}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("rank", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("node_size", type=int)
    ap.add_argument("id_dir")
    ap.add_argument("--control", default="")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--torch", action="store_true", help="torch.utils.data.DataLoader (Debian's CPU torch)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--ckpt-seconds", type=float, default=0.6)
    ap.add_argument("--grad-mib", type=int, default=4)
    ap.add_argument("--gemm", type=int, default=8192)
    ap.add_argument("--progress", default="", help="a file rewritten every 10 steps: the steps done so far")
    ap.add_argument("--flash-ckpt", default="", help="xtimer.ckpt's folder: resume from it, save into it")
    ap.add_argument("--flash-ckpt-every", type=int, default=10)
    args = ap.parse_args()
    if args.flash_ckpt_every < 1:
        sys.exit(f"--flash-ckpt-every takes a number of steps of at least 1, not {args.flash_ckpt_every}")
    node = args.rank // args.node_size
    faults = Faults(args.control, args.rank, node)
    torch = None
    if args.torch:
        import torch
        import torch.utils.data
    dataset = Samples(faults, torch)
    if torch:
        loader = iter(torch.utils.data.DataLoader(dataset, batch_size=args.batch, num_workers=0))
    else:
        loader = plain_loader(dataset, args.batch)
    lib = ctypes.CDLL(args.lib)  # releases the GIL during calls, like torch's C++ code
    rc = lib.tl_init(args.rank, args.world, args.node_size, args.id_dir.encode(), args.grad_mib, args.gemm)
    if rc != 0:
        sys.exit(f"rank {args.rank}: tl_init failed ({rc})")
    heap = []
    flash = FlashState(args.rank, args.flash_ckpt, args.flash_ckpt_every) if args.flash_ckpt else None
    print(json.dumps({"rank": args.rank, "training_at": time.time()}), flush=True)
    end = time.monotonic() + args.seconds
    step = start = flash.step if flash else 0
    while True:
        faults.refresh()
        batch = next(loader)
        prepare(batch)
        if faults["host_ms"] > 0:
            straggle_in_preprocessing(faults["host_ms"])
        want = int(faults["gc_objects"])
        if want > 0:
            if len(heap) < want:
                heap.extend({"i": i, "next": None} for i in range(want - len(heap)))
            gc.collect()
        elif heap:
            heap = []
        stop = lib.tl_step(1 if time.monotonic() >= end or faults["stop"] > 0 else 0)
        if stop < 0:
            sys.exit(f"rank {args.rank}: step {step} failed")
        step += 1
        if flash:
            if step == start + 1:
                print(json.dumps({"rank": args.rank, "first_step": step}), flush=True)
            flash.after(step)
        if args.progress and (step - start) % 10 == 0:
            with open(args.progress + ".tmp", "w") as f:
                json.dump({"steps": step - start, "t": time.time()}, f)
            os.replace(args.progress + ".tmp", args.progress)
        if stop:
            break  # every rank stops after the same step
        if args.ckpt_every > 0 and step % args.ckpt_every == 0:
            save_checkpoint(args.ckpt_seconds)
    print(json.dumps({"rank": args.rank, "done": True, "steps": step - start}), flush=True)


if __name__ == "__main__":
    main()
