"""One worker of the compatibility checks: the same DDP script (gloo, CPU) under torchrun,
xtimer_run and dlrover-run. It changes nothing for the launcher it runs under.

Writes $OUT/<label>/env-<RANK>.json: the whole environment as the worker saw it at start, what
init_process_group() (default env://, unchanged) gave, and the result of an all_reduce.

Faults, chosen by FAULT (at most once per job: a marker file in $OUT/<label> remembers it):
  raise:RANK      that rank raises ValueError inside a function decorated with torch's @record,
                  so torchrun's error file (TORCHELASTIC_ERROR_FILE) holds the traceback
  exit:RANK:CODE  that rank exits with CODE
  kill:RANK       that rank SIGKILLs itself
Other env: LABEL (the subfolder), STEPS (default 3).
"""
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

OUT = os.path.join(os.environ["OUT"], os.environ.get("LABEL", "run"))


def fault(rank):
    spec = os.environ.get("FAULT", "")
    if not spec:
        return
    kind, *rest = spec.split(":")
    if int(rest[0]) != rank:
        return
    marker = os.path.join(OUT, "fault.done")
    if os.path.exists(marker):
        return
    open(marker, "w").close()
    print(f"rank {rank}: fault {spec} on purpose", file=sys.stderr, flush=True)
    if kind == "raise":
        raise ValueError(f"bad batch on rank {rank}")
    if kind == "exit":
        sys.stderr.flush()
        os._exit(int(rest[1]))
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


@record
def main():
    os.makedirs(OUT, exist_ok=True)
    env = dict(os.environ)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"worker {rank} says hello on stdout", flush=True)
    print(f"worker {rank} says hello on stderr", file=sys.stderr, flush=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(int(os.environ.get("STEPS", "3"))):
        fault(rank)
        loss = model(torch.full((4, 8), float(step))).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    info = {
        "env": env,
        "rank": rank,
        "world": world,
        "backend": dist.get_backend(),
        "allreduce": t.item(),
        "restart": int(env.get("TORCHELASTIC_RESTART_COUNT", "-1")),
        "t": time.time(),
    }
    with open(os.path.join(OUT, f"env-{rank}.json.tmp"), "w") as f:
        json.dump(info, f)
    os.replace(os.path.join(OUT, f"env-{rank}.json.tmp"), os.path.join(OUT, f"env-{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
