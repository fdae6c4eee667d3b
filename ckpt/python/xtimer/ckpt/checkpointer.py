"""Flash checkpoint for PyTorch: the state dict into shared memory in about a memcpy's time,
written to disk behind the job by the node's saver, loaded from memory when every rank has it.

    from xtimer.ckpt import Checkpointer, StorageType
    ckpt = Checkpointer("/ckpt/run1")
    ckpt.save_checkpoint(step, state_dict, storage_type=StorageType.MEMORY)  # returns quickly
    ckpt.save_checkpoint(step, state_dict, storage_type=StorageType.DISK)    # memory, then disk
    step, state_dict = ckpt.load_checkpoint()   # newest valid: memory, else disk; (0, None)
    ckpt.wait()                                 # pending disk writes are durable

Across a change of world size (an elastic restart with fewer or more nodes), a step saved with
`replicated=True` (every rank holds the whole state, as in DDP) loads at any world size; a
step of per-rank (sharded) state loads only at the world size that saved it, else
CheckpointError names both sizes.

DdpCheckpointer is DLRover's class of that name: replicated, and load_checkpoint() returns the
state dict alone, so a DLRover user changes only the import.
"""
import atexit
import enum
import glob
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import weakref

from .. import _ckpt
from . import _tree

CheckpointError = _ckpt.CheckpointError
log = logging.getLogger("xtimer.ckpt")

_NUMPY_DTYPES = {
    "float32",
    "float64",
    "float16",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
}


class StorageType(enum.Enum):
    MEMORY = "memory"  # into shared memory only (and to disk by the saver if the process dies)
    DISK = "disk"  # into shared memory, then written to disk behind the job


def _saver_binary():
    """xtimer_ckpt_saver next to this package (<prefix>/bin from <prefix>/lib/python/xtimer),
    else on PATH."""
    here = os.path.dirname(os.path.abspath(_ckpt.__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "..", "bin", "xtimer_ckpt_saver"))
    if os.access(cand, os.X_OK):
        return cand
    # Not found: the core says so once and writes disk saves itself.
    return shutil.which("xtimer_ckpt_saver") or "xtimer_ckpt_saver"


_failed = False


def _note_failure_excepthook():
    """An uncaught exception ends the process as a failure: do not mark segments closed then,
    so that the saver writes their newest snapshot to disk."""
    previous = sys.excepthook

    def hook(tp, value, tb):
        global _failed
        _failed = True
        previous(tp, value, tb)

    sys.excepthook = hook


_note_failure_excepthook()
_live = weakref.WeakSet()


@atexit.register
def _close_all():
    if _failed:
        return
    for c in list(_live):
        try:
            c.close()
        except Exception:  # never turn an exit into an error
            pass


def _dist():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist
    except ImportError:
        pass
    return None


class _Entries:
    """Turns array leaves into what the core copies; keeps temporaries alive."""

    def __init__(self, torch):
        self.torch = torch
        self.keep = []
        self.cuda_devices = set()

    def entry(self, name, obj):
        torch = self.torch
        if torch is not None and isinstance(obj, torch.Tensor):
            t = obj.detach()
            if t.layout != torch.strided:
                raise TypeError(f"{name}: cannot save a {t.layout} tensor; convert it to dense first")
            if t.is_quantized:
                raise TypeError(f"{name}: cannot save a quantized tensor")
            if t.is_conj():
                t = t.resolve_conj()
            if t.is_neg():
                t = t.resolve_neg()
            dev = t.device
            if dev.type == "cuda":
                if not t.is_contiguous():
                    t = t.contiguous()
                self.cuda_devices.add(dev.index if dev.index is not None else torch.cuda.current_device())
                cuda = dev.index if dev.index is not None else torch.cuda.current_device()
            elif dev.type == "cpu":
                cuda = -1
            else:
                raise TypeError(f"{name}: cannot save a tensor on {dev}; move it to cpu or cuda first")
            self.keep.append(t)
            dtype = str(t.dtype).replace("torch.", "")
            return (
                name,
                dtype,
                str(dev) if dev.type == "cpu" else f"cuda:{cuda}",
                list(t.shape),
                t.data_ptr(),
                t.numel() * t.element_size(),
                t.element_size(),
                list(t.stride()),
                cuda,
            )
        import numpy as np

        a = obj
        if a.dtype.hasobject or a.dtype.name not in _NUMPY_DTYPES:
            raise TypeError(f"{name}: cannot save a numpy array of dtype {a.dtype}")
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        if any(s < 0 or s % a.itemsize for s in a.strides):
            a = np.ascontiguousarray(a)
        self.keep.append(a)
        return (
            name,
            a.dtype.name,
            "numpy",
            list(a.shape),
            a.ctypes.data,
            a.nbytes,
            a.itemsize,
            [s // a.itemsize for s in a.strides],
            -1,
        )


class Checkpointer:
    """One per rank. The rank and world size come from torch.distributed when it is initialised,
    else from RANK / WORLD_SIZE (default 0 / 1)."""

    def __init__(
        self,
        checkpoint_dir,
        *,
        replicated=False,
        shm_dir=None,
        keep=None,
        persist_on_failure=None,
        copy_threads=0,
        saver=None,
        saver_idle_exit=300.0,
    ):
        """checkpoint_dir: the folder on disk (shared by all ranks; DIR/<step>/rank_<r>.xtc).
        replicated: every rank saves the same whole state (DDP), so a step loads at any world
        size (rank r reads the file of rank r % saved_world); recorded in each file's tree.
        shm_dir, keep, persist_on_failure: default to XTIMER_CKPT_SHM_DIR, XTIMER_CKPT_KEEP,
        XTIMER_CKPT_PERSIST_ON_FAILURE. copy_threads: threads of the copy into shared memory (0:
        automatic). saver: path of xtimer_ckpt_saver, or False to write disk saves in this
        process. saver_idle_exit: seconds the saver waits with nothing to do before it exits."""
        self.checkpoint_dir = os.path.realpath(os.fspath(checkpoint_dir))
        self.replicated = bool(replicated)
        self._shm_dir = shm_dir if shm_dir is not None else _ckpt.env_string("XTIMER_CKPT_SHM_DIR")
        self._keep = -1 if keep is None else int(keep)
        self._persist_on_failure = -1 if persist_on_failure is None else int(bool(persist_on_failure))
        self._threads = int(copy_threads)
        self._saver = "" if saver is False else (saver or _saver_binary())
        self._idle_exit = float(saver_idle_exit)
        self._core = None
        self._rank = None
        self._lock = threading.Lock()
        self._warned_path = False
        _live.add(self)

    # --- identity
    def _rank_world(self):
        dist = _dist()
        if dist is not None:
            return dist.get_rank(), dist.get_world_size()
        return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)

    def _get_core(self, rank):
        if self._core is None or self._rank != rank:
            self._core = _ckpt.RankCheckpointer(
                self.checkpoint_dir,
                rank,
                self._shm_dir,
                self._keep,
                self._persist_on_failure,
                self._saver,
                self._idle_exit,
                self._threads,
            )
            self._rank = rank
        return self._core

    # --- save
    def save_checkpoint(self, step, state_dict, path=None, storage_type=StorageType.DISK):
        """Copies state_dict into shared memory (blocking only for that copy) and, for
        StorageType.DISK, asks the saver to write it to DIR/<step>/rank_<r>.xtc. `path` is
        accepted for DLRover compatibility and ignored. Returns False if a memory save was
        skipped because the slot it would overwrite still had to be written to disk (the
        previous snapshot stays current); a disk save waits for that instead."""
        if path is not None and not self._warned_path:
            self._warned_path = True
            log.info(
                "xtimer.ckpt: the path argument is ignored; files go to %s/<step>/rank_<r>.xtc", self.checkpoint_dir
            )
        if isinstance(storage_type, str):
            storage_type = StorageType(storage_type.lower())
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, not {step!r}")
        rank, world = self._rank_world()
        tree, leaves = _tree.flatten(state_dict)
        torch = _tree._torch()
        ents = _Entries(torch)
        entries = [ents.entry(name, obj) for name, obj in leaves]
        if ents.cuda_devices:
            for d in ents.cuda_devices:
                torch.cuda.synchronize(d)  # the copy runs on our own stream
        tree_doc = {"format": "xtimer-ckpt-tree", "version": 1, "root": tree}
        if self.replicated:
            tree_doc["replicated"] = True
        tree_json = json.dumps(tree_doc, separators=(",", ":"), allow_nan=False)
        with self._lock:
            core = self._get_core(rank)
            saved, why = core.save(step, world, tree_json, entries, storage_type == StorageType.DISK)
        del ents
        if not saved:
            log.warning("xtimer.ckpt: memory save of step %d skipped: %s", step, why)
        return saved

    # --- load
    def load_checkpoint(self, map_location=None):
        """Returns (step, state_dict) of the newest valid checkpoint: from memory if every rank
        holds the same newest step there and it verifies, else the newest step on disk whose
        files verify: complete at this world size, or saved with replicated state at any world
        size and with any of its rank files present; (0, None) if no step has any rank file. A
        complete step of sharded state saved at another world size raises CheckpointError naming
        both sizes. A corrupt file, or one that lies in another step's folder or under another
        rank's name, is named and never loaded; if steps exist and none is intact,
        CheckpointError names each step and what is wrong with it.
        map_location: None (the devices they were saved from), or a device for every tensor."""
        rank, world = self._rank_world()
        dist = _dist()
        with self._lock:
            core = self._get_core(rank)
            mem_step, mem = -1, None
            try:
                info = core.memory_index()
                if info is not None:
                    step, ws, index_json = info
                    if ws != world:
                        core.release_memory()
                        log.info(
                            "xtimer.ckpt: memory snapshot of step %d has world size %d, this job %d: not used",
                            step,
                            ws,
                            world,
                        )
                    else:
                        index = json.loads(index_json)
                        leaves = self._alloc(index)
                        core.copy_memory_into([_ptr(v) for v in leaves], self._threads)
                        mem_step, mem = step, (index, leaves)
            except CheckpointError as e:
                core.release_memory()
                log.warning("xtimer.ckpt: the in-memory snapshot is not usable (%s); loading from disk", e)
                mem_step, mem = -1, None
            # Steps of any world size with at least one rank file, newest first. A complete step
            # (every rank's file) always qualifies; one with files missing (a node died before its
            # snapshots reached disk) only if its state is replicated, since any rank's copy will do.
            disk = _ckpt.scan_disk(self.checkpoint_dir)
            steps = {s[0]: s for s in disk}
            disk_top = disk[0][0] if disk else -1
            lo, hi, disk_top = _agree(dist, [mem_step, -mem_step, disk_top], ["min", "min", "min"])
            hi = -hi
            if lo == hi and lo >= 0 and lo >= disk_top:
                index, leaves = mem
                return mem_step, self._build(index, leaves, map_location)
            mem = None
            corrupt = []  # what was wrong with each step tried, for the log and the error
            bound = disk_top
            while bound >= 0:
                mine = next((s[0] for s in disk if s[0] <= bound), -1)
                (cand,) = _agree(dist, [mine], ["min"])
                if cand < 0:
                    break
                ok, result, sw, why = self._read_step(steps.get(cand), cand, rank, world)
                if ok in (_CORRUPT, _INCOMPLETE) and why:
                    corrupt.append(why)
                    # An incomplete newest step is common (a node died before its snapshots reached disk).
                    log.log(logging.ERROR if ok == _CORRUPT else logging.INFO, "xtimer.ckpt: %s", why)
                (all_ok,) = _agree(dist, [ok], ["min"])
                if all_ok == _SHARDED_ELSEWHERE:
                    raise CheckpointError(
                        f"step {cand} in {self.checkpoint_dir} was saved by {sw} ranks with per-rank (sharded) state "
                        f"and this job has {world}: it loads only at world size {sw}; state that every rank holds "
                        "in full (DDP) is saved with Checkpointer(..., replicated=True) or DdpCheckpointer"
                    )
                if all_ok == _READ:
                    if corrupt:
                        log.warning("xtimer.ckpt: loaded step %d instead of a newer one that is not intact", cand)
                    if sw != world:
                        log.info(
                            "xtimer.ckpt: step %d was saved at world size %d; loaded at world size %d "
                            "(replicated state)",
                            cand,
                            sw,
                            world,
                        )
                    return cand, self._build(result[0], result[1], map_location)
                if ok == _READ:  # this rank's file was fine, another rank's was not
                    corrupt.append(f"step {cand}: another rank's file of it is not usable (see that rank's log)")
                bound = cand - 1
            # Steps with rank files exist and none loaded: never a silent start from scratch.
            tried = [s for s in disk if s[3]]
            if tried:
                raise CheckpointError(
                    "no intact checkpoint in %s (%d step(s) with rank files, none usable): %s; move the folder "
                    "away (or remove those steps) to start from scratch"
                    % (self.checkpoint_dir, len(tried), "; ".join(corrupt) or "see the log")
                )
            return 0, None

    def _read_step(self, found, step, rank, world):
        """Reads this rank's state of one step found on disk ((step, world, complete, ranks,
        problem) or None). Returns (status, (index, leaves) or None, the step's world size, why);
        `why` names the step and what is wrong with it."""
        if found is None:
            return _CORRUPT, None, world, f"step {step}: no rank file of it in {self.checkpoint_dir}"
        _, sw, complete, ranks, problem = found
        if not ranks:
            return _INCOMPLETE, None, world, ""
        if sw <= 0:
            return _CORRUPT, None, world, f"step {step}: no rank file of it is readable ({problem})"
        if problem:
            return _CORRUPT, None, sw, f"step {step}: {problem}"
        if complete and sw == world:
            src = rank
        else:  # another world size, or files missing: readable only if replicated
            src = rank % sw if rank % sw in ranks else ranks[0]
        try:
            f = _ckpt.XtcFile(_ckpt.rank_file(self.checkpoint_dir, step, src))
            if f.world_size != sw:
                return (
                    _CORRUPT,
                    None,
                    sw,
                    (
                        f"step {step}: rank_{src}.xtc says world size {f.world_size}, rank_{ranks[0]}.xtc of the same "
                        f"step says {sw} (files of different runs mixed in one folder)"
                    ),
                )
            index = json.loads(f.index_json)
            if src != rank or sw != world:
                if not (index.get("tree") or {}).get("replicated"):
                    if complete:
                        return _SHARDED_ELSEWHERE, None, sw, ""
                    missing = [r for r in range(sw) if r not in ranks]
                    return (
                        _INCOMPLETE,
                        None,
                        sw,
                        (
                            f"step {step}: incomplete, rank file(s) {_ranges(missing)} of world size {sw} missing "
                            "(per-rank state needs every rank's file)"
                        ),
                    )
            if all(e["offset"] % 64 == 0 for e in index["entries"]):
                # In place: the file mapped (copy on write) and verified, tensors viewing it.
                # Reading into new tensors would first touch every page of fresh memory, which
                # cost more than the copy itself (docs/benchmarks.md).
                leaves = self._views(index, f.map_verified())
            else:  # not laid out as we write them: read into new memory
                leaves = self._alloc(index)
                f.read_into([_ptr(v) for v in leaves])
            return _READ, (index, leaves), sw, ""
        except CheckpointError as e:
            return _CORRUPT, None, sw, f"step {step}: {e}"

    def _alloc(self, index):
        """Empty CPU tensors / arrays for every entry, in entry order."""
        torch = _tree._torch()
        kinds = _leaf_kinds(index["tree"]["root"] if index.get("tree") else None, len(index["entries"]))
        out = []
        for e, kind in zip(index["entries"], kinds):
            if kind == "n" or torch is None:
                import numpy as np

                if e["dtype"] not in _NUMPY_DTYPES:
                    raise CheckpointError(f"entry {e['name']}: dtype {e['dtype']} needs torch")
                out.append(np.empty(e["shape"], dtype=e["dtype"]))
            else:
                dtype = getattr(torch, e["dtype"], None)
                if not isinstance(dtype, torch.dtype):
                    raise CheckpointError(f"entry {e['name']}: dtype {e['dtype']} is unknown to this torch")
                out.append(torch.empty(e["shape"], dtype=dtype))
        return out

    def _views(self, index, mapping):
        """CPU tensors / arrays over a verified mapping of a rank file, in entry order. They keep
        the mapping alive; writing to them stays private to this process."""
        torch = _tree._torch()
        kinds = _leaf_kinds(index["tree"]["root"] if index.get("tree") else None, len(index["entries"]))
        out = []
        for e, kind in zip(index["entries"], kinds):
            off, nbytes, shape = e["offset"], e["nbytes"], e["shape"]
            if kind == "n" or torch is None:
                import numpy as np

                if e["dtype"] not in _NUMPY_DTYPES:
                    raise CheckpointError(f"entry {e['name']}: dtype {e['dtype']} needs torch")
                dt = np.dtype(e["dtype"])
                out.append(np.frombuffer(mapping, dtype=dt, count=nbytes // dt.itemsize, offset=off).reshape(shape))
                continue
            dtype = getattr(torch, e["dtype"], None)
            if not isinstance(dtype, torch.dtype):
                raise CheckpointError(f"entry {e['name']}: dtype {e['dtype']} is unknown to this torch")
            if nbytes == 0:
                out.append(torch.empty(shape, dtype=dtype))
                continue
            size = torch.empty((), dtype=dtype).element_size()
            out.append(torch.frombuffer(mapping, dtype=dtype, count=nbytes // size, offset=off).view(shape))
        return out

    def _build(self, index, leaves, map_location):
        torch = _tree._torch()
        if torch is not None:
            for i, e in enumerate(index["entries"]):
                if not isinstance(leaves[i], torch.Tensor):
                    continue
                dev = e["device"] if map_location is None else str(map_location)
                if dev != "cpu":
                    if dev.startswith("cuda") and not torch.cuda.is_available():
                        raise CheckpointError(
                            f"entry {e['name']} was saved from {e['device']} but CUDA is not "
                            "available; pass map_location='cpu'"
                        )
                    leaves[i] = leaves[i].to(dev)
        root = index["tree"]["root"] if index.get("tree") else None
        return _tree.unflatten(root, leaves)

    # --- disk
    def wait(self, timeout=None):
        """Blocks until every disk save asked for is durable; shows progress on a terminal when
        it takes long. Raises CheckpointError if one failed, TimeoutError on timeout."""
        if self._core is None:
            return
        core = self._core
        start = time.monotonic()
        shown = False
        tty = sys.stderr.isatty()
        while True:
            if core.wait(0.2):
                break
            waited = time.monotonic() - start
            if timeout is not None and waited > timeout:
                raise TimeoutError(f"xtimer.ckpt: disk writes still pending after {timeout} s")
            step, done, total = core.progress()
            if tty and waited > 2 and step >= 0 and total:
                shown = True
                sys.stderr.write(f"\rxtimer.ckpt: writing step {step}: {done / 2**30:.2f}/{total / 2**30:.2f} GiB  ")
                sys.stderr.flush()
        if shown:
            sys.stderr.write("\n")

    def close(self):
        """Marks a clean end: the saver will not treat this process as failed. Pending disk
        writes still complete (the saver runs on)."""
        with self._lock:
            if self._core is not None:
                self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, tp, value, tb):
        if tp is None:
            self.close()
        return False

    @property
    def shm_path(self):
        """The rank's shared-memory control file (after the first save or load)."""
        return self._core.ctl_path if self._core is not None else None


class DdpCheckpointer(Checkpointer):
    """DLRover's DdpCheckpointer: every rank saves the whole (replicated) state, so a step loads
    at any world size, and load_checkpoint() returns the state dict alone ({} when nothing was
    saved), as DLRover's does. Keep the step inside the state dict to resume from it."""

    # DLRover's constructor arguments, accepted so that its users' calls run unchanged. Its
    # defaults (one shard: the whole state on every rank) are what this class does; the others
    # have no meaning here (one saver per node, files kept by XTIMER_CKPT_KEEP) and are said once.
    _DLROVER_DEFAULTS = {
        "local_shard_num": 1,
        "global_shard_num": 1,
        "comm_backend": "",
        "deletion_strategy": None,
        "save_timeout": None,
        "replica_count": 0,
    }

    def __init__(self, checkpoint_dir, *args, **kwargs):
        names = list(self._DLROVER_DEFAULTS)
        if len(args) > len(names):
            raise TypeError(f"DdpCheckpointer takes at most {len(names) + 1} positional arguments")
        given = dict(zip(names, args))
        for name in names:
            if name in kwargs:
                given[name] = kwargs.pop(name)
        ignored = [f"{k}={v!r}" for k, v in given.items() if k != "save_timeout" and v != self._DLROVER_DEFAULTS[k]]
        if ignored:
            log.warning(
                "xtimer.ckpt: DdpCheckpointer saves the whole state on every rank; DLRover's %s " "has no effect here",
                ", ".join(ignored),
            )
        kwargs.setdefault("replicated", True)
        super().__init__(checkpoint_dir, **kwargs)

    def load_checkpoint(self, resume_path="", map_location=None):
        """The newest valid state dict, {} if there is none. resume_path: accepted for DLRover
        compatibility and ignored (the newest step of checkpoint_dir is loaded)."""
        _, state = super().load_checkpoint(map_location=map_location)
        return {} if state is None else state

    def wait_latest_checkpoint(self, timeout=1800):
        """DLRover's name for wait(): until the newest disk save is on disk."""
        return self.wait(timeout)


# What one rank found in a step (all ranks take the minimum, so one bad file moves every rank on).
_SHARDED_ELSEWHERE = -1  # complete, per-rank state, saved at another world size: an error
_CORRUPT = 0  # this rank's file is missing or did not verify: try an older step
_INCOMPLETE = 1  # files missing and the state is per-rank: try an older step
_READ = 2


def _ranges(ranks):
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _node_snapshots(core, own_rank, open_reader, accept=None):
    """The snapshots of `core`'s checkpoint folder in this node's shared-memory folder, of every
    saving rank: [(saving rank, step, world)]. `core` is this rank's; `open_reader(r)` opens a
    read-only core of saving rank r. A segment that cannot be read is logged and left out, and
    so is one for which accept(its memory_index()) is false."""
    base = os.path.basename(core.ctl_path)
    prefix = base[: base.rindex("-r") + 2]
    found = []
    for p in glob.glob(os.path.join(os.path.dirname(core.ctl_path), glob.escape(prefix) + "*.ctl")):
        m = re.search(r"-r(\d+)\.ctl$", p)
        if not m:
            continue
        r = int(m.group(1))
        try:
            c = core if r == own_rank else open_reader(r)
            info = c.memory_index()
            c.release_memory()
        except CheckpointError as e:
            log.warning("xtimer.ckpt: shared-memory snapshot %s not usable: %s", p, e)
            continue
        if info is not None and (accept is None or accept(info)):
            found.append((r, info[0], info[1]))
    return found


def _ptr(v):
    import numpy as np

    if isinstance(v, np.ndarray):
        return v.ctypes.data
    return v.data_ptr()


def _leaf_kinds(root, n):
    kinds = ["t"] * n

    def walk(node):
        if isinstance(node, dict):
            if "n" in node and isinstance(node["n"], int) and len(node) == 1:
                if 0 <= node["n"] < n:
                    kinds[node["n"]] = "n"
                return
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(root)
    return kinds


def _agree(dist, values, ops):
    """All-reduce small ints (min) across ranks; identity without torch.distributed."""
    if dist is None:
        return list(values)
    import torch

    dev = "cpu"
    if dist.get_backend() == "nccl":
        dev = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor(values, dtype=torch.int64, device=dev)
    assert all(op == "min" for op in ops)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return [int(x) for x in t.tolist()]
