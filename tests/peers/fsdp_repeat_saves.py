#!/usr/bin/env python3
"""FsdpShardCheckpointer saving the same state again and again (the plan cached while the state
dict's structure holds): 2 gloo ranks (FSDP2, CPU, uneven shards), Adam, four memory saves, each
after a training step, each loaded back at once from memory into a zeroed copy of the state:

  - what loads equals what was saved, byte for byte (DTensor shards, Adam's state, plain values):
    the data of every save is the live state's, not a cached one;
  - a plain value changed in place between saves (a list appended to) loads changed;
  - a key added at the fourth save loads too (the structure changed: planned again);
  - DCP's planner planned exactly twice per rank (the first save and the changed one).

  fsdp_repeat_saves.py --peers DIR --pypath BUILD/lib/python
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, load_json  # noqa: E402
from peers import base_env, peers_or_skip, run_two_ranks  # noqa: E402

WORKER = r"""
import json, os, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
plans = [0]
real = DefaultSavePlanner.create_local_plan
def counted(self):
    plans[0] += 1
    return real(self)
DefaultSavePlanner.create_local_plan = counted
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 3))  # 5 and 3 rows: uneven on 2
for m in model:
    fully_shard(m)
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
shm = os.path.join(os.environ["OUT"], "shm%d" % rank)
os.makedirs(shm, exist_ok=True)
ck = FsdpShardCheckpointer(os.environ["CKPT"], shm_dir=shm)

def zeroed(v):
    if isinstance(v, torch.Tensor):
        return v.detach().clone().zero_()
    if isinstance(v, dict):
        return {k: zeroed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [zeroed(x) for x in v]
    return None if not isinstance(v, (int, float, str)) else type(v)()

def diff(a, b, path=""):
    if isinstance(a, torch.Tensor):
        a = a.to_local() if isinstance(a, DTensor) else a
        b = b.to_local() if isinstance(b, DTensor) else b
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(
            a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8))
        return None if same else path
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(a)} vs {sorted(b)}"
        return next((d for k in a for d in [diff(a[k], b[k], f"{path}.{k}")] if d), None)
    return None if a == b and type(a) is type(b) else f"{path}: {b!r} instead of {a!r}"

extra = {"tags": ["a"], "lr": 0.5}
res = {"diffs": [], "steps": []}
x = torch.randn(6, 4, generator=torch.Generator().manual_seed(rank))
for step in range(1, 5):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 3:
        extra["tags"].append("b")  # in place: the same list object as before
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd, "step": step, "extra": extra}
    if step == 4:
        sd["added"] = torch.arange(7.0) + rank
    ck.save_checkpoint(step, sd, storage_type=StorageType.MEMORY)
    got = zeroed(sd)
    got["extra"]["tags"] = []
    dcp.load(got, storage_reader=ck.get_storage_reader())
    res["steps"].append(ck.loaded_from["step"])
    res["diffs"].append(diff(sd, got))
res["plans"] = plans[0]
json.dump(res, open(os.path.join(os.environ["OUT"], "rank%d.json" % rank), "w"))
dist.barrier()
ck.close()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--bin")
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix="xtimer-peers-fsdp-repeat-")
    t = time.time()
    try:
        env = base_env(out, args.pypath, CKPT=os.path.join(out, "ckpt"))
        rcs, logs = run_two_ranks(peers.python, WORKER, env)
        check(rcs == [0, 0], f"2 ranks saved and loaded 4 steps (exit {rcs})")
        for r in range(2):
            res = load_json(os.path.join(out, f"rank{r}.json")) or {}
            check(res.get("steps") == [1, 2, 3, 4], f"rank {r}: each step loaded from memory ({res.get('steps')})")
            check(
                res.get("diffs") == [None] * 4,
                f"rank {r}: every step loads equal to the state saved, the list changed in place and the key "
                f"added included ({res.get('diffs')})",
            )
            check(
                res.get("plans") == 2,
                f"rank {r}: DCP's planner ran at the first and the changed save ({res.get('plans')})",
            )
    finally:
        print(f"time: {time.time() - t:.1f} s")
        if failures:
            print(f"outputs kept in {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
