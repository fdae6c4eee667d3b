#!/usr/bin/env python3
"""Times consecutive disk saves of one Checkpointer: how long each background persist takes.

    PYTHONPATH=build/lib/python /usr/bin/python3 tests/ckpt/persist_steps.py [--size-gib 2] [--steps 3]

Written to look at the first persists from each of the two memory slots, which are slower than
the later ones on the development VM (README, "Measured"). Not part of the test suite.
"""
import argparse
import os
import shutil
import tempfile
import time

import torch
from xtimer.ckpt import Checkpointer, StorageType

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--size-gib", type=float, default=2)
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()
n = int(args.size_gib * 2**30 / 4 / 128)
state = {f"t{i}": torch.randn(n) for i in range(128)}
root, shm = tempfile.mkdtemp(), tempfile.mkdtemp(dir="/dev/shm")
try:
    c = Checkpointer(os.path.join(root, "ckpt"), shm_dir=shm, saver_idle_exit=30, keep=1)
    for step in (1, 2):  # both memory slots filled, as in a running job
        c.save_checkpoint(step, state, storage_type=StorageType.MEMORY)
    for step in range(3, 3 + args.steps):
        t0 = time.perf_counter()
        c.save_checkpoint(step, state, storage_type=StorageType.DISK)
        t1 = time.perf_counter()
        c.wait()
        print(
            f"step {step}: blocking save {t1 - t0:.2f} s, background persist {time.perf_counter() - t1:.2f} s",
            flush=True,
        )
    c.close()
finally:
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(shm, ignore_errors=True)
