"""How long a DeepSpeed training loop is blocked by a checkpoint: DeepSpeed's own
engine.save_checkpoint (torch.save of every file) against DeepSpeedCheckpointer's MEMORY save
and DISK save, on the same ZeRO-2 engine in the same run, with a copy of the same tensors
(torch.clone) as the baseline; and for the DISK save, how long until its files are on disk
(wait_latest_checkpoint). Run by hand (prints a table, asserts nothing on time):

  XTIMER_PYTHON=.peers/bin/python PYTHONPATH=build/lib/python OUT=/tmp/dsb \\
      XTIMER_CKPT_SHM_DIR=/dev/shm/dsb build/bin/xtimer_run --standalone --nproc-per-node 1 \\
      tests/peers/bench_deepspeed_ckpt.py

PARAMS (default 32M) fp32 parameters; Adam adds two moments and ZeRO an fp32 master copy. The
checkpointer loads first (nothing there), as a job that resumes does, which starts its persister.
Each round's files are removed after it (the disk may be small).

Then (PHASES=save,load by default; PHASES=load for the loads alone) what checking the files costs
on a load: one more DISK save, then REPEATS loads of its tag each way, alternating, in the same
process: DeepSpeed's own engine.load_checkpoint, ours with the check of every file's size and
checksum against the persister's marker (what a load does), ours without it (the check switched
off), the check alone, and the same reads with zlib.crc32 (the alternative checksum); the files
are in the page cache (just written), as on a restart soon after a save. PARAMS=64e6 makes the
tag's files 1 GiB (16 bytes per parameter: the fp32 weights, the fp32 master copy and Adam's two
moments).
"""
import importlib
import os
import shutil
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine  # noqa: E402

from xtimer.ckpt.deepspeed import DeepSpeedCheckpointer, StorageType  # noqa: E402

importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # see deepspeed_worker.py
OUT = os.environ.get("OUT", "/tmp/xtimer-ds-bench")
PARAMS = int(float(os.environ.get("PARAMS", "32e6")))
REPEATS = int(os.environ.get("REPEATS", "3"))
PHASES = os.environ.get("PHASES", "save,load").split(",")


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    deepspeed.init_distributed(dist_backend="gloo")
    width = int((PARAMS / 4) ** 0.5)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(4)])
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 10**6,
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    loss = engine(torch.randn(2, width)).pow(2).mean()
    engine.backward(loss)
    engine.step()  # Adam's moments exist from here
    tensors = (
        [p.detach() for p in engine.module.parameters()]
        + list(engine.optimizer.single_partition_of_fp32_groups)
        + [v for s in engine.optimizer.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    )
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    d_ds, d_x = os.path.join(OUT, "deepspeed"), os.path.join(OUT, "xtimer")
    ours = DeepSpeedCheckpointer(engine, d_x)
    ours.load_checkpoint(d_x)
    if "save" in PHASES:
        saves(engine, ours, tensors, nbytes, d_ds, d_x)
    if "load" in PHASES:
        loads(engine, ours, d_x)
    shutil.rmtree(OUT, ignore_errors=True)


def saves(engine, ours, tensors, nbytes, d_ds, d_x):
    times = {"copy": [], "deepspeed": [], "memory": [], "disk": [], "on_disk": []}
    skipped = 0
    for i in range(REPEATS):
        t = time.perf_counter()
        copies = [x.clone() for x in tensors]
        times["copy"].append(time.perf_counter() - t)
        del copies
        engine.checkpoint_engine = TorchCheckpointEngine()
        t = time.perf_counter()
        engine.save_checkpoint(d_ds, tag=f"r{i}")
        times["deepspeed"].append(time.perf_counter() - t)
        engine.checkpoint_engine = ours._engine
        t = time.perf_counter()
        skipped += not ours.save_checkpoint(d_x, tag=f"m{i}", storage_type=StorageType.MEMORY)
        times["memory"].append(time.perf_counter() - t)
        t = time.perf_counter()
        skipped += not ours.save_checkpoint(d_x, tag=f"d{i}", storage_type=StorageType.DISK)
        times["disk"].append(time.perf_counter() - t)
        ours.wait_latest_checkpoint()
        times["on_disk"].append(time.perf_counter() - t)
        for d in (os.path.join(d_ds, f"r{i}"), os.path.join(d_x, f"d{i}")):
            shutil.rmtree(d, ignore_errors=True)
    base = median(times["copy"])
    print(f"state {nbytes / 2**20:.0f} MiB ({PARAMS / 1e6:.0f}M fp32 parameters, ZeRO-2, Adam), median of {REPEATS}")
    for k, label in (
        ("copy", "a clone of the same tensors"),
        ("deepspeed", "DeepSpeed's save_checkpoint"),
        ("memory", "ours, MEMORY"),
        ("disk", "ours, DISK (memory; files behind)"),
        ("on_disk", "ours, DISK: until its files are on disk"),
    ):
        m = median(times[k])
        print(f"  {label:42s} {m:7.3f} s  {m / base:6.2f}x the copy  {[round(x, 3) for x in times[k]]}")
    if skipped:
        print(f"  ({skipped} of our saves were skipped: the figures do not hold)")


def crc32_files(tag_dir, chunk=1 << 20):
    """zlib.crc32 of every *.pt file of a tag, read as the check reads them (the alternative)."""
    import zlib

    buf = memoryview(bytearray(chunk))
    for n in sorted(os.listdir(tag_dir)):
        if n.endswith(".pt"):
            with open(os.path.join(tag_dir, n), "rb", buffering=0) as f:
                c = 0
                while True:
                    got = f.readinto(buf)
                    if not got:
                        break
                    c = zlib.crc32(buf[:got], c)


def loads(engine, ours, d_x):
    """A DISK save's tag loaded each way, REPEATS times, alternating (see the module's text)."""
    import xtimer.ckpt.deepspeed as xds

    engine.checkpoint_engine = ours._engine
    ours.save_checkpoint(d_x, tag="load", storage_type=StorageType.DISK)
    ours.wait_latest_checkpoint()
    tag_dir = os.path.join(d_x, "load")
    size = sum(os.path.getsize(os.path.join(tag_dir, n)) for n in os.listdir(tag_dir) if n.endswith(".pt"))
    times = {"deepspeed": [], "checked": [], "unchecked": [], "check": [], "crc32": []}
    for _ in range(REPEATS):
        engine.checkpoint_engine = TorchCheckpointEngine()
        t = time.perf_counter()
        engine.load_checkpoint(d_x, tag="load")
        times["deepspeed"].append(time.perf_counter() - t)
        engine.checkpoint_engine = ours._engine
        for checked in (True, False):
            xds._CHECKSUMS = checked
            t = time.perf_counter()
            ours.load_checkpoint(d_x, tag="load")
            times["checked" if checked else "unchecked"].append(time.perf_counter() - t)
        xds._CHECKSUMS = True
        t = time.perf_counter()
        problems = xds._tag_problems(tag_dir, 0, 1)
        times["check"].append(time.perf_counter() - t)
        assert not problems, problems
        t = time.perf_counter()
        crc32_files(tag_dir)
        times["crc32"].append(time.perf_counter() - t)
    base = median(times["unchecked"])
    print(f"load of one tag, {size / 2**30:.2f} GiB of DeepSpeed files, median of {REPEATS}")
    for k, label in (
        ("deepspeed", "DeepSpeed's engine.load_checkpoint"),
        ("unchecked", "ours, files not checked (the baseline)"),
        ("checked", "ours, every file's checksum checked"),
        ("check", "the check alone"),
        ("crc32", "the same reads with zlib.crc32 instead"),
    ):
        m = median(times[k])
        print(f"  {label:42s} {m:7.3f} s  {m / base:6.2f}x ours unchecked  {[round(x, 3) for x in times[k]]}")
    print(f"  the check reads {size / median(times['check']) / 2**30:.2f} GiB/s")


if __name__ == "__main__":
    main()
