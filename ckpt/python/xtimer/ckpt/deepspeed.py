"""Flash checkpoint for DeepSpeed: DLRover's `DeepSpeedCheckpointer`, on our core.

    from xtimer.ckpt.deepspeed import DeepSpeedCheckpointer, StorageType
    ckpt = DeepSpeedCheckpointer(engine, "/ckpt/run1")
    ckpt.save_checkpoint("/ckpt/run1", tag=None, storage_type=StorageType.MEMORY)  # about a copy
    ckpt.save_checkpoint("/ckpt/run1", storage_type=StorageType.DISK)  # + DeepSpeed's files, behind
    load_path, client_state = ckpt.load_checkpoint("/ckpt/run1")       # newest: memory, else disk

It plugs a checkpoint engine into DeepSpeed (`engine.checkpoint_engine`), so DeepSpeed itself
decides what each rank saves (ZeRO partitions, the model states of data-parallel rank 0; stages 2
and 3 tested):
- every save lands in the rank's shared-memory segment (one snapshot holding all of the
  rank's files of the tag: tensors copied by the core, the rest pickled alongside); when a
  training process dies the node's saver persists the newest snapshot
  (`<dir>/xtimer-flash/<step>/rank_<r>.xtc`);
- a DISK save returns after that copy too; the rank's persister (a process, _ds_persist.py)
  then writes DeepSpeed's own layout from the snapshot, `<dir>/<tag>/*.pt`, and the last rank
  to finish moves `<dir>/latest` (every file fsynced and renamed into place first, so `latest`
  only names complete tags), so that `engine.load_checkpoint` and `zero_to_fp32.py` read it as
  if DeepSpeed had saved it. A MEMORY save writes nothing to disk and leaves `latest` alone.
- `load_checkpoint` loads the newest of the two: the snapshot (memory when every rank holds the
  same step, else the persisted one) when it is not older than the tag `latest` names, through
  DeepSpeed's own loading code, else DeepSpeed's files. Snapshots of another world size (the
  persisted ones, or those every saving rank left in the shared memory of this job's nodes) are
  written out in DeepSpeed's layout (`<dir>/xtimer-flash/deepspeed-<step>/<tag>/`) and loaded as
  below when newer than DeepSpeed's files.
- DeepSpeed's files of a tag saved at another data-parallel size are converted once by
  DeepSpeed's ds_to_universal (rank 0, in its process) into `<dir>/<tag>_universal` and loaded
  from there with DeepSpeed's `load_universal` switched on for that load.

The step of a save is the engine's `global_steps`.

What a load trusts (ckpt/README.md): a snapshot's pickled skeletons are read by _safe_pickle
(containers, numbers, torch and NumPy types, DeepSpeed's classes registered below); anything
else, an unreadable segment, a FIFO among a tag's files or as `latest`, or a file our persister
wrote whose checksum no longer matches its marker is named in one line and the next newest
checkpoint loads (CheckpointError when nothing does). DeepSpeed's own `*.pt` files are read by
DeepSpeed's loader (torch.load, weights_only=False), as without xtimer.
"""
import io
import json
import logging
import os
import re
import shutil
import stat
import tempfile

import torch
import torch.distributed as dist
from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointEngine

from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
from deepspeed.runtime.zero.config import ZeroStageEnum
from deepspeed.utils.tensor_fragment import fragment_address

from .. import _ckpt
from . import _safe_pickle
from ._ds_persist import (
    DONE,
    STEP_FILE,
    _pack,
    _unpack,
    inside,
    read_json,
    read_small,
    skeleton_digest,
    tag_step,
)
from ._files import file_checksum, kind_of, open_regular
from ._persister import Persister
from .checkpointer import Checkpointer, CheckpointError, StorageType, _agree, _node_snapshots, _ptr

__all__ = ["DeepSpeedCheckpointer", "StorageType"]
log = logging.getLogger("xtimer.ckpt")
_CONVERTED = "xtimer_converted"  # in <dir>/<tag>_universal/: ds_to_universal completed
_OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")
_STEP_AT_END = re.compile(r"(\d+)$")

# What DeepSpeed's state dicts hold besides containers, numbers, strings and torch types (ZeRO
# stages 1-3, its optimizer files): the stage, the loss scaler, the parameter slice mappings. A
# skeleton read back from shared memory may name these and nothing else (_safe_pickle); a
# client_state holding another class makes that snapshot unusable (said in one line) and the
# load takes DeepSpeed's files of the last DISK save.
_safe_pickle.allow(ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address)


_CHECKSUMS = True  # check the files our persisters wrote against their markers (off: the benchmark's baseline)


class _Damaged(CheckpointError):
    """A tag's files are not what xtimer's persisters wrote (checksums), or not regular files."""


class _Engine(CheckpointEngine):
    """DeepSpeed's checkpoint engine interface. Within DeepSpeedCheckpointer.save_checkpoint,
    save() collects the tag's files of this rank and commit() puts them into shared memory as
    one snapshot; any other save through the engine (engine.save_checkpoint called directly,
    save_16bit_model) writes files as DeepSpeed's own engine does. load() answers from a loaded
    snapshot, else from disk."""

    def __init__(self, owner):
        super().__init__(None)
        self.name = "XtimerFlashCheckpointEngine"
        self.owner = owner
        self.active = False  # within DeepSpeedCheckpointer.save_checkpoint
        self.files = None  # relative path -> state dict, while such a save runs
        self.served = None  # (root, {relative path: state}) while a load from a snapshot runs

    def create(self, info):
        self.files = {} if self.active else None

    def makedirs(self, path, exist_ok=False):
        if not self.active:  # ours: the persister makes the tag's folder
            os.makedirs(path, exist_ok=exist_ok)

    def save(self, state_dict, path):
        if self.files is None:  # not ours to keep: as DeepSpeed's own engine
            torch.save(state_dict, path)
            return
        rel = os.path.relpath(path, self.owner._save_dir)
        # The tensors are copied into shared memory at commit(), before save_checkpoint returns
        # and before any training step can change them.
        self.files[rel] = state_dict

    def commit(self, info):
        files, self.files = self.files, None
        if files is None:
            return True
        self.owner._commit(info.tag, files)
        return True

    def load(self, path, map_location=None):
        if self.served is not None:
            root, files = self.served
            rel = os.path.relpath(path, root)
            if rel in files:
                return files[rel]
        # DeepSpeed's own trust model for its files (torch.load, weights_only=False), but a FIFO or
        # device planted under a file's name is refused at once instead of blocking the load.
        with os.fdopen(open_regular(path), "rb") as f:
            return torch.load(f, map_location=map_location, weights_only=False)


class DeepSpeedCheckpointer:
    """DLRover's DeepSpeedCheckpointer: flash saves of a DeepSpeed engine."""

    def __init__(self, engine, checkpoint_dir, storage=None, comm_backend="", save_timeout=None, **kwargs):
        """engine: the DeepSpeedEngine. checkpoint_dir: DeepSpeed's save directory (its tags and
        `latest`; snapshots persisted after a crash go to `checkpoint_dir/xtimer-flash`).
        storage, comm_backend, save_timeout: DLRover's, accepted and without effect here.
        Other keyword arguments go to Checkpointer (shm_dir, keep, copy_threads, ...)."""
        if storage is not None or comm_backend:
            log.warning("xtimer.ckpt: DeepSpeedCheckpointer's storage and comm_backend have no effect here")
        self.engine = engine
        self.checkpoint_dir = os.path.realpath(os.fspath(checkpoint_dir))
        self._ckpt = Checkpointer(os.path.join(self.checkpoint_dir, "xtimer-flash"), **kwargs)
        self._engine = _Engine(self)
        self._save_dir = self.checkpoint_dir
        self._persister = None  # the rank's persister process (_get_persister)
        self._digests = None  # file -> sha256 of its skeleton, while a DISK save runs
        engine.checkpoint_engine = self._engine

    # --- save
    def save_checkpoint(
        self,
        save_dir=None,
        tag=None,
        client_state=None,
        save_latest=True,
        storage_type=StorageType.DISK,
        exclude_frozen_parameters=False,
    ):
        """engine.save_checkpoint into shared memory; with StorageType.DISK the rank's persister
        then writes DeepSpeed's files into save_dir (default: checkpoint_dir) and, with
        save_latest, moves `latest` once every rank's files are there. Collective. Returns
        True, or False on every rank if a memory save was skipped because some rank's persister
        had not yet copied the previous disk save out of shared memory (the previous snapshot
        stays current); a disk save waits for that instead."""
        if isinstance(storage_type, str):
            storage_type = StorageType(storage_type.lower())
        save_dir = os.path.realpath(os.fspath(save_dir)) if save_dir else self.checkpoint_dir
        disk = storage_type == StorageType.DISK
        persister = self._get_persister() if disk else self._persister
        if disk:
            persister.wait_taken()
        on = dist.is_available() and dist.is_initialized()
        world = dist.get_world_size() if on else 1
        (ready,) = _agree(dist if world > 1 else None, [int(persister is None or persister.taken())], ["min"])
        if not ready:
            log.warning("xtimer.ckpt: memory save skipped: a persister has not yet copied the last disk save")
            return False
        os.makedirs(save_dir, exist_ok=True)  # DeepSpeed copies zero_to_fp32.py there on every save
        self._save_dir = save_dir
        self._engine.active = True
        self._saved = True
        self._digests = {} if disk else None
        try:
            self.engine.save_checkpoint(
                save_dir,
                tag=tag,
                client_state=client_state or {},
                save_latest=False,  # the persister moves `latest` once the files are there
                exclude_frozen_parameters=exclude_frozen_parameters,
            )
        finally:
            self._engine.active = False
            self._engine.files = None
        if disk and self._saved:
            persister.request(
                int(self.engine.global_steps),
                {"save_dir": save_dir, "world": world, "latest": bool(save_latest), "skeletons": self._digests},
            )
        return self._saved

    def _get_persister(self):
        """The rank's persister; started by the first load or DISK save (its interpreter takes
        seconds to start, behind the job)."""
        if self._persister is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            args = {"core_dir": self._ckpt.checkpoint_dir, "rank": rank, "shm_dir": self._ckpt._shm_dir}
            self._persister = Persister("xtimer.ckpt._ds_persist", args, rank, CheckpointError)
        return self._persister

    def _commit(self, tag, files):
        step = int(self.engine.global_steps)
        packed = {"tag": str(tag), "files": {}}
        for rel, sd in files.items():
            skeleton, tensors = _pack(sd)
            packed["files"][rel] = {"skeleton": skeleton, "tensors": tensors}
            if self._digests is not None:  # a DISK save: the persister unpickles only these bytes
                self._digests[rel] = skeleton_digest(skeleton)
        # Into memory only: the persister writes DeepSpeed's files of a DISK save from it; the
        # node's saver persists it (as a snapshot) only when the process dies.
        self._saved = self._ckpt.save_checkpoint(step, packed, storage_type=StorageType.MEMORY)

    # --- load
    def load_checkpoint(self, load_dir=None, tag=None, **kwargs):
        """The newest checkpoint into the engine: the snapshot (memory, else persisted after a
        crash) if it is not older than the tag `latest` names, else DeepSpeed's files. A given
        `tag` loads DeepSpeed's files of that tag. Other keyword arguments go to
        engine.load_checkpoint. Returns what engine.load_checkpoint returns (load path, client
        state); (None, None) when there is nothing to load.

        What is not usable is said in one line and the next newest is loaded: a snapshot whose
        pickled parts name a class outside the allow-list (a client_state of the user's own
        classes, or bytes someone else wrote into shared memory), an unreadable shared-memory
        segment, a tag whose files xtimer's persisters wrote and whose checksums no longer match,
        a FIFO or device among a tag's files or as `latest`. If such things exist and nothing
        loads, CheckpointError names them (on every rank)."""
        load_dir = os.path.realpath(os.fspath(load_dir)) if load_dir else self.checkpoint_dir
        self._get_persister()
        if tag is not None:
            return self._load_tag(load_dir, str(tag), **kwargs)
        step, snap, elsewhere = self._snapshot()
        tags = self._tags_on_disk(load_dir)
        # Every rank got the same answers above: the same ranks look at the nodes' memory.
        memory = self._memory_elsewhere() if snap is None else None
        # Newest first; at the same step: the snapshot, a persisted snapshot of another world
        # size, DeepSpeed's files, memory snapshots of another world size.
        tries = [(t_step, 1, "tag", t) for t, t_step in tags]
        if snap is not None:
            tries.append((step, 3, "snapshot", snap))
        if elsewhere is not None:
            tries.append((elsewhere[0], 2, "persisted", elsewhere))
        if memory is not None:
            tries.append((memory[0], 0, "memory", memory))
        tries.sort(key=lambda t: t[:2], reverse=True)
        unusable = []
        for t_step, _, kind, what in tries:
            if kind == "snapshot":
                got, why = self._load_snapshot(load_dir, t_step, what, **kwargs)
            elif kind == "persisted":
                got, why = self._load_persisted(what, **kwargs)
            elif kind == "memory":
                got, why = self._load_memory_elsewhere(what, **kwargs)
            else:
                try:
                    got, why = self._load_tag(load_dir, what, **kwargs), ""
                except _Damaged as e:
                    got, why = None, str(e)
                    log.error("xtimer.ckpt: %s; trying an older checkpoint", why)
            if got is not None:
                if unusable:
                    log.warning("xtimer.ckpt: loaded step %d instead of newer checkpoints that are not usable", t_step)
                return got
            unusable.append(why)
        if unusable:
            raise CheckpointError(
                f"no usable checkpoint for {load_dir}: {'; '.join(unusable)}; remove what is named (xtimer_ckpt clean "
                "--all removes shared-memory snapshots) to start from scratch"
            )
        return None, None

    def _dist(self):
        """torch.distributed when this job has more than one rank, else None."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
        return None

    def _gather(self, value):
        """Every rank's value (all_gather_object), [value] with one rank."""
        d = self._dist()
        if d is None:
            return [value]
        every = [None] * d.get_world_size()
        d.all_gather_object(every, value)
        return every

    def _snapshot(self):
        """Collective. (step, snapshot, persisted snapshot of another world size): the snapshot
        Checkpointer loads (memory when every rank holds the same step, else the persisted one),
        or (-1, None, ...) when there is none or some rank's shared-memory segment is not
        readable (a corrupt control file: said in one line naming it; every rank then agrees to
        go on without the snapshots)."""
        rank, _ = self._ckpt._rank_world()
        why = ""
        try:
            self._ckpt._get_core(rank)
        except CheckpointError as e:
            why = str(e)
        (ok,) = _agree(self._dist(), [0 if why else 1], ["min"])
        if not ok:
            log.warning(
                "xtimer.ckpt: the flash snapshot is not usable here (%s); loading DeepSpeed's files",
                why or "another rank's shared-memory segment is not readable, see its log",
            )
            return -1, None, None
        elsewhere = None  # a complete persisted snapshot of another world size
        try:
            step, snap = self._ckpt.load_checkpoint(map_location="cpu")
        except CheckpointError as e:  # e.g. a snapshot of another world size
            step, snap = -1, None
            elsewhere = self._persisted_elsewhere()
            if elsewhere is None:
                log.warning("xtimer.ckpt: the flash snapshot is not usable here (%s); loading DeepSpeed's files", e)
        return step, snap, elsewhere

    def _tags_on_disk(self, load_dir):
        """Collective. DeepSpeed's tags to try, newest first, as rank 0 sees them: [(tag, step)]:
        the tag `latest` names, then older tags whose files xtimer's persisters all wrote (their
        xtimer_step). Without `latest` none (DeepSpeed's own loader would load nothing); with a
        `latest` that is not a regular file (said in one line), every tag xtimer's persisters
        completed."""
        found = [[]]
        d = self._dist()
        if d is None or d.get_rank() == 0:
            try:
                found = [_tags_on_disk(load_dir)]
            except Exception as e:  # noqa: BLE001  (the others wait for the answer)
                log.error("xtimer.ckpt: cannot list the tags of %s: %s: %s", load_dir, type(e).__name__, e)
        if d is not None:
            d.broadcast_object_list(found, src=0)
        return found[0]

    def _persisted_elsewhere(self):
        """The newest persisted snapshot step if it is complete and of another world size, as
        scan_disk gives it (step, world, complete, ranks, problem); else None."""
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        found = _ckpt.scan_disk(self._ckpt.checkpoint_dir)
        top = next((f for f in found if f[3]), None)
        return top if top is not None and top[2] and not top[4] and top[1] != world else None

    def _load_persisted(self, found, **kwargs):
        """A snapshot persisted at another world size: rank 0 writes every saving rank's files out
        in DeepSpeed's layout (<checkpoint_dir>/xtimer-flash/deepspeed-<step>/<tag>/), which then
        loads through DeepSpeed's universal checkpoint like DeepSpeed's own files. Returns (what
        _load_tag returns, "") or, when a pickled part names a class outside the allow-list,
        (None, why)."""
        step, saved = found[0], found[1]
        root = os.path.join(self._ckpt.checkpoint_dir, f"deepspeed-{step}")
        said = ["", None, 0, False]  # why it failed, the tag, its data-parallel size, not allowed
        if self.engine.global_rank == 0:
            try:
                said[1] = self._export(found, root)
                said[2] = _dp_size(os.path.join(root, said[1]))
            except _safe_pickle.UnsafePickle as e:
                said[0], said[3] = str(e), True
            except Exception as e:  # noqa: BLE001  (said on every rank)
                said[0] = f"{type(e).__name__}: {e}".splitlines()[0]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast_object_list(said, src=0)
        if said[3]:
            log.warning("xtimer.ckpt: %s; not loaded", said[0])
            return None, said[0]
        if said[0]:
            raise CheckpointError(
                f"the snapshot of step {step} in {self._ckpt.checkpoint_dir}, saved by {saved} ranks, could not be "
                f"written out as DeepSpeed's files: {said[0]}; restart with {saved} ranks"
            )
        log.info("xtimer.ckpt: snapshot of step %d saved by %d ranks, written out to %s", step, saved, root)
        return self._load_tag(root, said[1], saved=said[2], **kwargs), ""

    def _memory_elsewhere(self):
        """Collective. The newest step of another world size whose snapshots, of every rank that
        saved it, are in the shared memory of some node of this job: (step, saved world size,
        {saving rank: the lowest rank of a node holding it}); None if there is none."""
        rank, world = self._ckpt._rank_world()
        try:
            mine = [
                (r, step, saved)
                for r, step, saved in _node_snapshots(self._ckpt._get_core(rank), rank, self._segment)
                if saved != world
            ]
        except CheckpointError:  # this rank's own segment is not readable (said by _snapshot)
            mine = []
        every = [mine]
        if dist.is_available() and dist.is_initialized() and world > 1:
            every = [None] * world
            dist.all_gather_object(every, mine)
        holders = {}  # (step, saved world) -> {saving rank: reader}
        for g, held in enumerate(every):
            for r, step, saved in held:
                holders.setdefault((step, saved), {}).setdefault(r, g)
        full = [(k, v) for k, v in holders.items() if sorted(v) == list(range(k[1]))]
        if not full:
            return None
        (step, saved), readers = max(full, key=lambda kv: kv[0])
        return step, saved, readers

    def _segment(self, r):
        """Reads the shared-memory snapshot of saving rank r (never saves into it)."""
        return _ckpt.RankCheckpointer(self._ckpt.checkpoint_dir, r, self._ckpt._shm_dir, -1, 0, "", 300.0, 0)

    def _load_memory_elsewhere(self, found, **kwargs):
        """Snapshots in the nodes' shared memory, saved at another world size: each is written out
        in DeepSpeed's layout by the rank that found it (<checkpoint_dir>/xtimer-flash/
        deepspeed-<step>/<tag>/, a folder every node shares), then loaded like DeepSpeed's files
        of that size (through DeepSpeed's universal checkpoint). Returns as _load_persisted."""
        step, saved, readers = found
        rank, world = self._ckpt._rank_world()
        root = os.path.join(self._ckpt.checkpoint_dir, f"deepspeed-{step}")
        on = dist.is_available() and dist.is_initialized() and world > 1
        if rank == 0:
            shutil.rmtree(root, ignore_errors=True)
        if on:
            dist.barrier()
        said = ["", None, False]  # why it failed, the tag, not allowed
        try:
            for r in sorted(r for r, g in readers.items() if g == rank):
                c = self._ckpt._get_core(rank) if r == rank else self._segment(r)
                info = c.memory_index()
                if info is None or info[0] != step:
                    c.release_memory()
                    raise CheckpointError(f"the snapshot of rank {r} is no longer step {step}")
                index = json.loads(info[2])
                leaves = self._ckpt._alloc(index)
                c.copy_memory_into([_ptr(v) for v in leaves], self._ckpt._threads)
                snap = self._ckpt._build(index, leaves, "cpu")
                said[1] = _write_files(snap, root, f"the shared-memory snapshot of step {step}, rank {r} of {saved}")
        except _safe_pickle.UnsafePickle as e:
            said[0], said[2] = str(e), True
        except Exception as e:  # noqa: BLE001  (said on every rank)
            said[0] = f"rank {rank}: {type(e).__name__}: {e}".splitlines()[0]
        every = [said]
        if on:
            every = [None] * world
            dist.all_gather_object(every, said)
        why = "; ".join(w for w, _, _ in every if w)
        if any(bad for _, _, bad in every):
            log.warning("xtimer.ckpt: %s; not loaded", why)
            return None, why
        if why:
            raise CheckpointError(
                f"the shared-memory snapshots of step {step}, saved by {saved} ranks, could not be written out as "
                f"DeepSpeed's files in {root}: {why}; restart with {saved} ranks"
            )
        tag = next(t for _, t, _ in every if t)
        log.info("xtimer.ckpt: memory snapshots of step %d saved by %d ranks, written out to %s", step, saved, root)
        return self._load_tag(root, tag, saved=_dp_size(os.path.join(root, tag)), **kwargs), ""

    def _export(self, found, root):
        """Every saving rank's files of a persisted snapshot into root, as DeepSpeed writes them;
        returns the tag."""
        from .checkpointer import _READ

        step, saved = found[0], found[1]
        shutil.rmtree(root, ignore_errors=True)
        tag = None
        for r in range(saved):
            ok, result, _, why = self._ckpt._read_step(found, step, r, saved)
            if ok != _READ:
                raise CheckpointError(why or f"rank_{r}.xtc of step {step} is not readable")
            snap = self._ckpt._build(result[0], result[1], "cpu")
            tag = _write_files(snap, root, f"the snapshot of step {step}, rank {r} of {saved}, persisted after a crash")
        return tag

    def _load_tag(self, load_dir, tag, saved=None, **kwargs):
        """DeepSpeed's files of a tag into the engine; saved at another data-parallel size, through
        DeepSpeed's universal checkpoint (converted once, into <load_dir>/<tag>_universal).
        Collective. First every file of the tag is checked (_tag_problems, the ranks sharing the
        work): _Damaged (a CheckpointError, on every rank) names what is wrong."""
        try:
            mine = self._tag_problems(load_dir, tag)
        except Exception as e:  # noqa: BLE001  (the check is collective: every rank must get here)
            mine = [f"{os.path.join(load_dir, tag)}: {type(e).__name__}: {e}"]
        problems = sorted({p for ps in self._gather(mine) for p in ps})
        if problems:
            raise _Damaged(f"DeepSpeed checkpoint {os.path.join(load_dir, tag)} not loaded: {'; '.join(problems)}")
        saved = _dp_size(os.path.join(load_dir, tag)) if saved is None else saved
        here = int(getattr(self.engine, "seq_dp_world_size", None) or self.engine.dp_world_size)
        if saved in (0, here):  # 0: no ZeRO partitions, DeepSpeed loads it at any size
            return self.engine.load_checkpoint(load_dir, tag=tag, **kwargs)
        universal = self._universal(load_dir, tag, saved, here)
        log.info(
            "xtimer.ckpt: DeepSpeed checkpoint %s saved at data-parallel size %d, loaded at %d through %s",
            tag,
            saved,
            here,
            universal,
        )
        config = self.engine._config
        before = config.load_universal_checkpoint
        config.load_universal_checkpoint = True
        try:
            return self.engine.load_checkpoint(load_dir, tag=universal, **kwargs)
        finally:
            config.load_universal_checkpoint = before

    def _universal(self, load_dir, tag, saved, here):
        """Tag of the universal checkpoint of <load_dir>/<tag>: rank 0 runs DeepSpeed's
        ds_to_universal on it unless an earlier load did; every rank then checks that it sees the
        result. Raises CheckpointError (on every rank) when that fails."""
        universal = f"{tag}_universal"
        out = os.path.join(load_dir, universal)
        done = os.path.join(out, _CONVERTED)
        why = ""
        if self.engine.global_rank == 0 and not _newer(done, os.path.join(load_dir, tag)):
            why = _convert(os.path.join(load_dir, tag), out)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            whys = [why]
            dist.broadcast_object_list(whys, src=0)
            why = whys[0]
        if not why and not os.path.exists(done):
            why = f"{out} is not visible on this node (the checkpoint folder must be one that every node reads)"
        if why:
            raise CheckpointError(
                f"{os.path.join(load_dir, tag)} was saved at data-parallel size {saved} and this job has {here}; "
                f"converting it to DeepSpeed's universal checkpoint failed: {why}; restart at data-parallel size "
                f"{saved}, or convert it with deepspeed/checkpoint/ds_to_universal.py and load it with "
                '"checkpoint": {"load_universal": true}'
            )
        return universal

    def _load_snapshot(self, load_dir, step, snap, **kwargs):
        """Collective. The snapshot's files through DeepSpeed's loader: (what it returns, "");
        (None, why) on every rank when some rank's snapshot is not usable (a pickled part names
        a class outside the allow-list, or it does not hold DeepSpeed's files), said in one
        line."""
        rank, _ = self._ckpt._rank_world()
        why, tag, mine = "", None, {}
        try:
            tag = _file_name(snap["tag"], f"the flash snapshot of step {step} names the tag")
            for rel, f in snap["files"].items():
                rel = _file_name(rel, f"the flash snapshot of step {step} names the file", nested=True)
                what = f"the flash snapshot of step {step} in shared memory (rank {rank}, {rel})"
                mine[rel] = _unpack(f["skeleton"], f["tensors"], what)
        except CheckpointError as e:
            why = str(e)
        except Exception as e:  # noqa: BLE001  (agreed below: every rank must get there)
            why = f"the flash snapshot of step {step} does not hold DeepSpeed's files ({type(e).__name__}: {e})"
        whys = self._gather(why)
        if any(whys):
            why = why or next(f"rank {r}: {w}" for r, w in enumerate(whys) if w)
            log.warning("xtimer.ckpt: %s; loading DeepSpeed's files", why)
            return None, why
        # DeepSpeed reads some files on every rank that only one rank wrote (the model states of
        # data-parallel rank 0 under ZeRO-1/2), and checks that every rank's optimizer file
        # exists: share the others' names and those files.
        shared = {rel: sd for rel, sd in mine.items() if "optim_states" not in os.path.basename(rel)}
        names = sorted(mine)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, (names, shared))
            every = sorted({n for ns, _ in gathered for n in ns})
            files = {}
            for _, sh in gathered:
                files.update(sh)
            files.update(mine)
        else:
            every, files = names, mine
        root = tempfile.mkdtemp(prefix="xtimer-ds-load-", dir=self._ckpt._shm_dir or None)
        try:
            for rel in every:  # empty stand-ins: DeepSpeed looks for the files, load() serves them
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
            self._engine.served = (root, files)
            load_path, client_state = self.engine.load_checkpoint(root, tag=tag, **kwargs)
        finally:
            self._engine.served = None
            shutil.rmtree(root, ignore_errors=True)
        log.info("xtimer.ckpt: DeepSpeed state of step %d (tag %s) loaded from the flash snapshot", step, tag)
        return ((os.path.join(load_dir, tag) if load_path else load_path), client_state), ""

    def _tag_problems(self, load_dir, tag):
        """What is wrong with the files of a tag that this rank checks: [] when nothing.

        Every rank looks at every file's type (a FIFO, device or socket is named, never opened).
        When xtimer's persisters wrote the tag (its xtimer_step), the files each rank's persister
        recorded in its marker (size and checksum) are read and checked by one loading rank each
        (saving rank r by loading rank r % world size). A file changed after its marker was
        written (by DeepSpeed's own save of the same tag) is not checked; nor are the files of
        tags DeepSpeed wrote itself: they load as they would without xtimer."""
        rank, world = self._ckpt._rank_world()
        return _tag_problems(os.path.join(load_dir, tag), rank, world)

    def wait_latest_checkpoint(self, timeout=1800):
        """Until this rank's files of the newest DISK save are on disk (fsynced; `latest` moves
        when the last rank's are). Raises CheckpointError if writing them failed."""
        if self._persister is not None:
            self._persister.wait_done(timeout)
        self._ckpt.wait(timeout)


def _write_files(snap, root, what):
    """A snapshot's files into root, as DeepSpeed writes them; returns its tag. Its pickled
    parts are read restrictedly (UnsafePickle names a class outside the allow-list)."""
    tag = _file_name(snap["tag"], f"{what} names the tag")
    for rel, f in snap["files"].items():
        rel = _file_name(rel, f"{what} names the file", nested=True)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(_unpack(f["skeleton"], f["tensors"], f"{what} ({rel})"), path)
    return tag


def _file_name(name, what, nested=False):
    """name if it is a file name (nested: a relative path) inside the folder it is joined to;
    else CheckpointError."""
    p = inside(name)
    if p is None or (not nested and os.sep in p):
        raise CheckpointError(f"{what} {name!r}, which is not a name inside the checkpoint folder")
    return p


def _dp_size(tag_dir):
    """Data-parallel size a DeepSpeed tag was saved at: the number of ZeRO partition files
    (zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt), 0 without ZeRO."""
    try:
        names = os.listdir(tag_dir)
    except OSError:
        return 0
    return len({m.group(1) for m in map(_OPTIM_FILE.match, names) if m})


def _newer(path, tag_dir):
    """path exists and is not older than any file of tag_dir (a tag saved again is converted again)."""
    try:
        at = os.path.getmtime(path)
        return all(os.path.getmtime(os.path.join(tag_dir, n)) <= at for n in os.listdir(tag_dir))
    except OSError:
        return False


def _convert(tag_dir, out):
    """DeepSpeed's ds_to_universal, in this process, of tag_dir into out; "" or why it failed."""
    import argparse
    import contextlib

    from deepspeed.checkpoint import ds_to_universal

    shutil.rmtree(out, ignore_errors=True)  # a conversion cut short
    args = argparse.Namespace(
        input_folder=tag_dir,
        output_folder=out,
        num_extract_workers=1,  # in this process: no pool of new interpreters
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,  # DeepSpeed writes the universal info only for some models
    )
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            ds_to_universal.main(args)
        with open(os.path.join(out, _CONVERTED), "w") as f:
            f.write(f"{tag_dir}\n")
    except Exception as e:  # noqa: BLE001  (any failure of the tool: said on every rank)
        log.debug("xtimer.ckpt: ds_to_universal said:\n%s", said.getvalue())
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return ""


def _tags_on_disk(load_dir):
    """See DeepSpeedCheckpointer._tags_on_disk (what rank 0 finds)."""
    try:
        names = sorted(e.name for e in os.scandir(load_dir) if e.is_dir(follow_symlinks=False))
    except OSError:
        names = []
    completed = {}  # tag -> step, of the tags xtimer's persisters completed
    broken = {}  # tag -> why its xtimer_step is not readable
    for name in names:
        try:
            found = tag_step(os.path.join(load_dir, name))
        except CheckpointError as e:
            broken[name] = str(e)
            continue
        if found is not None:
            completed[name] = found[0]
    older = sorted(completed.items(), key=lambda kv: kv[1], reverse=True)
    path = os.path.join(load_dir, "latest")
    instead = "loading the newest tag xtimer's persisters completed"
    try:
        latest = read_small(path, follow=True).decode().strip()
        name = _file_name(latest, f"{path} names the tag")
        if not os.path.isdir(os.path.join(load_dir, name)):
            raise CheckpointError(f"{path} names the tag {latest!r}, which is not a folder of {load_dir}")
    except FileNotFoundError:
        return []  # DeepSpeed's own loader loads nothing without it either
    except (CheckpointError, UnicodeDecodeError) as e:
        why = e if isinstance(e, CheckpointError) else f"{path} is not text"
        log.error("xtimer.ckpt: DeepSpeed's `latest` not read: %s; %s", why, instead)
        return older
    for other, why in broken.items():
        log.error("xtimer.ckpt: %s; %s", why, instead if other == name else "that tag is not loaded")
    if name in broken:
        return older
    m = _STEP_AT_END.search(name)
    step = completed.get(name, int(m.group(1)) if m else -1)
    return [(name, step)] + [(t, s) for t, s in older if s < step]


def _tag_problems(tag_dir, rank, world):
    """DeepSpeedCheckpointer._tag_problems."""
    problems = []
    try:
        entries = list(os.scandir(tag_dir))
    except OSError as e:
        return [f"{tag_dir}: {e.strerror}"]
    for e in entries:
        try:
            mode = e.stat(follow_symlinks=True).st_mode
        except OSError as err:
            problems.append(f"{e.path}: {err.strerror}")
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            problems.append(f"{e.path} is {kind_of(mode)}, not a regular file; remove it")
    try:
        found = tag_step(tag_dir)
    except CheckpointError as e:
        return problems + [str(e)]
    if found is None or problems:
        return problems  # DeepSpeed's own files, or not all of them files
    step, saved = found
    if saved is None:  # written before xtimer_step held the world size
        saved = len([e for e in entries if e.name.startswith(DONE.split("%")[0])])
    for r in range(rank, saved, world):
        marker = os.path.join(tag_dir, DONE % r)
        try:
            done = read_json(marker)
            if done is None:
                raise CheckpointError(f"{marker} does not exist, though {STEP_FILE} says every rank's files are there")
            if not isinstance(done, dict) or done.get("step") != step:
                raise CheckpointError(f"{marker} is not the marker of step {step} (damaged?)")
            marked = os.stat(marker).st_mtime_ns
        except CheckpointError as e:
            problems.append(str(e))
            continue
        except OSError as e:
            problems.append(f"{marker}: {e.strerror}")
            continue
        files = done.get("files")
        if files is None or not _CHECKSUMS:
            continue  # written before the persisters recorded checksums
        if not isinstance(files, dict):
            problems.append(f"{marker} does not list the files (damaged?)")
            continue
        for name, want in files.items():
            problems += _file_problems(tag_dir, name, want, marked, marker)
    return problems


def _file_problems(tag_dir, name, want, marked, marker):
    """[] if the file `name` of tag_dir is as its marker recorded it, else what is wrong."""
    try:
        name = _file_name(name, f"{marker} names the file")
        size, written = int(want["bytes"]), str(want["sum"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return [f"{marker} names {name!r} in a way it cannot (damaged?)"]
    path = os.path.join(tag_dir, name)
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return [f"{path} is missing (xtimer's persister wrote it)"]
    except CheckpointError as e:
        return [str(e)]
    try:
        st = os.fstat(fd)
        if st.st_mtime_ns > marked:
            log.info("xtimer.ckpt: %s changed after xtimer's persister wrote it: loaded as it is, unchecked", path)
            return []
        if st.st_size != size:
            return [f"{path} is {st.st_size} bytes, xtimer's persister wrote {size}: the file is damaged"]
        _, got = file_checksum(fd)
    except OSError as e:
        return [f"{path}: {e.strerror}"]
    finally:
        os.close(fd)
    if got != written:
        return [
            f"{path} does not match the checksum its persister recorded ({written}, now {got}): the file is damaged"
        ]
    return []
