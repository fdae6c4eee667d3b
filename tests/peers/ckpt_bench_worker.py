"""One worker of bench_ckpt.py, under the launcher its method belongs to (dlrover-run,
xtimer_run, torchrun). Saves the same state REPEATS times to disk with METHOD and measures:

  blocked  the save call: how long the training loop waits
  save_cost  per save call: this process's CPU seconds (every thread) and minor/major page faults
  on_disk  from the call until the step is on disk: DLRover's tracker file (dlrover_latest.txt,
           polled every 10 ms: DLRover's own wait_latest_checkpoint polls every 3 s), our
           Checkpointer.wait(), DCP's future.result()
  durable  from the call until the step's files are synced to the disk: ours and DCP's (its
           FileSystemWriter syncs by default) are synced when on_disk ends; DLRover's tracker
           is written before its state file is synced, so its files are fsync'ed then
  load     (PHASE=load) a new job resumes the newest step into its model's tensors (see
           load_phase); each from wherever it finds the step (a new job: disk; DLRover's and
           DCP's files are in the page cache, ours are not: our saver writes around it)

METHOD: dlrover | xtimer | dcp. SIZE bytes of float32 in 16 tensors. Writes $OUT/<METHOD>-<PHASE>.json.
"""
import json
import os
import resource
import time

import torch
import torch.distributed as dist

METHOD = os.environ["METHOD"]
SIZE = int(os.environ["SIZE"])
REPEATS = int(os.environ.get("REPEATS", "3"))
PHASE = os.environ.get("PHASE", "save")
OUT = os.environ["OUT"]
CKPT_DIR = os.path.join(OUT, f"ckpt-{METHOD}")


def make_state(fill):
    n = SIZE // 4 // 16
    return {"model": {f"w{i}": torch.full((n,), float(fill + i)) for i in range(16)}, "step": fill}


def checkpointer():
    if METHOD == "dlrover":
        from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer

        return DdpCheckpointer(CKPT_DIR)
    from xtimer.ckpt import DdpCheckpointer

    return DdpCheckpointer(CKPT_DIR)


def disk_step(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or -1)
    except (OSError, ValueError):
        return -1


def usage():
    """This process's CPU seconds (every thread, user + system) and page faults (minor, major)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt, r.ru_majflt


def save_phase(res):
    blocked, on_disk, durable, cost = [], [], [], []
    if METHOD == "dcp":
        import torch.distributed.checkpoint as dcp

        for step in range(1, REPEATS + 1):
            state = make_state(step)
            t0 = time.perf_counter()
            fut = dcp.async_save(state, checkpoint_id=os.path.join(CKPT_DIR, str(step)))
            blocked.append(time.perf_counter() - t0)
            fut.result()
            on_disk.append(time.perf_counter() - t0)
    else:
        if METHOD == "dlrover":
            from dlrover.trainer.torch.flash_checkpoint.checkpointer import StorageType
        else:
            from xtimer.ckpt import StorageType
        ck = checkpointer()
        # From step 1: with a disk save of step 0 as the very first save, DLRover's saver never
        # committed it in our runs (no shard written, "ready shards is 0" until its 600 s timeout).
        for step in range(1, REPEATS + 1):
            state = make_state(step)
            u0 = usage()
            t0 = time.perf_counter()
            if METHOD == "dlrover":
                # No path: DLRover then names the file itself, the only place its loader looks.
                ck.save_checkpoint(step, state, storage_type=StorageType.DISK)
                blocked.append(time.perf_counter() - t0)
                cost.append([b - a for a, b in zip(u0, usage())])
                tracker = os.path.join(CKPT_DIR, "dlrover_latest.txt")
                while disk_step(tracker) != step:
                    time.sleep(0.01)
                on_disk.append(time.perf_counter() - t0)
                # DLRover's saver writes the state with torch.save and no fsync (only its tracker
                # file is synced): the step is durable once its files are.
                fsync_tree(os.path.join(CKPT_DIR, str(step)))
                durable.append(time.perf_counter() - t0)
            else:
                ck.save_checkpoint(step, state, storage_type=StorageType.DISK)
                blocked.append(time.perf_counter() - t0)
                cost.append([b - a for a, b in zip(u0, usage())])
                ck.wait()  # returns once the files and the folder are synced
                on_disk.append(time.perf_counter() - t0)
                durable.append(on_disk[-1])
    res.update(blocked=blocked, on_disk=on_disk, durable=durable or on_disk, save_cost=cost)


def fsync_tree(folder):
    """fsync every file under `folder` and the folder itself; raises if it holds no file."""
    files = [os.path.join(d, n) for d, _, names in os.walk(folder) for n in names]
    if not files:
        raise RuntimeError(f"no files in {folder} to sync")
    for path in files + [folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def load_phase(res):
    """A resume: the model's tensors exist (allocated and filled, as after building the model);
    the time until they hold the saved step. DCP loads into them in place; DLRover's and our
    load return new tensors, copied in as load_state_dict() would."""
    want = REPEATS
    target = make_state(-1)
    if METHOD == "dcp":
        import torch.distributed.checkpoint as dcp

        t0 = time.perf_counter()
        dcp.load(target, checkpoint_id=os.path.join(CKPT_DIR, str(want)))
        res["load"] = time.perf_counter() - t0
        state = target
    else:
        ck = checkpointer()
        t0 = time.perf_counter()
        state = ck.load_checkpoint()
        if "model" in state:
            for k, v in state["model"].items():
                target["model"][k].copy_(v)
        res["load"] = time.perf_counter() - t0
    got = state.get("step")
    res["loaded_step"] = int(got) if got is not None else None
    w = target["model"]["w0"]
    res["loaded_ok"] = bool(float(w[0]) == float(want) and w.numel() == SIZE // 4 // 16)


def main():
    dist.init_process_group("gloo")
    os.makedirs(CKPT_DIR, exist_ok=True)
    torch.set_num_threads(1)
    res = {"method": METHOD, "phase": PHASE, "size": SIZE}
    (save_phase if PHASE == "save" else load_phase)(res)
    with open(os.path.join(OUT, f"{METHOD}-{PHASE}.json"), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
