"""One worker of bench_ckpt_fsdp.py, under the launcher its method belongs to: METHOD=xtimer
(xtimer_run, xtimer.ckpt.fsdp.FsdpShardCheckpointer), dlrover (dlrover-run, DLRover's FSDP
flash-checkpoint engine: its FsdpShardCheckpointer class drives FSDP1's state_dict_type, so the
same FSDP2 state dict goes to the engine it wraps), dcp (torchrun,
torch.distributed.checkpoint.async_save). The model: LAYERS Linear(DIM, DIM) layers under
fully_shard (gloo, CPU), Adam; the state: parameters + Adam's two moments (3 x the parameters).

For each of REPEATS disk saves, after one training step:
  blocked   the save call: how long the training loop waits
  on_disk   from the call until the step is complete on disk (ours: .metadata written; DLRover:
            its tracker file names the step; DCP: the future's result), polled between units of
            compute (a 128x128 matmul chain, about 5 ms) that stand for the training loop
  slowdown  a unit's mean time while the save persists / its mean time when idle
  memcpy    (once) copying this rank's shards into buffers allocated beforehand: the floor
Rank 0 writes OUT/<METHOD>.json.
"""
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

METHOD = os.environ["METHOD"]
OUT = os.environ["OUT"]
DIM, LAYERS = int(os.environ["DIM"]), int(os.environ["LAYERS"])
REPEATS = int(os.environ.get("REPEATS", "3"))
CKPT = os.path.join(OUT, f"ckpt-{METHOD}")


def shards(state):
    out = []

    def walk(v):
        if isinstance(v, DTensor):
            out.append(v.to_local())
        elif isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(state)
    return out


def memcpy_s(state):
    src = [t.detach() for t in shards(state)]
    dst = [torch.empty_like(t) for t in src]
    best = None
    for _ in range(4):
        t0 = time.perf_counter()
        for d, s in zip(dst, src):
            d.copy_(s)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, sum(t.numel() * t.element_size() for t in src)


A = torch.randn(128, 128)


def unit():
    t0 = time.perf_counter()
    x = A
    for _ in range(40):
        x = torch.tanh(x @ A) * 0.1
    return time.perf_counter() - t0


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(DIM, DIM) for _ in range(LAYERS)])
    for m in model:
        fully_shard(m)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(8, DIM)

    def train_step():
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    train_step()
    msd, osd = get_state_dict(model, opt)
    copy_s, nbytes = memcpy_s({"model": msd, "optim": osd})
    idle = statistics.median(unit() for _ in range(20))

    if METHOD == "xtimer":
        from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType

        ck = FsdpShardCheckpointer(CKPT)

        def save(step, sd):
            ck.save_checkpoint(step, sd, storage_type=StorageType.DISK)
            return lambda: os.path.exists(os.path.join(CKPT, str(step), ".metadata"))

    elif METHOD == "dlrover":
        from dlrover.python.common.constants import CheckpointConstant
        from dlrover.python.common.storage import get_checkpoint_storage
        from dlrover.trainer.torch.flash_checkpoint.fsdp_engine import FsdpCheckpointEngine

        engine = FsdpCheckpointEngine(CKPT, get_checkpoint_storage(None), "", CheckpointConstant.SAVE_TIMEOUT)
        tracker = os.path.join(CKPT, CheckpointConstant.TRACER_FILE_NAME)

        def tracked(step):
            try:
                with open(tracker) as f:
                    return f.read().strip() == str(step)
            except OSError:
                return False

        def save(step, sd):
            engine.save_to_storage(step, sd, {CheckpointConstant.MODEL_STATES_NAME: os.path.join(CKPT, str(step))})
            return lambda: tracked(step)

    else:
        import torch.distributed.checkpoint as dcp

        def save(step, sd):
            fut = dcp.async_save(sd, checkpoint_id=os.path.join(CKPT, str(step)))
            return fut.done

    blocked, on_disk, slow = [], [], []
    # From step 1: DLRover's saver did not commit a first disk save of step 0 (tests/peers/README.md).
    for step in range(1, REPEATS + 1):
        train_step()
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd, "step": step}
        dist.barrier()
        t0 = time.perf_counter()
        done = save(step, sd)
        blocked.append(time.perf_counter() - t0)
        units = []
        while not done():
            units.append(unit())
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"{METHOD}: step {step} not on disk after 600 s")
        on_disk.append(time.perf_counter() - t0)
        slow.append(statistics.mean(units) / idle if units else 1.0)
        dist.barrier()
    if rank == 0:
        with open(os.path.join(OUT, f"{METHOD}.json"), "w") as f:
            json.dump(
                {
                    "method": METHOD,
                    "bytes_per_rank": nbytes,
                    "memcpy": copy_s,
                    "blocked": blocked,
                    "on_disk": on_disk,
                    "slowdown": slow,
                },
                f,
            )
    dist.barrier()
    if METHOD == "xtimer":
        ck.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
