"""DeepSpeedCheckpointer against what it must not trust (check_ds_trust.py starts it; DeepSpeed
ZeRO-2 on the CPU, gloo, one engine per process, one checkpoint folder per case).

MODE=one (1 rank), one case after the other in this process, each a JSON line in $OUT/one.jsonl
({"case", "step": the engine's step after the load, "want": the step expected, "same": its state
is the one saved at that step, byte for byte, "log": what xtimer.ckpt said, "error": the
exception, if any}). Every load follows a training step that no save holds.
  memory       a MEMORY save after a DISK save loads from memory (DeepSpeed's own classes, its
               ZeRO stage enum among them, pass the restricted unpickler);
  hostile      the memory snapshot's pickled skeleton calls os.system (as bytes someone else
               could write into shared memory would): it must not run ("ran": the file it would
               make), and the DISK save of step 1 loads;
  client       a DISK save at step 1 with a client_state of the user's own class
               (ds_trust_thing.Thing; the persister writes it), a MEMORY save at step 2 with
               another: the snapshot is not used (one line names the class) and step 1 loads
               with its client_state;
  fifo-*       DISK saves at steps 1 and 2, then a FIFO where `latest`, step 2's xtimer_step,
               its marker or its optimizer file was: the load (from disk, no memory snapshot)
               returns instead of waiting on it ("hung" if SIGALRM had to end it after 45 s),
               names the FIFO and loads step 2 (`latest` gone) or step 1;
  bitflip      DISK saves at steps 1 and 2, one bit flipped in a tensor of step 2's optimizer
               file (its mtime kept, as storage corruption leaves it): the file is named and step
               1 loads; then one flipped in step 1's too: CheckpointError names both;
  stock        DeepSpeed's own save (its engine, no xtimer marker) loads as it is;
  stock-over   our DISK save of a tag, then DeepSpeed's own save of the same tag: DeepSpeed's loads,
               its files not taken for damaged ones.

MODE=save2, then MODE=load2 (2 ranks, a job of two processes each time):
  ctl          DISK step 1, MEMORY step 2; before the load rank 1 overwrites the header of its
               segment's control file: both ranks load step 1 from disk, rank 1 names the file;
  hostile      DISK step 1, MEMORY step 2, then rank 1's snapshot replaced by one whose skeleton
               calls os.system: nothing runs, both ranks load step 1 (the load is collective);
  bitflip      DISK steps 1 and 2; one bit flipped in rank 1's optimizer file of step 2: both
               ranks load step 1 (rank 1 flips it before the load).
save2 writes $OUT/save2.json (per case and rank: the control file, the digests of steps 1 and
2); load2 writes one JSON line per case and rank to $OUT/load2.jsonl.
"""
import hashlib
import importlib
import json
import logging
import os
import pickle
import signal
import time
import zipfile

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine  # noqa: E402

from ds_trust_thing import Thing  # noqa: E402  (a user's own class; on PYTHONPATH for the persister too)
from xtimer.ckpt.deepspeed import DeepSpeedCheckpointer, StorageType  # noqa: E402

importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # see deepspeed_worker.py
OUT = os.environ["OUT"]
MODE = os.environ["MODE"]
SHM = os.environ.get("SHM_ROOT", OUT)  # the snapshots' folders go here (a tmpfs, as in a job)
OPTIM = "zero_pp_rank_%d_mp_rank_00_optim_states.pt"


class Evil:
    """Pickles as a call of os.system: what a hostile skeleton holds."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


class Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


said = Said()
logging.getLogger("xtimer.ckpt").addHandler(said)
logging.getLogger("xtimer.ckpt").setLevel(logging.INFO)


def make_engine():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 10**6,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        "zero_optimization": {"stage": 2},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    return engine


def train(engine):
    g = torch.Generator().manual_seed(1000 * (engine.global_steps + 1) + engine.global_rank)
    x, y = torch.randn(2, 16, generator=g), torch.randn(2, 4, generator=g)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()


def digest(engine):
    h = hashlib.sha256()
    for group in engine.optimizer.single_partition_of_fp32_groups:
        h.update(group.detach().contiguous().view(torch.uint8).numpy().tobytes())
    for p in engine.module.parameters():
        h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    for s in engine.optimizer.optimizer.state.values():
        for v in s.values():
            if torch.is_tensor(v):
                h.update(v.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def checkpointer(engine, d, shm):
    """A DeepSpeedCheckpointer of folder d whose snapshots live in shm (a new shm: none)."""
    os.makedirs(shm, exist_ok=True)
    ck = DeepSpeedCheckpointer(engine, d, shm_dir=shm, saver_idle_exit=30)
    return ck


def use(engine, ck):
    engine.checkpoint_engine = ck._engine
    return ck


def disk_save(engine, ck, d, **kw):
    """One step, then a DISK save waited for: (its tag, the state's digest)."""
    use(engine, ck)
    train(engine)
    ck.save_checkpoint(d, storage_type=StorageType.DISK, **kw)
    ck.wait_latest_checkpoint(120)
    if torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()  # every rank's files written: `latest` moved
    return f"global_step{engine.global_steps}", (engine.global_steps, digest(engine))


class Hung(Exception):
    """Raised by SIGALRM in a load that waits (not an OSError: nothing on the way may take it
    for a missing file)."""


def load(engine, ck, d, guard=45):
    """One more step (so that the state loaded is never the one already there), then
    ck.load_checkpoint(d) under SIGALRM: (step, client_state, error, log lines)."""
    use(engine, ck)
    train(engine)
    said.lines = []

    def ring(signum, frame):
        raise Hung("hung: the load did not return within %d s" % guard)

    signal.signal(signal.SIGALRM, ring)
    signal.alarm(guard)
    err, client = None, None
    try:
        path, client = ck.load_checkpoint(d)
        step = engine.global_steps if path else -1
    except Exception as e:  # recorded: the driver checks it
        step, err = -1, f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    return step, client, err, list(said.lines)


def evil_snapshot(ck, step, mark):
    """Replaces this rank's memory snapshot with one of `step` whose skeleton calls os.system,
    checksums and all, as anyone who can write the segment could."""
    skeleton = np.frombuffer(pickle.dumps({"module": Evil(mark)}, protocol=4), dtype=np.uint8).copy()
    rel = f"global_step{step}/mp_rank_00_model_states.pt"
    packed = {"tag": f"global_step{step}", "files": {rel: {"skeleton": skeleton, "tensors": []}}}
    assert ck._ckpt.save_checkpoint(step, packed, storage_type=StorageType.MEMORY)


def flip_tensor_bit(path):
    """Flips one bit in the middle of the largest tensor record of a torch.save file; its mtime
    stays (storage corruption does not change it)."""
    st = os.stat(path)
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        at = info.header_offset + 30 + n + m + info.file_size // 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return at


T0 = time.monotonic()


def got(engine, step, want):
    """The fields of a row: the step loaded and the one wanted, and whether the state is the one
    saved then (want: (step, digest))."""
    return {"step": step, "want": want[0], "same": step == want[0] and digest(engine) == want[1]}


def record(name, **row):
    row.update(rank=torch.distributed.get_rank(), t=round(time.monotonic() - T0, 1))
    with open(os.path.join(OUT, name), "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def one(engine):
    base = os.path.join(OUT, "one")

    def folder(case):
        return os.path.join(base, case), os.path.join(SHM, case)

    # hostile: the skeleton would run os.system
    d, shm = folder("hostile")
    ck = checkpointer(engine, d, shm)
    _, d1 = disk_save(engine, ck, d)
    # First a real snapshot: DeepSpeed's own classes are on the allow-list (it loads from memory).
    train(engine)
    ck.save_checkpoint(d, storage_type=StorageType.MEMORY)
    dm = engine.global_steps, digest(engine)
    step, _, err, lines = load(engine, ck, d)
    record("one.jsonl", case="memory", **got(engine, step, dm), log=lines, error=err)
    train(engine)
    mark = os.path.join(OUT, "hostile-ran")
    evil_snapshot(ck, engine.global_steps, mark)
    step, _, err, lines = load(engine, ck, d)
    record("one.jsonl", case="hostile", **got(engine, step, d1), ran=os.path.exists(mark), log=lines, error=err)

    # client: a client_state of this script's own class
    d, shm = folder("client")
    ck = checkpointer(engine, d, shm)
    _, d1 = disk_save(engine, ck, d, client_state={"thing": Thing(1)})
    train(engine)
    saved2 = ck.save_checkpoint(d, storage_type=StorageType.MEMORY, client_state={"thing": Thing(2)})
    step, client, err, lines = load(engine, ck, d)
    thing = (client or {}).get("thing")
    record(
        "one.jsonl",
        case="client",
        **got(engine, step, d1),
        saved2=saved2,
        thing=getattr(thing, "value", None),
        log=lines,
        error=err,
    )

    # FIFOs where the files of a tag were; loads from disk only (a new shared-memory folder)
    for what in ("latest", "xtimer_step", "marker", "optim"):
        d, shm = folder("fifo-" + what)
        ck = checkpointer(engine, d, shm)
        _, d1 = disk_save(engine, ck, d)
        tag2, d2 = disk_save(engine, ck, d)
        path = {
            "latest": os.path.join(d, "latest"),
            "xtimer_step": os.path.join(d, tag2, "xtimer_step"),
            "marker": os.path.join(d, tag2, ".xtimer-done-rank_0"),
            "optim": os.path.join(d, tag2, OPTIM % 0),
        }[what]
        os.unlink(path)
        os.mkfifo(path)
        reader = checkpointer(engine, d, shm + "-new")
        step, _, err, lines = load(engine, reader, d)
        want = d2 if what == "latest" else d1
        record("one.jsonl", case="fifo-" + what, fifo=path, **got(engine, step, want), log=lines, error=err)

    # bitflip: a damaged file of step 2, then of step 1 too
    d, shm = folder("bitflip")
    ck = checkpointer(engine, d, shm)
    tag1, d1 = disk_save(engine, ck, d)
    tag2, _ = disk_save(engine, ck, d)
    flip_tensor_bit(os.path.join(d, tag2, OPTIM % 0))
    reader = checkpointer(engine, d, shm + "-new")
    step, _, err, lines = load(engine, reader, d)
    record("one.jsonl", case="bitflip", **got(engine, step, d1), log=lines, error=err)
    flip_tensor_bit(os.path.join(d, tag1, OPTIM % 0))
    step, _, err, lines = load(engine, reader, d)
    record("one.jsonl", case="bitflip-all", step=step, log=lines, error=err)

    # stock: DeepSpeed's own save, no xtimer marker
    d, shm = folder("stock")
    engine.checkpoint_engine = TorchCheckpointEngine()
    train(engine)
    engine.save_checkpoint(d)
    ds = engine.global_steps, digest(engine)
    reader = checkpointer(engine, d, shm)
    step, _, err, lines = load(engine, reader, d)
    record("one.jsonl", case="stock", **got(engine, step, ds), log=lines, error=err)

    # stock-over: DeepSpeed's own save of a tag our persister wrote before
    d, shm = folder("stock-over")
    ck = checkpointer(engine, d, shm)
    use(engine, ck)
    train(engine)
    ck.save_checkpoint(d, tag="t", storage_type=StorageType.DISK)
    ck.wait_latest_checkpoint(120)
    time.sleep(0.05)  # a later clock tick than our marker's (timestamps are a jiffy coarse)
    train(engine)
    engine.checkpoint_engine = TorchCheckpointEngine()
    engine.save_checkpoint(d, tag="t")
    ds = engine.global_steps, digest(engine)
    reader = checkpointer(engine, d, shm + "-new")
    step, _, err, lines = load(engine, reader, d)
    record("one.jsonl", case="stock-over", **got(engine, step, ds), log=lines, error=err)


def save2(engine):
    rank = torch.distributed.get_rank()
    base = os.path.join(OUT, "two")
    got = {}
    for case in ("ctl", "hostile", "bitflip"):
        d, shm = os.path.join(base, case), os.path.join(SHM, "two-" + case)
        ck = checkpointer(engine, d, shm)
        tag1, d1 = disk_save(engine, ck, d)
        if case == "bitflip":
            tag2, d2 = disk_save(engine, ck, d)
        else:
            use(engine, ck)
            train(engine)
            assert ck.save_checkpoint(d, storage_type=StorageType.MEMORY)
            tag2, d2 = f"global_step{engine.global_steps}", (engine.global_steps, digest(engine))
        if case == "hostile" and rank == 1:
            evil_snapshot(ck, engine.global_steps, os.path.join(OUT, "hostile2-ran"))
        got[case] = {"ctl": ck._ckpt._get_core(rank).ctl_path, "d1": d1, "d2": d2, "tags": [tag1, tag2]}
    every = [None, None]
    torch.distributed.all_gather_object(every, got)
    if rank == 0:
        with open(os.path.join(OUT, "save2.json"), "w") as f:
            json.dump(every, f)
    torch.distributed.barrier()
    os._exit(0)  # as a crash: the segments stay (persist-on-failure is off)


def load2(engine):
    rank = torch.distributed.get_rank()
    with open(os.path.join(OUT, "save2.json")) as f:
        saved = json.load(f)[rank]
    base = os.path.join(OUT, "two")
    if rank == 1:  # before any segment of it is opened in this process
        with open(saved["ctl"]["ctl"], "r+b") as f:
            f.write(b"\xab" * 64)  # the magic and header of rank 1's control file, its size kept
        flip_tensor_bit(os.path.join(base, "bitflip", saved["bitflip"]["tags"][1], OPTIM % 1))
    torch.distributed.barrier()
    for case in ("ctl", "hostile", "bitflip"):
        d, shm = os.path.join(base, case), os.path.join(SHM, "two-" + case)
        if case == "bitflip":
            shm += "-new"  # from disk only
        ck = checkpointer(engine, d, shm)
        step, _, err, lines = load(engine, ck, d)
        record(
            "load2.jsonl",
            case=case,
            **got(engine, step, saved[case]["d1"]),
            ran=os.path.exists(os.path.join(OUT, "hostile2-ran")),
            log=lines,
            error=err,
        )
    torch.distributed.barrier()
    os._exit(0)


def main():
    deepspeed.init_distributed(dist_backend="gloo")
    engine = make_engine()
    {"one": one, "save2": save2, "load2": load2}[MODE](engine)


if __name__ == "__main__":
    main()
