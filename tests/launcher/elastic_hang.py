#!/usr/bin/env python3
"""One worker of xtimer_run's hang check: hang_rank.py's training loop on the simulated NCCL,
with its rank and world from torchrun's environment. In the first round (restart 0) rank
--stuck-rank sleeps in load_batch before step 3's allreduce; after the restart nobody does.

  elastic_hang.py LIBPYCCL OUT_DIR --stuck-rank R
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
import hang_rank  # noqa: E402

lib, out, _, stuck = sys.argv[1:5]
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
idfile = os.path.join(out, f"nccl-id-{restart}")
sys.argv = [
    "hang_rank.py",
    lib,
    os.environ["RANK"],
    os.environ["WORLD_SIZE"],
    idfile,
    "--stuck-rank",
    stuck if restart == 0 else "-1",
    "--stuck-step",
    "3",
    "--steps",
    "8",
    "--sleep",
    "600",
    "--step-time",
    "0.05",
]
hang_rank.main()
