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
    shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
