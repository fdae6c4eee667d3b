"""A Hugging Face Trainer run with xtimer.ckpt.hf_trainer.FlashCkptTrainer on a tiny GPT-2 built
from a config here (nothing from a hub), DDP over gloo on the CPU, under xtimer_run.

Every step into shared memory (memory_save_steps=1), every SAVE_STEPS-th persisted. In the first
round rank CRASH_RANK exits 1 right after the memory save of step CRASH_AT. Records (JSON lines
in $OUT):
  saves.jsonl   {"rank", "restart", "step", "memory", "digest"}: after each save, whether it went
                to memory only, and the sha256 of every parameter's bytes;
  resumes.jsonl {"rank", "restart", "resumed", "global_step", "digest"}: when training begins,
                after the Trainer loaded what it resumes from.
"""
import hashlib
import json
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments

from xtimer.ckpt.hf_trainer import FlashCkptTrainer

OUT = os.environ["OUT"]
STEPS = int(os.environ.get("STEPS", "12"))
SAVE_STEPS = int(os.environ.get("SAVE_STEPS", "5"))
CRASH_AT = int(os.environ.get("CRASH_AT", "8"))
CRASH_RANK = int(os.environ.get("CRASH_RANK", "1"))
RANK = int(os.environ["RANK"])
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def digest(model):
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def record(name, **row):
    with open(os.path.join(OUT, name), "a") as f:
        f.write(json.dumps(dict(rank=RANK, restart=RESTART, **row)) + "\n")


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 64, (16,), generator=g)
        return {"input_ids": ids, "labels": ids}


class Watch(TrainerCallback):
    def __init__(self):
        self.trainer = None

    def on_train_begin(self, args, state, control, **kw):
        record(
            "resumes.jsonl",
            resumed=self.trainer.flash_resumed_step,
            global_step=state.global_step,
            digest=digest(self.trainer.model),
        )

    def on_save(self, args, state, control, **kw):
        memory = state.global_step % SAVE_STEPS != 0 and state.global_step != STEPS
        if not memory:
            # Until the persist is done, a memory save that would overwrite its slot is skipped
            # (by design); on a loaded machine that took several steps. Wait, so that every
            # memory save of the test lands.
            self.trainer.flash_checkpointer.wait()
        record(
            "saves.jsonl",
            step=state.global_step,
            memory=memory,
            ok=self.trainer.flash_last_save_ok,
            digest=digest(self.trainer.model),
        )
        if RESTART == 0 and RANK == CRASH_RANK and state.global_step == CRASH_AT:
            os._exit(1)


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=os.path.join(OUT, "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        logging_steps=100,
        use_cpu=True,
        ddp_backend="gloo",
        ddp_find_unused_parameters=False,
        report_to=[],
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    watch = Watch()
    trainer = FlashCkptTrainer(
        model=model,
        args=args,
        train_dataset=Tokens(),
        callbacks=[watch],
        memory_save_steps=1,
        checkpoint_dir=os.environ["CKPT_DIR"],
    )
    watch.trainer = trainer
    trainer.train()
    trainer.flash_checkpointer.wait()


if __name__ == "__main__":
    main()
