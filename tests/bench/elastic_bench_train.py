"""The worker of elastic_recovery_bench.py: gloo DDP on CPU with the default env://, the same under
xtimer_run and torchrun. Each step (an allreduce of the gradients, then STEP_S of 'compute')
appends a JSON line to $OUT/steps.jsonl: rank, world size, the round's master port, wall time,
pid. No checkpoint: the bench measures when the workers train again, not what they resume from."""
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    port = int(os.environ["MASTER_PORT"])
    step_s = float(os.environ.get("STEP_S", "0.1"))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out = open(os.path.join(os.environ["OUT"], "steps.jsonl"), "a")
    step = 0
    while True:
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.write(
            json.dumps({"rank": rank, "world": world, "port": port, "step": step, "t": time.time(), "pid": os.getpid()})
            + "\n"
        )
        out.flush()
        step += 1
        time.sleep(step_s)


if __name__ == "__main__":
    main()
