"""The persister of one rank of FsdpShardCheckpointer: a separate process (so that the training
loop never waits for the disk nor for the interpreter lock) that writes the rank's shared-memory
snapshot in torch.distributed.checkpoint's layout.

    python -m xtimer.ckpt._dcp_persist '{"ckpt_dir": ..., "core_dir": ..., "rank": R, "shm_dir": ..., "keep": K}'

The loop, its priority and its answers are _persister.serve's. For each request of STEP:
copies the current snapshot out of shared memory (the slot is pinned only for that copy; the
buffers are reused by the next persist) and says it has (copied()), writes
DIR/STEP/__R_0.distcp with DCP's FileSystemWriter (fsync), then DIR/STEP/.xtimer-rank_R.pkl (its
write results, renamed into place); serve then answers "done" ("failed ... why" on an error).
The persister that finds every rank's results there writes DIR/STEP/.metadata (under a lock) and
removes complete steps older than the KEEP newest that it wrote itself.
"""
import fcntl
import io
import json
import os
import pickle
import shutil
import sys

from xtimer.ckpt._persister import fsync_dir, serve, write_atomic


class _Planner:
    """What FileSystemWriter asks of a planner: the data of each write item."""

    def __init__(self, by_index):
        self.by_index = by_index

    def resolve_data(self, item):
        v = self.by_index[(item.index.fqn, tuple(item.index.offset) if item.index.offset is not None else None)]
        return io.BytesIO(v) if isinstance(v, (bytes, bytearray)) else v


_BUFFERS = {}  # copy_out's buffers, copied into again by the next persist of the same layout


def persist(args, core, step, copied):
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import _StoragePrefix
    from torch.distributed.checkpoint.planner import SavePlan
    from xtimer.ckpt.fsdp import SIDECAR, _disk_steps, copy_out

    got = copy_out(core, 1, _BUFFERS)
    if got is None or got[0]["step"] != step:
        raise RuntimeError(
            f"step {step} is no longer the rank's snapshot in shared memory "
            f"(it holds {None if got is None else got[0]['step']})"
        )
    local, glob_, values = got
    copied()
    rank, world = local["rank"], local["world"]
    step_dir = os.path.join(args["ckpt_dir"], str(step))
    os.makedirs(step_dir, exist_ok=True)
    items = [local["items"][i] for i in local["disk"]]
    by_index = {}
    for item, v in zip(local["items"], values):
        by_index[(item.index.fqn, tuple(item.index.offset) if item.index.offset is not None else None)] = v
    writer = FileSystemWriter(step_dir, single_file_per_rank=True, sync_files=True, thread_count=1, overwrite=True)
    plan = SavePlan(items=items, storage_data=_StoragePrefix(f"__{rank}_"))
    results = writer.write_data(plan, _Planner(by_index)).wait()
    side = {"step": step, "world": world, "results": results}
    write_atomic(os.path.join(step_dir, SIDECAR % rank), lambda f: pickle.dump(side, f, pickle.HIGHEST_PROTOCOL))
    fsync_dir(step_dir)
    # The last rank to finish writes .metadata.
    with open(os.path.join(step_dir, ".xtimer.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(step_dir, ".metadata")):
            return
        every = []
        for r in range(world):
            p = os.path.join(step_dir, SIDECAR % r)
            if not os.path.exists(p):
                return
            with open(p, "rb") as f:
                side = pickle.load(f)
            if side["world"] != world:
                raise RuntimeError(f"{p} was written at world size {side['world']}, this step has {world}")
            every.append(side["results"])
        writer.finish(glob_["md"], every)
        fsync_dir(step_dir)
    # Keep the newest complete steps (those this checkpointer wrote).
    keep = max(1, int(args.get("keep", 3)))
    complete = sorted(s for s, d in _disk_steps(args["ckpt_dir"]).items() if d["complete"] and d["ranks"])
    for s in complete[:-keep]:
        shutil.rmtree(os.path.join(args["ckpt_dir"], str(s)), ignore_errors=True)


def main():
    args = json.loads(sys.argv[1])
    from xtimer import _ckpt

    core = _ckpt.RankCheckpointer(args["core_dir"], int(args["rank"]), args["shm_dir"], -1, 0, "", 300.0, 0)
    serve(
        lambda step, _, copied: persist(args, core, step, copied),
        lambda step: f"rank {args['rank']}: writing step {step} to {args['ckpt_dir']}",
    )


if __name__ == "__main__":
    main()
