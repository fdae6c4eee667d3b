"""A small GPT-like model trained with real PyTorch on `cuda` and `nccl`: the program the realtorch
tier runs on the simulated GPU runtime (scripts/simgpu.sh), under xtimer_launch torchrun and
xtimer_run. Token and position embeddings, TransformerEncoderLayers with a causal mask, a tied
LM head, AdamW; wrapped in DDP (bucketed all-reduces overlapping backward) or FSDP2
(fully_shard: all-gathers and reduce-scatters).

The process group is `cpu:gloo,cuda:nccl`, as many real jobs use: kernels are not computed on
the simulation, so torch's object collectives (which size their buffers with device kernels)
run on gloo, while every tensor the model trains with goes through NCCL.

Faults, per rank, from arguments (for the tests) or from the SIMGPU_CONTROL file's words, read
every step: `host_ms=N` (the rank spends N ms per step in `prepare_batch`, a host straggler),
`gc_objects=N` (it keeps N objects alive and collects garbage every step: GC pauses),
`data_ms=N` (with --loader, each sample takes N ms more to load in the DataLoader's workers):
  --stall-rank R --stall-step S   rank R sleeps in `load_shard_slowly` before backward() at step S
                                  (in the first round only)
  --crash-rank R --crash-step S   rank R SIGKILLs itself at step S, once (a marker beside --ckpt)
  --skip-rank R --skip-step S     with --log-loss, rank R skips its loss all-reduce at step S: the
                                  ranks are out of step (desynchronised) from there on
--log-loss all-reduces the loss every step after backward(), as a job that logs the mean loss.
--loader takes the batches from a torch DataLoader with 2 worker processes instead of the loop.
--pg-timeout sets the process group's timeout (seconds), as a job with Flight Recorder does.
--eval-every N: every N steps an eval pass (--eval-batches forward passes without gradients, the
loss all-reduced; {"evaluated": step}), as a training job makes one.
--nvrx-report S: NVIDIA's straggler detection (nvidia-resiliency-ext) times each step as its
section "step" with CUDA profiling (its CUPTI module), and every S seconds rank 0 logs its report
({"nvrx": time, "stragglers", "gpu_relative", ...}): what tests/realtorch/bench_nvrx.py compares.
Each rank appends one JSON line per step to --step-log: {"rank", "step", "t", "cpu", "restart"}
("cpu": the process' CPU seconds so far, every thread's, a preloaded library's too).
--thread-cpu-steps A,B adds, after steps A and B, {"threads_at": A, "threads": {"<tid> <name>": s}}:
each thread's own CPU seconds so far (from its per-thread clock), so that a benchmark
can tell the threads that make the step (the main thread, torch's autograd thread) from the rest.
--profile-steps=A:B --profile-dir DIR runs torch.profiler (CPU and CUDA activities) from the start
of step A to the end of step B-1, as a user profiles a few steps mid-job, and exports its Chrome
trace to DIR/rank<R>.json ({"profiled": [A, B]}). A of -1 starts it before the first CUDA call.

With --ckpt DIR: xtimer's flash checkpoint saves the model and optimizer state into memory every
--ckpt-every steps (1) and to DIR every 5th save ({"saved": step}), and a restarted worker
resumes from it. DDP: DLRover's DdpCheckpointer API (state_dict / load_state_dict). FSDP2:
DLRover's FSDP API (FsdpShardCheckpointer, docs/dlrover_fsdp.md): get_state_dict, a save of
{"model", "optim", "step"}, and at the start get_storage_reader, dcp.load and set_state_dict.
The bytes are what torch copies between the device and the host: each save logs a digest of
the state as saved ({"saved": step, "digest"}), each load one of the state as loaded into the
device tensors ({"loaded": step, "digest"}), read back with copies. FSDP2 rows also carry
"pieces", a digest of each tensor this rank holds (a DTensor's local shard) by name, and the
load one more row ({"dcp_loaded": step, "pieces"}) between dcp.load and set_state_dict, so
that a piece placed by a device kernel (which computes nothing here) is named.
"""
import argparse
import datetime
import gc
import hashlib
import json
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.utils.data
import torch.nn as nn


class TinyGPT(nn.Module):
    def __init__(self, vocab, dim, layers, heads, context):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, src_mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(x))


def control_words():
    path = os.environ.get("SIMGPU_CONTROL")
    words = {}
    if not path or not os.path.exists(path):
        return words
    rank = os.environ.get("RANK", "")
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].split()
            if line and ("all" in line or f"rank={rank}" in line):
                words.update(w.split("=", 1) for w in line if "=" in w)
    return words


def prepare_batch(args, generator, device):
    """The host side of a step: a batch of random tokens (and a host straggler's extra work)."""
    extra_ms = float(control_words().get("host_ms", 0))
    if extra_ms > 0:
        end = time.monotonic() + extra_ms / 1000
        while time.monotonic() < end:
            pass
    if generator is None:
        return None
    idx = torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=generator)
    idx = idx.to(device, non_blocking=True)
    return idx[:, :-1], idx[:, 1:]


class Tokens(torch.utils.data.Dataset):
    """Random token rows, each `data_ms` (control word) slower to load under the fault; read in
    the DataLoader's worker processes."""

    def __init__(self, args, rank):
        self.args, self.rank = args, rank

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        delay_ms = float(control_words().get("data_ms", 0))
        if delay_ms > 0:
            time.sleep(delay_ms / 1000)
        g = torch.Generator().manual_seed(self.rank * 1000003 + i)
        return torch.randint(0, self.args.vocab, (self.args.context + 1,), generator=g)


def loader_batches(args, rank, device):
    """Batches from a DataLoader with 2 workers, as (input, target) on the device."""
    loader = torch.utils.data.DataLoader(Tokens(args, rank), batch_size=args.batch, num_workers=2)
    for idx in loader:
        idx = idx.to(device, non_blocking=True)
        yield idx[:, :-1], idx[:, 1:]


def collect_garbage(heap):
    """GC pauses on purpose (control word gc_objects=N): N objects kept alive, one collection."""
    want = int(control_words().get("gc_objects", 0))
    if want <= 0:
        heap.clear()
        return
    if len(heap) < want:
        heap.extend({"i": i, "next": None} for i in range(want - len(heap)))
    gc.collect()


def thread_cpu():
    """{"<tid> <name>": CPU seconds} of every thread of this process, from each thread's CPU clock
    (Linux makes a thread's clock id from its tid: ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            out[f"{tid} {name}"] = time.clock_gettime((~int(tid) << 3) | 6)
        except OSError:
            pass  # the thread ended meanwhile
    return out


def load_shard_slowly(seconds):
    """A rank that stalls here before its backward() leaves its peers waiting in DDP's all-reduce."""
    time.sleep(seconds)


def digest(model, opt):
    """sha256 of every parameter and optimizer state tensor (a DTensor's local shard), copied to
    the host."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(_local(p).detach().cpu().numpy().tobytes())
        for k, v in sorted(opt.state.get(p, {}).items()):
            if torch.is_tensor(v):
                h.update(k.encode())
                h.update(_local(v).detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


class NvrxSteps:
    """nvidia-resiliency-ext's straggler Detector around each step: `begin` and `end` enter and
    leave its section "step"; at each report (every `interval` s, agreed among the ranks) rank 0
    hands `note` what it names (StragglerIds as ranks) and its scores."""

    def __init__(self, interval, rank, note):
        from nvidia_resiliency_ext import straggler

        self.detector, self.rank, self.note = straggler.Detector, rank, note
        self.detector.initialize(scores_to_compute="all", gather_on_rank0=True, report_time_interval=interval)
        self.section = None

    def begin(self):
        self.section = self.detector.detection_section("step", profile_cuda=True)
        self.section.__enter__()

    def end(self):
        self.section.__exit__(None, None, None)
        report = self.detector.generate_report_if_interval_elapsed()
        if report is None or self.rank != 0:
            return
        named = report.identify_stragglers()
        self.note(
            nvrx=time.time(),
            stragglers={kind: sorted(s.rank for s in ids) for kind, ids in named.items() if isinstance(ids, set)},
            sections={
                kind: {name: sorted(s.rank for s in ids) for name, ids in by.items()}
                for kind, by in named.items()
                if isinstance(by, dict)
            },
            gpu_relative=report.gpu_relative_perf_scores,
            gpu_individual=report.gpu_individual_perf_scores,
            section_relative=report.section_relative_perf_scores,
        )


def _local(t):
    """The part of a tensor this rank holds: a DTensor's local shard, else the tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def state_tensors(model, opt):
    """(name, tensor) of every parameter, buffer and optimizer state tensor of the model."""
    names = {p: n for n, p in model.named_parameters()}
    out = list(model.named_parameters()) + list(model.named_buffers())
    for p, st in opt.state.items():
        out += [(f"{names[p]}.{k}", v) for k, v in sorted(st.items()) if torch.is_tensor(v)]
    return out


def pieces(model, opt):
    """sha256 (16 hex digits) of each tensor of state_tensors as this rank holds it (a DTensor's
    local shard), copied to the host, by name."""
    return {
        n: hashlib.sha256(_local(t).detach().cpu().numpy().tobytes()).hexdigest()[:16]
        for n, t in state_tensors(model, opt)
    }


def stamp(model, opt, seed):
    """Kernels compute nothing here: every parameter and floating-point optimizer state tensor
    (its local shard) gets random bytes from the host by a host-to-device copy, so that every
    byte a resume must bring back differs from save to save. The buffers (the causal mask, made
    on the host) and AdamW's step count (a CPU tensor) keep their values."""
    g = torch.Generator().manual_seed(seed)
    buffers = {n for n, _ in model.named_buffers()}
    with torch.no_grad():
        for n, t in state_tensors(model, opt):
            lt = _local(t)
            if n in buffers or not lt.is_cuda or not lt.is_floating_point():
                continue
            lt.copy_(torch.randn(lt.shape, generator=g).to(lt.dtype))


class DeviceWrites:
    """While active, counts the torch ops that write device memory, by how they do it: `copy
    host-to-device` and `copy device-to-device` (same dtype, both sides contiguous: a memcpy,
    which moves real bytes here), `copy onto itself`, or `kernel OP` (anything else: computes
    nothing here). A DTensor op is judged by its local tensors (same placements: the local op)."""

    def __init__(self):
        import collections

        from torch.utils._python_dispatch import TorchDispatchMode

        counts = self.counts = collections.Counter()

        def local(t):
            return getattr(t, "_local_tensor", t)

        allocations = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}

        def how(func, args, kwargs, out):
            schema = func._schema
            written = [
                v
                for a, v in zip(
                    schema.arguments, list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args) :]]
                )
                if a.alias_info is not None and a.alias_info.is_write and torch.is_tensor(v)
            ]
            if not written:  # a new tensor (not a view, not bare memory) on the device
                new = [t for t in (out if isinstance(out, (list, tuple)) else [out]) if torch.is_tensor(t)]
                if any(r.alias_info is not None for r in schema.returns) or schema.name.split("::")[-1] in allocations:
                    return None
                if not any(local(t).is_cuda for t in new):
                    return None
                src = local(args[0]) if args and torch.is_tensor(args[0]) else None
                if func in (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default) and src is not None:
                    dst = local(new[0])
                    if src.dtype == dst.dtype and src.is_contiguous() and dst.is_contiguous():
                        return "copy device-to-device" if src.is_cuda else "copy host-to-device"
                return f"kernel {func.__name__}"
            if not any(local(t).is_cuda for t in written):
                return None
            if func is torch.ops.aten.copy_.default:
                dst, src = local(args[0]), local(args[1])
                if dst.dtype != src.dtype or not dst.is_contiguous() or not src.is_contiguous():
                    strided = "" if dst.is_contiguous() and src.is_contiguous() else ", non-contiguous"
                    return f"kernel copy_ ({src.device.type} {src.dtype} -> {dst.dtype}{strided})"
                if src.is_cuda and src.data_ptr() == dst.data_ptr():
                    return "copy onto itself"  # aten's copy_ returns early: nothing moves
                return "copy device-to-device" if src.is_cuda else "copy host-to-device"
            return f"kernel {func.__name__}"

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                kind = how(func, args, kwargs, out)
                if kind is not None:
                    counts[kind] += 1
                return out

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def evaluate(args, model, loss_fn, generator, device):
    """An eval pass as a training job makes one: the model in eval mode, --eval-batches forward
    passes without gradients, the mean loss all-reduced."""
    model.eval()
    with torch.no_grad():
        total = torch.zeros((), device=device)
        for _ in range(args.eval_batches):
            x, y = prepare_batch(args, generator, device)
            total += loss_fn(model(x).reshape(-1, args.vocab), y.reshape(-1))
        dist.all_reduce(total)
    model.train()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--wrap", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--bucket-mb", type=float, default=0.25, help="DDP bucket size: several buckets per step")
    p.add_argument("--stall-rank", type=int, default=-1)
    p.add_argument("--stall-step", type=int, default=-1)
    p.add_argument("--stall-seconds", type=float, default=3600)
    p.add_argument("--skip-rank", type=int, default=-1)
    p.add_argument("--skip-step", type=int, default=-1)
    p.add_argument("--log-loss", action="store_true")
    p.add_argument("--loader", action="store_true")
    p.add_argument("--pg-timeout", type=float, default=0)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--ckpt", default="")
    p.add_argument("--ckpt-every", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--step-log", default="")
    p.add_argument("--thread-cpu-steps", default="", help="A,B: each thread's CPU seconds after steps A and B")
    p.add_argument("--nvrx-report", type=float, default=0)
    p.add_argument("--profile-steps", default="", help="A:B (A = -1: from before the first CUDA call)")
    p.add_argument("--profile-dir", default=".")
    args = p.parse_args()

    profile_from, profile_to = map(int, args.profile_steps.split(":")) if args.profile_steps else (-2, -2)
    profiler = None

    def start_profiler():
        nonlocal profiler
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        profiler = torch.profiler.profile(activities=acts)
        profiler.start()

    if profile_from == -1:
        start_profiler()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    timeout = datetime.timedelta(seconds=args.pg_timeout) if args.pg_timeout > 0 else None
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device, timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)

    model = TinyGPT(args.vocab, args.dim, args.layers, args.heads, args.context).to(device)
    if args.wrap == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=args.bucket_mb)
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    generator = torch.Generator().manual_seed(rank)
    loss_fn = nn.CrossEntropyLoss()

    log = open(args.step_log, "a", buffering=1) if args.step_log else None
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    def note(**row):
        if log:
            log.write(json.dumps({"rank": rank, "restart": restart, "pid": os.getpid(), **row}) + "\n")

    start, checkpointer = 0, None
    if args.ckpt and args.wrap == "fsdp":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from xtimer.ckpt.fsdp import FsdpShardCheckpointer, StorageType

        os.makedirs(args.ckpt, exist_ok=True)
        checkpointer = FsdpShardCheckpointer(args.ckpt)
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": -1}
        reader = checkpointer.get_storage_reader()  # collective; None: nothing saved
        if reader is not None:
            with DeviceWrites() as writes:
                dcp.load(state, storage_reader=reader)
            note(dcp_loaded=state["step"], pieces=pieces(model, opt), writes=dict(writes.counts))
            with DeviceWrites() as writes:
                set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            note(set_state=state["step"], writes=dict(writes.counts))
            start = state["step"] + 1
            got = pieces(model, opt)
            note(loaded=state["step"], digest=digest(model, opt), pieces=got, source=checkpointer.loaded_from)
    elif args.ckpt:
        from xtimer.ckpt import DdpCheckpointer, StorageType

        checkpointer = DdpCheckpointer(args.ckpt)
        state = checkpointer.load_checkpoint()
        if "model" in state:
            model.module.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start = state["step"] + 1
            note(loaded=state["step"], digest=digest(model, opt))
    nvrx = NvrxSteps(args.nvrx_report, rank, note) if args.nvrx_report > 0 else None
    batches = loader_batches(args, rank, device) if args.loader else None
    heap = []  # collect_garbage's objects
    for step in range(start, args.steps):
        if step == profile_from:
            start_profiler()
        if step == profile_to and profiler is not None:
            torch.cuda.synchronize()
            profiler.stop()
            profiler.export_chrome_trace(os.path.join(args.profile_dir, f"rank{rank}.json"))
            profiler = None
            note(profiled=[profile_from, profile_to])
        marker = os.path.join(args.ckpt or ".", "crashed")
        if rank == args.crash_rank and step == args.crash_step and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if nvrx:
            nvrx.begin()
        if batches is not None:
            prepare_batch(args, None, None)  # the host straggler's extra work alone
            x, y = next(batches)
        else:
            x, y = prepare_batch(args, generator, device)
        collect_garbage(heap)
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, args.vocab), y.reshape(-1))
        if rank == args.stall_rank and step == args.stall_step and restart == 0:
            load_shard_slowly(args.stall_seconds)
        loss.backward()
        if args.log_loss and not (rank == args.skip_rank and step == args.skip_step):
            dist.all_reduce(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        if checkpointer and args.wrap == "fsdp" and (step + 1) % args.ckpt_every == 0:
            stamp(model, opt, seed=step * 1000 + rank)
            msd, osd = get_state_dict(model, opt)
            kind = StorageType.DISK if (step + 1) % (5 * args.ckpt_every) == 0 else StorageType.MEMORY
            # False: skipped on every rank (a persister had not yet copied the last disk save).
            if checkpointer.save_checkpoint(step, {"model": msd, "optim": osd, "step": step}, storage_type=kind):
                note(saved=step, digest=digest(model, opt), pieces=pieces(model, opt))
        elif checkpointer and (step + 1) % args.ckpt_every == 0:
            # Kernels compute nothing here: stamp the step into a parameter with a host-to-device
            # copy, so that every step's state differs in bytes that a resume must bring back.
            with torch.no_grad():
                model.module.positions.weight[0].copy_(torch.full((args.dim,), float(step)))
            state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}
            kind = StorageType.DISK if (step + 1) % (5 * args.ckpt_every) == 0 else StorageType.MEMORY
            path = os.path.join(args.ckpt, f"checkpoint-{step}.pt")
            checkpointer.save_checkpoint(step, state, path, storage_type=kind)
            note(saved=step, digest=digest(model, opt))
        if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
            evaluate(args, model, loss_fn, generator, device)
            note(evaluated=step)
        torch.cuda.synchronize()
        if nvrx:
            nvrx.end()
        note(step=step, t=time.time(), cpu=time.process_time())
        if str(step) in args.thread_cpu_steps.split(","):
            note(threads_at=step, threads=thread_cpu())
    if checkpointer and rank == 0:
        checkpointer.wait_latest_checkpoint(timeout=120)
    dist.barrier()
    dist.destroy_process_group()
    if log:
        log.close()


if __name__ == "__main__":
    main()
