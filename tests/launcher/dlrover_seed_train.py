"""A worker for the seed's dlrover-run command lines (tests/launcher/check_run.py seed-*): gloo,
init_process_group() from torchrun's environment, three allreduces, and one JSON line in
$OUT/seed.jsonl with its rank, the world, the allreduced value and the arguments it was given
(the training script's own flags, which xtimer_run must pass on untouched)."""
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(4) * (rank + 1)
    for _ in range(3):
        dist.all_reduce(t)
    with open(os.path.join(os.environ["OUT"], "seed.jsonl"), "a") as f:
        f.write(
            json.dumps(
                {
                    "rank": rank,
                    "world": world,
                    "sum": float(t[0]),
                    "argv": sys.argv[1:],
                    "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
                }
            )
            + "\n"
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
