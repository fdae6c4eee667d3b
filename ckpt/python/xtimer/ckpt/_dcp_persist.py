"""The persister of one rank of FsdpShardCheckpointer (and of megatron.py's strategy): a separate
process (so that the training loop never waits for the disk nor for the interpreter lock) that
writes the rank's shared-memory snapshot in torch.distributed.checkpoint's layout.

    python -m xtimer.ckpt._dcp_persist '{"ckpt_dir": ..., "core_dir": ..., "rank": R, "shm_dir": ..., "keep": K}'

The loop, its priority and its answers are _persister.serve's. For each request of STEP:
copies the current snapshot out of shared memory (the slot is pinned only for that copy; the
buffers are reused by the next persist; its pickles read with the restricted reader) and says
it has (copied()), writes DIR/STEP/__R_0.distcp with DCP's FileSystemWriter (fsync), reads it
back for its checksum (the core's, fsdp.file_checksum), then writes DIR/STEP/.xtimer-rank_R.json
(its write results, the file's size and checksum; renamed into place); serve then answers
"done" ("failed ... why" on an error). The persister that finds every rank's results there
writes DIR/STEP/.metadata (under a lock) and removes complete steps older than the KEEP newest
that xtimer wrote. A FIFO, device or link found where it writes a file is removed first (a
folder fails the write): never opened, never written through.
"""
import fcntl
import io
import json
import os
import shutil
import stat
import sys
import time

from xtimer.ckpt._persister import fsync_dir, serve, write_atomic


class _Planner:
    """What FileSystemWriter asks of a planner: the data of each write item."""

    def __init__(self, by_index):
        self.by_index = by_index

    def resolve_data(self, item):
        v = self.by_index[(item.index.fqn, tuple(item.index.offset) if item.index.offset is not None else None)]
        return io.BytesIO(v) if isinstance(v, (bytes, bytearray)) else v


_BUFFERS = {}  # copy_out's buffers, copied into again by the next persist of the same layout


def _clear(path):
    """Makes room for a file this persister writes at path: a FIFO, device, socket or symbolic
    link planted there would block the open or redirect the write; it is removed (a folder
    raises). A regular file stays: the writer replaces it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise RuntimeError(f"{path} is a folder; a checkpoint file goes there")
    os.unlink(path)


def _lock(path):
    """An flock'ed descriptor of the step's lock file (created; never a FIFO or a link)."""
    _clear(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RuntimeError(f"{path} is not a regular file")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def persist(args, core, step, copied):
    from xtimer.ckpt.fsdp import _disk_steps

    write_snapshot(core, step, os.path.join(args["ckpt_dir"], str(step)), copied)
    # Keep the newest complete steps (those xtimer wrote).
    keep = max(1, int(args.get("keep", 3)))
    complete = sorted(s for s, d in _disk_steps(args["ckpt_dir"]).items() if d["complete"] and d["ours"])
    for s in complete[:-keep]:
        shutil.rmtree(os.path.join(args["ckpt_dir"], str(s)), ignore_errors=True)


def write_snapshot(core, step, step_dir, copied):
    """Writes the segment's snapshot of `step` into step_dir: the rank's .distcp, its results
    file and, by the last rank to finish, .metadata (megatron.py writes Megatron's folders so)."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import _StoragePrefix
    from torch.distributed.checkpoint.planner import SavePlan
    from xtimer.ckpt.fsdp import (
        SIDECAR,
        copy_out,
        file_checksum,
        read_sidecar,
        sidecar_json,
        write_results,
    )

    got = copy_out(core, 1, _BUFFERS)
    if got is None or got[0]["step"] != step:
        raise RuntimeError(
            f"step {step} is no longer the rank's snapshot in shared memory "
            f"(it holds {None if got is None else got[0]['step']})"
        )
    local, glob_, values = got
    copied()
    rank, world = local["rank"], local["world"]
    os.makedirs(step_dir, exist_ok=True)
    items = [local["items"][i] for i in local["disk"]]
    by_index = {}
    for item, v in zip(local["items"], values):
        by_index[(item.index.fqn, tuple(item.index.offset) if item.index.offset is not None else None)] = v
    # FileSystemWriter (single_file_per_rank, one thread) writes __<rank>_0.distcp.
    _clear(os.path.join(step_dir, f"__{rank}_0.distcp"))
    writer = FileSystemWriter(step_dir, single_file_per_rank=True, sync_files=True, thread_count=1, overwrite=True)
    plan = SavePlan(items=items, storage_data=_StoragePrefix(f"__{rank}_"))
    results = writer.write_data(plan, _Planner(by_index)).wait()
    files = {}
    for rel in sorted({wr.storage_data.relative_path for wr in results}):
        size, checksum = file_checksum(os.path.join(step_dir, rel))
        files[rel] = {"size": size, "fletcher64": checksum}
    side = sidecar_json(step, rank, world, results, files)
    write_atomic(os.path.join(step_dir, SIDECAR % rank), lambda f: f.write(side))
    fsync_dir(step_dir)
    # The last rank to finish writes .metadata.
    lock = _lock(os.path.join(step_dir, ".xtimer.lock"))
    try:
        if os.path.lexists(os.path.join(step_dir, ".metadata")):
            return
        every = []
        for r in range(world):
            p = os.path.join(step_dir, SIDECAR % r)
            if not os.path.lexists(p):
                return
            side = read_sidecar(p)
            if side["world"] != world or side["step"] != step:
                raise RuntimeError(
                    f"{p} was written for step {side['step']} at world size {side['world']}, "
                    f"this is step {step} at {world}"
                )
            every.append(write_results(side))
        _clear(os.path.join(step_dir, ".metadata.tmp"))
        writer.finish(glob_["md"], every)
        fsync_dir(step_dir)
    finally:
        os.close(lock)


# Megatron (megatron.py): each request names its folder ({"dir": ...}); a marker file says that
# the rank's files of that save, and .metadata if this rank was the last, are written.
DONE = ".xtimer-done-rank_%d"  # JSON {"save": N}
FAILED = ".xtimer-failed-rank_%d"  # JSON {"save": N, "error": why}
# JSON {"save": N}: the request's function has started (in megatron's async process, or in the
# training process for a synchronous save). A request with {"go_within": seconds} waits for it,
# or that long: megatron's caller forks the training process when it starts the request, and on
# a few cores a persister already at work makes that fork, which the training loop waits for,
# take up to several times as long.
GO = ".xtimer-go-rank_%d"


def read_marker(path):
    """A marker's JSON object, or None while it is missing, partial or not a regular file (never
    a FIFO, never waited on)."""
    from xtimer.ckpt._files import open_regular
    from xtimer.ckpt.checkpointer import CheckpointError

    try:
        with os.fdopen(open_regular(path, follow=False, max_bytes=4096), "rb") as f:
            got = json.loads(f.read(4096))
    except (OSError, ValueError, CheckpointError):  # missing, planted, cut short: not the marker (yet)
        return None
    return got if isinstance(got, dict) else None


def wait_go(folder, rank, save, within):
    """Until the request's function said go for `save`, at most `within` seconds; the marker is
    removed."""
    path = os.path.join(folder, GO % rank)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = read_marker(path)
        if got is not None and got.get("save") == save:
            break
        time.sleep(0.002)
    try:
        os.unlink(path)
    except OSError:
        pass


def say_go(folder, rank, save):
    """The request's side of wait_go (no fsync: nothing reads it after a crash)."""
    path = os.path.join(folder, GO % rank)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps({"save": save}).encode())
    os.rename(tmp, path)


def persist_into(core, rank, save, extra, copied):
    folder = extra["dir"]
    if extra.get("go_within"):
        wait_go(folder, rank, save, float(extra["go_within"]))
    try:
        write_snapshot(core, save, folder, copied)
    except Exception as e:
        why = f"{type(e).__name__}: {e}".replace("\n", " ")
        text = json.dumps({"save": save, "error": why}).encode()
        write_atomic(os.path.join(folder, FAILED % rank), lambda f: f.write(text))
        raise
    write_atomic(os.path.join(folder, DONE % rank), lambda f: f.write(json.dumps({"save": save}).encode()))
    fsync_dir(folder)


def main():
    args = json.loads(sys.argv[1])
    from xtimer import _ckpt

    rank = int(args["rank"])
    core = _ckpt.RankCheckpointer(args["core_dir"], rank, args["shm_dir"], -1, 0, "", 300.0, 0)
    if args.get("folder_per_save"):
        serve(
            lambda save, extra, copied: persist_into(core, rank, save, extra, copied),
            lambda save: f"rank {rank}: writing megatron's files of save {save}",
        )
        return
    serve(
        lambda step, _, copied: persist(args, core, step, copied),
        lambda step: f"rank {rank}: writing step {step} to {args['ckpt_dir']}",
    )


if __name__ == "__main__":
    main()
