"""A small DDP training job (gloo, CPU) for xtimer_run's tests: init_process_group() with the
default env://, a replicated model saved every step with the flash checkpoint, resumed at start.

Each step appends one JSON line to $OUT/steps.jsonl: rank, world, step, restart count, the step it
resumed from, and a digest of the parameters (equal on every rank: DDP keeps them replicated).

$OUT/events.jsonl gets, per rank and round, when the process started, when the process group was
up and how long the checkpoint load took (the phases of the README's recovery figures).

Faults, each at most once per job (a marker file in $OUT remembers it):
  CRASH_AT=STEP:RANK   that rank exits with code 7 at that step
  HANG_AT=STEP:RANK    that rank sleeps in sleep_forever() at that step (the others wait in the
                       allreduce; with simulated NCCL the hang is timed by the preload)
STEPS (default 30) steps; STEP_S (default 0.1) seconds of 'compute' per step.
"""
import time

STARTED = time.time()  # before the imports: starting Python and torch is part of a restart

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from xtimer.ckpt import CheckpointError, StorageType  # noqa: E402

try:
    from xtimer.ckpt import DdpCheckpointer as Ckpt
except ImportError:  # the DLRover-named class arrives with the resize-aware loader
    from xtimer.ckpt import Checkpointer as Ckpt

OUT = os.environ["OUT"]
STEPS = int(os.environ.get("STEPS", "30"))
STEP_S = float(os.environ.get("STEP_S", "0.1"))


def fault(name, step, rank):
    spec = os.environ.get(name)
    if not spec:
        return False
    s, r = (int(x) for x in spec.split(":"))
    marker = os.path.join(OUT, f"{name}.done")
    if s != step or r != rank or os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def sleep_forever():
    while True:
        time.sleep(1)


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    dist.init_process_group("gloo")
    initialized = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ckpt = Ckpt(os.path.join(OUT, "ckpt"))
    start = 0
    try:
        loaded = ckpt.load_checkpoint()
    except CheckpointError as e:
        print(f"rank {rank}: {e}", file=sys.stderr)
        raise
    loaded_t = time.time()
    state = loaded[1] if isinstance(loaded, tuple) else loaded
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"]) + 1
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    with open(os.path.join(OUT, "events.jsonl"), "a") as ev:
        ev.write(
            json.dumps(
                {
                    "rank": rank,
                    "world": world,
                    "restart": restart,
                    "started": STARTED,
                    "initialized": initialized,
                    "loaded": loaded_t,
                    "step": start,
                }
            )
            + "\n"
        )
    log = open(os.path.join(OUT, "steps.jsonl"), "a")
    for step in range(start, STEPS):
        if fault("CRASH_AT", step, rank):
            print(f"rank {rank}: crashing at step {step} on purpose", file=sys.stderr, flush=True)
            os._exit(7)
        if fault("HANG_AT", step, rank):
            sleep_forever()
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 64, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(STEP_S)
        ckpt.save_checkpoint(
            step,
            {"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
            storage_type=StorageType.DISK if step % 5 == 4 else StorageType.MEMORY,
        )
        log.write(
            json.dumps(
                {
                    "rank": rank,
                    "world": world,
                    "step": step,
                    "restart": restart,
                    "start": start,
                    "digest": digest(model),
                    "t": time.time(),
                    "pid": os.getpid(),
                }
            )
            + "\n"
        )
        log.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
