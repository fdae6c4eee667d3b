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
"""
import io
import json
import logging
import os
import re
import shutil
import tempfile

import torch
import torch.distributed as dist
from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointEngine

from .. import _ckpt
from ._ds_persist import STEP_FILE as _STEP_FILE
from ._ds_persist import _pack, _unpack
from ._persister import Persister
from .checkpointer import Checkpointer, CheckpointError, StorageType, _agree, _node_snapshots, _ptr

__all__ = ["DeepSpeedCheckpointer", "StorageType"]
log = logging.getLogger("xtimer.ckpt")
_CONVERTED = "xtimer_converted"  # in <dir>/<tag>_universal/: ds_to_universal completed
_OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


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
        return torch.load(path, map_location=map_location, weights_only=False)


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
                int(self.engine.global_steps), {"save_dir": save_dir, "world": world, "latest": bool(save_latest)}
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
        # Into memory only: the persister writes DeepSpeed's files of a DISK save from it; the
        # node's saver persists it (as a snapshot) only when the process dies.
        self._saved = self._ckpt.save_checkpoint(step, packed, storage_type=StorageType.MEMORY)

    # --- load
    def load_checkpoint(self, load_dir=None, tag=None, **kwargs):
        """The newest checkpoint into the engine: the snapshot (memory, else persisted after a
        crash) if it is not older than the tag `latest` names, else DeepSpeed's files. A given
        `tag` loads DeepSpeed's files of that tag. Other keyword arguments go to
        engine.load_checkpoint. Returns what engine.load_checkpoint returns (load path, client
        state); (None, None) when there is nothing to load."""
        load_dir = os.path.realpath(os.fspath(load_dir)) if load_dir else self.checkpoint_dir
        self._get_persister()
        if tag is not None:
            return self._load_tag(load_dir, str(tag), **kwargs)
        elsewhere = None  # a complete persisted snapshot of another world size
        try:
            step, snap = self._ckpt.load_checkpoint(map_location="cpu")
        except CheckpointError as e:  # e.g. a snapshot of another world size
            step, snap = -1, None
            elsewhere = self._persisted_elsewhere()
            if elsewhere is None:
                log.warning("xtimer.ckpt: the flash snapshot is not usable here (%s); loading DeepSpeed's files", e)
        disk_tag, disk_step = _latest(load_dir)
        if snap is not None and step >= disk_step:
            return self._load_snapshot(load_dir, step, snap, **kwargs)
        # Every rank got the same answer above: the same ranks look at the nodes' memory.
        memory = self._memory_elsewhere() if snap is None else None
        if memory is not None and memory[0] > max(disk_step, elsewhere[0] if elsewhere else -1):
            return self._load_memory_elsewhere(memory, **kwargs)
        if elsewhere is not None and elsewhere[0] >= disk_step:
            return self._load_persisted(elsewhere, **kwargs)
        if disk_tag is None:
            return None, None
        return self._load_tag(load_dir, disk_tag, **kwargs)

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
        loads through DeepSpeed's universal checkpoint like DeepSpeed's own files."""
        step, saved = found[0], found[1]
        root = os.path.join(self._ckpt.checkpoint_dir, f"deepspeed-{step}")
        said = ["", None, 0]  # why it failed, the tag, its data-parallel size
        if self.engine.global_rank == 0:
            try:
                said[1] = self._export(found, root)
                said[2] = _dp_size(os.path.join(root, said[1]))
            except Exception as e:  # noqa: BLE001  (said on every rank)
                said[0] = f"{type(e).__name__}: {e}".splitlines()[0]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast_object_list(said, src=0)
        if said[0]:
            raise CheckpointError(
                f"the snapshot of step {step} in {self._ckpt.checkpoint_dir}, saved by {saved} ranks, could not be "
                f"written out as DeepSpeed's files: {said[0]}; restart with {saved} ranks"
            )
        log.info("xtimer.ckpt: snapshot of step %d saved by %d ranks, written out to %s", step, saved, root)
        return self._load_tag(root, said[1], saved=said[2], **kwargs)

    def _memory_elsewhere(self):
        """Collective. The newest step of another world size whose snapshots, of every rank that
        saved it, are in the shared memory of some node of this job: (step, saved world size,
        {saving rank: the lowest rank of a node holding it}); None if there is none."""
        rank, world = self._ckpt._rank_world()
        mine = [
            (r, step, saved)
            for r, step, saved in _node_snapshots(self._ckpt._get_core(rank), rank, self._segment)
            if saved != world
        ]
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
        of that size (through DeepSpeed's universal checkpoint)."""
        step, saved, readers = found
        rank, world = self._ckpt._rank_world()
        root = os.path.join(self._ckpt.checkpoint_dir, f"deepspeed-{step}")
        on = dist.is_available() and dist.is_initialized() and world > 1
        if rank == 0:
            shutil.rmtree(root, ignore_errors=True)
        if on:
            dist.barrier()
        said = ["", None]  # why it failed, the tag
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
                said[1] = snap["tag"]
                _write_files(snap, root)
        except Exception as e:  # noqa: BLE001  (said on every rank)
            said[0] = f"rank {rank}: {type(e).__name__}: {e}".splitlines()[0]
        every = [said]
        if on:
            every = [None] * world
            dist.all_gather_object(every, said)
        why = "; ".join(w for w, _ in every if w)
        if why:
            raise CheckpointError(
                f"the shared-memory snapshots of step {step}, saved by {saved} ranks, could not be written out as "
                f"DeepSpeed's files in {root}: {why}; restart with {saved} ranks"
            )
        tag = next(t for _, t in every if t)
        log.info("xtimer.ckpt: memory snapshots of step %d saved by %d ranks, written out to %s", step, saved, root)
        return self._load_tag(root, tag, saved=_dp_size(os.path.join(root, tag)), **kwargs)

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
            tag = snap["tag"]
            _write_files(snap, root)
        return tag

    def _load_tag(self, load_dir, tag, saved=None, **kwargs):
        """DeepSpeed's files of a tag into the engine; saved at another data-parallel size, through
        DeepSpeed's universal checkpoint (converted once, into <load_dir>/<tag>_universal)."""
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
        tag = snap["tag"]
        mine = {rel: _unpack(f["skeleton"], f["tensors"]) for rel, f in snap["files"].items()}
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
        return (os.path.join(load_dir, tag) if load_path else load_path), client_state

    def wait_latest_checkpoint(self, timeout=1800):
        """Until this rank's files of the newest DISK save are on disk (fsynced; `latest` moves
        when the last rank's are). Raises CheckpointError if writing them failed."""
        if self._persister is not None:
            self._persister.wait_done(timeout)
        self._ckpt.wait(timeout)


def _write_files(snap, root):
    """A snapshot's files into root, as DeepSpeed writes them."""
    for rel, f in snap["files"].items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(_unpack(f["skeleton"], f["tensors"]), path)


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


def _latest(load_dir):
    """(tag, step) of DeepSpeed's `latest` in load_dir, (None, -1) when there is none. The step is
    the one a DISK save recorded, else the number that ends the tag (global_stepN)."""
    try:
        with open(os.path.join(load_dir, "latest")) as f:
            tag = f.read().strip()
    except OSError:
        return None, -1
    try:
        with open(os.path.join(load_dir, tag, _STEP_FILE)) as f:
            return tag, int(f.read().strip())
    except (OSError, ValueError):
        m = re.search(r"(\d+)$", tag)
        return tag, int(m.group(1)) if m else -1
