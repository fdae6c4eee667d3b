"""The worker of check_ckpt_fsdp.py: a small FSDP2 model (torch.distributed.fsdp.fully_shard, gloo,
CPU) trained with Adam, checkpointed with xtimer.ckpt.fsdp.FsdpShardCheckpointer, under
xtimer_run (one rank per node, one shared-memory folder per node).

Every step uses the same global batch of 12 samples split evenly over the ranks, so the loss of a
step does not depend on the world size (up to the order of float additions).

Environment: OUT, CKPT, TAG; STEPS: the last step; HOLD_WORLD: at this world size the worker
saves step SAVE_AT to disk, trains on to STEPS (the reference losses) and then waits in barriers
until xtimer_run stops it for a new round (the test kills or adds a node); at any other world
size it loads, trains to STEPS, saves STEPS to disk and ends. After each save rank 0 dumps the
full state to OUT/full-<step>.pt for the test to compare. CONVERT=1: rank 0 also checks
format_utils.dcp_to_torch_save on the loaded step. Writes OUT/<TAG>-w<world>.json (rank 0): the
step loaded, where from, whether the loaded state equals the dump byte for byte, and the loss
of every step.
"""
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType

OUT, CKPT, TAG = os.environ["OUT"], os.environ["CKPT"], os.environ["TAG"]
SAVE_AT, STEPS = int(os.environ["SAVE_AT"]), int(os.environ["STEPS"])
HOLD_WORLD = int(os.environ["HOLD_WORLD"])
BATCH = 12


def full_state(model, opt):
    """The whole state on rank 0 (CPU), as plain tensors: what the sharded state must equal."""
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"model": msd, "optim": osd}


def same(a, b, path=""):
    """Byte-for-byte equality of two nested states; the first difference, or None."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {type(b).__name__} {getattr(b, 'shape', '')} vs {a.dtype} {tuple(a.shape)}"
        ab = a.detach().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().contiguous().reshape(-1).view(torch.uint8)
        return None if torch.equal(ab, bb) else f"{path}: bytes differ"
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(map(str, a)) != set(map(str, b)):
            return f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b)) if isinstance(b, dict) else b}"
        bs = {str(k): v for k, v in b.items()}
        for k, v in a.items():
            d = same(v, bs[str(k)], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return f"{path}: {b!r} vs {a!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {b!r} vs {a!r}"


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    # Row counts 40 and 24 do not divide by 3: uneven shards at world size 3.
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 40), torch.nn.Tanh(), torch.nn.Linear(40, 24), torch.nn.Tanh(), torch.nn.Linear(24, 8)
    )
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ck = FsdpShardCheckpointer(CKPT)
    res = {"rank": rank, "world": world, "losses": {}}

    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd, "step": 0}
    t0 = time.perf_counter()
    reader = ck.get_storage_reader()
    start = 0
    if reader is not None:
        dcp.load(sd, storage_reader=reader)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        start = sd["step"]
        res["load_s"] = time.perf_counter() - t0
        res["loaded"] = start
        res["from"] = ck.loaded_from
        full = full_state(model, opt)
        if rank == 0:
            want = torch.load(os.path.join(OUT, f"full-{start}.pt"), weights_only=False)
            res["diff"] = same(want, full)
            if os.environ.get("CONVERT") == "1":
                from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

                conv = os.path.join(OUT, f"converted-{start}.pt")
                dcp_to_torch_save(os.path.join(CKPT, str(start)), conv)
                got = torch.load(conv, weights_only=False)
                res["converted_step"] = got.get("step")
                res["converted_diff"] = same(want, {"model": got["model"], "optim": got["optim"]})

    for step in range(start + 1, STEPS + 1):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 8, generator=g)
        per = BATCH // world
        loss = ((model(x[rank * per : (rank + 1) * per]) - y[rank * per : (rank + 1) * per]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        res["losses"][step] = total.item() / world
        if step == (SAVE_AT if world == HOLD_WORLD else STEPS):
            msd, osd = get_state_dict(model, opt)
            t = time.perf_counter()
            ck.save_checkpoint(step, {"model": msd, "optim": osd, "step": step}, storage_type=StorageType.DISK)
            res.setdefault("blocked_s", {})[step] = time.perf_counter() - t
            ck.wait_latest_checkpoint(120)
            full = full_state(model, opt)
            if rank == 0:
                torch.save(full, os.path.join(OUT, f"full-{step}.pt"))
            dist.barrier()  # every rank's files, and the dump, are there
    if rank == 0:
        with open(os.path.join(OUT, f"{TAG}-w{world}.json"), "w") as f:
            json.dump(res, f)
    if world == HOLD_WORLD:
        open(os.path.join(OUT, f"held-{TAG}-{rank}"), "w").close()
        while True:  # a node is killed meanwhile: a barrier fails, and xtimer_run restarts the round
            dist.barrier()
            time.sleep(0.2)
    ck.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
