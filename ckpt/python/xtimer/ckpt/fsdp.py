"""Flash checkpoint for FSDP and torch.distributed.checkpoint (DCP), with DLRover's API.

    from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType
    ckpt = FsdpShardCheckpointer("/ckpt/run1")          # every rank, after init_process_group
    sd = {"model": model_sd, "optim": optim_sd, "step": step}   # DTensor / ShardedTensor / tensors
    ckpt.save_checkpoint(step, sd, storage_type=StorageType.MEMORY)   # returns after the copy
    ckpt.save_checkpoint(step, sd, storage_type=StorageType.DISK)     # + written behind the job
    reader = ckpt.get_storage_reader()                   # None: nothing saved
    torch.distributed.checkpoint.load(sd, storage_reader=reader)     # at any world size

A save plans the rank's part of the state the way DCP does (DefaultSavePlanner: every tensor
shard with its global offsets, plain objects as bytes; the plan is reused while the state dict's
structure stays the same), copies the shards into the rank's
shared-memory segment (the same core as Checkpointer: two slots, checksums, one atomic flip)
and returns. A disk save also asks the rank's persister (a separate process, see _dcp_persist.py)
to write the snapshot in DCP's own layout: DIR/<step>/__<rank>_0.distcp (with
DIR/<step>/.xtimer-rank_<rank>.json beside it: where its items lie, its size and checksum) and,
once every rank's file is there, DIR/<step>/.metadata, which torch.distributed.checkpoint.load
and format_utils.dcp_to_torch_save read.

A load (get_storage_reader, collective) takes the newest step that the shared-memory snapshots
of every node plus the disk hold in full: a rank reads the snapshots of its own node, gets the
pieces it needs from other nodes' snapshots over torch.distributed, and reads the rest from
DIR/<step>. Every shard keeps its global offsets, so state saved by N ranks loads on M ranks.
When no step is complete, CheckpointError names the missing shards (fqn, offsets, saving rank).

What others could have written is not trusted: a snapshot's pickles are read with the restricted
reader (_safe_pickle; DCP's plan classes only), every file of a step is checked to be a regular
file before anything opens it (a FIFO never blocks a load), each item to lie within its file, and
the files xtimer's persister wrote to have the size and checksum it recorded in the rank's JSON
results file. A snapshot or step that fails is named in one line and the choice is made again
(all ranks leave out the same); DCP's own .metadata and .distcp payloads are pickles read as
stock torch reads them.
"""
import collections
import functools
import hashlib
import io
import json
import logging
import os
import pickle
import re
import socket
import stat
import threading

from torch.distributed.checkpoint.storage import StorageReader

from .. import _ckpt
from . import _safe_pickle
from ._files import file_checksum as _file_checksum
from ._files import kind_of, open_regular
from ._persister import Persister
from .checkpointer import CheckpointError, StorageType, _Entries, _live, _node_snapshots, _ptr

log = logging.getLogger("xtimer.ckpt")

__all__ = ["FsdpShardCheckpointer", "StorageType", "CheckpointError"]

CORE_SUBDIR = ".xtimer-mem"  # the core's folder (segment key); nothing is written there
# One per rank in DIR/<step> (JSON): where its items lie in its file and the file's checksum.
SIDECAR = ".xtimer-rank_%d.json"
_SIDECAR_RE = re.compile(r"\.xtimer-rank_(\d+)\.json")
_SIDECAR_FORMAT = "xtimer-dcp-rank-1"
_SIDECAR_MAX = 1 << 30  # bytes; a results file of a million items is about 200 MB
# Older xtimer wrote the results as pickles (.xtimer-rank_<r>.pkl). They are never read: such a
# step loads through its .metadata as a stock DCP folder would, without checksums.
_LEGACY_SIDECAR_RE = re.compile(r"\.xtimer-rank_(\d+)\.pkl")
_FORMAT = "xtimer-dcp-snapshot-1"


def _allow_dcp_classes():
    """The classes of DCP that a snapshot's pickles (plan and layout) hold: only these, besides
    containers, numbers and torch's dtypes and sizes, are built when a snapshot is read."""
    from torch.distributed.checkpoint import metadata as md, planner

    _safe_pickle.allow(
        md.Metadata,
        md.MetadataIndex,
        md.TensorStorageMetadata,
        md.BytesStorageMetadata,
        md.ChunkStorageMetadata,
        md.TensorProperties,
        planner.WriteItem,
        planner.WriteItemType,
        planner.TensorWriteData,
    )
    if hasattr(md, "_MEM_FORMAT_ENCODING"):  # TensorProperties' memory format, an enum (torch 2.x)
        _safe_pickle.allow(md._MEM_FORMAT_ENCODING)


_allow_dcp_classes()


def _dist():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def _rank_world():
    dist = _dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def _named_args(names, args, kwargs, what):
    """Positional and keyword arguments by name (DLRover's signatures)."""
    if len(args) > len(names):
        raise TypeError(f"{what}() takes at most {len(names) + 2} positional arguments")
    out = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in out:
            raise TypeError(f"{what}() got an unexpected or repeated argument {k!r}")
        out[k] = v
    return out


def _key(index):
    """A MetadataIndex as a hashable (fqn, offsets) pair."""
    return (index.fqn, tuple(index.offset) if index.offset is not None else None)


def _describe(key):
    fqn, off = key
    return fqn if off is None else f"{fqn} at offsets {list(off)}"


class FsdpShardCheckpointer:
    """One per rank (every rank constructs it, saves and loads collectively).

    checkpoint_dir: the folder on disk, shared by all ranks (DIR/<step>/ in DCP's layout).
    shm_dir, keep: default to XTIMER_CKPT_SHM_DIR, XTIMER_CKPT_KEEP (complete steps kept on disk).
    copy_threads: threads of the copy into shared memory (0: automatic).
    verify_files: before a load reads a step's files that this class wrote, their checksums are
    verified (the ranks share the reading); False checks only their kinds and sizes.
    DLRover's arguments (comm_backend, deletion_strategy, save_timeout) are accepted and have no
    effect."""

    def __init__(
        self,
        checkpoint_dir,
        comm_backend="",
        deletion_strategy=None,
        save_timeout=None,
        *,
        shm_dir=None,
        keep=None,
        copy_threads=0,
        verify_files=True,
    ):
        if comm_backend or deletion_strategy is not None:
            log.warning(
                "xtimer.ckpt: FsdpShardCheckpointer ignores DLRover's comm_backend and deletion_strategy "
                "(files kept: XTIMER_CKPT_KEEP)"
            )
        self.checkpoint_dir = os.path.realpath(os.fspath(checkpoint_dir))
        self._core_dir = os.path.join(self.checkpoint_dir, CORE_SUBDIR)
        self._shm_dir = shm_dir if shm_dir is not None else _ckpt.env_string("XTIMER_CKPT_SHM_DIR")
        self._keep = int(keep) if keep is not None else max(1, _ckpt.env_int("XTIMER_CKPT_KEEP"))
        self._threads = int(copy_threads)
        self._verify = bool(verify_files)
        self._core = None
        self._rank = None
        self._layout = None  # (signature, global metadata pickle, owners) of the last save
        self._plan = None  # (structure, its meshes, plan, signature, item kinds): _snapshot
        self._bytes_cache = {}  # fqn -> (plain value, its torch.save bytes) under that plan
        self._persister = None
        self._warned_path = False
        self._lock = threading.Lock()
        _live.add(self)

    # --- the rank's segment
    def _get_core(self, rank):
        if self._core is None or self._rank != rank:
            # saver="": no C++ saver; the snapshot is persisted in DCP's layout by the persister.
            self._core = _ckpt.RankCheckpointer(self._core_dir, rank, self._shm_dir, -1, 0, "", 300.0, self._threads)
            self._rank = rank
        return self._core

    # --- save
    def save_checkpoint(self, step, state_dict, *args, **kwargs):
        """save_checkpoint(step, state_dict, path=None, storage_type=StorageType.DISK)

        Copies this rank's part of state_dict into shared memory (blocking for that copy and
        a small all-reduce) and, for StorageType.DISK, has it written to DIR/<step> in DCP's
        layout behind the job. Collective: every rank calls it with the same step.
        DLRover 0.6.1's form save_checkpoint(step, model, optimizer, extra_sd={}, path="",
        storage_type=DISK) is accepted too (the state: get_state_dict(model, optimizer)).
        Returns False on every rank if a memory save was skipped because some rank's persister
        had not yet copied the previous disk save (the previous snapshot stays current); a
        disk save waits for that instead."""
        import torch

        if isinstance(state_dict, torch.nn.Module):
            a = _named_args(["optimizer", "extra_sd", "path", "storage_type"], args, kwargs, "save_checkpoint")
            from torch.distributed.checkpoint.state_dict import get_state_dict

            msd, osd = get_state_dict(state_dict, a.get("optimizer") or [])
            state_dict = {"model": msd, "optim": osd}
            state_dict.update(a.get("extra_sd") or {})
        else:
            a = _named_args(["path", "storage_type"], args, kwargs, "save_checkpoint")
        path, storage_type = a.get("path"), a.get("storage_type", StorageType.DISK)
        if path and not self._warned_path:
            self._warned_path = True
            log.info("xtimer.ckpt: the path argument is ignored; steps go to %s/<step>", self.checkpoint_dir)
        if isinstance(storage_type, str):
            storage_type = StorageType(storage_type.lower())
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, not {step!r}")
        disk = storage_type == StorageType.DISK
        rank, world = _rank_world()
        with self._lock:
            persister = self._get_persister(rank)
            if disk:
                persister.wait_taken()
            got = self._snapshot(step, state_dict, rank, world, persister.taken())
            if got is None:
                log.warning(
                    "xtimer.ckpt: memory save of step %d skipped: a persister has not yet copied step %d",
                    step,
                    persister.step,
                )
                return False
            entries, keep = got
            core = self._get_core(rank)
            saved, why = core.save(step, world, _tree_json(len(entries) - 3), entries, False)
            del keep
            if not saved:  # cannot happen while only this process writes the segment
                raise CheckpointError(f"memory save of step {step} skipped: {why}")
            if disk:
                persister.request(step)
        return True

    def _snapshot(self, step, state_dict, rank, world, ready):
        """Plans this rank's write items (DCP's default planner), agrees on the global layout
        and on whether every rank is `ready` (an all-reduce; an all-gather of the plans when the
        layout changed) and returns the core's entries: [local pickle, global pickle, bytes
        blob, tensors...] and what keeps them alive; None on every rank if one is not ready.

        The plan is DCP's at the first save and whenever the state dict's structure changes
        (keys, types, dtypes, shapes, DTensor meshes and placements: _structure); while it stays
        the same, the cached plan is used and each item's data taken straight from its value
        (a DTensor's local tensor, a tensor, torch.save bytes of anything else, kept while the
        value is the same plain value), which DCP's planner would resolve to the same data."""
        import numpy as np
        import torch

        planner = self._save_planner()
        planner.set_up_planner(state_dict, None, rank == 0)
        flat = planner.state_dict  # fqn -> value, DCP's flattening
        key, keep_alive = _structure(flat, planner.mappings)
        cached = self._plan
        if key is None or cached is None or cached[0] != key:
            plan = planner.create_local_plan()
            sig = _plan_signature(plan)
            kinds = _item_kinds(plan.items, flat) if key is not None else None
            cached = (key, keep_alive, plan, sig, kinds) if kinds is not None else None
            self._plan = cached
            self._bytes_cache = {}
        else:
            _, _, plan, sig, kinds = cached
        if not self._agree_layout(sig, plan, rank, world, ready):
            return None
        _, global_pickle, disk_of, items_pickle = self._layout
        ents = _Entries(torch)
        tensors, blob, data = [], bytearray(), []
        bytes_cache = self._bytes_cache if kinds is not None else None
        for n, item in enumerate(plan.items):
            if kinds is None:
                obj = planner.resolve_data(item)
                kind = _BYTES if isinstance(obj, io.BytesIO) else _TENSOR
            else:
                kind = kinds[n]
                obj = flat[item.index.fqn]
                if kind == _DTENSOR:
                    obj = obj._local_tensor
            if kind == _BYTES:
                if kinds is not None:
                    obj = _torch_save_bytes(torch, obj, bytes_cache, item.index.fqn)
                else:
                    obj = obj.getbuffer()
                data.append(("b", len(blob), len(obj)))
                blob += obj
            else:
                data.append(("t", len(tensors)))
                tensors.append(ents.entry(f"{item.index.fqn}@{list(item.index.offset or ())}", obj))
        if ents.cuda_devices:
            for d in ents.cuda_devices:
                torch.cuda.synchronize(d)
        local = pickle.dumps(
            {
                "format": _FORMAT,
                "step": step,
                "rank": rank,
                "world": world,
                "items": items_pickle,
                "data": data,
                "disk": disk_of[rank],
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        arrays = [
            np.frombuffer(local, dtype=np.uint8),
            np.frombuffer(global_pickle, dtype=np.uint8),
            np.frombuffer(bytes(blob), dtype=np.uint8),
        ]
        head = [ents.entry(name, a) for name, a in zip(("xtimer.local", "xtimer.global", "xtimer.bytes"), arrays)]
        return head + tensors, (ents, arrays)

    def _save_planner(self):
        """The planner of a save: DCP's default (megatron.py plans as Megatron-Core does)."""
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

        return DefaultSavePlanner()

    def _agree_layout(self, sig, plan, rank, world, ready):
        """Every rank holds the same global layout (DCP metadata, and which rank writes which
        item to disk). One all-reduce tells whether every rank is ready to save and whether
        every rank's plan is still the one its cached layout was computed from; if not, the
        plans are all-gathered and the layout computed again, identically on every rank.
        Returns False (on every rank) if a rank is not ready."""
        dist = _dist()
        have = self._layout is not None and self._layout[0] == (sig, world)
        if dist is not None and world > 1:
            import torch

            dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
            t = torch.tensor([1 if ready else 0, 1 if have else 0], dtype=torch.int64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            if not int(t[0]):
                return False
            if int(t[1]):
                return True
            plans = [None] * world
            dist.all_gather_object(plans, (plan.items, plan.planner_data))
        else:
            if not ready:
                return False
            if have:
                return True
            plans = [(plan.items, plan.planner_data)]
        items = pickle.dumps(plan.items, protocol=pickle.HIGHEST_PROTOCOL)
        self._layout = ((sig, world),) + _global_layout(plans) + (items,)
        return True

    def _get_persister(self, rank):
        if self._persister is None or self._persister.rank != rank:
            self._persister = _start_persister(self, rank)
        return self._persister

    def wait_latest_checkpoint(self, timeout=1800):
        """Blocks until the newest disk save of this rank is written (its data file; the step's
        .metadata follows when every rank's is there). Raises CheckpointError if it failed."""
        if self._persister is not None:
            self._persister.wait_done(timeout)

    wait = wait_latest_checkpoint

    def close(self):
        """A clean end; pending disk writes still complete (the persister runs on)."""
        with self._lock:
            if self._persister is not None:
                self._persister.close()
            if self._core is not None:
                self._core.close()

    # --- load
    def get_storage_reader(self, resume_path=""):
        """A StorageReader for torch.distributed.checkpoint.load / load_state_dict holding the
        newest step that memory and disk hold in full, or None if nothing was saved. Collective.
        A step whose files are not intact (checked, and verified where xtimer wrote them, before
        any reader opens one) or a snapshot that is not usable is named in one line and an older
        step loads; CheckpointError if steps exist and none is intact.
        resume_path: a DCP checkpoint folder to read instead (as FileSystemReader would), after
        the same check of its files (CheckpointError naming the file that fails it)."""
        # The persister's interpreter starts now (torch's import takes seconds), not at the first save.
        self._get_persister(_rank_world()[0])
        if resume_path:
            from torch.distributed.checkpoint import FileSystemReader

            why, _ = _check_step_files(self, os.fspath(resume_path), None)
            if why:
                raise CheckpointError(f"cannot load {resume_path}: {why}")
            return FileSystemReader(resume_path)
        return _find_step(self)

    def load_checkpoint(self, model_or_state_dict=None, optimizer=None, resume_path=""):
        """Loads the newest step into the given state dict in place and returns it ({} if nothing
        was saved), or, DLRover's form, load_checkpoint(model, optimizer): loads model and
        optimizer (torch.distributed.checkpoint.state_dict) and returns the other saved entries."""
        import torch
        import torch.distributed.checkpoint as dcp

        reader = self.get_storage_reader(resume_path)
        if reader is None:
            return {}
        if isinstance(model_or_state_dict, torch.nn.Module):
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            msd, osd = get_state_dict(model_or_state_dict, optimizer if optimizer is not None else [])
            sd = {"model": msd}
            if optimizer is not None:
                sd["optim"] = osd
            for path in (reader.read_metadata().planner_data or {}).values():
                if path and path[0] not in ("model", "optim"):  # the other saved entries, by their place
                    d = sd
                    for part in path[:-1]:
                        d = d.setdefault(part, {})
                    d[path[-1]] = None
            dcp.load(sd, storage_reader=reader)
            set_state_dict(
                model_or_state_dict,
                optimizer if optimizer is not None else [],
                model_state_dict=sd["model"],
                optim_state_dict=sd.get("optim", {}),
            )
            return {k: v for k, v in sd.items() if k not in ("model", "optim")}
        sd = model_or_state_dict if model_or_state_dict is not None else {}
        dcp.load(sd, storage_reader=reader)
        return sd

    @property
    def loaded_from(self):
        """After a load: {"step": S, "memory": [saving ranks read from memory], "disk": [...]}."""
        return getattr(self, "_loaded_from", None)


_TENSOR, _DTENSOR, _BYTES = 0, 1, 2  # how an item's data is taken from its value


def _structure(flat, mappings):
    """What DCP's local plan of a flattened state dict depends on, as one comparable value, and
    the meshes it names by id (kept alive with it, so that an id stays theirs); (None, None)
    when a value is of a kind planned afresh at every save (ShardedTensor, other subclasses)."""
    import torch
    from torch.distributed.tensor import DTensor

    plain = (torch.Tensor, torch.nn.Parameter)
    parts, meshes = [torch.is_grad_enabled()], []
    for fqn, v in flat.items():
        tp = type(v)
        if tp is DTensor:
            lt = v._local_tensor
            if type(lt) not in plain:
                return None, None
            mesh = v.device_mesh
            meshes.append(mesh)
            parts.append(
                (fqn, _DTENSOR, v.dtype, v.shape, id(mesh), v.placements, v.requires_grad)
                + (lt.shape, lt.layout, lt.is_pinned())
            )
        elif tp in plain:
            parts.append((fqn, _TENSOR, v.dtype, v.shape, v.requires_grad, v.layout, v.is_pinned()))
        elif isinstance(v, torch.Tensor):
            return None, None
        else:
            parts.append((fqn, _BYTES))
    return (tuple(parts), tuple(mappings.items())), meshes


def _item_kinds(items, flat):
    """For each write item of a local plan, how its data comes from its flattened value, or
    None if an item is not one value taken whole (then DCP's planner resolves every item)."""
    import torch
    from torch.distributed.checkpoint.planner import WriteItemType
    from torch.distributed.tensor import DTensor

    kinds, seen = [], set()
    for it in items:
        fqn = it.index.fqn
        if fqn in seen or fqn not in flat:
            return None
        seen.add(fqn)
        v = flat[fqn]
        if it.type == WriteItemType.BYTE_IO:
            if isinstance(v, torch.Tensor):
                return None
            kinds.append(_BYTES)
        elif type(v) is DTensor and tuple(it.tensor_data.chunk.sizes) == tuple(v._local_tensor.shape):
            kinds.append(_DTENSOR)
        elif isinstance(v, torch.Tensor) and not any(it.index.offset or ()):
            kinds.append(_TENSOR)
        else:
            return None
    return kinds


def _plan_signature(plan):
    """A digest of a local plan: what the cached global layout was computed from."""
    src = repr(
        [
            (
                i.index.fqn,
                tuple(i.index.offset or ()),
                i.type.value,
                None
                if i.tensor_data is None
                else (
                    tuple(i.tensor_data.size),
                    tuple(i.tensor_data.chunk.sizes),
                    str(i.tensor_data.properties.dtype),
                ),
            )
            for i in plan.items
        ]
    ) + repr(sorted((k, v) for k, v in (plan.planner_data or {}).items()))
    return int.from_bytes(hashlib.sha256(src.encode()).digest()[:7], "little")


_PLAIN = (int, float, str, bool, bytes, type(None))


def _frozen(v):
    """A plain value (numbers, strings, None, lists/tuples/dicts of them) as an exact,
    comparable copy (types kept, floats bit for bit), or None for anything else."""
    tp = type(v)
    if tp in _PLAIN:
        return (tp, v.hex() if tp is float else v)
    if tp in (list, tuple):
        out = []
        for x in v:
            f = _frozen(x)
            if f is None:
                return None
            out.append(f)
        return (tp, tuple(out))
    if tp is dict:
        out = []
        for k, x in v.items():
            fk, fx = _frozen(k), _frozen(x)
            if fk is None or fx is None:
                return None
            out.append((fk, fx))
        return (tp, tuple(out))
    return None


def _torch_save_bytes(torch, obj, cache, fqn):
    """torch.save(obj) as bytes (what DCP writes for a non-tensor value); a plain value that
    is the same as at the previous save reuses that save's bytes."""
    frozen = _frozen(obj)
    hit = cache.get(fqn)
    if frozen is not None and hit is not None and hit[0] == frozen:
        return hit[1]
    buf = io.BytesIO()
    torch.save(obj, buf)
    b = buf.getvalue()
    if frozen is not None:
        cache[fqn] = (frozen, b)
    return b


@functools.lru_cache(maxsize=8)
def _tree_json(n_tensors):
    """The core's tree of a snapshot: three byte arrays (local plan, global layout, bytes items)
    and the tensors; `dcp` marks it for inspect and for Checkpointer (which does not load it)."""
    root = {
        "d": [
            ["local", {"n": 0}],
            ["global", {"n": 1}],
            ["bytes", {"n": 2}],
            ["tensors", {"l": [{"t": 3 + i} for i in range(n_tensors)]}],
        ]
    }
    return json.dumps({"format": "xtimer-ckpt-tree", "version": 1, "root": root, "dcp": _FORMAT}, separators=(",", ":"))


def _global_layout(plans):
    """From every rank's (items, planner_data): the DCP Metadata of the step (pickled, without
    storage_data), which items each rank writes to disk (DCP's deduplication), and for
    every item which ranks hold it."""
    from torch.distributed.checkpoint.default_planner import create_default_global_save_plan
    from torch.distributed.checkpoint.planner import SavePlan
    from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans

    full = [SavePlan(items=list(items), planner_data=pd) for items, pd in plans]
    deduped = dedup_save_plans(full)
    _, md = create_default_global_save_plan(deduped)
    mappings = {}
    for _, pd in plans:
        mappings.update(pd or {})
    md.planner_data = mappings
    owners = collections.defaultdict(list)
    for r, (items, _) in enumerate(plans):
        for it in items:
            owners[_key(it.index)].append(r)
    disk_of = []
    for r, p in enumerate(deduped):
        keep = {_key(it.index) for it in p.items}
        disk_of.append([n for n, it in enumerate(plans[r][0]) if _key(it.index) in keep])
    return pickle.dumps({"md": md, "owners": dict(owners)}, protocol=pickle.HIGHEST_PROTOCOL), disk_of


# ---------------------------------------------------------------------------------------------
# The persister: one process per rank, started with the first save, writes DCP files.


def _start_persister(owner, rank):
    args = {
        "ckpt_dir": owner.checkpoint_dir,
        "core_dir": owner._core_dir,
        "rank": rank,
        "shm_dir": owner._shm_dir,
        "keep": owner._keep,
    }
    return Persister("xtimer.ckpt._dcp_persist", args, rank, CheckpointError)


# ---------------------------------------------------------------------------------------------
# Loading


def _open_regular(path):
    """(descriptor, size) of the regular file at `path` (_files.open_regular's rule, no link
    followed); CheckpointError naming it for anything else, a missing file included."""
    try:
        fd = open_regular(path, follow=False)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    return fd, os.fstat(fd).st_size


def file_checksum(path):
    """(size, checksum) of a regular file (_files.file_checksum); CheckpointError naming the file
    if it is not a regular file or its size changed while it was read."""
    fd, size = _open_regular(path)
    try:
        got, checksum = _file_checksum(fd)
    finally:
        os.close(fd)
    if got != size:
        raise CheckpointError(f"{path} changed while its checksum was computed")
    return size, checksum


def _member(step_dir, rel):
    """The path of a file a step's .metadata or results name: only a name inside the folder."""
    if not isinstance(rel, str) or not rel or "/" in rel or rel in (".", ".."):
        raise CheckpointError(f"{step_dir}: a file name {rel!r} in its metadata is not one of the folder's files")
    return os.path.join(step_dir, rel)


def _is_int(v, low=0):
    return type(v) is int and v >= low


def read_sidecar(path):
    """A rank's results file (SIDECAR, JSON), checked: {"step", "world", "rank", "results":
    [{"fqn", "offset", "index", "size", "file", "at", "length"[, "transforms"]}], "files":
    {name: {"size", "fletcher64"}}}. CheckpointError naming the file otherwise."""
    fd, size = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if size > _SIDECAR_MAX:
            raise CheckpointError(f"{path} is {size} bytes, larger than a results file can be")
        raw = f.read(_SIDECAR_MAX + 1)
    try:
        side = json.loads(raw)
    except ValueError as e:
        raise CheckpointError(f"{path} is not a readable results file (JSON: {e})") from None
    m = _SIDECAR_RE.fullmatch(os.path.basename(path))

    def ok_result(r):
        return (
            isinstance(r, dict)
            and isinstance(r.get("fqn"), str)
            and (r.get("offset") is None or (isinstance(r["offset"], list) and all(_is_int(x) for x in r["offset"])))
            and (r.get("index") is None or _is_int(r["index"]))
            and _is_int(r.get("size"))
            and isinstance(r.get("file"), str)
            and _is_int(r.get("at"))
            and _is_int(r.get("length"))
            and (r.get("transforms") is None or isinstance(r["transforms"], list))
        )

    good = (
        isinstance(side, dict)
        and side.get("format") == _SIDECAR_FORMAT
        and _is_int(side.get("step"))
        and _is_int(side.get("world"), 1)
        and _is_int(side.get("rank"))
        and (m is None or int(m.group(1)) == side["rank"])
        and isinstance(side.get("results"), list)
        and all(ok_result(r) for r in side["results"])
        and isinstance(side.get("files"), dict)
        and all(
            isinstance(v, dict) and _is_int(v.get("size")) and isinstance(v.get("fletcher64"), str)
            for v in side["files"].values()
        )
    )
    if not good:
        raise CheckpointError(f"{path} is not a results file of {_SIDECAR_FORMAT} (or not this rank's)")
    return side


def sidecar_json(step, rank, world, results, files):
    """The results file of a rank (see read_sidecar) from DCP's WriteResults."""
    out = []
    for wr in results:
        si = wr.storage_data
        r = {
            "fqn": wr.index.fqn,
            "offset": None if wr.index.offset is None else [int(x) for x in wr.index.offset],
            "index": wr.index.index,
            "size": int(wr.size_in_bytes),
            "file": si.relative_path,
            "at": int(si.offset),
            "length": int(si.length),
        }
        tds = getattr(si, "transform_descriptors", None)
        if tds is not None:
            r["transforms"] = list(tds)
        out.append(r)
    side = {"format": _SIDECAR_FORMAT, "step": step, "world": world, "rank": rank, "results": out, "files": files}
    return json.dumps(side, separators=(",", ":")).encode()


def write_results(side):
    """DCP's WriteResults of a results file (what FileSystemWriter.finish takes)."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.storage import WriteResult

    out = []
    for r in side["results"]:
        info = _StorageInfo(r["file"], r["at"], r["length"])
        if r.get("transforms") is not None:
            info.transform_descriptors = list(r["transforms"])
        index = MetadataIndex(r["fqn"], None if r["offset"] is None else torch.Size(r["offset"]), r["index"])
        out.append(WriteResult(index=index, size_in_bytes=r["size"], storage_data=info))
    return out


def _read_metadata(path):
    """{key: (file, offset, length)} of a step's DCP .metadata. It is a pickle by DCP's own format
    and is read as torch.distributed.checkpoint reads it (an unrestricted pickle.load: the trust
    model of stock torch); only its kind is checked first, and a file that does not unpickle to a
    Metadata is named."""
    fd, _ = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        try:
            md = pickle.load(f)
            storage = {_key(k): (v.relative_path, int(v.offset), int(v.length)) for k, v in md.storage_data.items()}
        except Exception as e:  # a cut or damaged pickle raises any of a dozen types
            raise CheckpointError(
                f"{path} is not a readable DCP .metadata ({type(e).__name__}: {str(e)[:200]})"
            ) from None
    return storage


def _inspect_step(step_dir, keys, verify):
    """Checks a step folder before any reader opens a file of it (rank 0 of a load): every file
    it names is a regular file (never a FIFO, device, folder or link), each item lies within its
    file, and for the files that xtimer's persister wrote (a results file beside them), their size
    and, where .metadata is there too, each item's place agree with what the persister recorded.
    keys: the items the load needs (None: all, read through .metadata). Returns {"storage": {key:
    (file, offset, length)} of those items, "verify": [(file, size, checksum)] to verify} or
    raises CheckpointError naming the file."""
    try:
        names = os.listdir(step_dir)
    except OSError as e:
        raise CheckpointError(f"{step_dir} cannot be listed ({e.strerror})") from None
    sidecars = {}
    for n in sorted(names):
        m = _SIDECAR_RE.fullmatch(n)
        if m:
            sidecars[int(m.group(1))] = read_sidecar(os.path.join(step_dir, n))
    recorded = {}  # key -> (file, offset, length), from the results files
    sums = {}  # file -> {"size", "fletcher64"}
    for side in sidecars.values():
        for r in side["results"]:
            recorded[(r["fqn"], None if r["offset"] is None else tuple(r["offset"]))] = (
                r["file"],
                r["at"],
                r["length"],
            )
        sums.update(side["files"])
    md_path = os.path.join(step_dir, ".metadata")
    if ".metadata" in names or keys is None:
        storage = _read_metadata(md_path)
        for k, where in storage.items():
            if k in recorded and recorded[k] != where:
                raise CheckpointError(
                    f"{md_path} places {_describe(k)} at {where}, its rank's results file at {recorded[k]}: "
                    "one of them was damaged"
                )
    else:
        storage = recorded
    need = list(storage) if keys is None else list(keys)
    ends = {}
    for k, (rel, off, ln) in storage.items():
        ends[rel] = max(ends.get(rel, 0), off + ln)
    files = set()
    for k in need:
        if k not in storage:
            raise CheckpointError(f"{step_dir}: {_describe(k)} is in none of its files")
        files.add(storage[k][0])
    out = []
    for rel in sorted(files):
        path = _member(step_dir, rel)
        fd, size = _open_regular(path)
        os.close(fd)
        if size < ends[rel]:
            raise CheckpointError(f"{path} is {size} bytes, but its items end at byte {ends[rel]}: it was cut short")
        if sidecars:  # ours: every file has its size and checksum in a results file
            rec = sums.get(rel)
            if rec is None:
                raise CheckpointError(
                    f"{path} has no checksum in the step's {SIDECAR.replace('%d', '*')} files (one is missing)"
                )
            if rec["size"] != size:
                raise CheckpointError(f"{path} is {size} bytes, but {rec['size']} were written")
            if verify:
                out.append((rel, size, rec["fletcher64"]))
    return {"storage": {k: storage[k] for k in need} if keys is not None else None, "verify": out}


def _check_step_files(fc, step_dir, keys):
    """Collective. Rank 0 checks the step folder (_inspect_step) and tells every rank; the files
    to verify are shared out by rank, each reads its share and computes its checksum, and one
    all-gather says whether every file verified. Returns (None, storage) or (the problem, None),
    the same on every rank."""
    dist = _dist()
    rank, world = _rank_world()
    multi = dist is not None and world > 1
    box = [None]
    if rank == 0 or not multi:
        try:
            box = [(None, _inspect_step(step_dir, keys, fc._verify))]
        except CheckpointError as e:
            box = [(str(e), None)]
    if multi:
        dist.broadcast_object_list(box, src=0)
    err, found = box[0]
    if err:
        return err, None
    mine = None
    for rel, size, want in found["verify"][rank::world] if multi else found["verify"]:
        path = os.path.join(step_dir, rel)
        try:
            got_size, got = file_checksum(path)
        except CheckpointError as e:
            mine = str(e)
            break
        if got_size != size or got != want:
            mine = f"{path} does not match the checksum written with it ({got}, written {want}): it was damaged"
            break
    if multi:
        errs = [None] * world
        dist.all_gather_object(errs, mine)
        mine = "; ".join(e for e in errs if e) or None
    return (mine, None) if mine else (None, found["storage"])


def _disk_steps(ckpt_dir):
    """{step: {"complete": .metadata is there, "ranks": [ranks whose results file is there],
    "ours": results files (or older xtimer's) are there, "problem": a file of the step that is
    not a regular file, or None}}. Only names and kinds (lstat): nothing is opened here."""
    out = {}
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        return out
    for name in names:
        if not (name.isascii() and name.isdigit()):
            continue
        d = os.path.join(ckpt_dir, name)
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                continue
            entries = os.listdir(d)
        except OSError:
            continue
        complete, ranks, legacy, problem = False, [], False, None
        for e in sorted(entries):
            m = _SIDECAR_RE.fullmatch(e)
            if e != ".metadata" and not m and not e.endswith(".distcp"):
                legacy = legacy or bool(_LEGACY_SIDECAR_RE.fullmatch(e))
                continue
            try:
                mode = os.lstat(os.path.join(d, e)).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                problem = problem or f"{os.path.join(d, e)} is {kind_of(mode)}, not a regular file"
            elif e == ".metadata":
                complete = True
            elif m:
                ranks.append(int(m.group(1)))
        if complete or ranks or problem:
            out[int(name)] = {
                "complete": complete,
                "ranks": sorted(ranks),
                "ours": bool(ranks) or legacy,
                "problem": problem,
            }
    return out


def _memory_snapshots(fc):
    """The snapshots of this checkpoint folder in this node's shared-memory folder:
    [(saving rank, step, world)]. Own segment that cannot be opened: logged, none."""
    rank = _rank_world()[0]
    try:
        core = fc._get_core(rank)
    except CheckpointError as e:
        log.warning("xtimer.ckpt: this rank's shared-memory snapshot is not usable: %s", e)
        return []
    return _node_snapshots(
        core,
        fc._rank,
        lambda r: _ckpt.RankCheckpointer(fc._core_dir, r, fc._shm_dir, -1, 0, "", 300.0, 0),
    )


def _read_snapshot(fc, saving_rank):
    """Copies one snapshot of this node out of shared memory (checksums verified, pickles read
    with the restricted reader): (local dict, global dict, {key: tensor or bytes})."""
    rank = _rank_world()[0]
    c = (
        fc._get_core(rank)
        if saving_rank == rank
        else _ckpt.RankCheckpointer(fc._core_dir, saving_rank, fc._shm_dir, -1, 0, "", 300.0, 0)
    )
    got = copy_out(c, fc._threads)
    if got is None:
        raise CheckpointError(f"the shared-memory snapshot of rank {saving_rank} went away during the load")
    local, glob_, values = got
    return local, glob_, {_key(item.index): v for item, v in zip(local["items"], values)}


def _snapshot_dtype(torch, name):
    v = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    return v if isinstance(v, torch.dtype) else None


def copy_out(core, threads=0, reuse=None):
    """The current snapshot of a segment, copied out (checksums verified): (local dict, global
    dict, [tensor or bytes per local item]), or None if the segment holds none. reuse: a dict
    kept by the caller across calls; the buffers of an entry of the same name, dtype and shape
    are copied into again (fresh memory's first touch costs more than the copy).

    Shared memory can be written by other users of the node: its pickles are read with the
    restricted reader (_safe_pickle: DCP's plan and metadata classes only) and every part is
    checked; a snapshot that is not one FsdpShardCheckpointer wrote raises CheckpointError
    naming it (and, for a pickle, the class it names)."""
    import numpy as np
    import torch

    info = core.memory_index()
    if info is None:
        return None
    what = f"the shared-memory snapshot of step {info[0]} in {core.ctl_path}"
    try:
        index = json.loads(info[2])
        entries = index["entries"]
        heads = [(e["name"], e["dtype"], len(e["shape"])) for e in entries[:3]]
        if heads != [("xtimer.local", "uint8", 1), ("xtimer.global", "uint8", 1), ("xtimer.bytes", "uint8", 1)]:
            raise ValueError("its first entries are not FsdpShardCheckpointer's")
        specs = []
        for n, e in enumerate(entries):
            shape = e["shape"]
            if not isinstance(shape, list) or not all(_is_int(x) for x in shape):
                raise ValueError(f"entry {n} has the shape {shape!r}")
            dtype = np.uint8 if n < 3 else _snapshot_dtype(torch, e["dtype"])
            if dtype is None:
                raise ValueError(f"entry {n} has the dtype {e['dtype']!r}")
            specs.append((e["name"], e["dtype"], tuple(shape), dtype))
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise CheckpointError(f"{what} is not one that FsdpShardCheckpointer wrote: its index: {e}") from None
    out = []
    for name, dt_name, shape, dtype in specs:
        v = reuse.get((name, dt_name, shape)) if reuse is not None else None
        if v is None:
            v = np.empty(shape, dtype=np.uint8) if dtype is np.uint8 else torch.empty(shape, dtype=dtype)
        out.append(v)
    if reuse is not None:
        reuse.clear()
        reuse.update(((name, dt_name, shape), v) for (name, dt_name, shape, _), v in zip(specs, out))
    core.copy_memory_into([_ptr(v) for v in out], threads)
    local = _safe_pickle.loads(out[0], what + " (its plan, xtimer.local)")
    if not (
        isinstance(local, dict)
        and local.get("format") == _FORMAT
        and all(_is_int(local.get(k)) for k in ("step", "rank", "world"))
        and isinstance(local.get("items"), bytes)
        and isinstance(local.get("data"), list)
        and isinstance(local.get("disk"), list)
    ):
        raise CheckpointError(f"{what} was not saved by FsdpShardCheckpointer")
    local["items"] = _safe_pickle.loads(local["items"], what + " (its write items)")
    glob_ = _safe_pickle.loads(out[1], what + " (its layout, xtimer.global)")
    _check_snapshot(local, glob_, len(out) - 3, out[2].nbytes, what)
    blob = out[2].tobytes()
    values = [blob[d[1] : d[1] + d[2]] if d[0] == "b" else out[3 + d[1]] for d in local["data"]]
    return local, glob_, values


def _check_snapshot(local, glob_, n_tensors, n_bytes, what):
    """The parts of a snapshot agree with each other (what the load and the persister index)."""
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
    from torch.distributed.checkpoint.planner import WriteItem

    items, data = local["items"], local["data"]

    def ok_data(d):
        if not isinstance(d, tuple) or not d:
            return False
        if d[0] == "t":
            return len(d) == 2 and _is_int(d[1]) and d[1] < n_tensors
        return d[0] == "b" and len(d) == 3 and _is_int(d[1]) and _is_int(d[2]) and d[1] + d[2] <= n_bytes

    def ok_key(k):
        return (
            isinstance(k, tuple)
            and len(k) == 2
            and isinstance(k[0], str)
            and (k[1] is None or (isinstance(k[1], tuple) and all(_is_int(x) for x in k[1])))
        )

    def ok_index(ix):
        return (
            isinstance(ix, MetadataIndex)
            and isinstance(ix.fqn, str)
            and (ix.offset is None or (isinstance(ix.offset, tuple) and all(_is_int(x) for x in ix.offset)))
        )

    owners = glob_.get("owners") if isinstance(glob_, dict) else None
    good = (
        isinstance(items, list)
        and len(items) == len(data)
        and all(isinstance(it, WriteItem) and ok_index(it.index) for it in items)
        and all(ok_data(d) for d in data)
        and all(_is_int(i) and i < len(items) for i in local["disk"])
        and isinstance(owners, dict)
        and isinstance(glob_.get("md"), Metadata)
        and all(ok_key(k) and isinstance(v, list) and all(_is_int(r) for r in v) for k, v in owners.items())
    )
    if not good:
        raise CheckpointError(f"{what} was not saved by FsdpShardCheckpointer (its parts disagree)")


def _choose(steps, holders, worlds, disk, bad_mem, bad_disk):
    """The newest step that memory (less the unusable snapshots) and disk (less the unusable
    steps) hold for every saving rank: ((step, saved world or None for disk only) or None,
    the problems of the newer steps). Deterministic: every rank computes the same."""
    problems = []
    for step in steps:
        mine = [f"step {step}: {bad_mem[(step, sr)]}" for sr in sorted(holders.get(step, {})) if (step, sr) in bad_mem]
        hs = {sr: rs for sr, rs in holders.get(step, {}).items() if (step, sr) not in bad_mem}
        ws = worlds.get(step, set())
        if len(ws) > 1:
            problems += mine + [f"step {step}: snapshots of different world sizes {sorted(ws)} in memory"]
            continue
        d = disk.get(step, {"complete": False, "ranks": []})
        if step in bad_disk:
            mine.append(f"step {step}: {bad_disk[step]}")
            d = {"complete": False, "ranks": []}
        if d["complete"] and not hs:
            return (step, None), problems
        if not ws:
            # On disk only and incomplete: some ranks' files were not all written.
            if d["ranks"]:
                mine.append(f"step {step}: on disk without .metadata (rank files {d['ranks']} only) and not in memory")
            problems += mine
            continue
        sw = next(iter(ws))
        missing = [r for r in range(sw) if r not in hs and not d["complete"] and r not in d["ranks"]]
        if not missing:
            return (step, sw), problems
        problems += mine + [(step, sw, missing)]
    return None, problems


def _find_step(fc):
    """Collective. Picks the newest step whose every saving rank is in some node's memory or on
    disk, reads this rank's share of the memory snapshots, checks (and verifies) the files it
    needs on disk, and returns a reader (or None if nothing was saved). A snapshot that cannot be
    read (corrupt, gone, not ours) or a step whose files are not intact is named in one line and
    left out, and the choice is made again: every rank leaves out the same (one all-gather of
    the snapshot errors, the file checks told by rank 0)."""
    dist = _dist()
    rank, world = _rank_world()
    node = (socket.gethostname(), os.path.realpath(fc._shm_dir or "/dev/shm"))
    mem = _memory_snapshots(fc)
    disk = _disk_steps(fc.checkpoint_dir) if rank == 0 else None
    mine = (node, rank, mem, disk)
    if dist is not None:
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
    else:
        everyone = [mine]
    disk = everyone[0][3]
    # step -> saving rank -> [new ranks that can read it (same node)], and the saved world size
    holders = collections.defaultdict(lambda: collections.defaultdict(list))
    worlds = collections.defaultdict(set)
    for nd, r, snaps, _ in everyone:
        for sr, step, sw in snaps:
            holders[step][sr].append(r)
            worlds[step].add(sw)
    steps = sorted(set(holders) | set(disk), reverse=True)
    if not steps:
        return None
    bad_mem = {}  # (step, saving rank) -> why its snapshot is not usable
    bad_disk = {s: d["problem"] for s, d in disk.items() if d.get("problem")}  # step -> why its files are not
    while True:
        chosen, problems = _choose(steps, holders, worlds, disk, bad_mem, bad_disk)
        # Every rank reads its share of the chosen step's memory snapshots (or of the newest one
        # that is incomplete, to name its missing shards).
        first = next((p for p in problems if isinstance(p, tuple)), None)
        target = chosen[0] if chosen else (first[0] if first else None)
        assign = {}
        if target is not None and target in holders:
            load = collections.Counter()
            for sr in sorted(holders[target]):
                if (target, sr) in bad_mem:
                    continue
                cands = holders[target][sr]
                pick = sr if sr in cands else min(cands, key=lambda r: (load[r], r))
                assign[sr] = pick
                load[pick] += 1
        local_data, glob_, err = {}, None, None
        for sr, r in assign.items():
            if r == rank:
                try:
                    local, g, data = _read_snapshot(fc, sr)
                    if local["step"] != target:
                        raise CheckpointError(f"the shared-memory snapshot of rank {sr} changed during the load")
                except CheckpointError as e:
                    err = (sr, f"the snapshot of saving rank {sr} is not usable: {e}")
                    break
                local_data[sr] = (local, data)
                glob_ = glob_ or g
        errs = [err]
        if dist is not None and assign:
            errs = [None] * world
            dist.all_gather_object(errs, err)
        errs = [e for e in errs if e]
        if errs:
            for sr, why in errs:
                bad_mem[(target, sr)] = why
            continue
        # The step's layout goes from the lowest rank that read a snapshot to every rank.
        src = min(assign.values()) if assign else None
        if dist is not None and src is not None:
            box = [glob_ if rank == src else None]
            dist.broadcast_object_list(box, src=src)
            glob_ = box[0]
        if chosen is None:
            _raise_missing(fc, problems, glob_, target)
        step, sw = chosen
        step_dir = os.path.join(fc.checkpoint_dir, str(step))
        storage = None
        if sw is None:
            keys = None  # disk only: every file of .metadata
        else:
            keys = [k for k, rs in glob_["owners"].items() if not any(r in assign for r in rs)]
        if keys is None or keys:
            why, storage = _check_step_files(fc, step_dir, keys)
            if why:
                bad_disk[step] = why
                continue
        break
    if problems:
        log.warning(
            "xtimer.ckpt: loading step %d; newer steps are not complete or not intact: %s",
            step,
            "; ".join(_problem_text(p, None) for p in problems),
        )
    passed = sorted(sr for (s, sr) in bad_mem if s == step)
    if passed:
        log.warning(
            "xtimer.ckpt: loading step %d with the shards of saving rank(s) %s from disk: %s",
            step,
            passed,
            "; ".join(bad_mem[(step, sr)] for sr in passed),
        )
    if sw is None:
        from torch.distributed.checkpoint import FileSystemReader

        fc._loaded_from = {"step": step, "memory": [], "disk": "all"}
        return FileSystemReader(step_dir)
    fc._loaded_from = {"step": step, "memory": sorted(assign), "disk": [r for r in range(sw) if r not in assign]}
    return _Reader(fc, step, glob_, assign, local_data, storage or {})


def _problem_text(p, glob_):
    if isinstance(p, str):
        return p
    step, sw, missing = p
    text = f"step {step}: the shards of saving rank(s) {missing} (of {sw}) are neither in memory nor on disk"
    if glob_ is not None:
        shards = [
            f"{_describe(k)} (rank {min(rs)})"
            for k, rs in sorted(glob_["owners"].items(), key=str)
            if all(r in missing for r in rs)
        ]
        text += ": " + ", ".join(shards[:50]) + (f" and {len(shards) - 50} more" if len(shards) > 50 else "")
    return text


def _raise_missing(fc, problems, glob_, target):
    raise CheckpointError(
        f"no complete checkpoint in {fc.checkpoint_dir} (memory of every node and disk): "
        + "; ".join(_problem_text(p, glob_ if isinstance(p, tuple) and p[0] == target else None) for p in problems)
    )


class _Reader(StorageReader):
    """A DCP StorageReader over the chosen step: this rank's memory snapshots, other ranks'
    (over torch.distributed), and DIR/<step> (or step_dir) for the saving ranks no node holds
    in memory."""

    def __init__(self, fc, step, glob_, assign, local_data, storage, step_dir=None):
        super().__init__()
        self.fc = fc
        self.step = step
        self.md = glob_["md"]
        self.owners = glob_["owners"]
        self.assign = assign  # saving rank -> new rank that holds it in memory
        self.data = {}
        for sr, (local, data) in local_data.items():
            for k, v in data.items():
                self.data.setdefault(k, v)
        self.step_dir = step_dir or os.path.join(fc.checkpoint_dir, str(step))
        self.storage = storage  # key -> (file, offset, length) of the items read from disk (checked)

    # StorageReader's interface
    def reset(self, checkpoint_id=None):
        pass

    def read_metadata(self):
        return self.md

    def set_up_storage_reader(self, metadata, is_coordinator):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False

    def _holder(self, key):
        for sr in self.owners.get(key, ()):
            if sr in self.assign:
                return self.assign[sr]
        return None

    def read_data(self, plan, planner):
        from torch.futures import Future

        dist = _dist()
        rank, world = _rank_world()
        remote, from_disk = [], []
        for req in plan.items:
            k = _key(req.storage_index)
            if k in self.data:
                self._apply(req, self.data[k], planner)
            elif self._holder(k) is not None:
                remote.append(req)
            else:
                from_disk.append(req)
        if dist is not None:
            self._exchange(remote, planner, dist, rank, world)
        elif remote:
            raise CheckpointError("internal: remote shards without torch.distributed")
        self._read_disk(from_disk, planner)
        fut = Future()
        fut.set_result(None)
        return fut

    def _apply(self, req, value, planner):
        import torch
        from torch.distributed.checkpoint.planner import LoadItemType

        if req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(req, io.BytesIO(value))
            return
        src = value
        for dim, (off, ln) in enumerate(zip(req.storage_offsets, req.lengths)):
            src = torch.narrow(src, dim, off, ln)
        dst = planner.resolve_tensor(req).detach()
        if dst.size() != src.size():
            raise CheckpointError(
                f"{_describe(_key(req.storage_index))}: size {tuple(src.size())} does not fit " f"{tuple(dst.size())}"
            )
        dst.copy_(src)
        planner.commit_tensor(req, dst)

    def _exchange(self, remote, planner, dist, rank, world):
        """Gets the pieces this rank needs from other ranks' memory snapshots: the requests are
        all-gathered; tensor pieces go point to point, bytes items in a second all-gather."""
        import torch
        from torch.distributed.checkpoint.planner import LoadItemType

        asks = [
            (
                self._holder(_key(r.storage_index)),
                _key(r.storage_index),
                r.type == LoadItemType.BYTE_IO,
                list(r.storage_offsets),
                list(r.lengths),
            )
            for r in remote
        ]
        everyone = [None] * world
        dist.all_gather_object(everyone, asks)
        dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
        ops, recv, byte_replies = [], [], {}
        for requester, their in enumerate(everyone):
            for n, (holder, k, is_bytes, offs, lens) in enumerate(their):
                if holder != rank:
                    continue
                v = self.data[k]
                if is_bytes:
                    byte_replies[(requester, n)] = bytes(v)
                    continue
                for dim, (off, ln) in enumerate(zip(offs, lens)):
                    v = torch.narrow(v, dim, off, ln)
                v = v.contiguous().reshape(-1).view(torch.uint8)
                if dev is not None:
                    v = v.to(dev)
                if requester == rank:
                    continue
                ops.append(dist.P2POp(dist.isend, v, requester))
        for n, (req, (holder, k, is_bytes, offs, lens)) in enumerate(zip(remote, asks)):
            if is_bytes or holder == rank:
                continue
            dst = planner.resolve_tensor(req).detach()
            buf = torch.empty(
                dst.numel() * dst.element_size(), dtype=torch.uint8, device=dev if dev is not None else "cpu"
            )
            recv.append((req, dst, buf))
            ops.append(dist.P2POp(dist.irecv, buf, holder))
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        for req, dst, buf in recv:
            src = buf.cpu().view(dst.dtype).reshape(dst.shape) if dst.numel() else buf.new_empty(0)
            dst.copy_(src.reshape(dst.shape))
            planner.commit_tensor(req, dst)
        box = [None] * world
        dist.all_gather_object(box, byte_replies)
        for n, (req, a) in enumerate(zip(remote, asks)):
            if a[2]:
                value = box[a[0]][(rank, n)]
                planner.load_bytes(req, io.BytesIO(value))

    def _read_disk(self, reqs, planner):
        import torch
        from torch.distributed.checkpoint.planner import LoadItemType

        if not reqs:
            return
        by_file = collections.defaultdict(list)
        for req in reqs:
            k = _key(req.storage_index)
            info = self.storage.get(k)
            if info is None:
                raise CheckpointError(
                    f"step {self.step}: {_describe(k)} (saved by rank "
                    f"{min(self.owners.get(k, [-1]))}) is neither in memory nor in {self.step_dir}"
                )
            by_file[info[0]].append((req, info))
        for rel, items in by_file.items():
            fd, _ = _open_regular(os.path.join(self.step_dir, rel))  # checked before; never a FIFO
            with os.fdopen(fd, "rb") as f:
                for req, (_, offset, length) in sorted(items, key=lambda x: x[1][1]):
                    f.seek(offset)
                    raw = f.read(length)
                    if req.type == LoadItemType.BYTE_IO:
                        planner.load_bytes(req, io.BytesIO(raw))
                    else:
                        self._apply(req, torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True), planner)
