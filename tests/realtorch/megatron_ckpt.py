"""Megatron-Core's own distributed checkpoint on the simulated GPU: what xtimer.ckpt's Megatron
strategy will be measured against and must stay readable by. One weight of shape (ROWS, COLS)
split over tensor-parallel ranks along its rows (a column-parallel linear's layout), replicated
over data-parallel ranks, as megatron.core.dist_checkpointing.ShardedTensor.

  MODE=save TP=2 (2 ranks): each rank's rows hold row numbers, saved with megatron's default
                            strategy (torch_dist) into DIR
  MODE=load TP=1 (2 ranks): the whole weight loaded on every rank (two data-parallel replicas)

Values are written with host-to-device copies and read back with device-to-host copies (the
simulated GPU copies bytes; its kernels compute nothing). Rank 0 writes DIR/<MODE>.json with what
each rank saw.

  scripts/simgpu.sh .peers/bin/torchrun --standalone --nproc-per-node 2 megatron_ckpt.py DIR
"""
import json
import os
import sys
import time

ROWS, COLS = 64, 32


def main():
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.dist_checkpointing import ShardedTensor

    mode, tp, out = os.environ["MODE"], int(os.environ["TP"]), sys.argv[1]
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    dp_rank = parallel_state.get_data_parallel_rank()
    rows = ROWS // tp
    full = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)
    mine = full[tp_rank * rows : (tp_rank + 1) * rows]

    def sharded(t):
        return {"weight": ShardedTensor.from_rank_offsets("weight", t, (0, tp_rank, tp), replica_id=dp_rank)}

    row = {"rank": dist.get_rank(), "tp_rank": tp_rank, "dp_rank": dp_rank}
    t0 = time.time()
    if mode == "save":
        dist_checkpointing.save(sharded(mine.cuda()), out)
        row["saved_s"] = round(time.time() - t0, 2)
    else:
        got = dist_checkpointing.load(sharded(torch.zeros(rows, COLS).cuda()), out)["weight"].cpu()
        row["loaded_s"] = round(time.time() - t0, 2)
        row["equal"] = bool(torch.equal(got, mine))
    rows_seen = [None] * dist.get_world_size()
    dist.all_gather_object(rows_seen, row)
    if dist.get_rank() == 0:
        with open(os.path.join(out, f"{mode}.json"), "w") as f:
            json.dump(rows_seen, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # megatron's async writer starts processes with spawn: they import this file
    main()
