"""The persister of one rank of DeepSpeedCheckpointer: a separate process (_persister.py) that
writes the rank's shared-memory snapshot of a DISK save as DeepSpeed's own files.

    python -m xtimer.ckpt._ds_persist '{"core_dir": ..., "rank": R, "shm_dir": ...}'

For each request of STEP, {"save_dir": D, "world": W, "latest": bool, "skeletons": {file:
sha256}} (_persister.serve): copies the current snapshot out of shared memory (the slot is
pinned only for that copy; the buffers are reused by the next persist of the same layout) and
says it has (copied()); checks that each file's pickled skeleton is the one the training process
saved (the sha256 it sent through the persister's stdin: only then is it unpickled without
restriction, as the training process's own objects, client_state classes included); writes each
of the rank's files of the tag as DeepSpeed's engine does (torch.save of the same state dict)
into D/<tag>/..., each into a temporary name, fsynced and renamed, then the folders fsynced;
then D/<tag>/.xtimer-done-rank_R (JSON: the step, the world size and each file's size and
checksum, computed while it was written; fsynced). The persister that finds the markers of all W
ranks for this step (under a lock) writes D/<tag>/xtimer_step (JSON) and, when asked, D/latest
(both renamed into place, fsynced): `latest` never names a tag whose files are not all on disk,
and a persister killed half way leaves the previous `latest` in place.

Shared with the loader (deepspeed.py), without importing DeepSpeed: _pack and _unpack (one
file's state dict as a pickled skeleton plus its tensors; a skeleton read back from shared memory
goes through the restricted unpickler, _safe_pickle), the markers and `xtimer_step` (read by
_files.open_regular's rule: a FIFO, device or folder is refused at once, never waited on).
"""
import fcntl
import hashlib
import io
import json
import os
import pickle
import sys

import numpy as np
import torch

from xtimer.ckpt import _safe_pickle
from xtimer.ckpt._files import SumWriter, open_regular
from xtimer.ckpt._persister import fsync_dir, serve, write_atomic
from xtimer.ckpt.checkpointer import Checkpointer, CheckpointError, _ptr

STEP_FILE = "xtimer_step"  # in <dir>/<tag>/: JSON, the step of a DISK save whose files are all there
DONE = ".xtimer-done-rank_%d"  # in <dir>/<tag>/: JSON, this rank's files of the step are on disk
CHECKSUM = "xtimer-fletcher64"  # the core's checksum (ckpt/checksum.h), "a:b" in hex
_SIDECAR_BYTES = 1 << 20  # the most a marker, xtimer_step or `latest` holds


def read_small(path, follow=False):
    """The bytes of a small sidecar file by the rule above."""
    fd = open_regular(path, follow, _SIDECAR_BYTES)
    with os.fdopen(fd, "rb") as f:
        return f.read(_SIDECAR_BYTES + 1)


def read_json(path):
    """A JSON sidecar (marker, xtimer_step) by the rule; None when it does not exist. Raises
    CheckpointError naming it when it is not a regular file or not JSON."""
    try:
        data = read_small(path)
    except FileNotFoundError:
        return None
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(f"{path} is not JSON (damaged?)") from None


def tag_step(tag_dir):
    """(step, world) of a tag whose files xtimer's persisters all wrote (its xtimer_step; world
    None when written before it was recorded), None when it has none. Raises CheckpointError as
    read_json."""
    v = read_json(os.path.join(tag_dir, STEP_FILE))
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):  # "N\n": xtimer_step before it was JSON
        return v, None
    if isinstance(v, dict) and isinstance(v.get("step"), int) and isinstance(v.get("world"), int):
        return v["step"], v["world"]
    raise CheckpointError(f"{os.path.join(tag_dir, STEP_FILE)} does not hold a step (damaged?)")


# --- the snapshot's files


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


def skeleton_digest(skeleton):
    return hashlib.sha256(np.asarray(skeleton).tobytes()).hexdigest()


def _unpack(skeleton, tensors, what=None):
    """The state dict of one file. With `what` (where the skeleton comes from, for the message)
    only the classes _safe_pickle allows are built, and anything else raises UnsafePickle (a
    CheckpointError) naming the class; without it (a skeleton whose digest the training process
    that pickled it vouched for) the pickle is read as the training process wrote it."""

    def persistent_load(pid):
        if not (isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "t" and type(pid[1]) is int):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, i, is_param, requires_grad = pid
        if not 0 <= i < len(tensors) or not isinstance(tensors[i], torch.Tensor):
            raise pickle.UnpicklingError(f"tensor {i} is not in the snapshot")
        t = tensors[i]
        return torch.nn.Parameter(t, requires_grad=bool(requires_grad)) if is_param else t

    data = np.asarray(skeleton).tobytes()
    if what is not None:
        return _safe_pickle.loads(data, what, persistent_load)

    class U(pickle.Unpickler):
        pass

    u = U(io.BytesIO(data))
    u.persistent_load = persistent_load
    return u.load()


def inside(rel):
    """rel (a path a snapshot names) if it stays inside the folder it is joined to, else None."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        return None
    p = os.path.normpath(rel)
    if os.path.isabs(p) or p == "." or p == ".." or p.startswith("../"):
        return None
    return p


# --- the persister


def _done_step(path):
    try:
        return int(read_json(path)["step"])
    except (CheckpointError, KeyError, TypeError, ValueError):
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
    vouched = extra.get("skeletons") or {}
    tag_dir = os.path.join(save_dir, tag)
    os.makedirs(tag_dir, exist_ok=True)
    folders = {tag_dir}
    sums = {}
    for rel, f in snap["files"].items():
        # Only the bytes the training process pickled are unpickled as it wrote them: a snapshot
        # changed in shared memory since (by anyone who can write there) is not written.
        if inside(rel) is None or vouched.get(rel) != skeleton_digest(f["skeleton"]):
            raise RuntimeError(
                f"the snapshot of step {step} in shared memory is not the one this rank saved (its file {rel!r} "
                "differs); nothing of it is written"
            )
        path = os.path.join(save_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        folders.add(os.path.dirname(path))
        try:
            state = _unpack(f["skeleton"], f["tensors"])
        except (AttributeError, ImportError) as e:
            raise RuntimeError(
                f"{rel} holds a class this process cannot import ({e}); a class in a DISK save's state must come "
                "from a module on the path (a class defined in the training script itself cannot be persisted)"
            ) from None

        def write(out, state=state):
            w = SumWriter(out)
            torch.save(state, w)
            return {"bytes": w.bytes, "sum": w.checksum()}

        sums[os.path.relpath(path, tag_dir)] = write_atomic(path, write)
    for d in sorted(folders, key=len, reverse=True):
        fsync_dir(d)
    mine = json.dumps({"step": step, "world": world, "checksum": CHECKSUM, "files": sums}, indent=1).encode()
    write_atomic(os.path.join(tag_dir, DONE % rank), lambda out: out.write(mine))
    fsync_dir(tag_dir)
    # The last rank of the step to finish says the tag is complete.
    lock = os.open(
        os.path.join(tag_dir, ".xtimer.lock"),
        os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
    )
    with os.fdopen(lock, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if any(_done_step(os.path.join(tag_dir, DONE % r)) != step for r in range(world)):
            return
        done = json.dumps({"format": "xtimer-deepspeed-step", "version": 1, "step": step, "world": world})
        write_atomic(os.path.join(tag_dir, STEP_FILE), lambda out: out.write(done.encode() + b"\n"))
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
