"""Flash checkpoint for Megatron-Core's dist_checkpointing: a save strategy that returns after a
copy into shared memory and has megatron's own `torch_dist` files written behind the job.

    from megatron.core import dist_checkpointing
    from xtimer.ckpt.megatron import FlashSaveStrategy, FlashLoadStrategy
    save = FlashSaveStrategy()                            # one per process, kept across saves
    req = dist_checkpointing.save(sd, "/ckpt/iter_0000100", sharded_strategy=save,
                                  async_sharded_save=True)  # returns after the copy
    ...schedule req as megatron's own async requests (AsyncCallsQueue), or req.execute_sync()
    sd = dist_checkpointing.load(sd, "/ckpt/iter_0000100", sharded_strategy=FlashLoadStrategy())

or by name, after register(): get_default_strategy(StrategyAction.SAVE_SHARDED, "xtimer_flash", 1)
(megatron-core 0.16.1 has no separate action for asynchronous saves; one that has gets it too).

A save translates the sharded state dict as megatron's TorchDistSaveShardedStrategy does
(main replicas only, Megatron's ShardedTensors as torch's, ShardedObjects as bytes), plans it
with megatron's MCoreSavePlanner, and copies this rank's shards into its shared-memory segment
(FsdpShardCheckpointer's machinery: the same core, snapshot layout and persister protocol; the
segment is keyed by the folder's parent, so a job's iter_* folders share one per rank, which
holds the newest). The rank's persister (_dcp_persist.py, a process) then writes, into the
folder, `__<rank>_0.distcp` with DCP's FileSystemWriter, its `.xtimer-rank_<rank>.json` results
file (size and checksum), and, the last rank to finish, DCP's `.metadata`; then a marker
`.xtimer-done-rank_<rank>` naming the save. The AsyncRequest returned waits for that marker
(in megatron's async process or, for a synchronous save, in the training process), so megatron
writes `metadata.json` only after every rank's files and `.metadata` are on disk. The files are
megatron's `torch_dist` format: metadata.json says `torch_dist`, and megatron's default load
strategy reads the folder without xtimer.

A load with FlashLoadStrategy reads the pieces that some node holds in memory for that folder
(this rank's node; other nodes' over torch.distributed) and the rest from the folder's files,
checked as FsdpShardCheckpointer checks its steps. What megatron cannot reshard is refused in
one line (CheckpointError).
"""
import json
import logging
import os
import time

from .. import _ckpt
from .checkpointer import CheckpointError, _node_snapshots
from .fsdp import (
    FsdpShardCheckpointer,
    _check_step_files,
    _dist,
    _rank_world,
    _read_snapshot,
    _Reader,
    _tree_json,
)
from ._dcp_persist import DONE, FAILED, read_marker, say_go
from ._persister import Persister
from megatron.core.dist_checkpointing.strategies import torch as _mt
from torch.distributed.checkpoint.api import CheckpointException as DcpCheckpointException
from megatron.core.dist_checkpointing.strategies.async_utils import AsyncRequest
from megatron.core.dist_checkpointing.strategies.base import (
    AsyncSaveShardedStrategy,
    StrategyAction,
    register_default_strategy,
)

log = logging.getLogger("xtimer.ckpt")

__all__ = ["FlashSaveStrategy", "FlashLoadStrategy", "register", "CheckpointError", "BACKEND"]

BACKEND = "xtimer_flash"  # the name under which register() puts the strategies
GO_WITHIN = 5.0  # seconds a persister waits for the request to start (see _dcp_persist.GO)


def _real(path):
    return os.path.realpath(os.fspath(path))


class _Folders(FsdpShardCheckpointer):
    """The snapshots of the checkpoint folders under one parent: FsdpShardCheckpointer's segment
    and persister, planned as megatron plans."""

    def _save_planner(self):
        from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner

        return MCoreSavePlanner(flatten_state_dict=False)

    def _get_persister(self, rank):
        if self._persister is None or self._persister.rank != rank:
            # The folder comes with each request; markers say when it is written (_wait_written).
            args = {"core_dir": self._core_dir, "rank": rank, "shm_dir": self._shm_dir, "folder_per_save": True}
            self._persister = Persister("xtimer.ckpt._dcp_persist", args, rank, CheckpointError)
        return self._persister


def _agreed_save_number(dist, world):
    """A number that grows from save to save, the same on every rank (the largest of the ranks'
    clocks in microseconds): the snapshot's step, and the name of its marker files."""
    n = time.time_ns() // 1000
    if dist is None or world == 1:
        return n
    import torch

    dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([n], dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t[0])


def _remove_old_results(folder):
    """A folder saved into again: the previous save's .metadata, results files and markers go
    first, so that nothing of it can pass for the new save's."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    for n in names:
        if n == ".metadata" or (n.startswith(".xtimer-") and n != ".xtimer.lock"):
            try:
                os.unlink(os.path.join(folder, n))
            except (IsADirectoryError, FileNotFoundError, PermissionError):
                pass


def _wait_written(folder, rank, save, persister_pid, timeout=3600.0):
    """The AsyncRequest's function: waits until the persister of `rank` has written its files of
    `save` (and .metadata if it was the last); raises its error, or if it exited. Runs in
    megatron's async process (module level: pickled by its persistent caller) or in the
    training process. It first tells the persister to start (the request's go_within)."""
    say_go(folder, rank, save)
    done, failed = os.path.join(folder, DONE % rank), os.path.join(folder, FAILED % rank)
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        for path, ok in ((done, True), (failed, False)):
            got = read_marker(path)
            if got is not None and got.get("save") == save:
                if ok:
                    return
                raise CheckpointError(f"xtimer.ckpt: rank {rank}'s files in {folder}: {got.get('error')}")
        try:
            os.kill(persister_pid, 0)
        except ProcessLookupError:
            raise CheckpointError(
                f"xtimer.ckpt: the persister of rank {rank} exited before writing its files into {folder}"
            ) from None
        except PermissionError:
            pass
        if time.monotonic() > deadline:
            raise CheckpointError(f"xtimer.ckpt: rank {rank}'s files in {folder} not written after {timeout} s")
        time.sleep(pause)
        pause = min(0.05, pause * 2)


class FlashSaveStrategy(AsyncSaveShardedStrategy):
    """Megatron-Core save strategy (backend torch_dist, version 1: the files are megatron's):
    blocks for the copy into shared memory; the files are written by the rank's persister.

    shm_dir, copy_threads: as FsdpShardCheckpointer's. keep_only_main_replica: as megatron's
    TorchDistSaveShardedStrategy (True: a replicated shard is saved by its main replica)."""

    def __init__(self, backend="torch_dist", version=1, *, shm_dir=None, copy_threads=0, keep_only_main_replica=True):
        if backend != "torch_dist" or version != 1:
            raise ValueError(f"xtimer's Megatron strategy writes torch_dist version 1, not {backend} {version}")
        super().__init__(backend, version)
        self._shm_dir = shm_dir
        self._threads = copy_threads
        self.keep_only_main_replica = keep_only_main_replica
        self._folders = None  # _Folders of the parent of the last folder saved into
        # What the last async_save did: {"folder", "save", "copy_s": the plan and the copy into
        # shared memory, "strategy_s": all of async_save (with the translation and agreements)}
        self.last_save = None

    @property
    def can_handle_sharded_objects(self):
        return True

    def _folders_of(self, parent):
        if self._folders is None or self._folders.checkpoint_dir != parent:
            if self._folders is not None:
                self._folders.wait_latest_checkpoint()
                self._folders.close()
            self._folders = _Folders(parent, shm_dir=self._shm_dir, copy_threads=self._threads)
        return self._folders

    def async_save(self, sharded_state_dict, checkpoint_dir):
        """Copies this rank's shards into shared memory and returns megatron's AsyncRequest,
        whose function waits for the rank's files (its finalize raises a write error)."""
        started = time.perf_counter()
        folder = _real(checkpoint_dir)
        if not os.path.isdir(folder):
            raise CheckpointError(f"xtimer.ckpt: {checkpoint_dir} is not a folder (megatron saves into one)")
        sd, _, _ = _mt._replace_state_dict_keys_with_sharded_keys(sharded_state_dict, self.keep_only_main_replica)
        pyt = _mt.mcore_to_pyt_state_dict(sd, False)
        rank, world = _rank_world()
        fc = self._folders_of(os.path.dirname(folder))
        dist = _dist()
        with fc._lock:
            persister = fc._get_persister(rank)
            persister.wait_taken()  # its slot holds the previous save until the persister copied it
            if self.last_save is not None and self.last_save["folder"] == folder:
                persister.wait_done(3600)  # saved into again: the previous files first
            save = _agreed_save_number(dist, world)  # every rank's persister is out of the folder
            if rank == 0:
                _remove_old_results(folder)  # before the snapshot's all-reduce, so before any request
            t0 = time.perf_counter()
            entries, keep = fc._snapshot(save, pyt, rank, world, True)
            tree = json.loads(_tree_json(len(entries) - 3))
            tree["megatron_dir"] = folder
            saved, why = fc._get_core(rank).save(save, world, json.dumps(tree, separators=(",", ":")), entries, False)
            del keep
            if not saved:
                raise CheckpointError(f"xtimer.ckpt: the copy into shared memory was skipped: {why}")
            # The persister starts once megatron's caller has started the request (it forks the
            # training process first), or after GO_WITHIN seconds if nobody starts it.
            persister.request(save, {"dir": folder, "go_within": GO_WITHIN})
            now = time.perf_counter()
            self.last_save = {"folder": folder, "save": save, "copy_s": now - t0, "strategy_s": now - started}

        def finalize():
            if persister.error:
                persister.wait_done(60)  # raises the persister's error

        return AsyncRequest(_wait_written, (folder, rank, save, persister.pid), [finalize])

    def wait(self, timeout=1800):
        """Until this rank's newest files are written."""
        if self._folders is not None:
            self._folders.wait_latest_checkpoint(timeout)

    def close(self):
        if self._folders is not None:
            self._folders.close()


class FlashLoadStrategy(_mt.TorchDistLoadShardedStrategy):
    """Megatron-Core load strategy: megatron's TorchDistLoadShardedStrategy with a reader that
    takes what the nodes hold in memory for the folder, the rest from its files.
    shm_dir, copy_threads, verify_files: as FsdpShardCheckpointer's."""

    def __init__(self, *, shm_dir=None, copy_threads=0, verify_files=True):
        super().__init__()
        self._shm_dir = shm_dir
        self._threads = copy_threads
        self._verify = verify_files
        self.loaded_from = None  # {"memory": [saving ranks], "disk": [...] or "all"}

    def load(self, sharded_state_dict, checkpoint_dir):
        from torch.distributed import checkpoint

        mt = _mt  # megatron's own translation (the same calls as its TorchDistLoadShardedStrategy)
        folder = _real(checkpoint_dir)
        tensors = [t for t in mt.nested_values(sharded_state_dict) if isinstance(t, mt.ShardedTensor)]
        sd, flat_mapping, rename_mapping = _mt._replace_state_dict_keys_with_sharded_keys(sharded_state_dict)
        pyt = _mt.mcore_to_pyt_state_dict(sd, True)
        fc = _Folders(
            os.path.dirname(folder), shm_dir=self._shm_dir, copy_threads=self._threads, verify_files=self._verify
        )
        try:
            reader = _reader(fc, folder)
            self.loaded_from = fc._loaded_from
            planner = mt.MCoreLoadPlanner(
                shapes_validation_sharded_tensors=[t for t in tensors if not t.allow_shape_mismatch],
                allow_shape_mismatch_sharded_tensors={t.key: t for t in tensors if t.allow_shape_mismatch},
            )
            try:
                checkpoint.load_state_dict(pyt, reader, planner=planner)
            except CheckpointError:
                raise
            except (Exception, DcpCheckpointException) as e:  # megatron's or DCP's refusal: one line
                raise CheckpointError(
                    f"xtimer.ckpt: megatron cannot load {folder} at this layout: {_one_line(e)}"
                ) from None
        finally:
            fc.close()
        out = {k: mt._unwrap_pyt_sharded_tensor(v) for k, v in pyt.items()}
        out = mt._replace_sharded_keys_with_state_dict_keys(out, flat_mapping, rename_mapping)
        mt._restore_dict_types(out, sharded_state_dict)
        return out


def _one_line(e):
    """What a load's exception says, in one line: DCP's CheckpointException carries each rank's
    exception with its stack; the first rank's is told, and which ranks failed."""
    ranks = ""
    if isinstance(e, DcpCheckpointException) and e.failures:
        ranks = f" (ranks {sorted(e.failures)})"
        first = next(iter(e.failures.values()))
        e = first[0] if isinstance(first, tuple) else first
    return f"{type(e).__name__}: {' '.join(str(e).split())[:400]}{ranks}"


def register(**kwargs):
    """Puts the strategies in megatron's registry under (BACKEND, 1): SAVE_SHARDED (and
    ASYNC_SAVE_SHARDED where megatron has it) and LOAD_SHARDED, so that a stack that picks its
    strategies by name gets them: get_default_strategy(StrategyAction.SAVE_SHARDED, "xtimer_flash", 1).
    Returns the save strategy. kwargs: FlashSaveStrategy's."""
    save = FlashSaveStrategy(**kwargs)
    register_default_strategy(StrategyAction.SAVE_SHARDED, BACKEND, 1, save)
    if hasattr(StrategyAction, "ASYNC_SAVE_SHARDED"):
        register_default_strategy(StrategyAction.ASYNC_SAVE_SHARDED, BACKEND, 1, save)
    load_kwargs = {k: v for k, v in kwargs.items() if k in ("shm_dir", "copy_threads")}
    register_default_strategy(StrategyAction.LOAD_SHARDED, BACKEND, 1, FlashLoadStrategy(**load_kwargs))
    return save


def _reader(fc, folder):
    """Collective. A StorageReader over `folder`: the snapshots of it that some node holds in
    memory (each read by a rank of its node), the rest from its files (checked, and verified
    where xtimer wrote them). fc._loaded_from says which."""
    dist = _dist()
    rank, world = _rank_world()

    def ours(info):
        try:
            return json.loads(info[2])["tree"].get("megatron_dir") == folder
        except (ValueError, KeyError, TypeError, AttributeError):
            return False

    try:
        core = fc._get_core(rank)
        mem = _node_snapshots(
            core,
            rank,
            lambda r: _ckpt.RankCheckpointer(fc._core_dir, r, fc._shm_dir, -1, 0, "", 300.0, 0),
            ours,
        )
    except CheckpointError as e:
        log.warning("xtimer.ckpt: this rank's shared-memory snapshot is not usable: %s", e)
        mem = []
    everyone = [(rank, mem)]
    if dist is not None and world > 1:
        everyone = [None] * world
        dist.all_gather_object(everyone, (rank, mem))
    newest = max((s for _, snaps in everyone for _, s, _ in snaps), default=None)
    holders, sw = {}, None
    for r, snaps in everyone:
        for sr, s, w in snaps:
            if s == newest:
                holders.setdefault(sr, []).append(r)
                sw = w
    assign, load = {}, {}
    for sr in sorted(holders):
        cands = holders[sr]
        pick = sr if sr in cands else min(cands, key=lambda r: (load.get(r, 0), r))
        assign[sr] = pick
        load[pick] = load.get(pick, 0) + 1
    local_data, glob_, err = {}, None, None
    for sr, r in assign.items():
        if r != rank:
            continue
        try:
            local, g, data = _read_snapshot(fc, sr)
            if local["step"] != newest:
                raise CheckpointError(f"the shared-memory snapshot of rank {sr} changed during the load")
            local_data[sr] = (local, data)
            glob_ = glob_ or g
        except CheckpointError as e:
            err = f"the snapshot of saving rank {sr} is not usable: {e}"
            break
    errs = [err]
    if dist is not None and world > 1 and assign:
        errs = [None] * world
        dist.all_gather_object(errs, err)
    errs = [e for e in errs if e]
    if errs:
        log.warning("xtimer.ckpt: loading %s from its files: %s", folder, "; ".join(errs))
        assign = {}
    if not assign:
        why, _ = _check_step_files(fc, folder, None)
        if why:
            raise CheckpointError(f"xtimer.ckpt: cannot load {folder}: {why}")
        from torch.distributed.checkpoint import FileSystemReader

        fc._loaded_from = {"memory": [], "disk": "all"}
        return FileSystemReader(folder)
    src = min(assign.values())
    if dist is not None and world > 1:
        box = [glob_ if rank == src else None]
        dist.broadcast_object_list(box, src=src)
        glob_ = box[0]
    keys = [k for k, rs in glob_["owners"].items() if not any(r in assign for r in rs)]
    storage = {}
    if keys:
        why, storage = _check_step_files(fc, folder, keys)
        if why:
            raise CheckpointError(
                f"xtimer.ckpt: cannot load {folder}: the shards of saving rank(s) "
                f"{sorted(set(range(sw)) - set(assign))} are not in memory and its files fail: {why}"
            )
    fc._loaded_from = {"memory": sorted(assign), "disk": [r for r in range(sw) if r not in assign]}
    return _Reader(fc, newest, glob_, assign, local_data, storage or {}, step_dir=folder)
