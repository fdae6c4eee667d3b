"""DeepSpeed ZeRO-2 and ZeRO-3 on the CPU (DeepSpeed's CPU accelerator, gloo), each engine saved
through xtimer.ckpt.deepspeed.DeepSpeedCheckpointer, under xtimer_run with 2 ranks.

For each stage in STAGES (one engine after the other in this process, to pay the start once):
load the newest checkpoint, then train to step STEPS, a MEMORY save after every step, a DISK
save at DISK_AT (in the first round with the rank's persister stopped until every rank has looked
at the disk). In the first round step CRASH_AT of the last stage is a DISK save too: rank 1 stops
its persister first, kills it after the save and exits 1, so `latest` must stay at DISK_AT and
the restart must resume every stage from memory: the last at CRASH_AT, the earlier ones at STEPS
(their files on disk are of DISK_AT). The restart, which finishes the job, first reads the last
stage's files with DeepSpeed's own loader, and ends each stage with a DISK save. Records (JSON
lines in $OUT):
  saves.jsonl  {"rank", "world", "restart", "stage", "step", "digest"}: after each save;
  loads.jsonl  {"rank", "world", "restart", "stage", "step", "digest"}: after the load (-1: none);
  reloads.jsonl (the same) after DeepSpeed's own loader read the DISK save of step STEPS, which
    the last stage does after one more step, saved to memory only, and its whole state
    ($OUT/memory_zero<stage>.pt); the job ends without closing (as a crash: the segments stay);
  disk_loads.jsonl (the same, and "latest") after DeepSpeed's own loader read `latest` on restart;
  behind.jsonl {"during", "after": [this rank's file of the tag is there, `latest` names it]}
    for the DISK save at DISK_AT, while its persister is stopped and after it wrote the files;
the digest is sha256 over this rank's fp32 partition (ZeRO's master weights) and the whole
module's parameters gathered from every rank. At the end rank 0 writes the whole model and,
per parameter, the fp32 master weights and Adam's moments gathered by DeepSpeed
($OUT/final_zero<stage>.pt), for the comparisons with zero_to_fp32.py and the resized job.

With RESIZE=1 (a later job at another world size): load each stage (the last one from the 2-rank
job's shared-memory snapshots, the others from DeepSpeed's files), write the same whole state
($OUT/resized_zero<stage>.pt), then train one step and save it to memory.
"""
import hashlib
import importlib
import json
import os
import signal

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402

from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine  # noqa: E402

from xtimer.ckpt.deepspeed import DeepSpeedCheckpointer, StorageType  # noqa: E402

# DeepSpeed's CPU backend compiles a shared-memory all-reduce kernel for inference (minutes on 2
# cores, once per machine); training over gloo does not use it.
# (deepspeed.comm re-exports torch under the name of its submodule: fetch the module itself.)
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

OUT = os.environ["OUT"]
STEPS = int(os.environ.get("STEPS", "6"))
DISK_AT = int(os.environ.get("DISK_AT", "3"))
CRASH_AT = int(os.environ.get("CRASH_AT", "5"))
STAGES = [int(s) for s in os.environ.get("STAGES", "3,2").split(",")]
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
RESIZE = os.environ.get("RESIZE") == "1"


def digest(engine, stage):
    h = hashlib.sha256()
    for group in getattr(engine.optimizer, "single_partition_of_fp32_groups", None) or getattr(
        engine.optimizer, "fp32_partitioned_groups_flat", []
    ):
        h.update(group.detach().contiguous().view(torch.uint8).numpy().tobytes())
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=stage == 3):
        for p in params:
            h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def whole(engine, stage):
    """The whole model, per parameter [fp32 master, exp_avg, exp_avg_sq] as DeepSpeed gathers them
    from every rank (collective), and the step counts in Adam's state."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    params = dict(engine.module.named_parameters())
    full = {
        n: [safe_get_full_fp32_param(p)] + [safe_get_full_optimizer_state(p, k) for k in ("exp_avg", "exp_avg_sq")]
        for n, p in params.items()
    }
    with deepspeed.zero.GatheredParameters(list(params.values()), enabled=stage == 3):
        module = {k: v.detach().clone() for k, v in params.items()}
    steps = sorted({int(s["step"]) for s in engine.optimizer.optimizer.state.values() if "step" in s})
    return {
        "module": module,
        "full": {n: [t.detach().clone() for t in ts] for n, ts in full.items()},
        "adam_steps": steps,
    }


def read(*path):
    try:
        with open(os.path.join(*path)) as f:
            return f.read().strip()
    except OSError:
        return None


def behind(ckpt, engine, save_dir, stage, step):
    """A DISK save with this rank's persister stopped: it returns, and neither this rank's files
    nor `latest` are there; once the persister runs on, both are. Records behind.jsonl."""
    tag, rank = f"global_step{step}", engine.global_rank
    mine = os.path.join(save_dir, tag, f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    pid = ckpt._get_persister().pid
    os.kill(pid, signal.SIGSTOP)
    ckpt.save_checkpoint(save_dir, storage_type=StorageType.DISK)
    row = {"during": [os.path.exists(mine), read(save_dir, "latest") == tag]}
    torch.distributed.barrier()
    os.kill(pid, signal.SIGCONT)
    ckpt.wait_latest_checkpoint(300)
    torch.distributed.barrier()
    row["after"] = [os.path.exists(mine), read(save_dir, "latest") == tag]
    record("behind.jsonl", stage=stage, step=step, **row)


def record(name, **row):
    with open(os.path.join(OUT, name), "a") as f:
        row.update(rank=int(os.environ["RANK"]), world=int(os.environ["WORLD_SIZE"]), restart=RESTART)
        f.write(json.dumps(row) + "\n")


def run(stage, last):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10**6,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    save_dir = os.path.join(os.environ["CKPT_DIR"], f"zero{stage}")
    ckpt = DeepSpeedCheckpointer(engine, save_dir)
    if last and RESTART == 1 and not RESIZE:
        # The files on disk after the crash: DeepSpeed's own loader reads the tag `latest` names.
        latest = read(save_dir, "latest")
        engine.checkpoint_engine = TorchCheckpointEngine()
        engine.load_checkpoint(save_dir)
        engine.checkpoint_engine = ckpt._engine
        record("disk_loads.jsonl", stage=stage, step=engine.global_steps, latest=latest, digest=digest(engine, stage))
    path, _ = ckpt.load_checkpoint(save_dir)
    start = engine.global_steps if path else 0
    record("loads.jsonl", stage=stage, step=start if path else -1, digest=digest(engine, stage))
    rank = engine.global_rank
    if RESIZE:
        state = whole(engine, stage)
        if rank == 0:
            torch.save(state, os.path.join(OUT, f"resized_zero{stage}.pt"))
        end = start + 1
    else:
        end = STEPS
    for step in range(start + 1, end + 1):
        train(engine, rank, step)
        crash = last and RESTART == 0 and not RESIZE and step == CRASH_AT
        disk = step == DISK_AT or crash
        if disk and RESTART == 0 and not RESIZE and not crash:
            behind(ckpt, engine, save_dir, stage, step)
        else:
            if crash and rank == 1:  # its persister never writes this step: stopped, then killed
                os.kill(ckpt._get_persister().pid, signal.SIGSTOP)
            ckpt.save_checkpoint(save_dir, storage_type=StorageType.DISK if disk else StorageType.MEMORY)
        record("saves.jsonl", stage=stage, step=step, disk=disk, digest=digest(engine, stage))
        if crash and rank == 1:
            os.kill(ckpt._persister.pid, signal.SIGKILL)
            os._exit(1)
    if RESTART == 0 or RESIZE:
        return  # the round that finishes the job (after the crash) writes the final DISK save
    ckpt.save_checkpoint(save_dir, storage_type=StorageType.DISK)
    record("saves.jsonl", stage=stage, step=engine.global_steps, disk=True, final=True, digest=digest(engine, stage))
    ckpt.wait_latest_checkpoint(300)
    torch.distributed.barrier()  # every rank's files written: `latest` names the tag
    # The whole state saved, for the comparisons with zero_to_fp32.py's output and the resized
    # job (before the reload below: after DeepSpeed's own ZeRO-1/2 load, its per-parameter views
    # of Adam's state are linked again only by the next step).
    state = whole(engine, stage)
    if rank == 0:
        torch.save(state, os.path.join(OUT, f"final_zero{stage}.pt"))
    if last:
        # One more step, saved to memory only: the job at 1 rank resumes from these snapshots.
        train(engine, rank, STEPS + 1)
        ckpt.save_checkpoint(save_dir, storage_type=StorageType.MEMORY)
        record("saves.jsonl", stage=stage, step=engine.global_steps, disk=False, digest=digest(engine, stage))
        state = whole(engine, stage)
        if rank == 0:
            torch.save(state, os.path.join(OUT, f"memory_zero{stage}.pt"))
    # DeepSpeed's own loader (its default engine, torch.load) reads the DISK save of step STEPS.
    engine.checkpoint_engine = TorchCheckpointEngine()
    engine.load_checkpoint(save_dir)
    record("reloads.jsonl", stage=stage, step=engine.global_steps, digest=digest(engine, stage))


def train(engine, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(2, 16, generator=g), torch.randn(2, 4, generator=g)
    loss = torch.nn.functional.mse_loss(engine(x), y)
    engine.backward(loss)
    engine.step()


def main():
    deepspeed.init_distributed(dist_backend="gloo")
    for i, stage in enumerate(STAGES):
        run(stage, i == len(STAGES) - 1)
    if RESTART == 1 and not RESIZE:
        # Ends as a crash would (no close): the segments stay for the job at 1 rank.
        torch.distributed.barrier()
        os._exit(0)


if __name__ == "__main__":
    main()
