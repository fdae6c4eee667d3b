"""Flash checkpoint for the Hugging Face Trainer: DLRover's `FlashCkptTrainer`, on our core.

    from xtimer.ckpt.hf_trainer import FlashCkptTrainer
    trainer = FlashCkptTrainer(model=model, args=training_args, train_dataset=ds,
                               memory_save_steps=1)   # every step into shared memory
    trainer.train()                                   # resumes from the newest snapshot

`args.save_steps` (the Trainer's own schedule, `save_strategy="steps"`) says when a checkpoint
is persisted to disk: into shared memory, then written behind the job by the node's saver
(`DIR/<step>/rank_<r>.xtc`, DIR = `checkpoint_dir`, default `<output_dir>/flash_ckpt`).
`memory_save_steps` adds saves into shared memory alone between them, which cost about a copy
of the state; when a worker dies, the saver persists the newest one. `train()` with
`resume_from_checkpoint` None or True loads the newest valid snapshot (memory when every rank
holds it and it is not older than the disk, else the newest intact step on disk): model,
optimizer, scheduler, RNG and the Trainer's state, and the Trainer skips the batches already
trained, as it does when it resumes from its own folders. A path given as
`resume_from_checkpoint` is the Trainer's own checkpoint folder and is loaded as usual.

State: the unwrapped model's and the optimizer's state dicts are those of DDP (every rank holds
the whole of them), so they are saved replicated and a step loads at any world size. Sharded
models (FSDP, DeepSpeed ZeRO) are refused with a line saying so.
"""
import dataclasses
import json
import os
import random
import shutil
import tempfile

import numpy as np
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME

from .checkpointer import Checkpointer, StorageType

__all__ = ["FlashCkptTrainer", "StorageType"]


class _MemorySaves(TrainerCallback):
    """Asks for a save every `every` optimizer steps and notes whether the Trainer's own schedule
    (save_steps, an epoch's end, the last step) asked for it too: only then is it persisted."""

    def __init__(self, every):
        self.every = every
        self.memory_only = False

    def on_step_end(self, args, state, control, **kwargs):
        # DefaultFlowCallback, first in the list, has set should_save by its schedule already.
        if state.global_step % self.every == 0 and not control.should_save:
            control.should_save = True
            self.memory_only = True
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        if control.should_save:
            self.memory_only = False
        return control


class FlashCkptTrainer(Trainer):
    """A transformers.Trainer whose checkpoints go through xtimer's flash checkpoint."""

    def __init__(self, *args, memory_save_steps=None, checkpoint_dir=None, checkpointer=None, **kwargs):
        """memory_save_steps: save into shared memory every N optimizer steps (None: only at
        `args.save_steps`, which are persisted). checkpoint_dir: where disk saves go (default
        `<output_dir>/flash_ckpt`). checkpointer: a Checkpointer to use instead (its own
        directory and settings)."""
        super().__init__(*args, **kwargs)
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError(
                "FlashCkptTrainer saves the whole model and optimizer state of every rank (DDP); "
                "for DeepSpeed use xtimer.ckpt.deepspeed.DeepSpeedCheckpointer"
            )
        if memory_save_steps is not None and int(memory_save_steps) <= 0:
            raise ValueError(f"memory_save_steps must be a positive number of steps, not {memory_save_steps!r}")
        self.memory_save_steps = int(memory_save_steps) if memory_save_steps else 0
        if checkpointer is None:
            checkpointer = Checkpointer(
                checkpoint_dir or os.path.join(self.args.output_dir, "flash_ckpt"), replicated=True
            )
        self.flash_checkpointer = checkpointer
        self.flash_resumed_step = None  # the step train() resumed from, None when it started afresh
        self.flash_last_save_ok = None  # what the newest save returned
        self._flash_state = None  # the loaded state while train() resumes from it
        self._memory_saves = _MemorySaves(self.memory_save_steps) if self.memory_save_steps else None
        if self._memory_saves is not None:
            self.add_callback(self._memory_saves)

    # --- save
    def _flash_state_dict(self):
        model = self.accelerator.unwrap_model(self.model)
        return {
            "model": model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else {},
            "scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else {},
            "rng": {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "cpu": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "trainer_state": json.dumps(dataclasses.asdict(self.state), sort_keys=True),
        }

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        step = int(self.state.global_step)
        memory_only = self._memory_saves is not None and self._memory_saves.memory_only
        storage = StorageType.MEMORY if memory_only else StorageType.DISK
        if self._memory_saves is not None:
            self._memory_saves.memory_only = False
        self.store_flos()
        # False when a memory save was skipped: the slot it would overwrite still waits for its
        # disk write (the previous snapshot stays current; see Checkpointer.save_checkpoint).
        self.flash_last_save_ok = self.flash_checkpointer.save_checkpoint(
            step, self._flash_state_dict(), storage_type=storage
        )

    # --- resume
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is None or resume_from_checkpoint is True:
            step, state = self.flash_checkpointer.load_checkpoint(map_location="cpu")
            if state is not None:
                self._flash_state = state
                self.flash_resumed_step = step
                # The Trainer reads its state from a folder's trainer_state.json; the rest comes
                # from the loaded snapshot through the _load_* methods below.
                folder = tempfile.mkdtemp(prefix="xtimer-hf-resume-")
                try:
                    with open(os.path.join(folder, TRAINER_STATE_NAME), "w") as f:
                        f.write(state["trainer_state"])
                    return super().train(folder, *args, **kwargs)
                finally:
                    self._flash_state = None
                    shutil.rmtree(folder, ignore_errors=True)
            resume_from_checkpoint = None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        if self._flash_state is None:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        target = self.accelerator.unwrap_model(model if model is not None else self.model)
        target.load_state_dict(self._flash_state["model"])

    def _load_optimizer_and_scheduler(self, checkpoint):
        if self._flash_state is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        if self.optimizer is not None and self._flash_state["optimizer"]:
            self.optimizer.load_state_dict(self._flash_state["optimizer"])
        if self.lr_scheduler is not None and self._flash_state["scheduler"]:
            self.lr_scheduler.load_state_dict(self._flash_state["scheduler"])

    def _load_scaler(self, checkpoint):
        if self._flash_state is None and hasattr(super(), "_load_scaler"):
            return super()._load_scaler(checkpoint)

    def _load_rng_state(self, checkpoint):
        if self._flash_state is None:
            return super()._load_rng_state(checkpoint)
        rng = self._flash_state["rng"]
        random.setstate(_as_python_rng(rng["python"]))
        np.random.set_state(tuple(rng["numpy"]))
        torch.set_rng_state(rng["cpu"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])


def _as_python_rng(s):
    """random.getstate() comes back with lists where it had tuples."""
    return (s[0], tuple(s[1]), s[2])
