#!/usr/bin/env python3
"""FsdpShardCheckpointer when shards are missing: 2 gloo ranks (FSDP2, CPU) save step 1 to disk
(DLRover's form: save_checkpoint(step, model, optimizer, extra_sd, path, storage_type)) and step
3 to memory only; rank 1's shared memory is then removed (its node is gone).

  - a load (DLRover's form: load_checkpoint(model)) takes step 1 from disk and says which
    shards of step 3 are missing;
  - with step 1 removed from disk too, the load raises CheckpointError naming the missing shards:
    fqn, offsets, saving rank (never a silent start from scratch).

  fsdp_missing.py --peers DIR --pypath BUILD/lib/python
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
import json, logging, os, sys, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from xtimer.ckpt.fsdp import CheckpointError, FsdpShardCheckpointer, StorageType
logging.basicConfig(level=logging.WARNING)
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2))
for m in model:
    fully_shard(m)
fully_shard(model)
shm = os.path.join(os.environ["OUT"], "shm%d" % rank)  # one node per rank; a lost node's is new and empty
os.makedirs(shm, exist_ok=True)
ck = FsdpShardCheckpointer(os.environ["CKPT"], shm_dir=shm)
msd, _ = get_state_dict(model, [])
out = {}
if os.environ["PHASE"] == "save":
    ck.save_checkpoint(1, model, [], {"step": 1}, "", StorageType.DISK)  # DLRover's form
    ck.wait_latest_checkpoint(120)
    out["saved3"] = ck.save_checkpoint(3, {"model": msd, "step": 3}, storage_type=StorageType.MEMORY)
else:
    try:
        out["loaded"] = ck.load_checkpoint(model).get("step")  # DLRover's form
        out["from"] = ck.loaded_from
    except CheckpointError as e:
        out["loaded"] = str(e)
    dist.barrier()
    if rank == 0:  # step 1 goes from the disk too
        import shutil
        shutil.rmtree(os.path.join(os.environ["CKPT"], "1"))
    dist.barrier()
    sd = {"model": msd, "step": 0}
    try:
        dcp.load(sd, storage_reader=ck.get_storage_reader())
        out["then"] = sd["step"]
    except CheckpointError as e:
        out["error"] = str(e)
if rank == 0:
    json.dump(out, open(os.path.join(os.environ["OUT"], os.environ["PHASE"] + ".json"), "w"))
dist.barrier()
ck.close()
"""


def run(peers, out, pypath, phase):
    env = base_env(out, pypath, CKPT=os.path.join(out, "ckpt"), PHASE=phase)
    return run_two_ranks(peers.python, WORKER, env, what=f"{phase}, ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--bin")
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix="xtimer-peers-fsdp-missing-")
    t = time.time()
    try:
        rcs, logs = run(peers, out, args.pypath, "save")
        check(
            rcs == [0, 0] and (load_json(os.path.join(out, "save.json")) or {}).get("saved3"),
            f"2 ranks saved step 1 to disk and step 3 to memory (exit {rcs})",
        )
        shutil.rmtree(os.path.join(out, "shm1"))
        rcs, logs = run(peers, out, args.pypath, "load")
        r = load_json(os.path.join(out, "load.json")) or {}
        check(
            rcs == [0, 0] and r.get("loaded") == 1,
            f"with rank 1's memory gone, step 1 loads from disk ({r.get('loaded')})",
        )
        warned = [line for line in logs[0].splitlines() if "newer steps are not complete" in line]
        check(
            warned and "step 3" in warned[0] and "rank(s) [1]" in warned[0],
            f"the log says which shards of step 3 are missing ({warned[:1]})",
        )
        err = r.get("error", "")
        print(f"  the error: {err}")
        check(
            rcs == [0, 0]
            and "step 3" in err
            and "rank(s) [1] (of 2)" in err
            and "model.0.weight at offsets [3, 0] (rank 1)" in err
            and "model.1.bias at offsets [1] (rank 1)" in err
            and "model.0.weight at offsets [0, 0]" not in err,
            "with step 1 gone from disk too, CheckpointError names exactly rank 1's shards",
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
