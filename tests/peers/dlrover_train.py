"""A DDP training script as DLRover's users write it, with DLRover's flash checkpoint. The test
(check_ckpt_import.py) runs it as it is under dlrover-run, and with only the import line below
changed to `from xtimer.ckpt import DdpCheckpointer, StorageType` under xtimer_run.

Every step: the state into memory; every 5th also to disk (the path as DLRover's examples pass
it). At start: load_checkpoint() and resume. Rank CRASH_RANK dies at step CRASH_AT once (a marker
in $OUT), so the launcher restarts the workers and they resume from the flash checkpoint.
Each step appends {"rank", "step", "restart", "start", "digest"} to $OUT/steps.jsonl.
"""
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType

OUT = os.environ["OUT"]
CKPT_DIR = os.environ["CKPT_DIR"]
STEPS = int(os.environ.get("STEPS", "20"))
CRASH_AT = int(os.environ.get("CRASH_AT", "-1"))
CRASH_RANK = int(os.environ.get("CRASH_RANK", "1"))
STEP_S = float(os.environ.get("STEP_S", "0"))  # seconds of "compute" per step


def digest(model, opt):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
        buf = opt.state.get(p, {}).get("momentum_buffer")
        if buf is not None:
            h.update(buf.numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    checkpointer = DdpCheckpointer(CKPT_DIR)

    start = 0
    state_dict = checkpointer.load_checkpoint()
    if "model" in state_dict:
        model.load_state_dict(state_dict["model"])
        opt.load_state_dict(state_dict["optimizer"])
        start = state_dict["step"] + 1
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with open(os.path.join(OUT, "loads.jsonl"), "a") as f:
        f.write(json.dumps({"rank": rank, "restart": restart, "start": start, "digest": digest(model, opt)}) + "\n")

    for step in range(start, STEPS):
        marker = os.path.join(OUT, "crashed")
        if step == CRASH_AT and rank == CRASH_RANK and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        g = torch.Generator().manual_seed(step * 100 + rank)
        x = torch.randn(16, 64, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(STEP_S)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
        path = os.path.join(CKPT_DIR, f"checkpoint-{step}.pt")
        if step % 5 == 4:
            checkpointer.save_checkpoint(step, state, path, storage_type=StorageType.DISK)
        else:
            checkpointer.save_checkpoint(step, state, path, storage_type=StorageType.MEMORY)
        with open(os.path.join(OUT, "steps.jsonl"), "a") as f:
            f.write(
                json.dumps(
                    {"rank": rank, "step": step, "restart": restart, "start": start, "digest": digest(model, opt)}
                )
                + "\n"
            )
    # Rank 0 only: DLRover's DdpCheckpointer persists from rank 0, and on the other ranks
    # wait_latest_checkpoint() waits out its whole timeout.
    if rank == 0:
        checkpointer.wait_latest_checkpoint(timeout=120)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
