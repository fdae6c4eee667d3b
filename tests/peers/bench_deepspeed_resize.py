"""What resuming a ZeRO-2 job at another world size costs with DeepSpeedCheckpointer: the load
of a 2-rank DISK save at 1 rank (DeepSpeed's ds_to_universal, then its universal load) against
the load of a 1-rank DISK save of the same model in the same process (DeepSpeed's own load).
Run by hand (prints a table, asserts nothing on time), first the save at 2 ranks, then the
loads at 1:

  export XTIMER_PYTHON=.peers/bin/python PYTHONPATH=build/lib/python OUT=/tmp/dsr
  PHASE=save build/bin/xtimer_run --standalone --nproc-per-node 2 tests/peers/bench_deepspeed_resize.py
  PHASE=load build/bin/xtimer_run --standalone --nproc-per-node 1 tests/peers/bench_deepspeed_resize.py

PARAMS (default 8M) fp32 parameters; Adam adds two moments and ZeRO an fp32 master copy.
"""
import importlib
import os
import shutil
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402

from xtimer.ckpt.deepspeed import DeepSpeedCheckpointer, StorageType  # noqa: E402

importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # see deepspeed_worker.py
OUT = os.environ.get("OUT", "/tmp/xtimer-ds-resize")
PARAMS = int(float(os.environ.get("PARAMS", "8e6")))


def engine():
    torch.manual_seed(0)
    width = int((PARAMS / 4) ** 0.5)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(4)])
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 10**6,
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
    }
    e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    e.backward(e(torch.randn(2, width)).pow(2).mean())
    e.step()  # Adam's moments exist from here
    return e


def shm(name):
    """A shared-memory folder of its own (a load from another one finds no snapshot in memory)."""
    path = os.path.join(OUT, name)
    os.makedirs(path, exist_ok=True)
    return path


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    deepspeed.init_distributed(dist_backend="gloo")
    e = engine()
    world = e.dp_world_size
    if os.environ.get("PHASE") == "save":
        d = os.path.join(OUT, f"ckpt{world}")
        DeepSpeedCheckpointer(e, d, shm_dir=shm("shm")).save_checkpoint(d, storage_type=StorageType.DISK)
        return
    own, other = os.path.join(OUT, "ckpt1"), os.path.join(OUT, "ckpt2")
    ours = DeepSpeedCheckpointer(e, own, shm_dir=shm("shm"))
    ours.save_checkpoint(own, storage_type=StorageType.DISK)
    base = timed(lambda: DeepSpeedCheckpointer(e, own, shm_dir=shm("shm-own")).load_checkpoint())
    first = timed(lambda: DeepSpeedCheckpointer(e, other, shm_dir=shm("shm-2")).load_checkpoint())
    again = timed(lambda: DeepSpeedCheckpointer(e, other, shm_dir=shm("shm-2")).load_checkpoint())
    nbytes = sum(
        os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(other, "global_step1")) for f in fs
    )
    print(f"ZeRO-2, {PARAMS / 1e6:.0f}M fp32 parameters with Adam; the 2-rank tag holds {nbytes / 2**20:.0f} MiB")
    for label, t in (
        ("1-rank save loaded at 1 rank (DeepSpeed's load)", base),
        ("2-rank save at 1 rank: conversion + universal load", first),
        ("the same again (conversion reused)", again),
    ):
        print(f"  {label:52s} {t:7.3f} s  {t / base:6.2f}x")
    shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
