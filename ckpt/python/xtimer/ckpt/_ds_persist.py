"""The persister of one rank of DeepSpeedCheckpointer: a separate process (_persister.py) that
writes the rank's shared-memory snapshot of a DISK save as DeepSpeed's own files.

    python -m xtimer.ckpt._ds_persist '{"core_dir": ..., "rank": R, "shm_dir": ...}'

For each request of STEP, {"save_dir": D, "world": W, "latest": bool} (_persister.serve): copies
the current snapshot out of shared memory (the slot is pinned only for that copy; the buffers are
reused by the next persist of the same layout) and says it has (copied()); writes each of the rank's files of the tag
as DeepSpeed's engine does (torch.save of the same state dict) into D/<tag>/..., each into a
temporary name, fsynced and renamed, then the folders fsynced; then D/<tag>/.xtimer-done-rank_R
(the step, fsynced). The persister that finds the markers of all W ranks for this step (under a
lock) writes D/<tag>/xtimer_step and, when asked, D/latest (both renamed into place, fsynced):
`latest` never names a tag whose files are not all on disk, and a persister killed half way
leaves the previous `latest` in place.

_pack and _unpack (one file's state dict as a pickled skeleton plus its tensors) live here so
that the persister does not import DeepSpeed unless a skeleton names its classes.
"""
import fcntl
import io
import json
import os
import pickle
import sys

import numpy as np
import torch

from xtimer.ckpt._persister import fsync_dir, serve, write_atomic
from xtimer.ckpt.checkpointer import Checkpointer, _ptr

STEP_FILE = "xtimer_step"  # in <dir>/<tag>/: the engine's global_steps of a DISK save
DONE = ".xtimer-done-rank_%d"  # in <dir>/<tag>/: this rank's files of the step are on disk


def _pack(obj):
    """One file's state dict as (pickled skeleton as uint8 array, list of tensors)."""
    tensors = []

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, torch.Tensor):
                tensors.append(o.detach())
                return ("t", len(tensors) - 1, isinstance(o, torch.nn.Parameter), o.requires_grad)
            return None

    buf = io.BytesIO()
    P(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8).copy(), tensors


def _unpack(skeleton, tensors):
    class U(pickle.Unpickler):
        def persistent_load(self, pid):
            _, i, is_param, requires_grad = pid
            t = tensors[i]
            return torch.nn.Parameter(t, requires_grad=requires_grad) if is_param else t

    return U(io.BytesIO(np.asarray(skeleton).tobytes())).load()


def _done_step(path):
    try:
        with open(path) as f:
            return int(json.load(f)["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


_BUFFERS = {}  # (entry name, dtype, shape) -> buffer of the previous persist


def _copy_out(ck, rank, step):
    """The rank's current snapshot, copied out of shared memory (checksums verified)."""
    core = ck._get_core(rank)
    info = core.memory_index()
    if info is None or info[0] != step:
        core.release_memory()
        held = None if info is None else info[0]
        raise RuntimeError(f"step {step} is no longer the rank's snapshot in shared memory (it holds {held})")
    index = json.loads(info[2])
    keys = [(e["name"], e["dtype"], tuple(e["shape"])) for e in index["entries"]]
    if all(k in _BUFFERS for k in keys):
        leaves = [_BUFFERS[k] for k in keys]
    else:
        leaves = ck._alloc(index)
    core.copy_memory_into([_ptr(v) for v in leaves], 1)
    _BUFFERS.clear()
    _BUFFERS.update(zip(keys, leaves))
    return ck._build(index, leaves, "cpu")


def persist(ck, rank, step, extra, copied):
    snap = _copy_out(ck, rank, step)
    copied()
    save_dir, world, tag = extra["save_dir"], int(extra["world"]), snap["tag"]
    tag_dir = os.path.join(save_dir, tag)
    os.makedirs(tag_dir, exist_ok=True)
    folders = {tag_dir}
    for rel, f in snap["files"].items():
        path = os.path.join(save_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        folders.add(os.path.dirname(path))
        state = _unpack(f["skeleton"], f["tensors"])
        write_atomic(path, lambda out: torch.save(state, out))
    for d in sorted(folders, key=len, reverse=True):
        fsync_dir(d)
    mine = json.dumps({"step": step, "world": world}).encode()
    write_atomic(os.path.join(tag_dir, DONE % rank), lambda out: out.write(mine))
    fsync_dir(tag_dir)
    # The last rank of the step to finish says the tag is complete.
    with open(os.path.join(tag_dir, ".xtimer.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if any(_done_step(os.path.join(tag_dir, DONE % r)) != step for r in range(world)):
            return
        write_atomic(os.path.join(tag_dir, STEP_FILE), lambda out: out.write(f"{step}\n".encode()))
        fsync_dir(tag_dir)
        if extra.get("latest"):
            write_atomic(os.path.join(save_dir, "latest"), lambda out: out.write(tag.encode()))
            fsync_dir(save_dir)


def main():
    args = json.loads(sys.argv[1])
    rank = int(args["rank"])
    ck = Checkpointer(args["core_dir"], shm_dir=args["shm_dir"], saver=False)  # reads; never saves
    serve(
        lambda step, extra, copied: persist(ck, rank, step, extra, copied),
        lambda step: f"rank {rank}: writing the DeepSpeed files of step {step}",
    )


if __name__ == "__main__":
    main()
