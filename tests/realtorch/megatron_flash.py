"""xtimer.ckpt.megatron on the simulated GPU: Megatron-Core 0.16.1's GPT (2 layers) with its
distributed optimizer, saved with xtimer's flash strategy and loaded at other parallel layouts.

  MODE=save (4 ranks): TP 2 x DP 2. One training step (the optimizer's state exists), then
      dist_checkpointing.save(..., sharded_strategy=FlashSaveStrategy(), async_sharded_save=True)
      returns after the copy into shared memory; what the folder holds then is recorded; the
      request is run (its function waits for the files); metadata.json is there after it.
      Before the save every shard of the sharded state dict (parameters, optimizer state,
      extra state) is read back with device-to-host copies and gathered whole on rank 0
      (DIR/../truth.pt). Then, in the same job, TP 1 x DP 4 loads DIR from disk (an empty
      shared-memory folder) with megatron's own default strategy (no xtimer) and with
      FlashLoadStrategy, after a first try that asks for a piece saved per tensor-parallel
      rank (which megatron cannot reshard): that must be refused in one line.
  MODE=load (2 ranks): TP 2 x DP 1 loads DIR twice with FlashLoadStrategy: from this node's
      memory (the save's shared-memory folder) and from disk (an empty one).

Every loaded shard is compared, byte for byte, with the same region of the gathered truth.
Rank 0 writes DIR/../<MODE>.json. Values: parameters are created on the host and copied to the
device; the optimizer's state is made by kernels, which compute nothing here, so its bytes are
what the device memory held; both are compared as read back from the device.
Not compared: anything computed after a load (a training step's result: kernels compute nothing
here); mixed precision (the model is fp32, so the optimizer's main parameters are the fp32
parameters themselves; a bf16 run's separate main copies are not exercised); Transformer
Engine's per-layer extra state (TE is not installed; the local layer spec has none), for which
a ShardedObject and the common `iteration` stand in.

  SIMGPU_DEVICES=4 scripts/simgpu.sh .peers/bin/torchrun --standalone --nproc-per-node 4 \\
      megatron_flash.py DIR        (MODE, SHM_EMPTY: a second, empty shared-memory folder)
"""
import json
import os
import sys
import time

HIDDEN = int(os.environ.get("HIDDEN", "64"))
VOCAB = int(os.environ.get("VOCAB", "256"))
SEQ = 32
# The distributed optimizer's reshardable format (0.16.1 refuses fully_sharded_model_space's flattened ranges).
OPT_FORMAT = {"distrib_optim_sharding_type": "fully_reshardable"}


def build(tp, hidden=HIDDEN, vocab=VOCAB):
    """GPT with 2 layers at tensor parallel `tp` (data parallel: the rest), megatron's DDP and
    distributed optimizer, one training step taken (also tests/peers/bench_ckpt_megatron.py's)."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    model_parallel_cuda_manual_seed(1234)
    torch.manual_seed(1234)
    cfg = TransformerConfig(
        num_layers=2,
        hidden_size=hidden,
        num_attention_heads=4,
        use_cpu_initialization=True,
        tensor_model_parallel_size=tp,
        params_dtype=torch.float32,
    )
    gpt = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=vocab,
        max_sequence_length=SEQ,
        position_embedding_type="learned_absolute",
    ).cuda()
    ddp = DistributedDataParallel(
        config=cfg, ddp_config=DistributedDataParallelConfig(use_distributed_optimizer=True), module=gpt
    )
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, use_distributed_optimizer=True, clip_grad=0.0), [ddp]
    )
    tokens = torch.randint(0, vocab, (2, SEQ), device="cuda")
    pos = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(2, SEQ)
    ddp.zero_grad_buffer()
    opt.zero_grad()
    out = ddp(tokens, pos, None, labels=tokens)
    out.float().mean().backward()
    ddp.finish_grad_sync()
    opt.step()
    return ddp, opt


def sharded(ddp, opt, tp_extra, is_loading=False):
    """The sharded state dict: model, optimizer (its default: fully_sharded_model_space) and
    extra state (an object every rank agrees on, and with tp_extra one per TP rank)."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.dist_checkpointing import ShardedObject

    model_sd = ddp.module.sharded_state_dict()
    sd = {
        "model": model_sd,
        "optimizer": opt.sharded_state_dict(model_sd, is_loading=is_loading, metadata=OPT_FORMAT),
        "iteration": 7,
    }
    rank = torch.distributed.get_rank()
    sd["extra"] = ShardedObject("extra_state", {"seed": 1234, "consumed": 640}, (1,), (0,), replica_id=rank)
    if tp_extra:
        tp, tp_rank = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_tensor_model_parallel_rank(),
        )
        sd["tp_extra"] = ShardedObject(
            "tp_extra", {"tp_rank": tp_rank}, (tp,), (tp_rank,), replica_id=parallel_state.get_data_parallel_rank()
        )
    return sd


def shards(sd):
    """[(key, global shape, global offset, local shape, prepend axes, flattened range, bytes)]
    of every ShardedTensor, read back to the host."""
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.dict_utils import nested_values

    out = []
    for t in nested_values(sd):
        if isinstance(t, ShardedTensor) and t.data is not None:
            fr = t.flattened_range
            out.append(
                (
                    t.key,
                    tuple(t.global_shape),
                    tuple(t.global_offset),
                    tuple(t.local_shape),
                    t.prepend_axis_num,
                    None if fr is None else (fr.start, fr.stop),
                    t.data.detach().cpu().contiguous(),
                )
            )
    return out


def region(full, piece):
    _, _, off, local_shape, prepend, fr, _ = piece
    sizes = (1,) * prepend + local_shape
    r = full[tuple(slice(o, o + n) for o, n in zip(off, sizes))].reshape(local_shape)
    return r.reshape(-1)[fr[0] : fr[1]] if fr is not None else r


def gather_truth(sd, path):
    """Every rank's shards, whole on rank 0: {key: full tensor}; saved to path."""
    import torch
    import torch.distributed as dist

    mine = shards(sd)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if dist.get_rank() != 0:
        return
    full, covered = {}, {}
    for pieces in every:
        for p in pieces:
            key, shape, data = p[0], p[1], p[6]
            f = full.setdefault(key, torch.zeros(shape, dtype=data.dtype))
            c = covered.setdefault(key, torch.zeros(shape, dtype=torch.bool))
            region(f, p).copy_(data.reshape(region(f, p).shape))
            region(c, p).fill_(True)
    torch.save({"full": full, "covered": {k: bool(v.all()) for k, v in covered.items()}}, path)


def compare(loaded, truth):
    """(shards compared, bytes compared, [keys that differ])."""
    n, nbytes, bad = 0, 0, []
    for p in shards(loaded):
        want = region(truth[p[0]], p).contiguous()
        got = p[6].reshape(want.shape)
        n, nbytes = n + 1, nbytes + got.numel() * got.element_size()
        if not torch_equal_bytes(got, want):
            bad.append(p[0])
    return n, nbytes, bad


def torch_equal_bytes(a, b):
    import torch

    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def load_and_compare(ddp, opt, folder, truth, strategy, row, name):
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    sd = sharded(ddp, opt, False, True)
    t0 = time.perf_counter()
    got = dist_checkpointing.load(sd, folder, sharded_strategy=strategy)
    row[f"{name}_s"] = round(time.perf_counter() - t0, 3)
    # load() returns the tensors in the sharded state dict's places: compared as that dict's data
    from megatron.core.dist_checkpointing import ShardedTensor

    loaded = sharded(ddp, opt, False)
    flat_loaded = _flatten(got)
    for path, t in _flatten(loaded).items():
        if isinstance(t, ShardedTensor):
            t.data = flat_loaded[path]
    n, nbytes, bad = compare(loaded, truth["full"])
    row[name] = {"shards": n, "bytes": nbytes, "differ": bad[:5], "n_differ": len(bad)}
    row[name]["extra"] = got.get("extra")
    row[name]["iteration"] = got.get("iteration")
    if strategy is not None and hasattr(strategy, "loaded_from"):
        row[name]["from"] = strategy.loaded_from
    dist.barrier()


def _flatten(d, prefix=()):
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, prefix + (k,)))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out.update(_flatten(v, prefix + (i,)))
    else:
        out[prefix] = d
    return out


def main():
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies.base import StrategyAction, get_default_strategy
    from xtimer.ckpt import megatron as flash

    folder, mode = os.path.abspath(sys.argv[1]), os.environ["MODE"]
    base = os.path.dirname(folder)
    truth_path = os.path.join(base, "truth.pt")
    empty_shm = os.environ["SHM_EMPTY"]
    row = {"rank": dist.get_rank()}
    if mode == "save":
        ddp, opt = build(2)
        sd = sharded(ddp, opt, True)
        gather_truth(sd, truth_path)
        if dist.get_rank() == 0:
            os.makedirs(folder, exist_ok=True)
        dist.barrier()
        flash.register()  # by name, as a stack that picks strategies so would
        strategy = get_default_strategy(StrategyAction.SAVE_SHARDED, flash.BACKEND, 1)
        row["strategy"] = f"{type(strategy).__module__}.{type(strategy).__name__}"
        t0 = time.perf_counter()
        req = dist_checkpointing.save(sd, folder, sharded_strategy=strategy, async_sharded_save=True)
        row["blocked_s"] = round(time.perf_counter() - t0, 3)
        row["at_return"] = sorted(os.listdir(folder))
        req.execute_sync()
        row["written_s"] = round(time.perf_counter() - t0, 3)
        row["files"] = sorted(os.listdir(folder))
        truth = torch.load(truth_path, weights_only=True)
        dist.barrier()
        # TP 1 x DP 4 from disk: megatron's own strategy, then ours with an empty shared memory.
        ddp, opt = build(1)
        sd = sharded(ddp, opt, True, True)
        try:
            dist_checkpointing.load(sd, folder, sharded_strategy=flash.FlashLoadStrategy(shm_dir=empty_shm))
            row["refused"] = None
        except flash.CheckpointError as e:
            row["refused"] = str(e)
        load_and_compare(ddp, opt, folder, truth, None, row, "megatron_tp1")
        load_and_compare(ddp, opt, folder, truth, flash.FlashLoadStrategy(shm_dir=empty_shm), row, "disk_tp1")
    else:
        truth = torch.load(truth_path, weights_only=True)
        ddp, opt = build(2)
        load_and_compare(ddp, opt, folder, truth, flash.FlashLoadStrategy(), row, "memory_tp2")
        load_and_compare(ddp, opt, folder, truth, flash.FlashLoadStrategy(shm_dir=empty_shm), row, "disk_tp2")
    if dist.get_rank() == 0:
        row["truth_covered"] = all(truth["covered"].values())
        row["truth_keys"] = len(truth["full"])
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    if dist.get_rank() == 0:
        with open(os.path.join(base, f"{mode}.json"), "w") as f:
            json.dump(rows, f, default=str)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # megatron's async writer starts processes with spawn: they import this file
    main()
